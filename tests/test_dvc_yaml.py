"""dvc.yaml names the paths the stages write (tfpipe.layout): each stage declares what its code writes, so DVC
caches, pushes and shows exactly those files."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tfpipe import layout

ROOT = Path(__file__).resolve().parents[1]


def _declared(stage: dict) -> set:
    """Every path a dvc.yaml stage declares as an output, metric or plot."""
    paths = set()
    for key in ("outs", "metrics", "plots"):
        for entry in stage.get(key, []):
            paths.add(next(iter(entry)) if isinstance(entry, dict) else entry)
    return paths


def test_each_stage_declares_the_files_its_code_writes():
    stages = yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"]
    assert layout.DATA_METRICS in _declared(stages["prepare"])
    assert {layout.TRAIN_METRICS, layout.HISTORY_CSV, f"{layout.MODELS_DIR}/${{dataset.name}}"} <= _declared(
        stages["train"]
    )
    written = {layout.EVAL_METRICS, layout.EVAL_PER_CLASS, layout.CONFUSION_CSV, layout.CONFUSION_PNG}
    assert written <= _declared(stages["evaluate"])
    assert f"{layout.MODELS_DIR}/${{dataset.name}}/saved_model" in stages["evaluate"]["deps"]


SCAFFOLD = ROOT / "src" / "tfpipe" / "scaffold" / "project" / "dvc.yaml.tmpl"


@pytest.mark.parametrize("path", [ROOT / "dvc.yaml", SCAFFOLD], ids=["project", "tfpipe init"])
def test_metrics_and_plots_are_shown_once_test_metrics_first(path):
    """The stages declare metrics and plots as plain outputs; the top-level sections say how DVC shows them:
    metrics/eval.json first (`dvc exp show`'s first metric columns), the data report's counts not at all, and
    each plot by one definition (a stage's `plots:` file would be drawn again with DVC's default template)."""
    pipeline = yaml.safe_load(path.read_text())
    for name, stage in pipeline["stages"].items():
        assert not {"metrics", "plots"} & set(stage), f"{path.name}: stage {name} declares metrics or plots"
    assert pipeline["metrics"] == [layout.EVAL_METRICS, layout.TRAIN_METRICS]
    named = [next(iter(p)) if isinstance(p, dict) else p for p in pipeline["plots"]]
    assert len(named) == len(set(named)) and layout.CONFUSION_PNG in named, named
    project = yaml.safe_load((ROOT / "dvc.yaml").read_text())
    assert named == [next(iter(p)) if isinstance(p, dict) else p for p in project["plots"]]


def _repo_with_the_projects_dvc_config(tmp_path: Path) -> tuple[Path, dict]:
    import os
    import shutil
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if not k.startswith("DVC_")} | {"DVC_NO_ANALYTICS": "1"}
    for cmd in (["git", "init", "-q"], [sys.executable, "-m", "dvc", "init", "-q"]):
        subprocess.run(cmd, cwd=tmp_path, env=env, check=True)
    shutil.copy(ROOT / ".dvc" / "config", tmp_path / ".dvc" / "config")
    return tmp_path, env


@pytest.mark.slow  # starts processes
def test_tracked_raw_data_is_checked_out_as_links_to_the_cache_never_copies_nor_symlinks(tmp_path):
    """With the project's .dvc/config, a checkout of `dvc add`ed raw data (what a queued or --temp experiment's
    copy of the project gets) links each file to the cached one (one inode, read-only) instead of copying it;
    never a symlink, which prepare would refuse (its target, in .dvc/cache, is outside data.path)."""
    import shutil
    import subprocess
    import sys

    repo, env = _repo_with_the_projects_dvc_config(tmp_path)
    image = repo / "data" / "raw" / "pics" / "train" / "cat" / "0.jpg"
    image.parent.mkdir(parents=True)
    image.write_bytes(b"not really a jpeg, only bytes to cache")
    dvc = [sys.executable, "-m", "dvc"]
    subprocess.run([*dvc, "add", "-q", "data/raw/pics"], cwd=repo, env=env, check=True)
    shutil.rmtree(repo / "data" / "raw" / "pics")
    subprocess.run([*dvc, "checkout", "-q"], cwd=repo, env=env, check=True)
    cached = [p for p in (repo / ".dvc" / "cache").rglob("*") if p.is_file() and not p.name.endswith(".dir")]
    assert not image.is_symlink() and len(cached) == 1
    assert image.stat().st_ino == cached[0].stat().st_ino  # a hard link (a reflink would be a copy's inode)
    assert not image.stat().st_mode & 0o222  # read-only: an edit in place would change the cache
