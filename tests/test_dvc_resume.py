"""`dvc repro` killed with SIGKILL mid-training (DVC and its stage process, the whole process group), then
`dvc repro` again: the train stage resumes from its checkpoint into the same MLflow run and the run finishes
with every step logged exactly once."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
import tensorflow as tf
from test_pipeline_e2e import _make_project, _run

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
