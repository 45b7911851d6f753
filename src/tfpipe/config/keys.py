"""Config keys: the schema type at a dotted key, and the one-line 'unknown config key' error with a
did-you-mean (also for the keys people type that the schema calls otherwise)."""

from __future__ import annotations

import dataclasses
import difflib
import re
import typing
from typing import Any, Optional

from tfpipe.config.root import Config
from tfpipe.errors import ConfigError

# keys people type that the schema calls otherwise: unknown key -> the key to use (and why)
KEY_HINTS = {
    "train.batch_size": (
        "train.batch_size_per_replica",
        "the batch is set per replica; global = per replica x replicas",
    ),
    "train.global_batch_size": (
        "train.batch_size_per_replica",
        "the batch is set per replica; global = per replica x replicas, so it always divides evenly",
    ),
    "train.lr": ("train.optimizer.learning_rate", None),
    "train.learning_rate": ("train.optimizer.learning_rate", None),
    "train.optimizer.lr": ("train.optimizer.learning_rate", None),
    "train.precision": ("precision.policy", None),
    "train.strategy": ("strategy.name", None),
    "precision.name": ("precision.policy", None),
    "data.batch_size": ("train.batch_size_per_replica", "the batch is set per replica"),
}


def _children(tp) -> dict:
    from tfpipe.config.schema import MODEL_SCHEMAS, ModelConfig

    if tp is ModelConfig:  # model.*: a key of any model schema (the selected one is checked after composing)
        merged: dict = {}
        for cls in MODEL_SCHEMAS.values():
            merged.update(typing.get_type_hints(cls))
        return merged
    return typing.get_type_hints(tp)


def schema_key(dotted: str, value: Any = None) -> Any:
    """The schema type at a dotted key, or ConfigError naming the unknown part (with a did-you-mean)."""
    tp: Any = Config
    parts = dotted.split(".")
    for i, part in enumerate(parts):
        parent = ".".join(parts[:i])
        if typing.get_origin(tp) is dict:  # a free mapping (model.params: a team builder's keyword arguments)
            return Any
        if not dataclasses.is_dataclass(tp):
            raise ConfigError(f"{dotted}: unknown config key; '{parent}' is a value, not a section")
        children = _children(tp)
        if part not in children:
            raise unknown_key(".".join(parts[: i + 1]), list(children), value=value, typed=dotted)
        tp = children[part]
    return tp


def schema_type(dotted: str) -> Optional[Any]:
    """The type at a key such as 'model.filters[1]' (a list's element type), None when there is none."""
    index = re.search(r"\[\d+\]$", dotted)
    try:
        tp = schema_key(re.sub(r"\[\d+\]$", "", dotted))
    except ConfigError:
        return None
    if index:
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        inner = (
            typing.get_args(args[0]) if args and typing.get_origin(args[0]) is list else typing.get_args(tp)
        )
        return inner[0] if inner else None
    return tp


def _deeper(typed: str) -> list[str]:
    """For 'epochs': the keys further down whose last part is what was typed ('train.epochs'), up to 3."""
    found: list[str] = []
    todo: list[tuple[str, type]] = [("", Config)]
    while todo:
        path, tp = todo.pop(0)
        for name, child in _children(tp).items():
            key = f"{path}{name}"
            if key.endswith(f".{typed}"):
                found.append(key)
            if isinstance(child, type) and dataclasses.is_dataclass(child):
                todo.append((f"{key}.", child))
    return found[:3]


def meant(dotted: str, allowed: list, typed: str) -> tuple[list[str], Optional[str]]:
    """The keys an unknown key probably meant, and why (for the keys people type that the schema calls
    otherwise): a KEY_HINTS entry, else the closest sibling (difflib), else the keys further down."""
    hint = KEY_HINTS.get(typed) or KEY_HINTS.get(dotted)
    if hint:
        return [hint[0]], hint[1]
    parent, _, leaf = dotted.rpartition(".")
    close = difflib.get_close_matches(leaf, list(allowed), n=1)
    if close:  # the whole key typed, with the unknown part corrected ('train.epochs' for 'trian.epochs')
        return [f"{parent}.{close[0]}{typed[len(dotted) :]}".lstrip(".")], None
    return _deeper(typed), None


def unknown_key(
    dotted: str,
    allowed: list,
    value: Any = None,
    typed: Optional[str] = None,
    params_file: Optional[str] = None,
) -> ConfigError:
    """'<key>=<value>: unknown config key (did you mean ...?); allowed keys under <parent>: ...'

    `dotted` is the key up to the unknown part, `typed` the whole key as given (may go deeper). `params_file`:
    the key was read from that file (params.yaml), not typed now; `in_params_file` says so and how to undo."""
    typed = typed or dotted
    keys, why = meant(dotted, allowed, typed)
    mean = f" (did you mean {' or '.join(repr(k) for k in keys)}?{' ' + why if why else ''})" if keys else ""
    shown = f"{typed}={value}" if value not in (None, "") else typed
    where = in_params_file(shown, keys, value, params_file) if params_file else ""
    parent = dotted.rpartition(".")[0] or "<root>"
    return ConfigError(
        f"{shown}: unknown config key{mean}{where}; allowed keys under '{parent}': {', '.join(allowed)}"
    )


def in_params_file(shown: str, keys: list, value: Any, params_file: str) -> str:
    """An unknown key read from the params file, not typed now: `dvc exp run -S +KEY=VALUE` writes a key the
    schema lacks into params.yaml (DVC's own error for `-S KEY` suggests the '+'), and the stage meets it
    later. Where it came from and how to undo it."""
    scalar = value not in (None, "")
    redo = f"`dvc exp run -S {keys[0]}={value}`" if keys and scalar else "`dvc exp run -S` with the right key"
    written = f"+{shown}" if scalar else f"+{shown}=..."
    return (
        f", in {params_file}: `dvc exp run -S {written}` (or an edit) wrote it there; "
        f"undo: `git checkout {params_file}`, or {redo}"
    )
