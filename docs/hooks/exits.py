"""MkDocs hook (mkdocs.yml `hooks:`): reference/exit-codes.md, generated at build time.

What it knows: every exit code `tfpipe.exits` names (its value and its trailing `# comment`, read with ast and
tokenize), and every exception class defined under src/tfpipe (read with ast): its base, its docstring's first
line and what the user sees of it: a `UserError` the line `tfpipe.commands.hydra_flags.refuse` prints and the
code it returns; any other class the line an `except` naming it (or, for an interruption, `KeyboardInterrupt`) prints
to stderr and the code that handler returns. What it does not: a line printed outside such a handler, a code a
handler computes other than with `tfpipe.exits`. It imports nothing of tfpipe, TensorFlow, Keras or MLflow."""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src" / "tfpipe"
EXITS = SRC / "exits.py"
BUILT_IN = {"Exception", "BaseException", "ValueError", "KeyboardInterrupt"}  # bases an error class may name
ALSO_CAUGHT_AS = {"KeyboardInterrupt"}  # handlers of these catch a subclass that no handler names
INTRO = """# Exit codes and error classes

This page is generated from `src/tfpipe/exits.py` (every exit code tfpipe chooses, as a named constant with a
comment saying when it happens) and the exception classes under `src/tfpipe` when the site is built. How bad
input is refused, in which order and with which words: [Bad input](errors.md). Which codes each command can
end with: its section in [Commands](commands.md).
"""


def on_files(files, config):
    """Add the page (replacing a file of the same name, should docs/ hold one)."""
    from mkdocs.structure.files import File

    uri = "reference/exit-codes.md"
    if (old := files.get_file_from_path(uri)) is not None:
        files.remove(old)
    files.append(File.generated(config, uri, content=exits_reference()))
    return files


def _md(text: str) -> str:
    """Text for a Markdown table cell: code spans kept; elsewhere `|`, `<`, `*` and `_` escaped."""
    escape = str.maketrans({"|": r"\|", "<": "&lt;", "*": r"\*", "_": r"\_"})
    return "".join(p if p.startswith("`") else p.translate(escape) for p in re.split(r"(`[^`]*`)", text))


def exits_reference() -> str:
    """The page: the exit code table, then the error class table."""
    codes = exit_codes()
    doc = ast.get_docstring(ast.parse(EXITS.read_text()))
    rows = ["| Code | Name | When |", "| --- | --- | --- |"]
    for name, (value, when) in sorted(codes.items(), key=lambda kv: (kv[1][0], kv[0])):
        rows.append(f"| {_code_cell(name, value)} | `{name}` | {_md(when)} |")
    out = [
        INTRO,
        "## Exit codes\n",
        "\n".join(rows) + "\n",
        "Not in this table: " + _md(" ".join(doc.split("\n\n")[-1].split()).partition(": ")[2]) + "\n",
    ]
    rows = [
        "| Class | Base | Meaning | What it prints (stderr) | Exit code |",
        "| --- | --- | --- | --- | --- |",
    ]
    for name, (module, base, meaning, lines, code) in error_classes(codes).items():
        shown = " or ".join(f"`{line}`" for line in lines) or "(no line: see its meaning)"
        rows.append(f"| `{name}` ({module}) | `{base}` | {_md(meaning)} | {shown} | {code or '-'} |")
    out += ["## Error classes\n", "\n".join(rows) + "\n"]
    return "\n".join(out)


def _code_cell(name: str, value: int) -> str:
    return f"{value} + N" if name == "SIGNAL_BASE" else str(value)


def exit_codes() -> dict:
    """{name: (value, its comment)} of every integer constant of src/tfpipe/exits.py: the comment lines right above
    it, else its trailing one."""
    source = EXITS.read_text()
    tokens = tokenize.generate_tokens(io.StringIO(source).readline)
    notes = {t.start[0]: t.string.lstrip("#").strip() for t in tokens if t.type == tokenize.COMMENT}
    out = {}
    for node in ast.parse(source).body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant):
            if isinstance(node.value.value, int) and isinstance(node.targets[0], ast.Name):
                above, n = [], node.lineno - 1
                while n in notes:
                    above, n = [notes[n], *above], n - 1
                out[node.targets[0].id] = (node.value.value, " ".join(above) or notes.get(node.lineno, ""))
    return out


