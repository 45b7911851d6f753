"""`tfpipe <subcommand>` runs the same code as `python -m pipeline.<name>`: same one-line errors, same exit codes.

Every command runs in a project of its own (conftest's `scratch_root`: conf/ and the committed params.yaml),
this checkout's code on PYTHONPATH, never in this checkout: a command that wrongly got past its check writes
there (and the test fails), and reads the committed params, never an applied experiment's."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest
from conftest import run_in_project

ROOT = Path(__file__).resolve().parents[1]


def _run(args, project: Path):
    return run_in_project(args, project, timeout=300)


@pytest.fixture
def project(scratch_root) -> Path:
    """The project folder every command here runs in (conftest's `scratch_root`), never this checkout."""
    return scratch_root


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
def test_console_script_and_module_fail_alike(project, module, subcommand, args):
    by_module = _run([sys.executable, "-m", module, *args], project)
    by_script = _run([sys.executable, "-m", "tfpipe.cli", subcommand, *args], project)
    assert by_module.returncode == by_script.returncode == 2, (by_module.stderr, by_script.stderr)
    assert by_module.stderr.strip().splitlines()[-1] == by_script.stderr.strip().splitlines()[-1]
    assert len(by_script.stderr.strip().splitlines()) == 1, by_script.stderr


def test_audit_subcommand_and_help(project):
    bad = _run([sys.executable, "-m", "tfpipe.cli", "audit", "--tolerance", "x", "abc"], project)
    assert bad.returncode == 2 and "tfpipe audit" in bad.stderr
    assert _run([sys.executable, "-m", "tfpipe.cli", "--help"], project).returncode == 0
    unknown = _run([sys.executable, "-m", "tfpipe.cli", "trian"], project)
    assert unknown.returncode == 2 and "unknown subcommand 'trian'" in unknown.stderr


@pytest.mark.skipif(
    shutil.which("tfpipe") is None, reason="the console script is installed by pip install -e ."
)
def test_installed_console_script_runs(project):
    proc = _run(["tfpipe", "train", "--help"], project)  # the installed script (PATH), not `python -m`
    assert proc.returncode == 0 and "tfpipe train" in proc.stdout
