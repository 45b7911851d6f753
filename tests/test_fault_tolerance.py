"""Crash and resume: SIGTERM / kill -9 mid-training, then the same command again.

In-process tests stop the loop with a real SIGTERM sent to this process; subprocess tests run the real
train entry point (`python -m pipeline.train`) against a real SQLite MLflow store and kill it with
signals. With op determinism (the default), a resumed run ends with the same weights as an
uninterrupted one, and the MLflow run holds every step's metrics exactly once.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import tensorflow as tf
from conftest import seed_store

from tfpipe import config, interrupts, training

ROOT = Path(__file__).resolve().parents[1]
# prepared_image: 21 train examples -> 5 steps per epoch at batch 4; dropout exercises the RNG state.
TINY = (
    "model.filters=[8,8]",
    "model.dense_units=16",
    "model.dropout=0.3",
    "train.batch_size_per_replica=4",
    "train.shuffle_buffer=64",
)


def _cfg(*overrides):
    return config.compose([*TINY, *overrides], config_dir=ROOT / "conf")


class SignalAtStep:
    """A MetricsSink that sends this process `sig` when step `at` is logged (log_every_steps=1)."""

    def __init__(self, at: int, sig=signal.SIGTERM):
        self.at, self.sig, self.steps = at, sig, []

    def log_metrics(self, metrics, step):
        if "train_loss" in metrics:
            self.steps.append(step)
            if step == self.at:
                signal.raise_signal(self.sig)


@pytest.mark.parametrize("stop_at", [7, 10])  # mid-epoch (epoch 1, batch 2) and exactly at an epoch end
@pytest.mark.slow
def test_sigterm_checkpoints_the_step_and_the_resumed_run_is_bit_identical(prepared_image, tmp_path, stop_at):
    cfg = _cfg("train.epochs=3", "train.log_every_steps=1", "train.checkpoint_every_steps=100")
    reference = training.train(
        cfg, prepared_dir=prepared_image.prepared_dir, output_dir=tmp_path / "reference"
    )

    out = tmp_path / "interrupted"
    sink = SignalAtStep(stop_at)
    with interrupts.graceful_stop(), pytest.raises(interrupts.Interrupted) as stopped:
        training.train(cfg, prepared_dir=prepared_image.prepared_dir, output_dir=out, sink=sink)
    assert stopped.value.signum == signal.SIGTERM
    assert sink.steps[-1] == stop_at  # stopped right after the step it was signalled in
    assert tf.train.latest_checkpoint(str(out / "checkpoints")).endswith(f"ckpt-{stop_at}")
    assert not (out / "saved_model").exists()  # nothing that looks like a finished training

    resumed = training.train(
        cfg, prepared_dir=prepared_image.prepared_dir, output_dir=out, sink=SignalAtStep(-1)
    )
    assert resumed.resumed and resumed.resumed_at_step == stop_at
    assert resumed.steps == reference.steps == 15
    assert resumed.weights_sha256 == reference.weights_sha256
    assert [row["epoch"] for row in resumed.history] == [0, 1, 2]


def test_second_signal_stops_at_once(prepared_image, tmp_path):
    """A stop request pending (the loop has not reached a step boundary yet) + another signal: raise now."""
    with interrupts.graceful_stop():
        with interrupts.deferred():
            signal.raise_signal(signal.SIGTERM)
            assert interrupts.requested() == signal.SIGTERM
            with pytest.raises(interrupts.Interrupted):
                signal.raise_signal(signal.SIGINT)
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # handlers restored


def test_train_stream_resumes_at_any_batch(prepared_image):
    """Epoch e's order depends on (seed, e) only: the stream from (epoch 1, batch 3) is the tail of the full one."""
    from tfpipe import data

    def labels(**kw):
        ds = data.make_train_stream(
            prepared_image.prepared_dir,
            batch_size=4,
            seed=5,
            epochs=3,
            batches_per_epoch=5,
            shuffle_buffer=64,
            **kw,
        )
        return [b[1].numpy().tolist() for b in ds]

    full = labels(start_epoch=0)
    assert len(full) == 15 and full[:5] != full[5:10]  # epochs are shuffled differently
    assert labels(start_epoch=1, skip_batches=3) == full[8:]
    assert labels(start_epoch=2) == full[10:]


