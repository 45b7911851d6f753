"""Faults while saving the outputs after training (issue 23, items 2 and 4), all real: a SavedModel
export SIGKILLed mid-write, a truncated or unsealed SavedModel, a full tmpfs, a read-only remount, a full
MLflow artifact store. Each ends in one line naming the folder and the cause; nothing half-written is
left looking complete."""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import stage_project

from tfpipe import files
from tfpipe.errors import UserError

ROOT = Path(__file__).resolve().parents[1]

EXPORT_LOOP = """
import sys, keras
from tfpipe.models import export_saved_model
model = keras.Sequential([keras.Input((4, 4, 3)), keras.layers.Flatten(), keras.layers.Dense(3)])
while True:
    export_saved_model(model, sys.argv[1], modality="image", image_shape=[4, 4, 3], class_names=["a", "b", "c"])
"""


def _tiny_model(units: int = 3):
    import keras

    return keras.Sequential([keras.Input((4, 4, 3)), keras.layers.Flatten(), keras.layers.Dense(units)])


def _export(model, directory: Path) -> None:
    from tfpipe.models import export_saved_model

    export_saved_model(model, directory, modality="image", image_shape=[4, 4, 3], class_names=["a", "b", "c"])


@pytest.fixture
def small_disk(tmp_path):
    """A real 3 MB filesystem (tmpfs), mounted when the tests run as root (as CI does)."""
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a tmpfs needs root")
    mountpoint = tmp_path / "small"
    mountpoint.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=3m", "tmpfs", str(mountpoint)]).returncode != 0:
        pytest.skip("this machine does not allow mounting a tmpfs")
    yield mountpoint
    subprocess.run(["umount", "-l", str(mountpoint)])


def _fill(disk: Path) -> None:
    with open(disk / "filler", "wb") as fh:
        try:
            while True:
                fh.write(b"\0" * 65536)
                fh.flush()
        except OSError:
            pass


