"""Stage wiring that the end-to-end tests do not reach: when train resumes and when it starts clean."""

from __future__ import annotations

import json

from tfpipe import stages


def _checkpoints(out, fingerprint):
    (out / "checkpoints").mkdir(parents=True)
    (out / "checkpoints" / "ckpt-1.index").write_text("x")
    (out / "checkpoints" / "fingerprint.txt").write_text(fingerprint + "\n")


def test_interrupted_run_of_the_same_config_is_resumed(tmp_path):
    out = tmp_path / "models" / "cifar10"
    _checkpoints(out, "abc")
    stages._clear_unless_resumable(out, "abc")
    assert (out / "checkpoints" / "ckpt-1.index").is_file()


def test_checkpoints_of_another_config_are_removed(tmp_path):
    out = tmp_path / "models" / "cifar10"
    _checkpoints(out, "abc")
    stages._clear_unless_resumable(out, "def")
    assert not out.exists()


def test_a_finished_run_is_never_resumed(tmp_path):
    out = tmp_path / "models" / "cifar10"
    _checkpoints(out, "abc")
    (out / stages.TRAINING_STATE).write_text(json.dumps({"fingerprint": "abc", "complete": True}))
    stages._clear_unless_resumable(out, "abc")
    assert not out.exists()


def test_fingerprint_ignores_tracking_but_not_training_settings(make_config):
    base = stages._training_fingerprint(make_config(), "digest")
    assert stages._training_fingerprint(make_config("tracking.experiment_name=other"), "digest") == base
    assert stages._training_fingerprint(make_config("train.epochs=7"), "digest") != base
    assert stages._training_fingerprint(make_config(), "other-digest") != base
