"""dvc.yaml names the paths the stages write (tfpipe.layout): each stage declares what its code writes, so DVC
caches, pushes and shows exactly those files."""

from __future__ import annotations

from pathlib import Path

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
