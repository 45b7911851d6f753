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


def _leaves(expr) -> list:
    """The expressions `expr` can evaluate to: both sides of `a if x else b`, each operand of `a or b`."""
    if isinstance(expr, ast.IfExp):
        return _leaves(expr.body) + _leaves(expr.orelse)
    if isinstance(expr, ast.BoolOp):
        return [leaf for value in expr.values for leaf in _leaves(value)]
    return [expr]


def _own_nodes(scope) -> list:
    """The nodes of a function's body (or a module's top level) that run in it: not those of a def, lambda or
    class nested in it, which are scopes of their own."""
    found, todo = [], list(ast.iter_child_nodes(scope))
    while todo:
        node = todo.pop()
        found.append(node)
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            todo.extend(ast.iter_child_nodes(node))
    return found


def _exit_argument(node):
    """The code passed to an exit, when `node` is one: `sys.exit(X)`, `os._exit(X)`, `SystemExit(X)`,
    `self.exit(X, ...)` (argparse's); else None."""
    if isinstance(node, ast.Call) and node.args:
        name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
        if name in EXIT_CALLS or name == "SystemExit":
            return node.args[0]
    return None


class _Module:
    """One module's functions (top-level `f` and methods `C.f`), top-level classes and imported names."""

    def __init__(self, name: str, tree: ast.Module, package: bool):
        self.name, self.tree = name, tree
        self.functions, self.classes, self.imports = {}, set(), {}
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                self.functions[node.name] = node
            elif isinstance(node, ast.ClassDef):
                self.classes.add(node.name)
                for item in node.body:
                    if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                        self.functions[f"{node.name}.{item.name}"] = item
        base = name.split(".") if package else name.split(".")[:-1]
        for node in ast.walk(tree):  # the imports inside functions too (cli.py imports each command there)
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.asname:
                        self.imports[alias.asname] = alias.name
                    else:
                        first = alias.name.split(".")[0]
                        self.imports[first] = first
            elif isinstance(node, ast.ImportFrom):
                parent = base[: len(base) - node.level + 1] if node.level else []
                source = ".".join([*parent, *([node.module] if node.module else [])])
                for alias in node.names:
                    self.imports[alias.asname or alias.name] = f"{source}.{alias.name}"


def _dotted(expr) -> str | None:
    parts = []
    while isinstance(expr, ast.Attribute):
        parts.append(expr.attr)
        expr = expr.value
    if not isinstance(expr, ast.Name):
        return None
    return ".".join([expr.id, *reversed(parts)])


def _callee(call, module: _Module, modules: dict, cls: str | None):
    """(module name, function name) that `call` calls, where it is a function of the scanned modules: `f()`,
    `mod.f()`, `self.m()`, `Class.m()`, `Class(...).m()`, through the module's imports; else None (a method of
    an object held in a name: the scan resolves names, not types)."""
    if not isinstance(call, ast.Call):
        return None
    func = call.func
    if isinstance(func, ast.Attribute) and isinstance(made := func.value, ast.Call):  # Class(...).method()
        owner = _resolve(_dotted(made.func), module, modules, cls, classes=True)
        method = owner and (owner[0], f"{owner[1]}.{func.attr}")
        return method if method and method[1] in modules[method[0]].functions else None
    return _resolve(_dotted(func), module, modules, cls)


def _resolve(dotted, module: _Module, modules: dict, cls: str | None, classes: bool = False):
    """(module name, function or class name) a dotted name in `module` stands for; else None."""
    if dotted is None:
        return None
    first, _, rest = dotted.partition(".")
    if first in ("self", "cls") and cls and rest and "." not in rest:
        return (module.name, f"{cls}.{rest}") if f"{cls}.{rest}" in module.functions else None
    if dotted in module.functions or (classes and dotted in module.classes):
        return module.name, dotted
    if first not in module.imports:
        return None
    parts = ".".join([module.imports[first], *([rest] if rest else [])]).split(".")
    for i in range(len(parts) - 1, 0, -1):
        target = modules.get(".".join(parts[:i]))
        if target is not None:
            name = ".".join(parts[i:])
            known = name in target.functions or (classes and name in target.classes)
            return (target.name, name) if known else None
    return None


