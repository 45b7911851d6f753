"""A run record's config as values only: what a re-run takes from `config/resolved.yaml` (an artifact anyone
with EDIT on the store can replace).

`overrides(record, trusted)` turns the record into a flat list of typed `(key, value)` pairs (plain scalars,
lists of them, empty containers) that `nested` puts back together for the commit's own stages, which check
them against their schema. Nothing in a record is instantiated and no object comes from it: wherever a value
names code (any Hydra instantiation key `_target_`, `_partial_`, `_args_`, `_recursive_`, `_convert_` at any
depth, inside a hook's arguments, a list or any section; `model.builder`, `model.fit`), it is accepted only
when the commit's own conf/ names the very same value at the very same key (`named_by_conf`: the commit's
conf/ and params.yaml, read before a recorded diff is applied); anything else is refused in one line naming
the key and what conf/ allows there, before any stage runs. An interpolation (`${...}`: OmegaConf resolves it
when the stage reads it, `oc.decode` into a structure) is refused too. It imports nothing a record names and
reads only YAML (no Hydra, no search path)."""

from __future__ import annotations

import datetime
import re
from pathlib import Path
from typing import Any, Dict, List, Tuple

from tfpipe.errors import UserError

# Hydra's instantiation keys: a mapping holding one is an object to build.
SPECIAL = ("_target_", "_partial_", "_args_", "_recursive_", "_convert_")
# Keys whose string value names a function the stages import and call.
CODE_KEYS = ("model.builder", "model.fit")
_NAME = re.compile(r"[A-Za-z0-9_-]+$")  # a key of a config mapping: a field or keyword-argument name
_PACKAGE = re.compile(r"#\s*@package\s+(\S+)")
_SCALARS = (str, bool, int, float, type(None), datetime.date)

Override = Tuple[str, Any]


def _refuse(origin: str, message: str) -> UserError:
    return UserError(f"{origin}: {message}; a record's config is taken as values only: refused")


def _is_code(key: str) -> bool:
    """Whether the value at `key` names code: a Hydra instantiation key on its path, or model.builder/fit."""
    parts = re.split(r"[.\[\]]+", key)
    return any(p in SPECIAL for p in parts) or any(
        key == k or key.startswith((f"{k}.", f"{k}[")) for k in CODE_KEYS
    )


def _leaves(tree: Any, key: str, origin: str, out: list, strict: bool = True) -> list:
    """(dotted key, value) of every leaf; a list of scalars is one leaf, a list holding containers is indexed.
    `strict` (a record): a key that is not a plain name, a value that is not plain data or an interpolation is
    refused."""
    if isinstance(tree, dict):
        if not tree and key:
            out.append((key, {}))
        for name, value in tree.items():
            if not isinstance(name, str) or not _NAME.match(name):
                if strict:
                    raise _refuse(
                        origin, f"recorded key {name!r} under {key or 'the top'} is not a plain name"
                    )
                continue
            _leaves(value, f"{key}.{name}" if key else name, origin, out, strict)
    elif isinstance(tree, list) and any(isinstance(v, (dict, list)) for v in tree):
        for i, value in enumerate(tree):
            _leaves(value, f"{key}[{i}]", origin, out, strict)
    else:
        for value in tree if isinstance(tree, list) else [tree]:
            if strict and not isinstance(value, _SCALARS):
                raise _refuse(origin, f"recorded {key} holds a {type(value).__name__}, not a plain value")
            if strict and isinstance(value, str) and "${" in value:
                raise _refuse(origin, f"recorded {key}={value!r} is an interpolation (resolved when read)")
        out.append((key, tree))
    return out


def _files(conf_dir: Path, params_file) -> list:
    """(file, the package its keys land in) of every YAML file conf/ holds, and params.yaml (the top)."""
    found: list[tuple[Path, str | None]] = []
    if conf_dir.is_dir() and not conf_dir.is_symlink():
        for path in sorted(conf_dir.rglob("*.yaml")):
            found.append((path, ".".join(path.relative_to(conf_dir).parent.parts)))
    if params_file is not None:
        found.append((Path(params_file), None))
    return found