# ----------------------------------------------------------------------------- real processes, real store

SUBPROCESS_TINY = [
    *TINY,
    "train.epochs=40",
    "train.log_every_steps=1",
    "train.checkpoint_every_steps=3",
    "tracking.log_model=false",
    "train.tensorboard=false",
]


def _project(tmp: Path, prepared_dir: Path, name: str) -> tuple[Path, list, dict]:
    project = tmp / name
    shutil.copytree(ROOT / "conf", project / "conf")
    seed_store(project)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "TF_CONFIG"))}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), str(ROOT)])
    env["TF_CPP_MIN_LOG_LEVEL"] = "2"
    cmd = [sys.executable, "-m", "pipeline.train", *SUBPROCESS_TINY, f"data.output_dir={prepared_dir}"]
    return project, cmd, env


def _latest_step(project: Path) -> int:
    latest = tf.train.latest_checkpoint(str(project / "models" / "cifar10" / "checkpoints"))
    return int(latest.rsplit("-", 1)[1]) if latest else 0


def _start_and_signal(cmd, project, env, sig, after_step: int, timeout: float = 180) -> tuple[int, str]:
    proc = subprocess.Popen(
        cmd, cwd=project, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    deadline = time.monotonic() + timeout
    try:
        while _latest_step(project) < after_step:
            assert proc.poll() is None, (
                f"training ended before step {after_step}:\n{proc.stdout.read()[-3000:]}"
            )
            assert time.monotonic() < deadline, "no checkpoint in time"
            time.sleep(0.02)
        proc.send_signal(sig)
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return proc.returncode, out


def _run(cmd, project, env) -> str:
    proc = subprocess.run(cmd, cwd=project, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return proc.stderr


def _store(project: Path):
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{project / 'mlflow.db'}")
    runs = client.search_runs(
        client.search_experiments()[0].experiment_id if client.search_experiments() else [], run_view_type=3
    )
    return client, runs


def _weights(project: Path) -> str:
    return (project / "models" / "cifar10" / "weights.sha256").read_text().strip()


# The defaults' cadence: 10 steps per compiled call, step metrics every 50 steps, checkpoints every 500 (so
# only at epoch ends here). Batch 2 -> 10 steps per epoch, so every call is a full 10-step call.
DEFAULT_CADENCE = [
    *[
        o
        for o in SUBPROCESS_TINY
        if not o.startswith(("train.log_every_steps", "train.checkpoint_every_steps"))
    ],
    "train.batch_size_per_replica=2",
    "train.epochs=20",
]


def _default_cadence(tmp: Path, prepared_dir: Path, project_name: str):
    project, cmd, env = _project(tmp, prepared_dir, project_name)
    return project, [c for c in cmd if c not in SUBPROCESS_TINY] + DEFAULT_CADENCE, env


@pytest.fixture(scope="module")
def default_cadence_weights(prepared_image, tmp_path_factory):
    reference, cmd, env = _default_cadence(tmp_path_factory.mktemp("ft"), prepared_image.prepared_dir, "ref")
    _run(cmd, reference, env)
    return _weights(reference)


@pytest.mark.slow
@pytest.mark.parametrize(
    "sig, code, status",
    [(signal.SIGKILL, -9, "RUNNING"), (signal.SIGTERM, 143, "KILLED"), (signal.SIGINT, 130, "KILLED")],
)  # kill -9; a cluster manager's stop; Ctrl-C
def test_resume_with_the_default_cadence_is_bit_identical_and_logs_each_step_once(
    prepared_image, tmp_path, default_cadence_weights, sig, code, status
):
    project, cmd, env = _default_cadence(tmp_path, prepared_image.prepared_dir, "project")
    returncode, out = _start_and_signal(cmd, project, env, sig, after_step=30)
    assert returncode == code, out[-3000:]
    stopped_at = _latest_step(project)
    assert 30 <= stopped_at < 200
    assert not (project / "models" / "cifar10" / "training_state.json").exists()
    client, runs = _store(project)
    assert len(runs) == 1 and runs[0].info.status == status  # kill -9 leaves it RUNNING: nothing can run then
    if sig != signal.SIGKILL:  # a checkpoint at the end of the compiled call in progress
        name = signal.Signals(sig).name
        assert f"interrupted (stopped by {name}" in out and f"checkpoint saved at step {stopped_at}" in out
    _run(cmd, project, env)
    assert _weights(project) == default_cadence_weights
    client, runs = _store(project)
    assert len(runs) == 1 and runs[0].info.status == "FINISHED"
    assert runs[0].data.tags["tfpipe.resumes"] == "1"
    assert runs[0].data.tags["tfpipe.resumed_at_step"] == str(stopped_at)
    steps = [m.step for m in client.get_metric_history(runs[0].info.run_id, "train_loss")]
    # every epoch end (each 10th step; the 50-step cadence falls on epoch ends too), each exactly once
    assert sorted(steps) == list(range(10, 201, 10))
    assert sorted(m.step for m in client.get_metric_history(runs[0].info.run_id, "val_loss")) == list(
        range(20)
    )


@pytest.mark.slow
def test_a_crash_marks_the_run_failed(prepared_image, tmp_path):
    """An exception mid-stage (here: the TensorBoard folder cannot be created) ends the run FAILED."""
    project, cmd, env = _project(tmp_path, prepared_image.prepared_dir, "project")
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    cmd = [c for c in cmd if not c.startswith(("train.epochs=", "train.tensorboard="))]
    cmd += ["train.epochs=1", "train.tensorboard=true", f"train.tensorboard_dir={blocker}/tb"]
    proc = subprocess.run(cmd, cwd=project, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode not in (0, 143), proc.stderr[-3000:]
    client, runs = _store(project)
    assert len(runs) == 1 and runs[0].info.status == "FAILED"


@pytest.mark.slow
def test_a_damaged_newest_checkpoint_falls_back_to_the_one_before(prepared_image, tmp_path, caplog):
    """A truncated newest checkpoint (a full disk, a crash mid-copy): the stage resumes from the intact one
    before it, says so in one line, and ends where an uninterrupted run ends."""
    prepared = prepared_image.prepared_dir
    reference = training.train(_cfg("train.epochs=2"), prepared_dir=prepared, output_dir=tmp_path / "ref")
    out = tmp_path / "damaged"
    training.train(
        _cfg("train.epochs=1", "train.checkpoint_every_steps=2"), prepared_dir=prepared, output_dir=out
    )  # checkpoints at steps 2, 4, 5 (epoch end)
    data = next((out / "checkpoints").glob("ckpt-5.data-*"))
    data.write_bytes(data.read_bytes()[: data.stat().st_size // 2])
    with caplog.at_level("WARNING", logger="tfpipe.workdir"):
        resumed = training.train(
            _cfg("train.epochs=2", "train.checkpoint_every_steps=2"), prepared_dir=prepared, output_dir=out
        )
    assert resumed.resumed_at_step == 4
    assert any("ckpt-5" in r.getMessage() and "\n" not in r.getMessage() for r in caplog.records)
    assert resumed.steps == reference.steps and resumed.weights_sha256 == reference.weights_sha256


def _counter_checkpoint():
    return tf.train.Checkpoint(
        epoch=tf.Variable(0, dtype=tf.int64),
        step=tf.Variable(0, dtype=tf.int64),
        w=tf.Variable(tf.zeros([4096])),
    )


def test_a_fallback_over_damaged_checkpoints_says_so_in_one_line(tmp_path, caplog):
    """Two truncated newest checkpoints (real files): the resume takes the third and says so in ONE warning
    line naming both skipped ones (not a line per checkpoint plus a summary)."""
    from tfpipe.workdir import WorkDir

    saved = _counter_checkpoint()
    work = WorkDir(tmp_path)
    work.open_checkpoints(saved, chief=True, max_to_keep=3)
    for step in (1, 2, 3):
        saved.step.assign(step)
        work.save_checkpoint(step)
    for step in (2, 3):
        data = next((tmp_path / "checkpoints").glob(f"ckpt-{step}.data-*"))
        data.write_bytes(data.read_bytes()[: data.stat().st_size // 2])
    restored = _counter_checkpoint()
    with caplog.at_level("INFO", logger="tfpipe.workdir"):
        assert WorkDir(tmp_path).open_checkpoints(restored, chief=True, max_to_keep=3)
    assert int(restored.step.numpy()) == 1
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 1, warnings
    assert "\n" not in warnings[0] and all(f"ckpt-{n}" in warnings[0] for n in (1, 2, 3)), warnings[0]


def test_a_stale_temp_folder_of_an_interrupted_save_is_removed_at_the_next_start(tmp_path, caplog):
    """An interrupted save leaves `ckpt-N_temp/` (TensorFlow writes the shards there, then merges them into
    ckpt-N): the next start removes it, says so in one line, and resumes from the newest whole checkpoint."""
    from tfpipe.workdir import WorkDir

    saved = _counter_checkpoint()
    work = WorkDir(tmp_path)
    work.open_checkpoints(saved, chief=True, max_to_keep=3)
    for step in (1, 2):
        saved.step.assign(step)
        work.save_checkpoint(step)
    checkpoints = tmp_path / "checkpoints"
    stale = checkpoints / "ckpt-3_temp"  # what a save killed before its merge leaves, with real shard files
    stale.mkdir()
    for part in checkpoints.glob("ckpt-2.*"):
        shutil.copy(part, stale / part.name.replace("ckpt-2", "part-00000-of-00001"))
    restored = _counter_checkpoint()
    with caplog.at_level("INFO", logger="tfpipe.workdir"):
        assert WorkDir(tmp_path).open_checkpoints(restored, chief=True, max_to_keep=3)
    assert not stale.exists() and not list(checkpoints.glob("*_temp*"))
    assert int(restored.step.numpy()) == 2
    lines = [r.getMessage() for r in caplog.records if "ckpt-3_temp" in r.getMessage()]
    assert len(lines) == 1 and "interrupted" in lines[0] and "\n" not in lines[0], lines


def _damage(checkpoints: Path, case: str) -> None:
    """Real damage to the newest checkpoint (ckpt-5) of a run with checkpoints at steps 2, 4, 5."""
    if case == "truncated index":
        index = checkpoints / "ckpt-5.index"
        index.write_bytes(index.read_bytes()[:10])
    elif case == "missing index":
        (checkpoints / "ckpt-5.index").unlink()
    elif case == "state names a missing checkpoint":
        for part in checkpoints.glob("ckpt-5.*"):
            part.unlink()
    elif case == "every checkpoint damaged":
        for data in checkpoints.glob("ckpt-*.data-*"):
            data.write_bytes(b"")


@pytest.mark.slow
@pytest.mark.parametrize(
    "case",
    ["truncated index", "missing index", "state names a missing checkpoint", "every checkpoint damaged"],
)
def test_damaged_checkpoints_fall_back_or_stop_in_one_line(prepared_image, tmp_path, case, caplog):
    from tfpipe.errors import UserError

    prepared, out = prepared_image.prepared_dir, tmp_path / "run"
    cfg = _cfg("train.epochs=1", "train.checkpoint_every_steps=2")
    training.train(cfg, prepared_dir=prepared, output_dir=out)
    _damage(out / "checkpoints", case)
    again = _cfg("train.epochs=2", "train.checkpoint_every_steps=2")
    if case == "every checkpoint damaged":
        with pytest.raises(UserError) as info:
            training.train(again, prepared_dir=prepared, output_dir=out)
        message = str(info.value)
        assert "\n" not in message and "no readable checkpoint" in message and "delete the folder" in message
        return
    with caplog.at_level("INFO", logger="tfpipe.workdir"):
        resumed = training.train(again, prepared_dir=prepared, output_dir=out)
    assert resumed.resumed_at_step == 4 and resumed.steps == 10
    warnings = [
        r.getMessage() for r in caplog.records if r.name == "tfpipe.workdir" and r.levelno >= logging.WARNING
    ]
    assert len(warnings) == 1, warnings  # one line for the fallback, naming what it skipped and what it took
    assert "\n" not in warnings[0] and "skipped the damaged ckpt-5 (" in warnings[0], warnings[0]
    assert "resumed from ckpt-4" in warnings[0], warnings[0]


@pytest.fixture
def small_disk(tmp_path):
    """A real 8 MB filesystem (tmpfs), mounted when the tests run as root (as CI does)."""
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a tmpfs needs root")
    mountpoint = tmp_path / "small"
    mountpoint.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(mountpoint)]).returncode != 0:
        pytest.skip("this machine does not allow mounting a tmpfs")
    yield mountpoint
    subprocess.run(["umount", "-l", str(mountpoint)])


@pytest.mark.slow
@pytest.mark.parametrize("fault, cause", [("full", "no space left"), ("read-only", "not writable")])
def test_a_full_or_read_only_disk_while_saving_stops_in_one_line_and_the_same_command_resumes(
    prepared_image, tmp_path, small_disk, fault, cause
):
    from tfpipe.errors import UserError
    from tfpipe.hooks import Hook

    filler = small_disk / "filler"

    def break_the_disk():
        if fault == "read-only":
            subprocess.run(["mount", "-o", "remount,ro", str(small_disk)], check=True)
            return
        with filler.open("wb") as fh:  # another writer takes all the space
            try:
                while True:
                    fh.write(b"\0" * 65536)
            except OSError:
                pass

    def repair_the_disk():
        if fault == "read-only":
            subprocess.run(["mount", "-o", "remount,rw", str(small_disk)], check=True)
        else:
            filler.unlink()

    class BreakTheDiskAfterStep2(Hook):  # runs after the built-in hooks: the save of step 2 is complete
        def on_checkpoint(self, step, epoch, epoch_step):
            if step == 2:
                break_the_disk()

    cfg = _cfg("train.epochs=2", "train.checkpoint_every_steps=2", "train.tensorboard=false")
    out = small_disk / "models" / "cifar10"
    reference = training.train(cfg, prepared_dir=prepared_image.prepared_dir, output_dir=tmp_path / "ref")
    with pytest.raises(UserError) as info:
        training.train(
            cfg, prepared_dir=prepared_image.prepared_dir, output_dir=out, hooks=[BreakTheDiskAfterStep2()]
        )
    message = str(info.value)
    assert "\n" not in message and str(out / "checkpoints") in message and cause in message, message
    assert "resumes from ckpt-2" in message
    repair_the_disk()  # the operator fixes it; the same command resumes
    assert not list((out / "checkpoints").glob("*_temp*"))  # no half-written save left looking like one
    resumed = training.train(cfg, prepared_dir=prepared_image.prepared_dir, output_dir=out)
    assert resumed.resumed_at_step == 2 and resumed.weights_sha256 == reference.weights_sha256


@pytest.mark.slow
def test_a_full_metrics_folder_after_training_is_one_line_and_the_next_run_resumes(
    prepared_image, tmp_path, small_disk
):
    """metrics/ on a full tmpfs when the train stage writes metrics/train.json: one line naming the folder,
    exit 2, the run FAILED with the reason as tfpipe.failure; after space is freed the same command resumes
    at the final step into the same run and finishes."""
    project, cmd, env = _project(tmp_path, prepared_image.prepared_dir, "project")
    cmd = [c for c in cmd if not c.startswith("train.epochs=")] + ["train.epochs=2"]
    (project / "metrics").symlink_to(small_disk, target_is_directory=True)
    filler = small_disk / "filler"
    with open(filler, "wb") as fh, contextlib.suppress(OSError):  # fill it up
        while True:
            fh.write(b"\0" * 65536)
            fh.flush()
    proc = subprocess.run(cmd, cwd=project, env=env, capture_output=True, text=True, timeout=300)
    last = proc.stderr.strip().splitlines()[-1]
    assert proc.returncode == 2 and "no space left" in last and "metrics" in last, proc.stderr[-3000:]
    client, runs = _store(project)
    assert len(runs) == 1 and runs[0].info.status == "FAILED"
    assert "no space left" in runs[0].data.tags["tfpipe.failure"]
    filler.unlink()
    assert "resuming" in _run(cmd, project, env)
    client, runs = _store(project)
    assert len(runs) == 1 and runs[0].info.status == "FINISHED"
    assert (project / "metrics" / "train.json").is_file()
