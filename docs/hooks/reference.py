"""MkDocs hook (mkdocs.yml `hooks:`): reference/config.md, generated at build time (commands.py: the commands).

What it knows: every key of the config schema (src/tfpipe/config; the model section once per MODEL_SCHEMAS
entry), its type, its default (what conf/'s default composition sets, else the schema's), the values the
checks allow where a `choice()`, `positive()` or `non_negative()` call says so (read with ast), its meaning
(its trailing `# comment` in conf/, else in the schema). What it does not: a rule a check writes as `if ...: raise` (model.dropout
in [0, 1)), left to the comments; a key nothing comments (an empty cell). It imports no TensorFlow, Keras or
MLflow."""

from __future__ import annotations

import ast
import dataclasses
import functools
import inspect
import io
import re
import sys
import textwrap
import tokenize
import typing
from pathlib import Path

import yaml

from tfpipe.config.root import flatten

ROOT = Path(__file__).resolve().parents[2]
CONF = ROOT / "conf"
DEFAULTS_LINE = re.compile(r"\s*-\s*(\w+):\s*(\S+)\s*#?\s*(.*)")  # config.yaml: `- GROUP: OPTION  # what`
# inspect.getsource of a class parses its whole module: once per object here
_source = functools.lru_cache(maxsize=None)(lambda obj: textwrap.dedent(inspect.getsource(obj)))
RULES = {"choice": None, "positive": "> 0", "non_negative": ">= 0"}  # tfpipe.config.checks' one-value checks
CONFIG_INTRO = """# Config keys

This page is generated from `src/tfpipe/config` (the schema: keys, types, checks) and `conf/` (defaults and
comments) when the site is built. Override a key with `dvc exp run -S key=value` (DVC records it in
params.yaml) or `tfpipe train key=value`; `python -m pipeline.train --cfg job` prints the config a run would
compose. *Default* is what the default composition sets (conf/config.yaml's defaults list; for a model, its
conf/model/NAME.yaml), else the schema's; `${...}` is an interpolation Hydra resolves. *Allowed* is what the
schema's checks accept.
"""


def on_files(files, config):
    """Add the generated pages (replacing a file of the same name, should docs/ hold one)."""
    from mkdocs.structure.files import File

    uri = "reference/config.md"
    if (old := files.get_file_from_path(uri)) is not None:
        files.remove(old)
    files.append(File.generated(config, uri, content=config_reference()))
    return files


def config_reference() -> str:
    """The config page: a table per section (models last, one table per schema of MODEL_SCHEMAS)."""
    from tfpipe.config.root import Config
    from tfpipe.config.schema import BUILT_IN, MODEL_SCHEMAS

    lines = (CONF / "config.yaml").read_text().splitlines()
    groups = {m[1]: (m[2], m[3]) for s in lines if (m := DEFAULTS_LINE.match(s))}
    out = [CONFIG_INTRO]
    for section, cls in sorted(typing.get_type_hints(Config).items(), key=lambda kv: kv[0] == "model"):
        option, about = groups.get(section, ("", ""))
        out.append(f"## {section}\n\n{_md(about)}\n")
        if section != "model":
            out.append(_table(section, cls, CONF / section / f"{option}.yaml"))
        for name, model in MODEL_SCHEMAS.items() if section == "model" else ():
            title = f"model={name}" if name in BUILT_IN else "A model of your own (`model.builder` set)"
            out.append(f"### {title}\n\n{_model_intro(name, model)}\n")
            out.append(_table(section, model, CONF / section / f"{name}.yaml"))
    return "\n".join(out)


def _table(section: str, cls, conf_file: Path) -> str:
    leaves = list(_leaves(cls, section))
    notes = {key: _field_comments(owner).get(key.rpartition(".")[2], "") for key, _, _, owner in leaves}
    values = {}
    if conf_file.is_file():
        text = conf_file.read_text()  # an option file holds its group's keys, unless @package _global_
        values = flatten(yaml.safe_load(text) or {}, "" if "@package _global_" in text else f"{section}.")
        notes.update(_yaml_comments(conf_file))  # conf/ speaks to users: its comment first
    rules = {k: v for owner in {leaf[3] for leaf in leaves} for k, v in _rules(owner).items()}
    rows = ["| Key | Type | Default | Allowed | Meaning |", "| --- | --- | --- | --- | --- |"]
    for key, tp, default, _ in leaves:
        shown = _code(values.get(key, default))
        rows.append(f"| `{key}` | {_type(tp)} | {shown} | {rules.get(key, '')} | {_md(notes.get(key, ''))} |")
    return "\n".join(rows) + "\n"


def _leaves(cls, prefix: str):
    """(dotted key, type, schema default, owning dataclass) of every leaf; a nested dataclass is a section."""
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        key, tp = f"{prefix}.{f.name}", hints[f.name]
        default = f.default if f.default_factory is dataclasses.MISSING else f.default_factory()
        yield from _leaves(tp, key) if dataclasses.is_dataclass(tp) else [(key, tp, default, cls)]


def _type(tp) -> str:
    args, origin = [a for a in typing.get_args(tp) if a is not type(None)], typing.get_origin(tp)
    if origin is typing.Union:
        return " or ".join(map(_type, args)) + " or null"
    if origin in (list, dict):
        return f"list of {_type(args[0])}" if origin is list else "mapping"
    return "any" if tp is typing.Any else tp.__name__


def _code(value) -> str:
    text = yaml.safe_dump(value, default_flow_style=True, width=1000).strip()
    return f"`{text.removesuffix('...').strip()}`"


