"""The config a stage runs with when overrides are given (issue 52): the params file first (params.yaml: what
`dvc repro` reads, what `dvc exp run -S` writes), then the overrides on top, so one override keeps the rest.

- KEY=VALUE, +KEY=VALUE, ++KEY=VALUE, ~KEY: applied to params.yaml in Hydra's override grammar (Hydra's compose
  API with params.yaml as the primary config).
- GROUP=OPTION (or ~GROUP) of a group whose options write their own section only (model, precision, strategy,
  data, train, tracking): that section is conf/'s with the option, every other one params.yaml's; then the values.
- GROUP=OPTION of a group whose options reach other sections (a dataset picks its model and precision, an
  experiment preset sets keys anywhere: a defaults list or `# @package _global_`): params.yaml holds values, not
  the choices that made them, so the old choice's values cannot be told from the user's; conf/ is composed fresh
  with the overrides, and `note` names the params.yaml values that this drops.
- No params file (a project that has none) and not named with --params: conf/ with the overrides.

params.yaml holds resolved values: one that still equals what conf/'s interpolation gives from params.yaml's own
values (data.output_dir: data/prepared/${dataset.name}) gets the interpolation back, so dataset.name=x moves it."""

from __future__ import annotations

import dataclasses
import re
import tempfile
from pathlib import Path
from typing import Any

import yaml

from tfpipe.config.compose import (
    CONF_DIR,
    CONFIG_NAME,
    OVERRIDE_FORM,
    PARAMS_FILE,
    check_overrides,
    compose_conf,
    compose_dict,
    hydra_error,
    plain,
    read_params,
    resolved,
    search_dirs,
)
from tfpipe.config.load import SECTIONS, flatten, from_dict
from tfpipe.errors import ConfigError

_PACKAGE = re.compile(r"^\s*#\s*@package\s+(\S+)", re.M)
_ABSENT = object()
_NOTED = 6  # dropped values named in the note; the rest counted


@dataclasses.dataclass
class Composed:
    """`cfg`: the composition, interpolations kept (an OmegaConf DictConfig); `source`: what was composed;
    `note`: one line for stderr when params.yaml's own values were dropped, else empty."""

    cfg: Any
    source: str
    note: str = ""


def load(overrides, params_path=PARAMS_FILE, config_dir=CONF_DIR, *, named: bool = False):
    """The checked Config and the note: `params_path` with `overrides` on top (see the module's docstring);
    `named`: the params file was named on the command line, so a missing one is refused, not skipped."""
    composed = compose_over_params(overrides, params_path, config_dir, named=named)
    return from_dict(resolved(composed.cfg, overrides), origin=composed.source), composed.note


def compose_over_params(overrides, params_path=PARAMS_FILE, config_dir=CONF_DIR, *, named: bool = False):
    """A `Composed`: the params file, then the overrides (the module's docstring says how)."""
    from omegaconf import OmegaConf

    overrides, params_path = list(overrides), Path(params_path)
    check_overrides(overrides, config_dir)
    if not params_path.is_file() and not named:
        return Composed(
            compose_conf(overrides, config_dir), f"{CONF_DIR}/ + overrides (no {params_path.name})"
        )
    groups, values = split_overrides(overrides, config_dir)
    if crossing := [o for o in groups if not _own_section(o, config_dir)]:
        cfg = compose_conf(overrides, config_dir)
        try:
            params = read_params(params_path)
        except ConfigError:
            if named:  # a file named with --params must be there and read, even where it is not used
                raise
            params = None  # not used: an unreadable params.yaml drops nothing worth a note
        note = _dropped(params, resolved(cfg, overrides), crossing, params_path, config_dir) if params else ""
        return Composed(
            cfg, f"{CONF_DIR}/ + overrides ({' '.join(crossing)}: {params_path.name} not used)", note
        )
    params = read_params(params_path)
    _check_sections(params)
    conf = compose_conf(groups, config_dir)  # the switched sections, and conf/'s interpolations
    base = OmegaConf.create(params)
    _restore_interpolations(base, conf)
    for override in groups:
        section = _parts(override)[1]
        if section in conf:
            base[section] = conf[section]
        elif section in base:
            del base[section]
    return Composed(_apply(values, base), f"{params_path.name} + overrides")


def compose_yaml(overrides, params_path=PARAMS_FILE, config_dir=CONF_DIR) -> str:
    """The resolved composition as a params file's text (what `--params FILE` reads back)."""
    from omegaconf import OmegaConf

    composed = compose_over_params(overrides, params_path, config_dir)
    return OmegaConf.to_yaml(OmegaConf.create(resolved(composed.cfg, overrides)))


def source(overrides, params_path=PARAMS_FILE, config_dir=CONF_DIR, *, named: bool = False) -> str:
    """What `compose_over_params` composes, in words (for --info); nothing is composed."""
    params_path = Path(params_path)
    if not params_path.is_file() and not named:
        return f"{CONF_DIR}/{CONFIG_NAME}.yaml + overrides (there is no {params_path.name})"
    crossing = [o for o in split_overrides(overrides, config_dir)[0] if not _own_section(o, config_dir)]
    if crossing:
        return f"{CONF_DIR}/{CONFIG_NAME}.yaml + overrides ({' '.join(crossing)} composes conf/ afresh)"
    return f"{params_path.name} + overrides"


