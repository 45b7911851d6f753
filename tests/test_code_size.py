"""The size bounds of the code (issue 13): no module over 300 lines, no function over 60, in src/ and pipeline/; and no
import circles in the package. Small units with one-way imports keep the core changeable; each test names what broke it."""

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


def _module_of(path: Path) -> str:
    parts = path.relative_to(ROOT / "src").with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path, module: str, known: set) -> set:
    """The tfpipe modules `path` imports anywhere (function-level imports too), as module names."""
    found = set()
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(
                    [*package.split(".")[: len(package.split(".")) - node.level + 1], base]
                ).strip(".")
            names = [f"{base}.{a.name}" for a in node.names] + [base]
        else:
            continue
        for name in names:
            while (
                name and name not in known
            ):  # `from tfpipe.models import registry` names a module or a symbol
                name = name.rpartition(".")[0]
            if name and name != module and not module.startswith(name + "."):
                found.add(name)
    return found


def test_the_package_has_no_import_circles():
    """A module's imports (at the top or inside functions) never lead back to it: each circle found is named.
    A package's __init__ importing its own submodules, and a module importing its parent package, are not circles."""
    paths = {_module_of(p): p for p in (ROOT / "src").rglob("*.py")}
    graph = {
        m: {n for n in _imports(p, m, set(paths)) if not n.startswith(m + ".")} for m, p in paths.items()
    }
    circles, state = [], {}

    def visit(node, trail):
        state[node] = "open"
        for nxt in sorted(graph[node]):
            if state.get(nxt) == "open":
                circles.append(trail[trail.index(nxt) :] + [nxt])
            elif nxt not in state:
                visit(nxt, [*trail, nxt])
        state[node] = "done"

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])
    assert not circles, "import circles: " + "; ".join(" -> ".join(c) for c in circles)
