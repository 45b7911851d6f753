"""TensorFlow's start-up lines left out of a command's stderr (`tfpipe.tfstart`), everything else kept; `-v`
brings the details back. The stages' whole output: tests/test_pipeline_e2e.py."""

from __future__ import annotations

import logging
import os
import subprocess
import sys

from tfpipe import tfstart

# As TensorFlow 2.21 writes them while it imports, on an AVX512-BF16 EPYC (copied from a terminal)
ABSL = "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR"
ONEDNN = (
    "I0000 00:00:1795941834.450060    7622 port.cc:153] oneDNN custom operations are on. You may see slightly "
    "different numerical results due to floating-point round-off errors from different computation orders. "
    "To turn them off, set the environment variable `TF_ENABLE_ONEDNN_OPTS=0`."
)
GUARD = (
    "I0000 00:00:1795941851.236448    7949 cpu_feature_guard.cc:227] This TensorFlow binary is optimized to use "
    "available CPU instructions in performance-critical operations."
)


def test_start_up_lines_are_left_out_and_warnings_and_errors_kept():
    assert not tfstart.wanted(ABSL + "\n")
    assert not tfstart.wanted(ONEDNN + "\n")
    assert not tfstart.wanted(GUARD)
    kept = (
        "E0000 00:00:1758131045.203198 3722035 cuda_dnn.cc:8579] Unable to register cuDNN factory",
        "W0000 00:00:1758131045.228 3722035 gpu_device.cc:2344] Cannot dlopen some GPU libraries.",
        "/usr/lib/python3/site-packages/foo.py:3: DeprecationWarning: bar",
        "Traceback (most recent call last):",
        "INFO: a line of someone else's",
    )
    assert all(tfstart.wanted(line) for line in kept)


def test_importing_tensorflow_quietly_leaves_stderr_to_everything_else():
    """In its own process: the descriptor is the process's. A line Python writes before and after stays, in
    order; TensorFlow is imported; none of its start-up lines shows."""
    code = (
        "import sys; from tfpipe import tfstart; print('before', file=sys.stderr); tfstart.import_quietly(); "
        "print('after', 'tensorflow' in sys.modules, file=sys.stderr)"
    )
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.splitlines() == ["before", "after True"], proc.stderr


def test_verbose_shows_the_details(monkeypatch):
    from tfpipe.commands import entry

    monkeypatch.setenv("TF_CPP_MIN_LOG_LEVEL", "2")
    monkeypatch.setenv("MLFLOW_LOGGING_LEVEL", "WARNING")
    ours = logging.getLogger("tfpipe")
    level = ours.level
    try:
        entry._configure_logging("train", verbose=True)
        assert os.environ["TF_CPP_MIN_LOG_LEVEL"] == "0" and os.environ["MLFLOW_LOGGING_LEVEL"] == "INFO"
        assert logging.getLogger("tfpipe.precision").isEnabledFor(logging.DEBUG)
    finally:
        ours.setLevel(level)


def test_verbose_is_a_stage_flag():
    from tfpipe.commands import entry

    seen = []
    code = entry.cli("train", lambda cfg, root: seen.append(cfg), "doc", ["-v", "--cfg", "job"], os.getcwd())
    assert code == 0 and not seen
