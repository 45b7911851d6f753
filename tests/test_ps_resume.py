"""A parameter_server job (chief + 2 workers + 1 ps through the local launcher) killed with SIGKILL mid-training,
then the same command again: every task dies with the launcher; the chief resumes from its checkpoint,
continues the same MLflow run and logs
each epoch once (asynchronous updates: the weights are not compared bit for bit, README "Auditing")."""

from __future__ import annotations

import json
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

pytestmark = pytest.mark.slow
EPOCHS = 10  # 5 steps each: killed at step >= 10, well before the end


def _latest_step(project) -> int:
    latest = tf.train.latest_checkpoint(str(project / "models" / "cifar10" / "checkpoints"))
    return int(latest.rsplit("-", 1)[1]) if latest else 0


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"


def test_a_killed_parameter_server_job_resumes_from_its_checkpoint(prepared_image, tmp_path):
    project = make_project(tmp_path)
    db = project / "mlflow.db"
    cmd = [
        sys.executable,
        "-m",
        "pipeline.train",
        "strategy=parameter_server",
        *[o for o in TINY if not o.startswith("train.epochs")],
        f"train.epochs={EPOCHS}",
        "train.checkpoint_every_steps=5",
        f"data.output_dir={prepared_image.prepared_dir}",
        f"tracking.uri=sqlite:///{db}",
    ]
    env = project_env()
    log = (project / "first.log").open("w")
    proc = subprocess.Popen(
        cmd, cwd=project, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )
    deadline = time.monotonic() + 300
    try:
        while _latest_step(project) < 10:
            assert proc.poll() is None, "the job ended before its first checkpoints"
            assert time.monotonic() < deadline, "no checkpoint in time"
            time.sleep(0.05)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # the launcher and every task it started
        proc.wait()
        log.close()
    tasks = [int(p) for p in re.findall(r"[a-z]+:\d+=(\d+)", (project / "first.log").read_text())]
    assert len(tasks) == 4, (project / "first.log").read_text()[-2000:]
    deadline = time.monotonic() + 30
    while any(_alive(pid) for pid in tasks):  # every task dies with its launcher, none trains on
        assert time.monotonic() < deadline, [pid for pid in tasks if _alive(pid)]
        time.sleep(0.1)
    stopped_at = _latest_step(project)
    (killed,) = _runs(db)

    done = subprocess.run(cmd, cwd=project, env=env, capture_output=True, text=True, timeout=400)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (run,) = _runs(db)
    assert run.info.run_id == killed.info.run_id and run.info.status == "FINISHED"
    assert run.data.tags["tfpipe.resumes"] == "1"
    assert int(run.data.tags["tfpipe.resumed_at_step"]) == stopped_at >= 10
    summary = json.loads((project / "metrics" / "train.json").read_text())
    assert summary["steps"] > stopped_at
    from mlflow import MlflowClient

    history = MlflowClient(tracking_uri=f"sqlite:///{db}").get_metric_history(run.info.run_id, "val_loss")
    assert sorted(m.step for m in history) == list(range(EPOCHS)), "each epoch logged exactly once"