def _scopes(module: _Module):
    """(scope node, class of a method or None) of the module's top level, each def, lambda and class body."""
    methods = {id(node): name.split(".")[0] for name, node in module.functions.items() if "." in name}
    yield module.tree, None
    for node in ast.walk(module.tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            yield node, methods.get(id(node))


def _assigned(nodes) -> dict:
    """name -> the values assigned to it in these nodes (`x = v`, `x: T = v`, `(x := v)`)."""
    values = {}
    for node in nodes:
        if isinstance(node, ast.Assign):
            pairs = [(t, node.value) for t in node.targets]
        elif isinstance(node, (ast.AnnAssign, ast.NamedExpr)) and node.value is not None:
            pairs = [(node.target, node.value)]
        else:
            continue
        for target, value in pairs:
            if isinstance(target, ast.Name):
                values.setdefault(target.id, []).append(value)
    return values


def _codes_of(expr, assigned: dict) -> list:
    """What an exit code expression can be: its leaves, a name standing for each value assigned to it."""
    found = []
    for leaf in _leaves(expr):
        if isinstance(leaf, ast.Name) and leaf.id in assigned:
            found += [v for value in assigned[leaf.id] for v in _leaves(value)]
        else:
            found.append(leaf)
    return found


def _scan(sources: dict) -> tuple:
    """({module name: [(line, code), ...]}, exiting functions): the lines of each exit written as a literal
    other than 0, over modules given as {module name: source} (a name ending in `.__init__` is its package):
    everywhere, `sys.exit(N)`, `os._exit(N)`, `SystemExit(N)`, `self.exit(N, ...)`; and `return N` in each
    function whose result is an exit code: main and *_main, every function whose result is passed to an exit
    (`sys.exit(f())`, `code = f(); raise SystemExit(code)`), and every function whose result such a function
    returns (`return g()`, `x = g(); return x`), through the imports between the modules. A code written as a
    name assigned a literal counts too. Other functions' `return 1` are not exit codes (a count, a step, a
    flag). Also the (module, function) pairs read as returning an exit code."""
    modules = {}
    for name, source in sources.items():
        package = name.endswith(".__init__")
        name = name.removesuffix(".__init__")
        modules[name] = _Module(name, ast.parse(source), package)
    found = {name: [] for name in modules}
    exiting = {
        (m.name, f)
        for m in modules.values()
        for f in m.functions
        if f.split(".")[-1] == "main" or f.endswith("_main")
    }
    for module in modules.values():
        for scope, cls in _scopes(module):
            nodes = _own_nodes(scope)
            assigned = _assigned(nodes)
            for node in nodes:
                code = _exit_argument(node)
                if code is None:
                    continue
                for leaf in _codes_of(code, assigned):
                    found[module.name] += [(node.lineno, c) for c in _literal_codes(leaf)]
                    if (callee := _callee(leaf, module, modules, cls)) is not None:
                        exiting.add(callee)
    done = set()
    while exiting - done:
        module_name, function = current = sorted(exiting - done)[0]
        done.add(current)
        module = modules[module_name]
        node = module.functions[function]
        cls = function.split(".")[0] if "." in function else None
        nodes = _own_nodes(node)
        assigned = _assigned(nodes)
        for ret in nodes:
            if not isinstance(ret, ast.Return) or ret.value is None:
                continue
            for leaf in _codes_of(ret.value, assigned):
                found[module_name] += [(ret.lineno, c) for c in _literal_codes(leaf)]
                if (callee := _callee(leaf, module, modules, cls)) is not None:
                    exiting.add(callee)
    return {
        name: sorted({(line, c) for line, c in codes if c != 0}) for name, codes in found.items()
    }, exiting


def literal_exits_in(sources: dict) -> dict:
    """{module name: [(line, code), ...]}: see `_scan`."""
    return _scan(sources)[0]


def literal_exits(source: str) -> list:
    """`literal_exits_in` for one module: [(line, code), ...]."""
    return literal_exits_in({"module": source})["module"]


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


def test_the_scan_follows_an_exit_code_out_of_main_and_across_modules():
    """Issue 49: a literal exit code returned from a function not named main stayed green."""
    cli = """
import sys
from pkg.commands import entry
from pkg import runner as run_mod
sys.exit(9)  # module level
def main():
    sys.exit(entry.cli([]))
def launch_stage():
    code = run_mod.launch() if a else run_mod.other()
    if code:
        raise SystemExit(code)
def count():
    return 10  # a count, not an exit code: nothing passes it to an exit
"""
    entry = """
from .flags import refuse
from pkg.exits import EXIT_OK
class Parser:
    def error(self):
        return self.helper()
    def helper(self):
        return 11
def cli(argv):
    if (refused := _check(argv)) is not None:
        return refused
    answer = refuse("x")
    if answer:
        return answer
    code = 12
    if argv:
        return code
    return Parser().error() if argv else EXIT_OK
def _check(argv):
    return 13 if argv else None
"""
    flags = """
def refuse(message):
    print(message)
    return 14
def unrelated():
    return 15
"""
    runner = """
def launch():
    return 16
def other():
    return 17
def worker_count():
    return 1
"""
    found = literal_exits_in(
        {
            "pkg.cli": cli,
            "pkg.commands.entry": entry,
            "pkg.commands.flags": flags,
            "pkg.runner": runner,
            "pkg.__init__": "",
        }
    )
    codes = {name: [code for _, code in lines] for name, lines in found.items()}
    assert codes == {
        "pkg.cli": [9],
        "pkg.commands.entry": [11, 12, 13],
        "pkg.commands.flags": [14],
        "pkg.runner": [16, 17],
        "pkg": [],
    }, codes


def _sources() -> dict:
    paths = sorted([*(ROOT / "src").rglob("*.py"), *(ROOT / "pipeline").rglob("*.py")])
    assert any(p.name == "cli.py" for p in paths) and len(paths) > 50  # the walk found the code
    names = {}
    for path in paths:
        if path == ROOT / "src" / "tfpipe" / "exits.py":
            continue
        parts = (
            path.relative_to(ROOT / "src" if path.is_relative_to(ROOT / "src") else ROOT)
            .with_suffix("")
            .parts
        )
        names[".".join(parts)] = path
    return names


def test_no_exit_code_is_a_literal_outside_tfpipe_exits():
    paths = _sources()
    found, exiting = _scan({name: path.read_text() for name, path in paths.items()})
    # the scan reached the entry points' helpers, across modules (else it would pass by finding nothing)
    assert {
        ("tfpipe.commands.entry", "cli"),
        ("tfpipe.commands.entry", "_run_guarded"),
        ("tfpipe.commands.entry", "_check_mlflow_keys"),
        ("tfpipe.commands.hydra_flags", "refuse"),
        ("tfpipe.commands.hydra_flags", "answer"),
        ("tfpipe.commands.promote", "main"),
        ("tfpipe.launch.local", "launch"),
        ("tfpipe.launch.local", "Launcher.run"),
    } <= exiting, sorted(exiting)
    written = {
        f"{paths[name if name in paths else name + '.__init__'].relative_to(ROOT)}:{line}": code
        for name, lines in found.items()
        for line, code in lines
    }
    assert not written, f"exit codes written as literals (name them in src/tfpipe/exits.py): {written}"


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