def named_by_conf(conf_dir, params_file=None) -> Dict[str, list]:
    """key -> the values naming code that a commit's own config names at that key: the YAML files of
    `conf_dir`, keyed where Hydra puts them (a file's group, or its `# @package` line), and `params_file`
    (DVC's composed params.yaml, at the top). Unreadable files and symlinks name nothing; Hydra is not run
    (no search path)."""
    import yaml

    named: Dict[str, list] = {}
    for path, group in _files(Path(conf_dir), params_file):
        if path.is_symlink() or not path.is_file():
            continue
        try:
            text = path.read_text(encoding="utf-8")
            tree = yaml.safe_load(text)
        except (OSError, UnicodeDecodeError, yaml.YAMLError):
            continue
        if not isinstance(tree, dict):
            continue
        header = next((m for m in map(_PACKAGE.match, text.splitlines()[:20]) if m), None)
        package = "" if group is None else header.group(1) if header else "_group_"
        package = package.replace("_global_", "").replace("_group_", group or "").strip(".")
        tree = {k: v for k, v in tree.items() if k not in ("defaults", "hydra")}
        for name, value in tree.items():
            key = f"{package}.{name}" if package else str(name)
            for leaf, found in _leaves(value, key, str(path), [], strict=False):
                if _is_code(leaf) and found not in named.setdefault(leaf, []):
                    named[leaf].append(found)
    return named


def named_in(wt, also: Dict[str, list] | None = None) -> Dict[str, list]:
    """`named_by_conf` of a worktree's conf/ and params.yaml, added to `also` (what an earlier read named)."""
    named = {key: list(values) for key, values in (also or {}).items()}
    for key, values in named_by_conf(Path(wt) / "conf", Path(wt) / "params.yaml").items():
        named[key] = named.get(key, []) + [v for v in values if v not in named.get(key, [])]
    return named


def recorded_config(run: dict, log) -> Any:
    """The run's config with the policy its `precision.policy=auto` ran as (the tag `precision.resolved`):
    both from the record, so both go through `overrides` alike."""
    cfg, resolved = run["config"], run["tags"].get("precision.resolved")
    precision = cfg.get("precision") if isinstance(cfg, dict) else None
    if isinstance(precision, dict) and precision.get("policy") == "auto" and resolved:
        # `auto` picks the policy from the host: re-run with the one the original run used.
        log(f"precision.policy=auto ran as {resolved}: the re-run uses {resolved}")
        return {**cfg, "precision": {**precision, "policy": resolved}}
    return cfg


def overrides(record: Any, trusted: Dict[str, list], origin: str = "rerun") -> List[Override]:
    """The record's config as flat typed `(key, value)` overrides; UserError in one line for a value naming
    code that `trusted` (`named_by_conf` of the commit's conf/) does not name identically at that key, for an
    object to instantiate (a mapping holding `_target_` & co.) anywhere else, for an interpolation, a key that
    is not a plain name or a value that is not plain data."""
    if not isinstance(record, dict):
        raise _refuse(origin, f"the recorded config is a {type(record).__name__}, not a mapping of sections")
    values = _leaves(record, "", origin, [])
    for key, value in values:
        if not _is_code(key) or (value is None and key in CODE_KEYS):
            continue  # plain data, or model.fit: null (nothing named)
        allowed = trusted.get(key, [])
        if value not in allowed:
            shown = ", ".join(repr(a) for a in allowed) or "none"
            raise _refuse(
                origin,
                f"recorded {key}={value!r} names code the commit's conf/ does not name at {key} "
                f"(allowed there: {shown})",
            )
    return values


def _parts(key: str) -> list:
    return [int(p[1:-1]) if p[0] == "[" else p for p in re.findall(r"\[\d+\]|[^.\[\]]+", key)]


def nested(values: List[Override]) -> dict:
    """The overrides put back into nested sections (params.yaml), in their order."""
    root: dict = {}
    for key, value in values:
        parts = _parts(key)
        node: Any = root  # a section (dict), or a list where the next part is an index
        for part, following in zip(parts, parts[1:] + [None]):
            child = value if following is None else [] if isinstance(following, int) else {}
            if isinstance(part, int):
                node.extend([None] * (part + 1 - len(node)))
                node[part] = child if node[part] is None or following is None else node[part]
            elif following is None or part not in node:
                node[part] = child
            node = node[part]
    return root


def as_text(values: List[Override]) -> List[str]:
    """`key=value` lines, as the re-run's plan prints them."""
    return [f"{key}={value!r}" for key, value in values]
