"""Issue 50, the recorded config (a teammate's run is data): `config/resolved.yaml` is an artifact anyone with EDIT
on the store can replace, the params the train stage logged beside it are not. A run is recorded as the train
stage records it (`tracking.start_run`, `log_params(cfg.flat())`, `log_config`) in a real SQLite store; its
artifact is then replaced by a changed value, an added key, a removed key, a nested `_target_` at depth 1 to 3,
an object in place of a value, a hook appended to a list of mappings, a key spelled twice. Every loader of a
record's config (`reading.load_run`, and through it `audit --rerun`, the audit's check, `compare` and the
warm-start line) refuses each in one line naming the key; the command exits 2 before any stage runs. The run as
recorded is accepted."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tfpipe.errors import UserError

ROOT = Path(__file__).resolve().parents[1]
ARTIFACT = "config/resolved.yaml"


@pytest.fixture
def recorded(tmp_path, db_template, make_config, monkeypatch):
    """(project, uri, run_id, the config as logged): a run recorded as the train stage records it."""
    import mlflow

    from tfpipe import tracking

    for name in ("MLFLOW_TRACKING_URI", "MLFLOW_RUN_ID", "MLFLOW_EXPERIMENT_ID", "MLFLOW_EXPERIMENT_NAME"):
        monkeypatch.delenv(name, raising=False)
    shutil.copy(db_template, tmp_path / "mlflow.db")
    cfg = make_config("experiment=smoke")
    with tracking.start_run(cfg, tmp_path, stage="train") as run:
        run.log_params(cfg.flat())  # as tfpipe.stages.train logs them
        run.log_config(cfg.to_dict())
        run_id = run.run_id
    mlflow.set_tracking_uri(None)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    return tmp_path, uri, run_id, _artifact(uri, run_id, tmp_path / "download")


def _artifact(uri: str, run_id: str, dest: Path) -> dict:
    from mlflow import MlflowClient

    dest.mkdir(exist_ok=True)
    return yaml.safe_load(Path(MlflowClient(uri).download_artifacts(run_id, ARTIFACT, str(dest))).read_text())


def _replace(uri: str, run_id: str, config: dict) -> None:
    """What a teammate with EDIT does: log another file at the artifact's path (MLflow overwrites it)."""
    from mlflow import MlflowClient

    MlflowClient(uri).log_text(run_id, yaml.safe_dump(config, sort_keys=False), ARTIFACT)


def _attacks(config: dict) -> list:
    """(name, the replaced config, the key the refusal must name)."""

    def edited(change):
        copy = yaml.safe_load(yaml.safe_dump(config))
        change(copy)
        return copy

    evil = {"_target_": "os.system", "command": "touch /tmp/owned"}
    return [
        ("changed value", edited(lambda c: c["train"].update(epochs=99)), "train.epochs"),
        ("changed string", edited(lambda c: c["model"].update(name="resnet")), "model.name"),
        ("added key", edited(lambda c: c["train"].update(extra=1)), "train.extra"),
        ("added section", edited(lambda c: c.update(tfpipe={"x": 1})), "tfpipe.x"),
        ("removed key", edited(lambda c: c["train"].pop("epochs")), "train.epochs"),
        ("object for a value", edited(lambda c: c["train"].update(epochs=evil)), "train.epochs._target_"),
        ("_target_ at depth 1", edited(lambda c: c["data"].update(_target_="os.system")), "data._target_"),
        (
            "_target_ at depth 2",
            edited(lambda c: c["train"]["optimizer"].update(x=evil)),
            "train.optimizer.x",
        ),
        (
            "_target_ at depth 3",
            edited(lambda c: c["model"].setdefault("params", {}).update(a={"b": evil})),
            "model.params.a.b",
        ),
        ("hook in a list", edited(lambda c: c["train"].update(hooks=[evil])), "train.hooks"),
        ("builder", edited(lambda c: c["model"].update(builder="os:system")), "model.builder"),
        (
            "a key spelled twice",
            edited(lambda c: c.update({"train.epochs": config["train"]["epochs"]})),
            "twice",
        ),
        (
            "a key with a line break",
            edited(lambda c: c["train"].update({"x\nrun 0: accepted": 1})),
            "train.x",
        ),
        ("not a mapping", ["train"], "not a mapping"),
    ]


def test_the_run_as_recorded_is_accepted(recorded):
    from tfpipe.tracking import reading

    _, uri, run_id, config = recorded
    assert reading.load_run(uri, run_id)["config"] == config


def test_a_replaced_config_is_refused_by_load_run_naming_the_key(recorded):
    from tfpipe.tracking import reading

    _, uri, run_id, config = recorded
    for name, forged, key in _attacks(config):
        _replace(uri, run_id, forged)
        with pytest.raises(UserError) as refused:
            reading.load_run(uri, run_id)
        line = str(refused.value)
        assert "\n" not in line and key in line and ARTIFACT in line, (name, line)
    _replace(uri, run_id, config)  # put back as it was: accepted again
    assert reading.load_run(uri, run_id)["config"] == config


def test_every_loader_of_a_record_refuses_it(recorded, tmp_path):
    """The check, compare, the warm-start line and the re-run (before its worktree) all read through load_run."""
    from tfpipe import audit

    project, uri, run_id, config = recorded
    forged = yaml.safe_load(yaml.safe_dump(config))
    forged["train"]["hooks"] = [{"_target_": "os.system", "command": "id"}]
    _replace(uri, run_id, forged)
    loaders = {
        "check": lambda: audit.check(run_id, project, uri),
        "compare": lambda: audit.compare(run_id, run_id, uri),
        "warm start line": lambda: audit.warm_start_line(run_id, project, uri),
        "rerun": lambda: audit.rerun(run_id, project, uri, sandbox_mode="off", log=lambda m: None),
    }
    for name, load in loaders.items():
        with pytest.raises(
            UserError, match="train.hooks=.*differs from the run's immutable param"
        ) as refused:
            load()
        assert "\n" not in str(refused.value), name


@pytest.mark.slow
def test_audit_rerun_of_a_replaced_config_exits_2_in_one_line_before_any_stage(recorded):
    project, uri, run_id, config = recorded
    forged = yaml.safe_load(yaml.safe_dump(config))
    forged["train"]["epochs"] = 99
    _replace(uri, run_id, forged)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "src")])}
    for cmd in (["pipeline.audit", run_id, "--rerun", "--sandbox", "off"], ["pipeline.audit", run_id]):
        proc = subprocess.run(
            [sys.executable, "-m", *cmd, "--tracking-uri", uri],
            cwd=project,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert proc.returncode == 2, proc.stderr
        last = proc.stderr.strip().splitlines()[-1]
        assert last.startswith(f"audit: error: run {run_id}: {ARTIFACT}: train.epochs='99' differs"), last
        assert "rerun: train" not in proc.stderr
