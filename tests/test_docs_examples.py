"""The README's commands, executed (issue 36, item 4). Every fenced shell or Python block of README.md is preceded
by a marker saying how the suite runs it, `<!-- docs-test: run -->`, or why it does not, `<!-- docs-test: not
run: WHY -->`; a block without one fails the first test. The runnable blocks run verbatim, in order, with bash in
a fresh project (git and DVC as a clone has them) beside a `../shared/datasets` that holds a small subset of the
real CIFAR-10 archive (same layout: 20 train and 5 test images per class). A line that starts `mlflow ui` (a server
a user leaves running) is started in the background on a free port, must answer `/health`, and is stopped."""

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
    r"(?:<!-- docs-test: (?P<marker>[^>]*?) -->\s*\n)?```(?P<lang>bash|sh|python)\n(?P<body>.*?)```", re.S
)
RUN, NOT_RUN = "run", "not run: "


def shell_blocks(text: str) -> list:
    """(marker or None, language, body) of each fenced bash/sh/python block, in page order."""
    return [(m["marker"], m["lang"], m["body"]) for m in FENCE.finditer(text)]


def test_every_shell_block_of_the_readme_says_whether_the_suite_runs_it():
    blocks = shell_blocks((ROOT / "README.md").read_text())
    assert blocks, "no shell blocks found"
    for marker, _, body in blocks:
        assert marker == RUN or (marker or "").startswith(NOT_RUN), (
            f"block without a docs-test marker:\n{body}"
        )
        assert marker == RUN or len(marker) > len(NOT_RUN) + 10, f"say why it is not run: {marker!r}"
    assert any(marker == RUN for marker, _, _ in blocks)


def _subset_archive(shared: Path) -> Path:
    """../shared/datasets/cifar10-images.tar.gz, shrunk: the real archive's first files per (split, class)."""
    from test_data_real import CASES, SHARED, _extract_subset

    archive_name, pattern, per_class, _ = CASES["cifar10"]
    if not (SHARED / archive_name).is_file():
        pytest.skip(f"{SHARED / archive_name} not found (real data lives in ../shared/datasets)")
    top = _extract_subset(SHARED / archive_name, pattern, per_class, shared / "extracted")
    out = shared / "datasets" / archive_name
    out.parent.mkdir(parents=True)
    with tarfile.open(out, "w:gz") as tar:
        tar.add(top, arcname=top.name)
    shutil.rmtree(shared / "extracted")
    return out


def _free_port() -> int:
    from test_tracking import _free_port

    return _free_port()


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


@pytest.mark.slow  # starts processes: DVC, the three stages, MLflow's UI
@pytest.mark.real_data
def test_the_readmes_runnable_blocks_run_verbatim_in_a_fresh_project(tmp_path):
    from test_pipeline_e2e import copy_project

    _subset_archive(tmp_path / "shared")
    project = copy_project(tmp_path / "project")  # ../shared is tmp_path/shared, as a clone beside shared/
    (project / "data" / "raw" / ".gitkeep").touch()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "DVC_"))}
    env.update(
        PYTHONPATH=str(project / "src"),
        DVC_NO_ANALYTICS="1",
        PATH=f"{Path(sys.executable).parent}:{env['PATH']}",
    )
    env.update(GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@t", GIT_COMMITTER_NAME="t", GIT_COMMITTER_EMAIL="t@t")
    for cmd in (["git", "init", "-q", "-b", "main"], ["git", "add", "-A"], ["git", "commit", "-qm", "clone"]):
        subprocess.run(cmd, cwd=project, env=env, check=True, capture_output=True)
    port = _free_port()
    runnable = [body for marker, _, body in shell_blocks((ROOT / "README.md").read_text()) if marker == RUN]
    try:
        for body in runnable:
            proc = subprocess.run(
                ["bash", "-c", _script(body, port)],
                cwd=project,
                env=env,
                capture_output=True,
                text=True,
                timeout=900,
            )
            assert proc.returncode == 0, f"{body}\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
        if (project / "mlflow-ui.pid").is_file():
            assert _answers(f"http://127.0.0.1:{port}/health"), (project / "mlflow-ui.log").read_text()[
                -2000:
            ]
    finally:
        pid_file = project / "mlflow-ui.pid"
        if pid_file.is_file():
            pid = int(pid_file.read_text())
            try:
                os.killpg(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{project / 'mlflow.db'}")
    (run,) = client.search_runs([client.get_experiment_by_name("tfpipe").experiment_id])
    assert run.info.status == "FINISHED" and "test_accuracy" in run.data.metrics
    assert (project / "metrics" / "eval.json").is_file()
