"""`dvc repro` killed with SIGKILL mid-training (DVC and its stage process, the whole process group), then
`dvc repro` again: the train stage resumes from its checkpoint into the same MLflow run and the run finishes
with every step logged exactly once."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest
import tensorflow as tf
from test_pipeline_e2e import TINY, _make_project, _run

pytestmark = pytest.mark.slow
EPOCHS = 12  # long enough to be killed mid-training


def _latest_step(project) -> int:
    latest = tf.train.latest_checkpoint(str(project / "models" / "cifar10" / "checkpoints"))
    return int(latest.rsplit("-", 1)[1]) if latest else 0


def test_dvc_repro_after_kill_9_resumes_into_the_same_run(tmp_path, image_dir, text_dir):
    project, env = _make_project(
        tmp_path, image_dir, text_dir, f"train.epochs={EPOCHS}", "train.checkpoint_every_steps=2"
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "dvc", "repro"],
        cwd=project,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # its own process group: the kill reaches DVC and the stage it runs
    )
    deadline = time.monotonic() + 300
    try:
        while _latest_step(project) < 4:
            assert proc.poll() is None, "dvc repro ended before the first checkpoints"
            assert time.monotonic() < deadline, "no checkpoint in time"
            time.sleep(0.05)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    stopped_at = _latest_step(project)

    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{project / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("tfpipe").experiment_id
    (killed,) = client.search_runs([experiment])
    assert killed.info.status == "RUNNING"  # nothing runs at a kill -9

    _run([sys.executable, "-m", "dvc", "repro"], project, env)  # the same command again
    (run,) = client.search_runs([experiment])
    assert run.info.run_id == killed.info.run_id and run.info.status == "FINISHED"
    assert run.data.tags["tfpipe.resumes"] == "1"
    assert int(run.data.tags["tfpipe.resumed_at_step"]) == stopped_at > 0
    steps = sorted(m.step for m in client.get_metric_history(run.info.run_id, "train_loss"))
    total = json.loads((project / "metrics" / "train.json").read_text())["steps"]
    assert total > stopped_at and steps == list(range(1, total + 1)), "every step logged exactly once"
    assert "test_accuracy" in run.data.metrics  # evaluate ran into the same run


@pytest.fixture(scope="module")
def committed_baseline(tmp_path_factory, image_dir, text_dir):
    """A project whose last commit holds a finished run's dvc.lock (models/ in DVC's cache), as a team has
    after `dvc exp apply` + `git commit`: what `dvc exp run` checks out before it runs the stages. Made once;
    each test runs in its own copy (the whole folder: git, DVC cache, store)."""
    tmp_path = tmp_path_factory.mktemp("baseline")
    project, env = _make_project(tmp_path, image_dir, text_dir, "train.checkpoint_every_steps=2")
    _run(
        [sys.executable, "-m", "dvc", "add", "data/raw/cifar10", "data/raw/imdb"], project, env
    )  # a copy has them
    _run([sys.executable, "-m", "dvc", "repro"], project, env)
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t"]
    _run([*git, "add", "-A"], project, env)
    _run([*git, "commit", "-qm", "baseline run"], project, env)
    return project, env


def _shelved_step(project) -> int:
    """The newest checkpoint step on the shelf of the project's unfinished training (.tfpipe/resume)."""
    shelves = list((project / ".tfpipe" / "resume").glob("*/checkpoint"))
    latest = tf.train.latest_checkpoint(str(shelves[0].parent)) if shelves else None
    return int(latest.rsplit("-", 1)[1]) if latest else 0


def _stop_at_a_checkpoint(proc: subprocess.Popen, project, stop) -> int:
    """Wait for the shelf's 4th checkpoint step, `stop()`, wait for `proc`; the shelved step it stopped at."""
    deadline = time.monotonic() + 300
    try:
        while _shelved_step(project) < 4:  # the shelf mirrors the checkpoints after every save
            assert proc.poll() is None, "the experiment ended before the first checkpoints"
            assert time.monotonic() < deadline, "no checkpoint in time"
            time.sleep(0.05)
        stop()
        proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    return _shelved_step(project)