def _md(text: str) -> str:
    """Text for a Markdown table cell: code spans kept; elsewhere `|`, `<`, `*` and `_` escaped."""
    escape = str.maketrans({"|": r"\|", "<": "&lt;", "*": r"\*", "_": r"\_"})
    return "".join(p if p.startswith("`") else p.translate(escape) for p in re.split(r"(`[^`]*`)", text))


# The comments are read by hand: PyYAML and OmegaConf drop them, dataclasses.fields has none, and ruamel.yaml
# (here only as DVC's dependency) keeps YAML's behind an undocumented `.ca` attribute: one of the two sources.
def _yaml_comments(path: Path) -> dict:
    """{dotted key: trailing comment} of a conf/ file (block mappings, as conf/ writes them)."""
    text = path.read_text()
    stack, out = ([] if "@package _global_" in text else [(-1, path.parent.name)]), {}
    for line in text.splitlines():
        if m := re.match(r"( *)([A-Za-z_]\w*):(.*)$", line):
            while stack and stack[-1][0] >= len(m[1]):
                stack.pop()
            stack.append((len(m[1]), m[2]))
            if comment := m[3].partition(" #")[2].strip():
                out[".".join(key for _, key in stack)] = comment
    return out


def _field_comments(cls) -> dict:
    """{field: trailing comment} from a dataclass's source, a base class's where the subclass has none."""
    out = {}
    for klass in reversed([k for k in cls.__mro__ if dataclasses.is_dataclass(k)]):
        source = _source(klass)
        tokens = tokenize.generate_tokens(io.StringIO(source).readline)
        notes = {t.start[0]: t.string.lstrip("#").strip() for t in tokens if t.type == tokenize.COMMENT}
        for node in ast.parse(source).body[0].body:
            found = [notes[n] for n in range(node.lineno, node.end_lineno + 1) if n in notes]
            if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and found:
                out[node.target.id] = found[0]
    return out


def _model_intro(name: str, cls) -> str:
    """A model's conf/model/NAME.yaml header comment, else its schema module's first paragraph."""
    path = CONF / "model" / f"{name}.yaml"
    if path.is_file():
        lines = path.read_text().splitlines()
        text = " ".join(s.lstrip("# ") for s in lines[: next(i for i, s in enumerate(lines) if s[:1] != "#")])
    else:
        text = " ".join(inspect.getdoc(sys.modules[cls.__module__]).split("\n\n")[0].split())
    return (f"{cls.MODALITY.capitalize()} model. " if cls.MODALITY else "") + _md(text)


def _rules(cls) -> dict:
    """{dotted key: allowed} from the one-value checks in a schema class's methods, its base's where `check`
    calls `super().check`, and the tfpipe.config functions they call."""
    chain = [cls]
    while "super().check(" in _source(chain[-1]):
        chain.append(next(k for k in chain[-1].__mro__[1:] if "check" in vars(k)))
    out: dict = {}
    for klass in reversed(chain):
        out.update(_calls(ast.parse(_source(klass)), vars(sys.modules[klass.__module__]), depth=1))
    return out


def _calls(node, namespace: dict, depth: int, loops: typing.Optional[dict] = None) -> dict:
    """The rules of the check calls under `node`; `loops`: the values of each `for NAME in (constants)`."""
    loops, out = dict(loops or {}), {}
    if isinstance(node, ast.For) and isinstance(node.target, ast.Name) and isinstance(node.iter, ast.Tuple):
        if all(isinstance(e, ast.Constant) for e in node.iter.elts):
            loops[node.target.id] = [e.value for e in node.iter.elts]
    if isinstance(node, ast.Call):
        name = getattr(node.func, "id", getattr(node.func, "attr", ""))
        helper = _resolve(node.func, namespace)
        if name in RULES and node.args:
            rule = RULES[name] or ", ".join(f"`{v}`" for v in _allowed(node.args[2], namespace))
            out.update(dict.fromkeys(_keys(node.args[0], loops), rule))
        elif depth and inspect.isfunction(helper) and helper.__module__.startswith("tfpipe.config"):
            out.update(_calls(ast.parse(_source(helper)), vars(sys.modules[helper.__module__]), depth - 1))
    for child in ast.iter_child_nodes(node):
        out.update(_calls(child, namespace, depth, loops))
    return out


def _keys(arg, loops: dict) -> list:
    """The dotted keys a check names: a string, or f"section.{NAME}" with NAME a loop variable."""
    if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
        return [arg.value]
    parts = arg.values if isinstance(arg, ast.JoinedStr) else []
    if len(parts) == 2 and isinstance(parts[0], ast.Constant) and isinstance(parts[1], ast.FormattedValue):
        return [f"{parts[0].value}{v}" for v in loops.get(getattr(parts[1].value, "id", None), [])]
    return []


def _resolve(expr, namespace: dict):
    if isinstance(expr, ast.Attribute):
        return getattr(_resolve(expr.value, namespace), expr.attr, None)
    return namespace.get(expr.id) if isinstance(expr, ast.Name) else None


def _allowed(expr, namespace: dict) -> tuple:
    """What a `choice()` call allows: a name, a module's attribute, tuple(NAME) or a literal tuple."""
    if isinstance(expr, ast.Call) and getattr(expr.func, "id", None) == "tuple":
        return tuple(_allowed(expr.args[0], namespace))
    found = _resolve(expr, namespace)
    return tuple(found) if found is not None else ast.literal_eval(expr)
