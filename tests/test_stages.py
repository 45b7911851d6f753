"""Stage wiring that the end-to-end tests do not reach: when train resumes and when it starts clean."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from conftest import stage_project

from tfpipe import workdir
from tfpipe.workdir import WorkDir


def _checkpoints(out, fingerprint):
    (out / "checkpoints").mkdir(parents=True)
    (out / "checkpoints" / "ckpt-1.index").write_text("x")
    (out / "checkpoints" / "fingerprint.txt").write_text(fingerprint + "\n")


def test_interrupted_run_of_the_same_config_is_resumed(tmp_path):
    out = tmp_path / "models" / "cifar10"
    _checkpoints(out, "abc")
    assert WorkDir(out).prepare("abc") is None  # no run id recorded
    assert (out / "checkpoints" / "ckpt-1.index").is_file()


def test_checkpoints_of_another_config_are_removed(tmp_path):
    out = tmp_path / "models" / "cifar10"
    _checkpoints(out, "abc")
    WorkDir(out).prepare("def")
    assert out.is_dir() and not any(out.iterdir())  # contents cleared, the folder kept (a mount or symlink)


def test_a_finished_run_is_never_resumed(tmp_path):
    out = tmp_path / "models" / "cifar10"
    _checkpoints(out, "abc")
    (out / workdir.TRAINING_STATE).write_text(json.dumps({"fingerprint": "abc", "complete": True}))
    WorkDir(out).prepare("abc")
    assert out.is_dir() and not any(out.iterdir())


def test_fingerprint_ignores_tracking_but_not_training_settings(make_config):
    base = workdir.fingerprint(make_config(), "digest")
    assert workdir.fingerprint(make_config("tracking.experiment_name=other"), "digest") == base
    assert workdir.fingerprint(make_config("train.epochs=7"), "digest") != base
    assert workdir.fingerprint(make_config(), "other-digest") != base


def test_a_symlinked_work_dir_is_cleared_not_removed(tmp_path):
    real = tmp_path / "bigger-disk" / "cifar10"
    _checkpoints(real, "abc")
    out = tmp_path / "models" / "cifar10"
    out.parent.mkdir()
    out.symlink_to(real, target_is_directory=True)
    WorkDir(out).prepare("def")  # shutil.rmtree would refuse a symlink
    assert out.is_symlink() and real.is_dir() and not any(real.iterdir())


ROOT = Path(__file__).resolve().parents[1]
TINY_TRAIN = [  # prepared_image: 21 train examples, a few seconds of training
    "model.filters=[8,8]",
    "model.dense_units=16",
    "train.batch_size_per_replica=4",
    "train.epochs=1",
    "tracking.log_model=false",
    "train.tensorboard=false",
]


@pytest.mark.slow
def test_a_mounted_work_dir_is_cleared_not_removed_and_a_fresh_run_trains(
    prepared_image, tmp_path, mount_tmpfs
):
    """models/<dataset> is a real mount point (a tmpfs, as a Kubernetes volume or a bigger disk would be)
    holding another config's checkpoints: `python -m pipeline.train` clears its contents (rmtree of the
    folder itself fails: Device or resource busy), keeps the mount and trains into it."""
    project, env, stage = stage_project(tmp_path, prepared_image, *TINY_TRAIN)
    out = mount_tmpfs(project / "models" / "cifar10")
    _checkpoints(out, "another-config")
    (out / "old.txt").write_text("from another run")
    proc = subprocess.run(stage("train"), cwd=project, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert os.path.ismount(out) and not (out / "old.txt").exists()
    assert (out / workdir.TRAINING_STATE).is_file() and (out / workdir.WEIGHTS_FILE).is_file()
    assert (out / "checkpoints" / "fingerprint.txt").read_text().strip() != "another-config"