def _no_queue_worker(project, env) -> None:
    """Wait (at most 60 s) for the killed queue's worker to stop: it idles 10 s once its queue is empty, and a task
    queued while it shuts down is taken by no worker and shown Running for good (DVC's race, seen once in the suite:
    the next `--run-all` waited 600 s). A user who queues again a few seconds later never meets it."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        status = subprocess.run(
            [sys.executable, "-m", "dvc", "queue", "status"],
            cwd=project,
            env=env,
            capture_output=True,
            text=True,
        ).stdout
        if "Worker status: 0 active, 0 idle" in status:
            return
        time.sleep(1)


def _interrupted_run(project):
    """(client, experiment id, the one run that did not finish), which must be KILLED: ended by the stop."""
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{project / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("tfpipe").experiment_id
    killed = [r for r in client.search_runs([experiment]) if r.info.status != "FINISHED"]
    assert [r.info.status for r in killed] == ["KILLED"]
    return client, experiment, killed[0].info.run_id


def _assert_resumed(client, experiment, run_id, stopped_at):
    """The interrupted run finished as the one resumed run beside the baseline's, every step logged once."""
    assert len(client.search_runs([experiment])) == 2, "the baseline run and the interrupted one, no third"
    run = client.get_run(run_id)
    assert run.info.status == "FINISHED" and run.data.tags["tfpipe.resumes"] == "1"
    assert int(run.data.tags["tfpipe.resumed_at_step"]) == stopped_at > 0
    steps = sorted(m.step for m in client.get_metric_history(run_id, "train_loss"))
    assert steps == list(range(1, steps[-1] + 1)) and steps[-1] > stopped_at, "every step logged exactly once"


@pytest.mark.parametrize("form", [[], ["--temp"]], ids=["workspace", "temp"])
def test_dvc_exp_run_after_ctrl_c_resumes_into_the_same_run(tmp_path, committed_baseline, form):
    """Ctrl-C (SIGINT to the whole foreground group) during `dvc exp run -S ...`, then the same command: DVC
    first checks out the committed finished models/ over the interrupted one (and `--temp` works in a copy it
    deletes), yet the training resumes from its newest checkpoint into the same MLflow run."""
    baseline, env = committed_baseline
    project = shutil.copytree(baseline, tmp_path / "project", symlinks=True)
    env = {
        **env,
        "PYTHONPATH": str(project / "src"),
    }  # (the experiment's artifact folder stays the baseline's)
    overrides = [*TINY, "train.checkpoint_every_steps=2", f"train.epochs={EPOCHS}"]  # -S composes conf/ anew
    command = [sys.executable, "-m", "dvc", "exp", "run", *form, *[a for o in overrides for a in ("-S", o)]]
    proc = subprocess.Popen(
        command,
        cwd=project,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    stopped_at = _stop_at_a_checkpoint(proc, project, lambda: os.killpg(proc.pid, signal.SIGINT))  # Ctrl-C
    client, experiment, run_id = _interrupted_run(project)
    _run(command, project, env)  # the same command again
    _assert_resumed(client, experiment, run_id, stopped_at)
    assert not list((project / ".tfpipe" / "resume").iterdir()), "a finished training leaves no shelf"


def test_a_queued_experiment_killed_by_dvc_queue_kill_resumes_when_queued_again(tmp_path, committed_baseline):
    """`dvc exp run --queue -S ...` then `dvc exp run --run-all`; `dvc queue kill` (the queue's Ctrl-C) during the
    training; the same two commands again: the queued copy is deleted and a new one made, yet the training
    resumes from its newest checkpoint into the same MLflow run. Then a teammate's `audit --rerun --apply-diff
    DIGEST` of that run (its diff holds params.yaml and dvc.lock: the experiment re-prepared the data) is
    REPRODUCED: a resumed run re-runs from scratch to the same weights."""
    baseline, env = committed_baseline
    project = shutil.copytree(baseline, tmp_path / "project", symlinks=True)
    env = {**env, "PYTHONPATH": str(project / "src")}
    overrides = [
        *TINY,
        "train.checkpoint_every_steps=2",
        f"train.epochs={4 * EPOCHS}",  # more than the other forms: `dvc queue kill` is a process, slower than a signal
        "data.examples_per_shard=4",
    ]
    dvc = [sys.executable, "-m", "dvc"]
    queue = [*dvc, "exp", "run", "--queue", *[a for o in overrides for a in ("-S", o)]]
    queued = _run(queue, project, env)
    name = queued.split("Queued experiment '", 1)[1].split("'", 1)[0]
    proc = subprocess.Popen(
        [*dvc, "exp", "run", "--run-all"],
        cwd=project,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    stopped_at = _stop_at_a_checkpoint(
        proc, project, lambda: _run([*dvc, "queue", "kill", name], project, env)
    )
    client, experiment, run_id = _interrupted_run(project)
    _no_queue_worker(project, env)
    _run(queue, project, env)  # the same commands again
    _run([*dvc, "exp", "run", "--run-all"], project, env)
    _assert_resumed(client, experiment, run_id, stopped_at)

    audit = [sys.executable, "-m", "pipeline.audit", run_id, "--rerun"]
    shown = subprocess.run(audit, cwd=project, env=env, capture_output=True, text=True, timeout=300)
    reviewed = shown.stderr.rsplit("--apply-diff ", 1)[-1].strip()  # the diff reviewed: its digest
    out = _run([*audit, "--apply-diff", reviewed], project, env, timeout=900)
    assert "rerun: the diff's dvc.lock left out" in out and "\nREPRODUCED\n" in out, out[-3000:]
