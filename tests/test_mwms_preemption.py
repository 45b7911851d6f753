"""Coordinated preemption under multi_worker_mirrored (2 workers through the local launcher): SIGTERM to worker 1
alone mid-training makes both workers checkpoint the same step and exit 143; the same command again resumes
there, to the weights of an uninterrupted run, with every step's metrics logged once in the one MLflow run.
Also: our SIGTERM handler taken back from a native one, and the stop a peer's preemption raises."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import tensorflow as tf
from test_multiworker import TINY, _runs, make_project, project_env

from tfpipe import interrupts

EPOCHS = 8
STEPS_PER_EPOCH = 8  # 21 train examples in files of 8/8/5, 2 workers x 1 per replica: 8 batches each
TOTAL_STEPS = EPOCHS * STEPS_PER_EPOCH
OVERRIDES = (
    "strategy=multi_worker_mirrored",
    *[o for o in TINY if not o.startswith(("train.epochs", "train.batch_size_per_replica"))],
    f"train.epochs={EPOCHS}",
    "train.batch_size_per_replica=1",
    "train.steps_per_execution=2",  # calls of 2 steps: the agreed stop falls on a call boundary
    "train.log_every_steps=2",
    "train.checkpoint_every_steps=1000",  # periodic checkpoints only at epoch ends: no lag hidden by them
    "train.tensorboard=false",
    "strategy.stop_grace_seconds=30",  # the launcher waits this long for the other workers' own exit
)


def _command(project: Path, prepared_dir: Path) -> list:
    return [
        sys.executable,
        "-m",
        "pipeline.train",
        *OVERRIDES,
        f"data.output_dir={prepared_dir}",
        f"tracking.uri=sqlite:///{project / 'mlflow.db'}",
    ]


def _latest_step(project: Path) -> int:
    latest = tf.train.latest_checkpoint(str(project / "models" / "cifar10" / "checkpoints"))
    return int(latest.rsplit("-", 1)[1]) if latest else 0


def _weights(project: Path) -> str:
    return (project / "models" / "cifar10" / "weights.sha256").read_text().strip()


def _run(project: Path, prepared_dir: Path) -> str:
    proc = subprocess.run(
        _command(project, prepared_dir),
        cwd=project,
        env=project_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    return proc.stdout


@pytest.fixture(scope="module")
def reference_weights(prepared_image, tmp_path_factory):
    project = make_project(tmp_path_factory.mktemp("mwms-reference"))
    _run(project, prepared_image.prepared_dir)
    return _weights(project)


def _worker_pid(log: Path, role: str) -> int:
    found = re.search(rf"\b{role}=(\d+)", log.read_text())
    return int(found.group(1)) if found else 0


def _sigterm_worker_1(project: Path, prepared_dir: Path) -> tuple[int, str]:
    """Start the job, SIGTERM worker 1 once the chief checkpointed epoch 1, return the launcher's code and log."""
    log = project / "first.log"
    with log.open("w") as out:
        proc = subprocess.Popen(
            _command(project, prepared_dir),
            cwd=project,
            env=project_env(),
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    deadline = time.monotonic() + 180
    try:
        while _latest_step(project) < STEPS_PER_EPOCH or not _worker_pid(log, "worker:1"):
            assert proc.poll() is None, (
                "the job ended before epoch 1's checkpoint:\n" + log.read_text()[-3000:]
            )
            assert time.monotonic() < deadline, "no checkpoint in time"
            time.sleep(0.02)
        os.kill(_worker_pid(log, "worker:1"), signal.SIGTERM)
        code = proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    return code, log.read_text()


def test_reclaim_takes_the_stop_signals_back_from_another_handler():
    with interrupts.graceful_stop():
        signal.signal(
            signal.SIGTERM, signal.SIG_IGN
        )  # as TF's coordination service's native handler swallows it
        interrupts.reclaim()
        with interrupts.deferred():
            signal.raise_signal(signal.SIGTERM)
            assert interrupts.requested() == signal.SIGTERM
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # handlers restored


@pytest.mark.parametrize("pending, expected", [(None, signal.SIGTERM), (signal.SIGINT, signal.SIGINT)])
def test_an_agreed_stop_raises_this_workers_signal_or_sigterm(pending, expected):
    with interrupts.graceful_stop(), interrupts.deferred():
        if pending is not None:
            signal.raise_signal(pending)
        with pytest.raises(interrupts.Interrupted) as stopped:
            interrupts.raise_stop("at step 6")
        assert interrupts.requested() is None
    assert stopped.value.signum == expected and str(stopped.value).endswith("at step 6")


@pytest.mark.slow
def test_sigterm_to_one_worker_stops_all_at_one_step_and_the_job_resumes_there(
    prepared_image, tmp_path, reference_weights
):
    project = make_project(tmp_path)
    code, out = _sigterm_worker_1(project, prepared_image.prepared_dir)
    assert code == 143, out[-4000:]
    saved = {
        role: re.findall(rf"\[{role}\] .*checkpoint saved at step (\d+)", out)
        for role in ("worker:0", "worker:1")
    }
    assert saved["worker:0"] and saved["worker:0"] == saved["worker:1"], (saved, out[-4000:])
    stopped_at = int(saved["worker:0"][0])
    for role in (
        "worker:0",
        "worker:1",
    ):  # both exit as a cluster manager's SIGTERM would, the launcher says so
        assert re.search(
            rf"\[{role}\] train: interrupted \(stopped by SIGTERM at step {stopped_at}\b", out
        ), out[-4000:]
    assert re.search(r"\[launcher\] job stopped \(worker:0=143, worker:1=143\)", out), out[-4000:]
    assert _latest_step(project) == stopped_at, "the chief's checkpoint is at the agreed step, not behind it"
    assert STEPS_PER_EPOCH < stopped_at < TOTAL_STEPS and stopped_at % 2 == 0  # a call boundary
    runs = _runs(project / "mlflow.db")
    assert len(runs) == 1 and runs[0].info.status == "KILLED"

    _run(project, prepared_image.prepared_dir)  # the same command again
    assert _weights(project) == reference_weights
    runs = _runs(project / "mlflow.db")
    assert len(runs) == 1, "the resumed job continues the interrupted run"
    run = runs[0]
    assert run.info.status == "FINISHED" and run.data.tags["tfpipe.resumes"] == "1"
    assert run.data.tags["tfpipe.resumed_at_step"] == str(stopped_at)
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{project / 'mlflow.db'}")
    steps = [m.step for m in client.get_metric_history(run.info.run_id, "train_loss")]
    assert sorted(steps) == list(range(2, TOTAL_STEPS + 1, 2)), "every logged step exactly once"
    epochs = [m.step for m in client.get_metric_history(run.info.run_id, "val_loss")]
    assert sorted(epochs) == list(range(EPOCHS))
