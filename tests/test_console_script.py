"""`tfpipe <subcommand>` runs the same code as `python -m pipeline.<name>`: same one-line errors, same exit codes."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _run(args, cwd=ROOT):
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    return subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize(
    "module, subcommand, args",
    [
        ("pipeline.train", "train", ["train.epochs=0"]),
        ("pipeline.prepare", "prepare", ["dataset=cifar11"]),
        ("pipeline.launch", "launch", ["strategy=mirrored"]),
        ("pipeline.promote", "promote", ["abc", "--alias", "a b"]),
        ("pipeline.predict", "predict", ["no/such/model", "."]),
        ("pipeline.serve", "serve", ["no/such/model"]),
    ],
)
@pytest.mark.slow
def test_console_script_and_module_fail_alike(module, subcommand, args):
    by_module = _run([sys.executable, "-m", module, *args])
    by_script = _run([sys.executable, "-m", "tfpipe.cli", subcommand, *args])
    assert by_module.returncode == by_script.returncode == 2, (by_module.stderr, by_script.stderr)
    assert by_module.stderr.strip().splitlines()[-1] == by_script.stderr.strip().splitlines()[-1]
    assert len(by_script.stderr.strip().splitlines()) == 1, by_script.stderr


def test_audit_subcommand_and_help():
    bad = _run([sys.executable, "-m", "tfpipe.cli", "audit", "--tolerance", "x", "abc"])
    assert bad.returncode == 2 and "tfpipe audit" in bad.stderr
    assert _run([sys.executable, "-m", "tfpipe.cli", "--help"]).returncode == 0
    unknown = _run([sys.executable, "-m", "tfpipe.cli", "trian"])
    assert unknown.returncode == 2 and "unknown subcommand 'trian'" in unknown.stderr


@pytest.mark.skipif(
    shutil.which("tfpipe") is None, reason="the console script is installed by pip install -e ."
)
def test_installed_console_script_runs():
    proc = _run(["tfpipe", "train", "--help"])
    assert proc.returncode == 0 and "tfpipe train" in proc.stdout