def _modules() -> dict:
    """{module name: parsed source} of src/tfpipe."""
    out = {}
    for path in sorted(SRC.rglob("*.py")):
        parts = path.relative_to(SRC.parent).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = ast.parse(path.read_text())
    return out


def error_classes(codes: dict) -> dict:
    """{class: (module, bases, docstring's first line, lines printed, exit code)}, UserError's family first."""
    modules = _modules()
    classes = {
        node.name: (module, node)
        for module, tree in modules.items()
        for node in ast.walk(tree)
        if isinstance(node, ast.ClassDef) and node.bases
    }
    bases = {name: [_name(b) for b in node.bases] for name, (_, node) in classes.items()}
    errors = [name for name in classes if _is_error(name, bases, classes)]
    refuse = _function(modules["tfpipe.commands.hydra_flags"], "refuse")
    out = {}
    for name in sorted(
        errors, key=lambda n: (not _derives(n, "UserError", bases), n != "UserError", classes[n][0], n)
    ):
        module, node = classes[name]
        if _derives(name, "UserError", bases):
            lines, code = [_printed(refuse)], _returned(refuse, codes)
        else:
            lines, code = _handled(name, bases, modules, codes)
        meaning = (ast.get_docstring(node) or "").split("\n")[0]
        out[name] = (module, ", ".join(bases[name]), meaning, lines, code)
    return out


def _name(expr) -> str:
    return expr.attr if isinstance(expr, ast.Attribute) else getattr(expr, "id", "")


def _is_error(name: str, bases: dict, classes: dict) -> bool:
    """Whether a class is an exception: a base is a built-in exception, another such class, or named *Exception."""
    return any(
        b in BUILT_IN or b.endswith("Exception") or (b in classes and _is_error(b, bases, classes))
        for b in bases[name]
    )


def _derives(name: str, ancestor: str, bases: dict) -> bool:
    return name == ancestor or any(_derives(b, ancestor, bases) for b in bases.get(name, []))


def _function(tree, name: str):
    return next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == name)


def _handled(name: str, bases: dict, modules: dict, codes: dict) -> tuple:
    """(lines, exit codes) of the `except` clauses naming the class (else a base of ALSO_CAUGHT_AS) that print:
    each distinct one, joined with "or"."""
    for wanted in [name] + [b for b in bases[name] if b in ALSO_CAUGHT_AS]:
        found = {}
        for tree in modules.values():
            for node in ast.walk(tree):
                if isinstance(node, ast.ExceptHandler) and wanted in _caught_names(node.type):
                    if line := _printed(node):
                        found.setdefault(line, _returned(node, codes))
        if found:
            codes_given = sorted({c for c in found.values() if c})
            return list(found), " or ".join(codes_given)
    return [], ""


def _caught_names(expr) -> set:
    if isinstance(expr, ast.Tuple):
        return {_name(e) for e in expr.elts}
    return {_name(expr)} if expr is not None else set()


def _printed(node) -> str:
    """The first line `print(..., file=sys.stderr)` under `node` writes, `{expr}` as `<what>`."""
    for call in ast.walk(node):
        if isinstance(call, ast.Call) and _name(call.func) == "print" and call.args:
            if any(k.arg == "file" and _name(k.value) == "stderr" for k in call.keywords):
                return _template(call.args[0])
    return ""


def _template(expr) -> str:
    """An f-string as text, each `{...}` as `<message>` (the exception's), `<prog>` or `<its expression>`."""
    if isinstance(expr, ast.Constant):
        return str(expr.value)
    parts = []
    for part in getattr(expr, "values", []):
        if isinstance(part, ast.Constant):
            parts.append(str(part.value))
            continue
        text = ast.unparse(part.value)
        parts.append(
            "<message>"
            if re.search(r"\b(exc|message)\b", text)
            else "<prog>"
            if text == "stage"
            else f"<{text}>"
        )
    return "".join(parts)


def _returned(node, codes: dict) -> str:
    """The exit code the first `return` under `node` gives: a `tfpipe.exits` name, or 128 + N from signal_exit."""
    for ret in ast.walk(node):
        if isinstance(ret, ast.Return) and ret.value is not None:
            name = _name(ret.value.func) if isinstance(ret.value, ast.Call) else _name(ret.value)
            if name == "signal_exit":
                return f"{codes['SIGNAL_BASE'][0]} + N"
            if name in codes:
                return str(codes[name][0])
    return ""