def split_overrides(overrides, config_dir=CONF_DIR) -> tuple[list, list]:
    """(config-group overrides, value overrides), as check_overrides tells them apart."""
    dirs = search_dirs(config_dir)
    groups = [o for o in overrides if _is_group(o, dirs)]
    return groups, [o for o in overrides if o not in groups]


def _parts(override: str) -> tuple[str, str, str | None]:
    match = OVERRIDE_FORM.match(override)
    assert match is not None, f"{override!r}: check_overrides refuses a malformed override first"
    return match["prefix"] or "", match["key"].strip(), match["value"]


def _is_group(override: str, dirs: list) -> bool:
    key = _parts(override)[1]
    return "." not in key and not key.startswith("hydra") and any((d / key).is_dir() for d in dirs)


def _own_section(override: str, config_dir) -> bool:
    """Whether the option an override picks (every option of the group, for ~GROUP) writes its group's section
    only: no `@package` other than the group's, no defaults list choosing other groups' options."""
    prefix, group, option = _parts(override)
    if "@" in override.split("=", 1)[0] or "/" in group:
        return False
    dirs = search_dirs(config_dir)
    if prefix == "~":
        files = [p for d in dirs for p in (d / group).glob("*.yaml")]
    else:
        files = [d / group / f"{option}.yaml" for d in dirs if (d / group / f"{option}.yaml").is_file()][:1]
    return bool(files) and all(_writes_own_section(path, group) for path in files)


def _writes_own_section(path: Path, group: str) -> bool:
    text = path.read_text(encoding="utf-8")
    lines = text.splitlines()
    header = next(
        (i for i, line in enumerate(lines) if line.strip() and not line.lstrip().startswith("#")), None
    )
    package = _PACKAGE.search("\n".join(lines[:header]))  # Hydra reads `# @package` in the leading comments
    if package and package.group(1) not in ("_group_", group):
        return False
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError:
        return False
    return not isinstance(raw, dict) or raw.get("defaults") in (None, [], ["_self_"])


def _check_sections(params: dict) -> None:
    """A top-level key that is no section, refused as a validation would (Hydra reads `defaults` as a list)."""
    from tfpipe.config.keys import unknown_key

    for key in params:
        if key not in SECTIONS:
            shown = params[key] if isinstance(params[key], (str, int, float, bool)) else None
            raise unknown_key(key, list(SECTIONS), value=shown)


def _restore_interpolations(base, conf) -> None:
    """Each value of `base` that equals what conf/'s interpolation at its key gives from `base` itself becomes
    that interpolation again."""
    from omegaconf import DictConfig, ListConfig, OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    for key, expr in _interpolations(plain(conf, resolve=False)):
        old = OmegaConf.select(base, key, default=_ABSENT)
        if old is _ABSENT or isinstance(old, (DictConfig, ListConfig)):
            continue
        OmegaConf.update(base, key, expr)
        try:
            same = OmegaConf.select(base, key, throw_on_resolution_failure=True) == old
        except OmegaConfBaseException:
            same = False
        if not same:
            OmegaConf.update(base, key, old)


def _interpolations(tree: dict, prefix: str = ""):
    for key, value in tree.items():
        if isinstance(value, dict):
            yield from _interpolations(value, f"{prefix}{key}.")
        elif isinstance(value, str) and "${" in value:
            yield f"{prefix}{key}", value


def _apply(values: list, base):
    """Hydra's override grammar on `base`: it is the primary config of a one-file config dir."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.errors import HydraException
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    if not values:
        return base
    with tempfile.TemporaryDirectory(prefix="tfpipe-params-") as folder:
        (Path(folder) / f"{CONFIG_NAME}.yaml").write_text(OmegaConf.to_yaml(base), encoding="utf-8")
        try:
            with initialize_config_dir(folder, version_base=None):
                return hydra_compose(config_name=CONFIG_NAME, overrides=values)
        except (HydraException, OmegaConfBaseException, ValueError) as exc:
            raise hydra_error(exc, values) from None


def _dropped(params: dict, result: dict, crossing: list, params_path: Path, config_dir) -> str:
    """The note when conf/ was composed fresh: params.yaml's values that differ from conf/'s own and that the
    result does not hold; empty when there are none (nothing of params.yaml's is lost)."""
    defaults, got = flatten(compose_dict((), config_dir)), flatten(result)
    lost = [
        f"{key}={_shown(value)}"
        for key, value in flatten(params).items()
        if defaults.get(key, _ABSENT) != value and got.get(key, _ABSENT) != value
    ]
    if not lost:
        return ""
    more = f" and {len(lost) - _NOTED} more" if len(lost) > _NOTED else ""
    return (
        f"{params_path.name} not used: {' '.join(crossing)} sets values outside its own section and "
        f"{params_path.name} records values, not the choices behind them, so conf/ is composed with the overrides "
        f"alone; dropped: {', '.join(lost[:_NOTED])}{more} (give them as overrides to keep them)"
    )


def _shown(value) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, list):
        return "[" + ",".join(_shown(v) for v in value) + "]"
    return str(value)