@pytest.mark.parametrize("damage", ["truncated variables", "seal missing"])
def test_a_damaged_saved_model_is_refused_at_evaluate_in_one_line(tmp_path, damage):
    from tfpipe import evaluation

    model_dir = tmp_path / "saved_model"
    _export(_tiny_model(), model_dir)
    evaluation.check_complete(model_dir)  # whole: accepted
    if damage == "seal missing":
        (model_dir / files.SEAL).unlink()
    else:
        data = next((model_dir / "variables").glob("variables.data-*"))
        data.write_bytes(data.read_bytes()[: data.stat().st_size // 2])
    with pytest.raises(UserError) as info:
        evaluation.check_complete(model_dir)
    message = str(info.value)
    assert "\n" not in message and str(model_dir) in message and "re-run the train stage" in message


@pytest.mark.slow
def test_a_killed_export_leaves_the_old_whole_model_or_none(tmp_path):
    """SIGKILL a real exporting process at random moments: the final folder is always absent or whole."""
    target = tmp_path / "saved_model"
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "CUDA_VISIBLE_DEVICES": ""}
    rng = random.Random(23)
    for _ in range(4):
        proc = subprocess.Popen([sys.executable, "-c", EXPORT_LOOP, str(target)], env=env)
        deadline = time.monotonic() + 240
        while not list(tmp_path.glob(".saved_model.tmp-*")) and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(rng.uniform(0, 1.5))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        if target.exists():
            assert files.check_seal(target) is None, "a partial SavedModel in the final place"
    _export(_tiny_model(), target)  # the next export clears what the kills left beside it
    assert not list(tmp_path.glob(".saved_model.*-*")) and files.check_seal(target) is None


@pytest.mark.parametrize("fault", ["full", "read-only"])
def test_a_full_or_read_only_disk_while_exporting_is_one_line_and_leaves_the_old_model(small_disk, fault):
    target = small_disk / "saved_model"
    _export(_tiny_model(), target)
    if fault == "read-only":
        subprocess.run(["mount", "-o", "remount,ro", str(small_disk)], check=True)
    try:
        with pytest.raises(UserError) as info:
            _export(_tiny_model(units=25_000), target)  # 4.8 MB of weights on a 3 MB disk
    finally:
        subprocess.run(["mount", "-o", "remount,rw", str(small_disk)], check=True)
    message = str(info.value)
    assert "\n" not in message and str(small_disk) in message
    assert ("no space left" if fault == "full" else "not writable") in message
    assert fault != "full" or "MB" in message
    assert files.check_seal(target) is None  # the old model, whole
    assert not list(small_disk.glob(".saved_model.*"))


@pytest.mark.parametrize("fault", ["full", "read-only"])
def test_metrics_and_plots_on_a_full_or_read_only_disk_are_one_line(small_disk, fault):
    import numpy as np

    from tfpipe import evaluation

    result = evaluation.EvalResult(**_eval_fields(np))
    paths = dict(
        metrics_path=small_disk / "metrics" / "eval.json",
        confusion_csv_path=small_disk / "plots" / "cm.csv",
        confusion_png_path=small_disk / "plots" / "cm.png",
    )
    evaluation.write_reports(result, **paths)
    before = paths["metrics_path"].read_bytes()
    if fault == "full":
        _fill(small_disk)
    else:
        subprocess.run(["mount", "-o", "remount,ro", str(small_disk)], check=True)
    try:
        with pytest.raises(UserError) as info:
            evaluation.write_reports(result, **paths)
    finally:
        subprocess.run(["mount", "-o", "remount,rw", str(small_disk)], check=True)
    message = str(info.value)
    assert "\n" not in message and str(small_disk / "metrics") in message
    assert ("no space left" if fault == "full" else "not writable") in message
    assert paths["metrics_path"].read_bytes() == before  # the old report, whole


def _eval_fields(np) -> dict:
    return dict(
        class_names=["a", "b"],
        num_examples=4,
        accuracy=0.5,
        loss=0.7,
        precision=[0.5, 0.5],
        recall=[0.5, 0.5],
        f1=[0.5, 0.5],
        support=[2, 2],
        macro_precision=0.5,
        macro_recall=0.5,
        macro_f1=0.5,
        confusion=np.array([[1, 1], [1, 1]]),
        labels=np.array([0, 0, 1, 1]),
        predictions=np.array([0, 1, 0, 1]),
    )


@pytest.mark.slow
def test_a_full_artifact_store_fails_the_run_in_one_line_with_the_reason_as_a_tag(
    small_disk, tmp_path, make_config, monkeypatch
):
    """The project's SQLite store, its artifact root on a full 3 MB tmpfs: the upload is one line, the run
    ends FAILED tagged tfpipe.failure; after space is freed the same upload goes through."""
    import mlflow
    from mlflow import MlflowClient

    from tfpipe import tracking

    for name in ("MLFLOW_TRACKING_URI", "MLFLOW_RUN_ID", "MLFLOW_EXPERIMENT_NAME", "MLFLOW_EXPERIMENT_ID"):
        monkeypatch.delenv(name, raising=False)
    project = tmp_path / "project"
    project.mkdir()
    cfg = make_config("experiment=smoke", f"tracking.artifact_location={small_disk}/artifacts")
    report = project / "report.bin"
    report.write_bytes(os.urandom(512 * 1024))
    _fill(small_disk)
    try:
        with pytest.raises(UserError) as info, tracking.start_run(cfg, project, stage="train") as run:
            run.log_artifact(report, "reports")
    finally:
        while mlflow.active_run() is not None:
            mlflow.end_run()
        mlflow.set_tracking_uri(None)
    message = str(info.value)
    assert "\n" not in message and str(small_disk) in message and "no space left" in message
    got = MlflowClient(tracking_uri=f"sqlite:///{project / 'mlflow.db'}").get_run(run.run_id)
    assert got.info.status == "FAILED" and "no space left" in got.data.tags["tfpipe.failure"]
    (small_disk / "filler").unlink()
    with tracking.start_run(cfg, project, stage="train") as again:
        again.log_artifact(report, "reports")
    mlflow.set_tracking_uri(None)


CONCURRENT_RUN = """
import sys
from pathlib import Path
from tfpipe import config, tracking
root, repo = Path(sys.argv[1]), Path(sys.argv[2])
cfg = config.compose(["experiment=smoke"], config_dir=repo / "conf")
with tracking.start_run(cfg, root, stage="train", flush_every=5, flush_seconds=0.05) as run:
    run.log_params(cfg.flat())
    for step in range(200):
        run.log_metrics({"train_loss": 1.0 / (step + 1)}, step=step)
        if step % 20 == 0:
            run.set_tags({f"at{step}": "x"})
print(run.run_id)
"""

LOCK_HOLDER = """
import sqlite3, sys, time
db = sqlite3.connect(sys.argv[1], isolation_level=None)
for _ in range(6):  # a third writer (a backup, `mlflow gc`) holding the write lock 2 s at a time
    db.execute("BEGIN IMMEDIATE"); time.sleep(2); db.execute("COMMIT"); time.sleep(0.5)
"""


@pytest.mark.slow
def test_two_runs_logging_to_one_sqlite_store_at_once_both_finish(tmp_path):
    """Two real processes log params, tags and 200 steps each to one mlflow.db while a third holds its
    write lock in 2 s bursts: both finish, every step logged once, no 'database is locked' shown."""
    from mlflow import MlflowClient

    from tfpipe.tracking import sqlite

    db = tmp_path / "mlflow.db"
    sqlite.init_store(f"sqlite:///{db}")
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    for name in ("MLFLOW_TRACKING_URI", "MLFLOW_RUN_ID"):
        env.pop(name, None)
    holder = subprocess.Popen([sys.executable, "-c", LOCK_HOLDER, str(db)])
    runs = [
        subprocess.Popen(
            [sys.executable, "-c", CONCURRENT_RUN, str(tmp_path), str(ROOT)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    outputs = [proc.communicate(timeout=300) for proc in runs]
    holder.wait(timeout=60)
    client = MlflowClient(tracking_uri=f"sqlite:///{db}")
    for proc, (out, err) in zip(runs, outputs):
        assert proc.returncode == 0 and "locked" not in err, err[-2000:]
        run = client.get_run(out.strip().splitlines()[-1])
        assert run.info.status == "FINISHED"
        steps = [m.step for m in client.get_metric_history(run.info.run_id, "train_loss")]
        assert sorted(steps) == list(range(200))


from test_stages import TINY_TRAIN as EVAL_TINY  # noqa: E402  prepared_image: seconds of training, no upload


@pytest.mark.slow
def test_a_killed_evaluate_leaves_the_previous_reports_whole_and_the_rerun_completes(
    prepared_image, tmp_path
):
    """SIGKILL a real `python -m pipeline.evaluate` at random moments of its run (load, scoring, writing the
    reports, logging): metrics/eval.json is never half of one; the same command again completes and ends
    the run FINISHED."""
    from mlflow import MlflowClient

    project, env, stage = stage_project(tmp_path, prepared_image, *EVAL_TINY)
    for name in ("train", "evaluate"):
        started = time.monotonic()
        done = subprocess.run(stage(name), cwd=project, env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-3000:]
    runtime = time.monotonic() - started  # of the whole evaluate: the kills fall anywhere in it
    report = project / "metrics" / "eval.json"
    before = report.read_bytes()
    rng = random.Random(23)
    for _ in range(2):
        proc = subprocess.Popen(stage("evaluate"), cwd=project, env=env, stderr=subprocess.DEVNULL)
        time.sleep(rng.uniform(0.5, 1.0) * runtime)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        # absent (as `dvc repro` leaves it) or the previous report, whole (the same model scores the same)
        assert not report.exists() or report.read_bytes() == before, report.read_bytes()[:200]
    done = subprocess.run(
        stage("evaluate"), cwd=project, env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert report.read_bytes() == before
    client = MlflowClient(tracking_uri=f"sqlite:///{project / 'mlflow.db'}")
    (run,) = client.search_runs([e.experiment_id for e in client.search_experiments()])
    assert run.info.status == "FINISHED" and "test_accuracy" in run.data.metrics


@pytest.mark.slow
def test_a_store_locked_longer_than_sqlite_waits_fails_the_stage_in_one_line(prepared_image, tmp_path):
    """Another program holds mlflow.db's write lock (`BEGIN EXCLUSIVE`, held here by this process) for the
    whole stage: `python -m pipeline.train` stops with exit 2 and one line naming the store and the lock."""
    import sqlite3

    from tfpipe.tracking import sqlite

    project, env, stage = stage_project(tmp_path, prepared_image, *EVAL_TINY)
    db = project / "mlflow.db"
    sqlite.init_store(f"sqlite:///{db}")
    cmd = stage("train")
    holder = sqlite3.connect(db, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        proc = subprocess.run(cmd, cwd=project, env=env, capture_output=True, text=True, timeout=300)
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert lines[-1].startswith("train: error: ") and str(db) in lines[-1] and "locked" in lines[-1], lines[
        -1
    ]
