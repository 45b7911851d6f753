"""multi_worker_mirrored (2 workers) and parameter_server (chief + 2 workers + 1 ps) as real processes
through the local launcher on loopback: each job runs once (module-scoped) and serves several checks."""

from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
TINY = (
    "model.filters=[4]",
    "model.dense_units=8",
    "train.batch_size_per_replica=2",
    "train.epochs=3",
    "train.optimizer.learning_rate=0.01",
    "tracking.log_model=false",
)

pytestmark = pytest.mark.slow


def make_project(tmp: Path) -> Path:
    """A project folder with its own conf/ (outputs land here, never in the shared tree)."""
    shutil.copytree(ROOT / "conf", tmp / "conf")
    return tmp


def project_env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(ROOT / "src"), env.get("PYTHONPATH", "")])
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    env.pop("TF_CONFIG", None)
    for name in ("MLFLOW_RUN_ID", "MLFLOW_TRACKING_URI", "MLFLOW_EXPERIMENT_ID", "MLFLOW_EXPERIMENT_NAME"):
        env.pop(name, None)  # the environment's store would win over the job's tracking.uri
    return env


def _train_job(tmp: Path, prepared_dir: Path, strategy: str, *extra: str, env: dict | None = None):
    project = make_project(tmp)
    db = project / "mlflow.db"
    keys = {e.split("=")[0] for e in extra}
    cmd = [
        sys.executable,
        "-m",
        "pipeline.train",
        f"strategy={strategy}",
        *(t for t in TINY if t.split("=")[0] not in keys),
        f"data.output_dir={prepared_dir}",
        f"tracking.uri=sqlite:///{db}",
        *extra,
    ]
    proc = subprocess.run(
        cmd, cwd=project, env=env or project_env(), capture_output=True, text=True, timeout=400
    )
    return project, db, proc


def _runs(db: Path):
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{db}")
    experiments = client.search_experiments()
    return client.search_runs([e.experiment_id for e in experiments])


def _losses(project: Path) -> list[float]:
    with (project / "plots" / "history.csv").open() as fh:
        return [float(row["epoch_train_loss"]) for row in csv.DictReader(fh)]


def _examples(project: Path) -> list[int]:
    """Examples each epoch trained on, as its throughput figure states them."""
    with (project / "plots" / "history.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    return [round(float(r["epoch_examples_per_sec"]) * float(r["epoch_seconds"])) for r in rows]


STALE_SCRATCH = ("tfpipe-worker-{pid}-k1ll3d00", "tfpipe-preemption-{pid}-k1ll3d00")  # a SIGKILLed worker's


@pytest.fixture(scope="module")
def mwms_job(prepared_image, tmp_path_factory):
    # `python -m pipeline.train` itself hands over to the launcher (no TF_CONFIG set), as `dvc repro` would. The
    # job's temp dir holds the scratch folders a killed worker of an earlier job left (its pid is gone).
    temp = tmp_path_factory.mktemp("mwms-temp")
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    for name in STALE_SCRATCH:
        (temp / name.format(pid=int(dead.stdout))).mkdir()
    env = {**project_env(), "TMPDIR": str(temp)}
    job = _train_job(
        tmp_path_factory.mktemp("mwms"), prepared_image.prepared_dir, "multi_worker_mirrored", env=env
    )
    return (*job, temp)


@pytest.fixture(scope="module")
def ps_job(prepared_image, tmp_path_factory):
    # 5 epochs, not 3: asynchronous steps of 2 examples make an epoch's loss noisy (a run can rise from one
    # epoch to the next; over 3 epochs one run of about ten never went below its first epoch)
    return _train_job(
        tmp_path_factory.mktemp("ps"), prepared_image.prepared_dir, "parameter_server", "train.epochs=5"
    )


def test_mwms_job_succeeds_with_role_prefixed_logs(mwms_job):
    _, _, proc, _ = mwms_job
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "[worker:0]" in proc.stdout and "[worker:1]" in proc.stdout
    assert "[launcher] started 2 processes (multi_worker_mirrored)" in proc.stdout


def test_mwms_workers_remove_the_scratch_folders_of_killed_workers_and_leave_none_of_their_own(mwms_job):
    _, _, proc, temp = mwms_job
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    left = sorted(
        p.name for p in temp.iterdir() if p.name.startswith(("tfpipe-worker-", "tfpipe-preemption-"))
    )
    assert left == [], "a worker's scratch checkpoints or preemption folder stayed in the node's temp dir"


def test_mwms_loss_decreases_and_one_run_records_the_cluster(mwms_job):
    project, db, proc, _ = mwms_job
    assert proc.returncode == 0
    losses = _losses(project)
    assert len(losses) == 3 and losses[-1] < losses[0], losses
    runs = _runs(db)
    assert len(runs) == 1, [r.info.run_id for r in runs]  # never one run per worker
    tags, params = runs[0].data.tags, runs[0].data.params
    assert tags["replicas"] == "2" and tags["strategy.worker_count"] == "2"
    assert tags["strategy"] == "multi_worker_mirrored"
    spec = json.loads(tags["cluster_spec"])
    assert list(spec) == ["worker"] and len(spec["worker"]) == 2
    assert params["strategy.name"] == "multi_worker_mirrored"
    assert json.loads((project / "run.json").read_text())["run_id"] == runs[0].info.run_id
    metrics = json.loads((project / "metrics" / "train.json").read_text())
    assert metrics["global_batch_size"] == 4  # 2 per replica x 2 workers
    # 21 train records in shards of 8, 8, 5 (conftest.prepared_image), split by file over 2 workers: the
    # smaller worker's 8 records make 4 batches of 2 a epoch on each worker, 16 examples over both
    assert _examples(project) == [16, 16, 16]


def test_mwms_chief_exports_a_float32_model(mwms_job, prepared_image):
    import tensorflow as tf

    project, _, proc, _ = mwms_job
    assert proc.returncode == 0
    saved = project / "models" / "cifar10" / "saved_model"
    fn = tf.saved_model.load(str(saved)).signatures["serving_default"]
    images = np.zeros((2, 32, 32, 3), np.uint8)
    out = fn(image=tf.constant(images))["probabilities"]
    assert out.dtype == tf.float32 and out.shape == (2, 3)
    assert np.allclose(out.numpy().sum(axis=1), 1.0, atol=1e-4)
    # workers checkpointed to their own scratch dirs: only the chief's checkpoints are here
    assert list((project / "models" / "cifar10" / "checkpoints").glob("ckpt-*.index"))


def test_ps_job_trains_with_chief_workers_and_ps(ps_job):
    project, db, proc = ps_job
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    for role in ("[chief:0]", "[worker:0]", "[worker:1]", "[ps:0]"):
        assert role in proc.stdout
    losses = _losses(project)
    # it learns: a later epoch is below the first (in 10 of 10 runs by 0.15-0.63, 2026-11-26)
    assert len(losses) == 5 and min(losses[1:]) < losses[0], losses
    runs = _runs(db)
    assert len(runs) == 1
    tags = runs[0].data.tags
    assert tags["strategy"] == "parameter_server" and tags["strategy.worker_count"] == "2"
    spec = json.loads(tags["cluster_spec"])
    assert len(spec["chief"]) == 1 and len(spec["worker"]) == 2 and len(spec["ps"]) == 1
    # the chief schedules 10 steps a epoch (21 train records in batches of 2), each on one worker's batch of 2:
    # the examples come back with the steps' results
    assert _examples(project) == [20] * 5
    assert (project / "models" / "cifar10" / "saved_model" / "saved_model.pb").is_file()
