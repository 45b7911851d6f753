"""The crash sweep's CI subset (scripts/crash_sweep.py, issue 49): the train stage killed with SIGKILL right after
the writes where a half-done attempt is hardest to recognise, then the same command again and evaluate; every
invariant of the sweep holds (the weights, manifest, test metrics and kept checkpoints of an uninterrupted
run; one FINISHED run holding its served model once and one model per kept checkpoint once, all READY, and
each step's metrics once; no registry version without its model; no temporary file left). The whole sweep,
with evenly spaced instants over every stage, is the script's."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("crash_sweep", ROOT / "scripts" / "crash_sweep.py")
sweep = importlib.util.module_from_spec(_spec)
sys.modules["crash_sweep"] = sweep
_spec.loader.exec_module(sweep)

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def states(tmp_path_factory):
    work = tmp_path_factory.mktemp("sweep")
    states = sweep.make_states(work)
    reference, _ = sweep.reference_run("train", states, work)
    return work, states, reference


TRIGGERS = {
    "the export sealed": sweep.export_sealed,
    "the model's digest in the store": sweep.digest_in_store,  # issue 49: the run could never finish
    "the model logged": sweep.model_logged,
    "a checkpoint model begun": sweep.checkpoint_model_begun,  # PENDING: deleted and made again
    "a checkpoint model READY": sweep.checkpoint_model_ready,  # kept, the others made: each once
}


@pytest.mark.parametrize("name", TRIGGERS)
def test_train_killed_after_a_write_finishes_as_if_never_killed(states, name):
    work, projects, reference = states
    killed, found = sweep.kill_and_recover("train", projects, work, TRIGGERS[name], reference)
    assert killed, f"the train stage ended before {name}"
    assert found == [], found


def test_the_sweep_sees_a_violation(states, tmp_path):
    """The checker is not blind: a second FINISHED run, a checkpoint model twice (the second left PENDING), one
    missing and a temporary file are each reported (made here by hand, not by the code under test)."""
    work, projects, reference = states
    project = sweep.clone_state(projects["trained"], tmp_path / "broken")
    assert sweep.run(sweep.COMMANDS["evaluate"], project).returncode == 0
    assert sweep.violations(project, reference) == []
    (project / "models" / "cifar10" / ".saved_model.tmp-x").mkdir()
    import json

    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{project / 'mlflow.db'}")
    (experiment,) = [e for e in client.search_experiments() if e.name == "tfpipe"]
    run_id = json.loads((project / "run.json").read_text())["run_id"]
    kept = sweep.kept_checkpoints(project)
    assert len(kept) == 3, kept  # train.max_checkpoints_to_keep
    models = {m.name: m.model_id for m in client.search_logged_models([experiment.experiment_id])}
    client.delete_logged_model(models[f"checkpoint-step-{kept[-1]}"])
    name = f"checkpoint-step-{kept[0]}"
    client.create_logged_model(
        experiment.experiment_id, name=name, source_run_id=run_id, model_type="checkpoint"
    )
    extra = client.create_run(experiment.experiment_id)
    client.set_terminated(extra.info.run_id, "FINISHED")
    found = sweep.violations(project, reference)
    assert any("2 FINISHED runs" in line for line in found), found
    twice = sorted(["model", name, *(f"checkpoint-step-{n}" for n in kept[:-1])])  # kept[0] twice
    assert f"run {run_id}: logged models {twice}, not " in "\n".join(found), found
    assert f"run {run_id}: logged models not READY: [('{name}', 'PENDING')]" in found, found
    assert any("temporary files left" in line for line in found), found


def test_an_export_killed_before_its_clean_up_leaves_nothing_after_the_next_attempt(states, tmp_path):
    """The sweep's "the export sealed" kill, under load, landed after the SavedModel's rename and before its
    staging folder was removed: `.saved_model.tmp-*` (and `.saved_model.old-*`, the export it replaced) stayed
    for good. Here the kill lands once the export is sealed, and the two are planted as a process that is gone
    leaves them; the same train command again (which keeps that export: the same weights) removes them."""
    import subprocess

    work, projects, reference = states
    project = sweep.clone_state(projects["prepared"], tmp_path / "leftovers")
    assert sweep.start_and_kill(sweep.COMMANDS["train"], project, sweep.export_sealed).killed
    gone = subprocess.Popen(["true"])
    gone.wait()
    models = project / "models" / "cifar10"
    planted = [models / f".saved_model.tmp-{gone.pid}", models / f".saved_model.old-{gone.pid}"]
    for folder in planted:
        (folder / "saved_model").mkdir(parents=True)
    proc = sweep.run(sweep.COMMANDS["train"], project)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert not [p for p in planted if p.exists()], sorted(p.name for p in models.iterdir())


def test_a_store_killed_while_it_is_created_opens_next_time(tmp_path):
    """The sweep's finding: SIGKILL while MLflow creates a new mlflow.db's tables left a store every later run failed
    on (exit 1). The kill lands mid-migration: while one of MLflow's Alembic migrations rebuilds a table
    (`_alembic_tmp_<table>` exists), the instant a store made in place cannot recover from (shown red on the code
    before tfpipe.tracking.sqlite: "table _alembic_tmp_... already exists" on every later open)."""
    import os
    import signal
    import subprocess

    db = tmp_path / "mlflow.db"
    code = f"from tfpipe.tracking.sqlite import init_store; init_store('sqlite:///{db}')"
    proc = subprocess.Popen([sys.executable, "-c", code], start_new_session=True)
    try:
        while proc.poll() is None and not any(_mid_migration(p) for p in tmp_path.glob("*mlflow.db*")):
            pass
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    assert proc.returncode == -signal.SIGKILL, "the store was made before the kill landed"
    again = f"{code}; from mlflow import MlflowClient; c = MlflowClient('sqlite:///{db}'); c.create_experiment('x')"
    done = subprocess.run([sys.executable, "-c", again], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-1500:]
    assert sorted(p.name for p in tmp_path.iterdir() if p.name != "mlruns") == ["mlflow.db"]


def _mid_migration(path) -> bool:
    import sqlite3

    try:
        with sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=0.01) as db:
            rebuilding = "select count(*) from sqlite_master where name like '\\_alembic\\_tmp%' escape '\\'"
            return db.execute(rebuilding).fetchone()[0] > 0
    except sqlite3.Error:
        return False
