"""`Config` and the typed load: raw nested dicts (params.yaml, or Hydra's composition) merged section by section
into the structured-config schemas held in Hydra's ConfigStore (group `tfpipe_schema`), then checked.

OmegaConf does the typing (conversion, unknown keys, nulls); this module only turns its errors into the
project's one-line messages. conf/ does not name the stored schemas in its defaults lists: `dvc exp run -S`
composes conf/ in DVC's own process, where tfpipe (and so the ConfigStore entries) is not imported."""

from __future__ import annotations

import dataclasses
import typing
from typing import Any, Optional

from tfpipe.config import schema
from tfpipe.config.root import Config, flatten  # noqa: F401 - flatten re-exported
from tfpipe.errors import ConfigError, one_line

SCHEMA_GROUP = "tfpipe_schema"
SECTIONS = (
    "model",
    "dataset",
    "data",
    "strategy",
    "precision",
    "train",
    "tracking",
)  # the order of the checks


def register_schemas() -> None:
    """Every section schema (and every model's) into Hydra's ConfigStore: `tfpipe_schema/<section>`,
    `tfpipe_schema/model/<name>`."""
    from hydra.core.config_store import ConfigStore

    store = ConfigStore.instance()
    for name, cls in schema.MODEL_SCHEMAS.items():
        store.store(group=f"{SCHEMA_GROUP}/model", name=name, node=cls)
    for section in SECTIONS[1:]:
        store.store(group=SCHEMA_GROUP, name=section, node=_section_class(section))


def _section_class(section: str):
    return typing.get_type_hints(Config)[section]


def _stored(section: str, raw: dict):
    from hydra.core.config_store import ConfigStore

    if section == "model":
        name = raw.get("name", "cnn") if isinstance(raw, dict) else "cnn"
        if isinstance(raw, dict) and "builder" in raw:  # a team's own model: its name is theirs
            name = schema.CUSTOM_MODEL
        elif name not in schema.MODEL_SCHEMAS:
            from tfpipe.config.checks import choice

            choice("model.name", name, tuple(schema.BUILT_IN))
        path = f"{SCHEMA_GROUP}/model/{name}.yaml"
    else:
        path = f"{SCHEMA_GROUP}/{section}.yaml"
    return ConfigStore.instance().load(path).node


def from_dict(raw: dict, origin: str = "config", params_file: Optional[str] = None) -> Config:
    """A Config from nested dicts: unknown keys, wrong types and nulls refused in one line; then checked.
    `params_file`: `raw` is that file's (params.yaml): an unknown key is in it (keys.in_params_file)."""
    register_schemas()
    for key in raw:
        if key not in SECTIONS:
            from tfpipe.config.keys import unknown_key

            shown = raw[key] if isinstance(raw[key], (str, int, float, bool)) else None
            raise unknown_key(key, list(SECTIONS), value=shown, params_file=params_file)
    sections = {name: _typed(name, raw.get(name), params_file) for name in SECTIONS if name in raw}
    cfg = Config(**sections)
    for name in SECTIONS:
        getattr(cfg, name).check(cfg)
    return cfg


def _typed(section: str, raw: Any, params_file: Optional[str] = None):
    from omegaconf import OmegaConf
    from omegaconf.errors import ConfigKeyError, OmegaConfBaseException

    raw = {} if raw is None else raw
    node = _stored(section, raw)
    cls = type(OmegaConf.to_object(node))
    _require_mappings(section, cls, raw)
    _require_values(section, raw)
    try:
        return OmegaConf.to_object(OmegaConf.merge(node, raw))
    except ConfigKeyError as exc:
        from tfpipe.config.keys import unknown_key

        assert exc.full_key is not None, "OmegaConf names the key of a ConfigKeyError"
        parent = _class_at(cls, exc.full_key.split(".")[:-1])
        shown = _value_at(raw, exc.full_key)
        key = f"{section}.{exc.full_key}"
        raise unknown_key(key, schema.fields_of(parent), value=shown, params_file=params_file) from None
    except OmegaConfBaseException as exc:
        raise _type_error(section, exc) from None


def _require_mappings(prefix: str, cls, raw: Any) -> None:
    """A section, or a nested section (train.optimizer), given as something else than a mapping."""
    if not isinstance(raw, dict):
        raise ConfigError(f"{prefix}: expected a mapping, got {raw!r}")
    hints = typing.get_type_hints(cls)
    for key, value in raw.items():
        if dataclasses.is_dataclass(hints.get(key)):
            _require_mappings(f"{prefix}.{key}", hints[key], value)


def _require_values(prefix: str, raw: dict) -> None:
    """A `???` left in conf/ (dataset=images: dataset.name): OmegaConf's merge would keep the schema default."""
    for key, value in raw.items():
        if isinstance(value, dict):
            _require_values(f"{prefix}.{key}", value)
        elif value == "???":
            raise ConfigError(f"{prefix}.{key}: required, no value given; set it, e.g. {prefix}.{key}=VALUE")


def _class_at(cls, parts: list):
    for part in parts:
        cls = typing.get_type_hints(cls)[part]
    return cls


def _value_at(raw: dict, dotted: str):
    value: Any = raw
    for part in dotted.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return value if isinstance(value, (str, int, float, bool)) else None


_EXPECTED = {int: "an integer", float: "a number", bool: "true or false", str: "a string"}


def _type_error(section: str, exc) -> ConfigError:
    key = f"{section}.{exc.full_key}" if exc.full_key else section
    value = getattr(exc, "value", None)
    from tfpipe.config.keys import schema_type

    tp = schema_type(key)
    if value is None and "None" in str(exc):
        return ConfigError(f"{key}: must not be null; expected {_type_name(tp)}")
    return ConfigError(
        f"{key}={value!r}: expected {_type_name(tp)} ({one_line(exc)})"
        if tp is None
        else f"{key}={value!r}: expected {_type_name(tp)}"
    )


def _type_name(tp: Any) -> str:
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is typing.Union:
        inner = [a for a in args if a is not type(None)]
        return _type_name(inner[0]) if inner else "null"
    if origin is list:
        return f"a list of {getattr(args[0], '__name__', args[0])}"
    return _EXPECTED.get(tp, getattr(tp, "__name__", str(tp)))
