"""The README's and the tutorials' examples, executed (issue 36, item 4), by tests/docs_runner.py: every fenced
shell or Python block of those pages is preceded by a marker saying how the suite runs it (`<!-- docs-test: run
-->`), or why it does not (`<!-- docs-test: not run: WHY -->`); a block without one fails the first test. A page's
blocks run verbatim, in order, from a fresh project of their own (this repository's project files, git and DVC
as a clone has them) or, for pages that start outside a clone, the folder holding it; either sits beside a
`../shared/datasets` holding small subsets of the real CIFAR-10 and IMDb archives (same layouts: 20 train and 5
test files per class). Shown output (`<!-- docs-test: output -->`) is checked line by line against what the block
before it printed; servers a page starts must answer /health and are stopped.

A small runner of our own rather than Sybil or pytest-markdown-docs: those evaluate each block on its own in the
test process (Python, or shell through a per-block evaluator), while these pages are bash sessions that build on
each other in a project beside shrunk real archives, save files the reader writes, and start servers that must be
waited for and stopped."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from docs_runner import FILE, NOT_RUN, OUTPUT, RUN, SHELL, blocks, missing, run_page, stop_servers

ROOT = Path(__file__).resolve().parents[1]
# page -> where its blocks start: a fresh clone of the project, or a folder beside `shared/` (for `tfpipe init`)
PAGES = {
    "README.md": "clone",
    "docs/tutorials/first-run.md": "clone",
    "docs/tutorials/own-data.md": "clone",
    "docs/tutorials/own-model.md": "clone",
    "docs/tutorials/own-project.md": "folder",
    "docs/tutorials/audit.md": "clone",
    "docs/tutorials/team.md": "clone",
    "docs/tutorials/cluster.md": "clone",
}


@pytest.mark.parametrize("page", PAGES)
def test_every_shell_block_says_whether_the_suite_runs_it(page):
    shell = [block for block in blocks((ROOT / page).read_text()) if block[1] in SHELL]
    assert shell, "no shell blocks found"
    for marker, _, body in shell:
        assert marker in (RUN, OUTPUT) or (marker or "").startswith((NOT_RUN, FILE)), (
            f"block without a docs-test marker:\n{body}"
        )
        assert not (marker or "").startswith(NOT_RUN) or len(marker) > len(NOT_RUN) + 10, (
            f"say why it is not run: {marker!r}"
        )


@pytest.mark.parametrize("page", PAGES)
def test_a_tutorial_runs_at_least_one_block(page):
    assert any(marker == RUN for marker, _, _ in blocks((ROOT / page).read_text())), page


def test_shown_output_is_matched_line_by_line_in_order():
    printed = (
        "12:00:01 train INFO epoch 1/3: loss=2.25\n12:00:09 evaluate INFO test accuracy 0.41 on 50 examples\n"
    )
    assert (
        missing(
            "train INFO epoch 1/6: loss=1.9\n...\nevaluate INFO test accuracy 0.4257 on 3000 examples",
            printed,
        )
        == []
    )
    assert missing("evaluate INFO test accuracy 0.4 on 3 examples\ntrain INFO epoch 1/6", printed) == [
        "train INFO epoch 1/6"  # out of order
    ]
    assert missing("train INFO resuming from ...", printed) == ["train INFO resuming from ..."]


@pytest.fixture(scope="session")
def shared_subsets(tmp_path_factory) -> Path:
    """A `shared/` folder with the small archives, made once per test process (each page only reads it)."""
    shared = tmp_path_factory.mktemp("shared")
    _subset_archives(shared)
    return shared


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


def _fresh_project(tmp_path: Path) -> tuple:
    """(project, env): this repository's project files committed in a new git repo, beside tmp_path/shared."""
    from test_pipeline_e2e import copy_project

    project = copy_project(tmp_path / "project")  # ../shared is tmp_path/shared, as a clone beside shared/
    (project / "data" / "raw" / ".gitkeep").touch()
    shutil.copytree(ROOT / "deploy", project / "deploy")  # a clone has the team server's script too
    env = _environment(project / "src")
    for cmd in (["git", "init", "-q", "-b", "main"], ["git", "add", "-A"], ["git", "commit", "-qm", "clone"]):
        subprocess.run(cmd, cwd=project, env=env, check=True, capture_output=True)
    return project, env


def _environment(src: Path) -> dict:
    """A reader's environment: no MLflow or DVC settings of ours, tfpipe from `src`, git knowing who commits."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "DVC_"))}
    env.update(PYTHONPATH=str(src), DVC_NO_ANALYTICS="1")
    env.update(PATH=f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}")
    env.update(GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@t", GIT_COMMITTER_NAME="t", GIT_COMMITTER_EMAIL="t@t")
    return env


@pytest.mark.slow  # starts processes: DVC, the three stages, MLflow's servers
@pytest.mark.real_data
@pytest.mark.parametrize("page", PAGES)
def test_the_runnable_blocks_run_verbatim_in_a_fresh_project(tmp_path, page, shared_subsets):
    (tmp_path / "shared").symlink_to(shared_subsets, target_is_directory=True)
    if PAGES[page] == "clone":
        start, env = _fresh_project(tmp_path)
    else:
        start, env = tmp_path, _environment(ROOT / "src")
    try:
        run_page(ROOT / page, start, env, tmp_path / "docs-test")
    finally:
        stop_servers(tmp_path / "docs-test")
    from mlflow import MlflowClient

    stores = list(tmp_path.rglob("mlflow.db"))  # the page's clones may sit beside its start
    assert stores or page == "README.md", "the page made no MLflow run"
    for db in stores:
        client = MlflowClient(tracking_uri=f"sqlite:///{db}")
        runs = client.search_runs([e.experiment_id for e in client.search_experiments()])
        assert any(run.info.status == "FINISHED" for run in runs), [r.info for r in runs]  # a page's refused
        # command (shown with its error) may leave a FAILED run beside it
