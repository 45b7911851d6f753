"""`tfpipe serve MODEL_URI`: the model is checked as batch prediction checks it before any server starts (a model
changed in the store is one line, exit 2), then a real `mlflow models serve` answers on the checked copy, and a
stop (SIGTERM, as a cluster manager sends, or Ctrl-C) ends the server, removes the copy and exits 128+N."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import IMAGE_CLASSES
from test_predict import log_image_model
from test_registry import post_when_up
from test_tracking import _free_port

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow  # starts processes


@pytest.fixture
def logged(tmp_path, monkeypatch):
    """(project, run id, the stored SavedModel folder) of a SQLite store holding one logged image model."""
    project = tmp_path / "project"
    run_id, saved = log_image_model(project, monkeypatch)
    return project, run_id, saved


def _serve(project: Path, spec: str, port: int, temp: Path) -> subprocess.Popen:
    # as a user's shell has it: no MLflow settings, and no TF_CPP_MIN_LOG_LEVEL (the command sets its default)
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_") and k != "TF_CPP_MIN_LOG_LEVEL"}
    env.update(
        PYTHONPATH=os.pathsep.join([str(ROOT / "src"), str(ROOT)]),
        MLFLOW_TRACKING_URI=f"sqlite:///{project / 'mlflow.db'}",
        TMPDIR=str(temp),
    )
    cmd = [sys.executable, "-m", "tfpipe", "serve", spec, "--port", str(port)]
    return subprocess.Popen(  # its own process group, as a terminal's foreground job
        cmd,
        cwd=project,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )


@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGINT], ids=["sigterm", "ctrl-c"])
def test_a_checked_model_is_served_and_a_stop_ends_the_server_and_removes_the_copy(logged, tmp_path, stop):
    """A cluster manager's SIGTERM reaches the command; Ctrl-C reaches the terminal's whole process group."""
    project, run_id, _ = logged
    temp = tmp_path / "temp"
    temp.mkdir()
    port = _free_port()
    proc = _serve(project, f"runs:/{run_id}/model", port, temp)
    try:
        image = np.zeros((1, 8, 8, 3), np.uint8)
        image[..., 2] = 255  # the test model's colour: red
        (answer,) = post_when_up(proc, port, {"inputs": image.tolist()})
        assert sorted(answer) == sorted(["class", *IMAGE_CLASSES]) and answer["class"] == "red", answer
        assert [p.name for p in temp.iterdir()][0].startswith("tfpipe-serve-")  # the checked copy is served
        if stop == signal.SIGINT:
            os.killpg(proc.pid, stop)
        else:
            proc.send_signal(stop)
        out, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert f"serve: runs:/{run_id}/model checked; serving it at http://127.0.0.1:{port}/invocations" in out
    assert (
        "cpu_feature_guard" not in out
    )  # the server's TensorFlow start-up lines stay quiet, as in the stages
    assert not [p for p in temp.iterdir() if p.name.startswith("tfpipe-serve-")], "the copy stayed"
    assert proc.returncode == 128 + stop, out  # as the stages exit after a stop


def test_a_model_changed_in_the_store_is_refused_before_any_server_starts(logged, tmp_path):
    from tfpipe import files

    project, run_id, saved = logged
    weights = next(saved.rglob("*.data-*"))
    weights.write_bytes(weights.read_bytes()[::-1])
    files.seal(saved)  # whole against its own seal: only the run's recorded digest tells
    temp = tmp_path / "temp"
    temp.mkdir()
    proc = _serve(project, f"runs:/{run_id}/model", _free_port(), temp)
    out, _ = proc.communicate(timeout=120)
    lines = [line for line in out.splitlines() if line.strip()]
    assert proc.returncode == 2 and len(lines) == 1, out
    assert (
        lines[0].startswith("serve: error: MODEL_URI=") and f"is not the one run {run_id} logged" in lines[0]
    )
    assert not list(temp.iterdir())
