"""A refused command changes nothing (issue 49): every check that can refuse the train stage runs before the stage
opens an MLflow run, clears `models/<dataset>/` or writes run.json. Each case starts from a project holding a
finished run's outputs and a store, refuses in one line, and leaves every file of the project (the store's bytes
included) and the store's rows as they were."""

from __future__ import annotations

import hashlib
import json
import shutil
import sqlite3
from pathlib import Path

import pytest
from conftest import ROOT, seed_store
from test_own_model import GOOD

from tfpipe import config, stages
from tfpipe.errors import UserError


def _project(tmp_path: Path) -> Path:
    """conf/ with a team's model file, a store, and what a finished cifar10 run left (outputs DVC tracks)."""
    project = tmp_path / "project"
    shutil.copytree(ROOT / "conf", project / "conf")
    (project / "conf" / "model" / "tiny_team.yaml").write_text(GOOD)
    seed_store(project)
    models = project / "models" / "cifar10"
    (models / "saved_model" / "variables").mkdir(parents=True)
    (models / "saved_model" / "saved_model.pb").write_bytes(b"a finished run's export")
    (models / "checkpoints").mkdir()
    (models / "checkpoints" / "ckpt-3.index").write_bytes(b"a finished run's checkpoint")
    (models / "training_state.json").write_text('{"complete": true, "fingerprint": "f"}\n')
    (models / "weights.sha256").write_text("0" * 64 + "\n")
    (project / "run.json").write_text('{"run_id": "a finished run"}\n')
    return project


def _files(project: Path) -> dict:
    return {
        p.relative_to(project).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(project.rglob("*"))
        if p.is_file()
    }


def _rows(project: Path) -> dict:
    """Row counts of the store's tables, read with sqlite3 (not with MLflow, not with tfpipe)."""
    with sqlite3.connect(project / "mlflow.db") as db:
        tables = [r[0] for r in db.execute("select name from sqlite_master where type='table'")]
        return {t: db.execute(f'select count(*) from "{t}"').fetchone()[0] for t in tables}


REFUSALS = [
    (["model=tiny_team", "+model.params.widht=3"], "unexpected keyword argument 'widht'"),
    (
        ["model=tiny_team", "model.builder=test_own_model:build_wrong_width"],
        "unexpected keyword argument 'units'",
    ),
    (["train.batch_size_per_replica=64"], "train split gives no full batch of 64 (21 examples)"),
    (["model=tiny_team", "model.builder=test_own_model:build_tinny"], "cannot be imported"),
    (["model=tiny_team", "+model.fit=test_own_model:no_such_fit"], "model.fit=test_own_model:no_such_fit"),
    (["dataset=imdb", "model=embedding_gap"], "prepared data is 'image'"),
    (["dataset.image_size=[16,16]"], "prepared images are [32, 32, 3]"),
    (["+train.hooks=[{_target_: test_own_model.NoSuchHook}]"], "cannot be imported"),
    (["train.init_from=/nonexistent/tfpipe/model"], "/nonexistent/tfpipe/model"),
]


@pytest.mark.parametrize("overrides, expected", REFUSALS, ids=[" ".join(o) for o, _ in REFUSALS])
def test_a_refused_training_changes_nothing(prepared_image, tmp_path, overrides, expected):
    project = _project(tmp_path)
    cfg = config.compose(
        ["train.batch_size_per_replica=4", *overrides, f"data.output_dir={prepared_image.prepared_dir}"],
        config_dir=project / "conf",
    )
    files, rows = _files(project), _rows(project)
    with pytest.raises(UserError) as refused:
        stages.run_train(cfg, project)
    message = str(refused.value)
    assert expected in message and "\n" not in message, message
    assert _files(project) == files  # models/ kept, run.json kept, the store's file not written
    assert _rows(project) == rows  # no run opened (not even one left FAILED)
    assert json.loads((project / "run.json").read_text()) == {"run_id": "a finished run"}
