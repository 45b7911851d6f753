"""The README's and the first-run tutorial's commands, executed (issue 36, item 4). Every fenced shell or Python
block of those pages is preceded by a marker saying how the suite runs it, `<!-- docs-test: run -->`, or why it
does not, `<!-- docs-test: not run: WHY -->`; a block without one fails the first test. The runnable blocks of a
page run verbatim, in order, with bash in a fresh project of their own (git and DVC as a clone has them) beside a
`../shared/datasets` holding small subsets of the real CIFAR-10 and IMDb archives (same layouts: 20 train and 5
test files per class). A line that starts `mlflow ui` (a server a user leaves running) is started in the
background on a free port, must answer `/health`, and is stopped. A text block marked `<!-- docs-test: output -->`
shows what the block before it prints: each of its lines must appear, in order, in that output, where numbers
and `...` may be anything and a leading time of day is left out."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FENCE = re.compile(
    r"(?:<!-- docs-test: (?P<marker>[^>]*?) -->\s*\n)?```(?P<lang>bash|sh|python|text)\n(?P<body>.*?)```",
    re.S,
)
PAGES = ("README.md", "docs/tutorials/first-run.md")
RUN, NOT_RUN, OUTPUT = "run", "not run: ", "output"


def blocks(text: str) -> list:
    """(marker or None, language, body) of each fenced bash/sh/python/text block, in page order."""
    return [(m["marker"], m["lang"], m["body"]) for m in FENCE.finditer(text)]


@pytest.mark.parametrize("page", PAGES)
def test_every_shell_block_says_whether_the_suite_runs_it(page):
    shell = [block for block in blocks((ROOT / page).read_text()) if block[1] != "text"]
    assert shell, "no shell blocks found"
    for marker, _, body in shell:
        assert marker == RUN or (marker or "").startswith(NOT_RUN), (
            f"block without a docs-test marker:\n{body}"
        )
        assert marker == RUN or len(marker) > len(NOT_RUN) + 10, f"say why it is not run: {marker!r}"
    assert any(marker == RUN for marker, _, _ in shell)


def test_shown_output_is_matched_line_by_line_in_order():
    printed = (
        "12:00:01 train INFO epoch 1/3: loss=2.25\n12:00:09 evaluate INFO test accuracy 0.41 on 50 examples\n"
    )
    assert (
        _missing(
            "train INFO epoch 1/6: loss=1.9\n...\nevaluate INFO test accuracy 0.4257 on 3000 examples",
            printed,
        )
        == []
    )
    assert _missing("evaluate INFO test accuracy 0.4 on 3 examples\ntrain INFO epoch 1/6", printed) == [
        "train INFO epoch 1/6"  # out of order
    ]
    assert _missing("train INFO resuming from ...", printed) == ["train INFO resuming from ..."]


def _missing(shown: str, printed: str) -> list:
    """The lines of `shown` not found, in order, in `printed` (numbers and `...` match anything; a leading
    HH:MM:SS is left out)."""
    missing, lines, at = [], printed.splitlines(), 0
    for line in shown.splitlines():
        line = re.sub(r"^\d\d:\d\d:\d\d ", "", line.strip())
        if not line or line == "...":
            continue
        parts = [re.escape(p) for p in re.split(r"\.\.\.|\d+(?:\.\d+)?", line)]
        pattern = re.compile(".*?".join(parts))
        found = next((i for i in range(at, len(lines)) if pattern.search(lines[i])), None)
        if found is None:
            missing.append(line)
        else:
            at = found + 1
    return missing


def _subset_archives(shared: Path) -> None:
    """../shared/datasets/*.tar.gz, shrunk: each real archive's first files per (split, class)."""
    from test_data_real import CASES, SHARED, _extract_subset

    for name in ("cifar10", "imdb"):
        archive_name, pattern, per_class, _ = CASES[name]
        if not (SHARED / archive_name).is_file():
            pytest.skip(f"{SHARED / archive_name} not found (real data lives in ../shared/datasets)")
        top = _extract_subset(SHARED / archive_name, pattern, per_class, shared / "extracted")
        out = shared / "datasets" / archive_name
        out.parent.mkdir(parents=True, exist_ok=True)
        with tarfile.open(out, "w:gz") as tar:
            tar.add(top, arcname=top.name)
        shutil.rmtree(shared / "extracted")


def _script(body: str, port: int) -> str:
    """The block as a bash script; `mlflow ui` lines in the background, in their own process group, on `port`."""
    lines = []
    for line in body.splitlines():
        if line.startswith("mlflow ui"):
            command = line.split("#", 1)[0].strip()
            lines.append(f"setsid {command} --port {port} > mlflow-ui.log 2>&1 & echo $! > mlflow-ui.pid")
        else:
            lines.append(line)
    return "set -euo pipefail\n" + "\n".join(lines) + "\n"


def _answers(url: str, timeout: float = 180.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                return response.status == 200
        except OSError:
            time.sleep(0.5)
    return False


def _fresh_project(tmp_path: Path) -> tuple:
    """(project, env): this repository's project files committed in a new git repo, beside tmp_path/shared."""
    from test_pipeline_e2e import copy_project

    project = copy_project(tmp_path / "project")  # ../shared is tmp_path/shared, as a clone beside shared/
    (project / "data" / "raw" / ".gitkeep").touch()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "DVC_"))}
    env.update(PYTHONPATH=str(project / "src"), DVC_NO_ANALYTICS="1")
    env.update(PATH=f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}")
    env.update(GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@t", GIT_COMMITTER_NAME="t", GIT_COMMITTER_EMAIL="t@t")
    for cmd in (["git", "init", "-q", "-b", "main"], ["git", "add", "-A"], ["git", "commit", "-qm", "clone"]):
        subprocess.run(cmd, cwd=project, env=env, check=True, capture_output=True)
    return project, env


def _run_page(page: str, project: Path, env: dict, port: int) -> None:
    printed = ""
    for marker, lang, body in blocks((ROOT / page).read_text()):
        if lang == "text" and marker == OUTPUT:
            missing = _missing(body, printed)
            assert not missing, f"shown but not printed: {missing}\n{printed[-3000:]}"
        if lang == "text" or marker != RUN:
            continue
        cmd = ["bash", "-c", _script(body, port)]
        proc = subprocess.run(  # one stream, as a terminal shows DVC's lines between the stages' logs
            cmd,
            cwd=project,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=900,
        )
        printed = proc.stdout
        assert proc.returncode == 0, f"{body}\n{printed[-4000:]}"


@pytest.mark.slow  # starts processes: DVC, the three stages, MLflow's UI
@pytest.mark.real_data
@pytest.mark.parametrize("page", PAGES)
def test_the_runnable_blocks_run_verbatim_in_a_fresh_project(tmp_path, page):
    from test_tracking import _free_port

    _subset_archives(tmp_path / "shared")
    project, env = _fresh_project(tmp_path)
    port = _free_port()
    try:
        _run_page(page, project, env, port)
        if (project / "mlflow-ui.pid").is_file():
            log = project / "mlflow-ui.log"
            assert _answers(f"http://127.0.0.1:{port}/health"), log.read_text()[-2000:]
    finally:
        pid_file = project / "mlflow-ui.pid"
        if pid_file.is_file():
            try:
                os.killpg(int(pid_file.read_text()), signal.SIGTERM)
            except ProcessLookupError:
                pass
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{project / 'mlflow.db'}")
    runs = client.search_runs([client.get_experiment_by_name("tfpipe").experiment_id])
    assert runs and all(run.info.status == "FINISHED" and "test_accuracy" in run.data.metrics for run in runs)
    assert (project / "metrics" / "eval.json").is_file()
