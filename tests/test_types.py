"""The type checker over src/ and pipeline/: mypy, configured in pyproject.toml ([tool.mypy]: its files, Python
3.11, function bodies checked), finds no error. A failure lists mypy's own lines, grouped by file."""

from __future__ import annotations

import getpass
import hashlib
import os
import re
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

import pytest
import tomllib

ROOT = Path(__file__).resolve().parents[1]
ERROR = re.compile(r"^(?P<file>[^:\n]+):\d+: error: ")


def mypy_cache() -> Path:
    """mypy's cache: outside the checkout (the session guard watches `git status`), stable across runs of this
    checkout (a warm run rechecks only the files that changed), one per user and checkout."""
    key = hashlib.sha256(f"{getpass.getuser()}:{ROOT}".encode()).hexdigest()[:12]
    return Path(tempfile.gettempdir()) / f"tfpipe-mypy-{key}"


def run_mypy() -> subprocess.CompletedProcess:
    """`python -m mypy` from the checkout's root: its files and settings come from pyproject.toml."""
    return subprocess.run(
        [sys.executable, "-m", "mypy", "--cache-dir", str(mypy_cache()), "--no-color-output", "--no-pretty"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )


def errors_by_file(output: str) -> Counter:
    """{file: number of errors} in mypy's output."""
    return Counter(m["file"] for m in map(ERROR.match, output.splitlines()) if m)


def test_mypy_is_configured_for_src_and_pipeline():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"]
    assert config["files"] == ["src", "pipeline"]
    assert config["check_untyped_defs"] is True and config["python_version"] == "3.11"
    assert "ignore_missing_imports" not in config, "per library, in [[tool.mypy.overrides]], never for all"
    for override in config.get("overrides", []):
        modules = override["module"] if isinstance(override["module"], list) else [override["module"]]
        assert all(m.split(".")[0] not in ("*", "tfpipe", "pipeline") for m in modules), modules


@pytest.mark.slow
def test_mypy_finds_no_error():
    try:
        import mypy  # noqa: F401
    except ImportError:
        why = "mypy is not installed (requirements-dev.lock has it: pip install --require-hashes -r ...)"
        if os.environ.get("CI", "").strip().lower() in ("1", "true", "yes"):
            pytest.fail(f"CI=true but {why}", pytrace=False)
        pytest.skip(why)
    proc = run_mypy()
    if proc.returncode not in (0, 1):
        pytest.fail(
            f"mypy itself failed (exit {proc.returncode}):\n{proc.stdout}{proc.stderr}", pytrace=False
        )
    per_file = errors_by_file(proc.stdout)
    if proc.returncode or per_file:
        summary = "\n".join(f"{count:4d} {file}" for file, count in sorted(per_file.items()))
        pytest.fail(f"{proc.stdout}{proc.stderr}\nerrors per file:\n{summary}", pytrace=False)


# `python tests/test_types.py [PATH_PREFIX ...]`: mypy's errors per file, leaving out the files under the prefixes
if __name__ == "__main__":
    output = run_mypy().stdout
    left_out = tuple(sys.argv[1:])
    counts = {file: n for file, n in sorted(errors_by_file(output).items()) if not file.startswith(left_out)}
    print("\n".join(f"{n:4d} {file}" for file, n in counts.items()))
    print(f"{sum(counts.values())} errors in {len(counts)} files, leaving out {' '.join(left_out) or 'none'}")
    sys.exit(1 if counts else 0)
