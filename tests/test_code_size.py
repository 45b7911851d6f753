"""The size bounds of the code (issue 13): no module over 300 lines, no function over 60, in src/ and pipeline/.
Small units are what keeps the core changeable; this test names the unit that grew past its bound."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MAX_MODULE_LINES = 300
MAX_FUNCTION_LINES = 60


def _sources():
    return sorted([*(ROOT / "src").rglob("*.py"), *(ROOT / "pipeline").rglob("*.py")])


def test_no_module_over_300_lines():
    long = {
        str(p.relative_to(ROOT)): n
        for p in _sources()
        if (n := len(p.read_text().splitlines())) > MAX_MODULE_LINES
    }
    assert not long, f"modules over {MAX_MODULE_LINES} lines: {long}"


def test_no_function_over_60_lines():
    long = {}
    for path in _sources():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    long[f"{path.relative_to(ROOT)}:{node.lineno} {node.name}"] = lines
    assert not long, f"functions over {MAX_FUNCTION_LINES} lines: {long}"


def test_the_bounds_are_checked_on_real_code(tmp_path):
    """The walk finds the project's sources (a wrong root would make both tests pass vacuously)."""
    names = {p.relative_to(ROOT).as_posix() for p in _sources()}
    assert {"src/tfpipe/training/loop.py", "pipeline/train.py"} <= names
