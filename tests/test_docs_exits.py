"""The exit-code page of the documentation site (docs/hooks/exits.py, issue 36): every exit code tfpipe chooses has
its row saying when it happens, every error class meant for the user its row with the line it prints, and no
exit code is written as a literal outside `tfpipe.exits` (a new one would be missing from the page).

Expected values are written here by hand or read from the sources, never computed with the hook. No site is built
and no TensorFlow is imported (but by the slow test's child process, which checks just that).
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from tfpipe import errors, exits

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "docs" / "hooks"))
import exits as exits_hook  # noqa: E402 - docs/hooks is not a package: importable once on sys.path

# code -> words its row must hold (the row of each name with that value, case-insensitive)
EXPECTED = {
    0: ["EXIT_OK", "ALL MATCH", "no difference"],
    1: ["EXIT_DIFFERS", "DIFFERS", "EXIT_FAILED", "failed"],
    2: ["EXIT_BAD_INPUT", "bad input", "<prog>: error: <message>"],
    130: ["EXIT_SIGINT", "Ctrl-C", "SIGINT"],
    143: ["EXIT_SIGTERM", "SIGTERM", "preemption"],
}
EXIT_CALLS = {"exit", "_exit"}  # sys.exit, os._exit, argparse's self.exit / parser.exit


@pytest.fixture(scope="module")
def page() -> str:
    return exits_hook.exits_reference()


def _rows(page: str, first_cell: str) -> str:
    rows = [line for line in page.splitlines() if line.startswith(f"| {first_cell} |")]
    assert rows, f"{first_cell}: no row on the exit-code page"
    return "\n".join(rows).replace("\\", "").replace("&lt;", "<")


@pytest.mark.parametrize("code", sorted(EXPECTED))
def test_each_exit_code_has_its_row_saying_when(page, code):
    rows = _rows(page, str(code)).lower()
    for words in EXPECTED[code]:
        assert words.lower() in rows, (code, words, rows)


def test_the_signal_rule_and_the_codes_passed_on_are_on_the_page(page):
    assert "stopped by signal N" in _rows(page, "128 + N")
    assert exits.signal_exit(15) == 143 and exits.signal_exit(2) == 130
    for words in ("255", "traceback", "tfpipe serve"):  # the codes tfpipe hands on (the module docstring)
        assert words in page.split("## Error classes")[0], words


def test_every_exit_code_constant_is_one_of_the_expected(page):
    """A new constant in tfpipe.exits must be added to EXPECTED above (and so is checked on the page)."""
    values = {v for k, v in vars(exits).items() if k.isupper() and isinstance(v, int)}
    assert values == {*EXPECTED, 128}


@pytest.mark.parametrize(
    "name, module, line, code",
    [
        ("UserError", "tfpipe.errors", "<prog>: error: <message>", "2"),
        ("ConfigError", "tfpipe.errors", "<prog>: error: <message>", "2"),
        ("DataError", "tfpipe.errors", "<prog>: error: <message>", "2"),
        ("TrackingError", "tfpipe.errors", "<prog>: error: <message>", "2"),
        ("NotBetter", "tfpipe.tracking.registry", "<prog>: error: <message>", "2"),  # promote's refusal
        ("InitError", "tfpipe.scaffold", "init: error: <message>", "2"),
        ("Interrupted", "tfpipe.interrupts", "<prog>: interrupted (<message>); run it again", "128 + N"),
    ],
)
def test_each_error_class_meant_for_the_user_has_its_row(page, name, module, line, code):
    (row,) = _rows(page, f"`{name}` ({module})").splitlines()
    cells = [cell.strip() for cell in row.strip("|").split("|")]
    assert line in cells[3] and cells[4] == code, cells
    cls = getattr(errors, name, None)
    if cls is not None:  # the docstring's first line, read from the class itself
        assert cls.__doc__.strip().split("\n")[0] in cells[2]


# ----------------------------------------------------------------------------- no literal exit code elsewhere


def _literal_codes(expr) -> list:
    """The int literals an exit expression can evaluate to (`2 if x else 0` gives both); a call gives none."""
    if isinstance(expr, ast.Constant) and isinstance(expr.value, int) and not isinstance(expr.value, bool):
        return [expr.value]
    if isinstance(expr, ast.IfExp):
        return _literal_codes(expr.body) + _literal_codes(expr.orelse)
    if isinstance(expr, ast.BoolOp):
        return [v for value in expr.values for v in _literal_codes(value)]
    return []


def literal_exits(source: str) -> list:
    """(line, code) of each exit written as a literal other than 0: `sys.exit(N)`, `os._exit(N)`,
    `SystemExit(N)`, `self.exit(N, ...)`, and `return N` in a function named main or *_main."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and node.args:
            name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            if name in EXIT_CALLS or name == "SystemExit":
                found += [(node.lineno, c) for c in _literal_codes(node.args[0])]
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and (
            node.name == "main" or node.name.endswith("_main")
        ):
            for ret in ast.walk(node):
                if isinstance(ret, ast.Return) and ret.value is not None:
                    found += [(ret.lineno, c) for c in _literal_codes(ret.value)]
    return [(line, code) for line, code in found if code != 0]


def test_the_scan_finds_each_form_of_literal_exit():
    source = """
import os, sys
def main():
    if a:
        sys.exit(3)
    if b:
        raise SystemExit(4)
    if c:
        os._exit(5)
    if d:
        self.exit(6, "no")
    if e:
        sys.exit(0)
    return 7 if f else 0
def helper():
    return 8
"""
    assert sorted(code for _, code in literal_exits(source)) == [3, 4, 5, 6, 7]


def test_no_exit_code_is_a_literal_outside_tfpipe_exits():
    sources = sorted([*(ROOT / "src").rglob("*.py"), *(ROOT / "pipeline").rglob("*.py")])
    assert any(p.name == "cli.py" for p in sources) and len(sources) > 50  # the walk found the code
    found = {
        f"{path.relative_to(ROOT)}:{line}": code
        for path in sources
        if path != ROOT / "src" / "tfpipe" / "exits.py"
        for line, code in literal_exits(path.read_text())
    }
    assert not found, f"exit codes written as literals (name them in src/tfpipe/exits.py): {found}"


# ----------------------------------------------------------------------------- MkDocs adds the page


@pytest.mark.slow  # starts a process: MkDocs's plugin events run in it, as in a build, without building
def test_mkdocs_adds_the_page_and_nothing_imports_tensorflow_or_tfpipe(tmp_path):
    script = f"""
import sys
from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import Files
config = MkDocsConfig()
config.load_dict({{"site_name": "t", "docs_dir": {str(ROOT / "docs")!r}, "site_dir": {str(tmp_path)!r},
                  "hooks": [{str(ROOT / "docs" / "hooks" / "exits.py")!r}]}})
assert config.validate() == ([], []), config.validate()
files = config.plugins.on_files(Files([]), config=config)
for f in files:
    print(f.src_uri, len(f.content_string))
print(sorted(m for m in sys.modules if m.split(".")[0] in ("tensorflow", "keras", "mlflow", "tfpipe")))
"""
    proc = subprocess.run(
        [sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    page, imported = proc.stdout.strip().splitlines()
    assert page.split()[0] == "reference/exit-codes.md" and int(page.split()[1]) > 2000, page
    assert imported == "[]", imported
