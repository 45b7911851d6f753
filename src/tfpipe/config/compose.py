"""Loading a config: `load_params()` (the DVC path: params.yaml) and `compose()` (the Hydra path: conf/ plus
overrides, as `mlflow run` and tests use). Overrides are pre-checked before Hydra runs (malformed, an option
missing from its group, an unknown key with a did-you-mean), and Hydra's own errors become one line."""

from __future__ import annotations

import copy
import os
import re
from pathlib import Path

import yaml

from tfpipe.config.checks import did_you_mean
from tfpipe.config.keys import schema_key
from tfpipe.config.load import Config, from_dict
from tfpipe.errors import ConfigError, one_line

CONF_DIR = "conf"
CONFIG_NAME = "config"
PARAMS_FILE = "params.yaml"


def load_params(path: str | os.PathLike = PARAMS_FILE) -> Config:
    """Read and validate a composed config file (DVC's `params.yaml`); an unknown key in it is refused naming
    the file, how it got there and how to undo it (`keys.in_params_file`)."""
    return from_dict(read_params(path), origin=str(path), params_file=_shown(Path(path)))


def _shown(path: Path) -> str:
    """The path as the user would type it: relative to the working folder where it is below it."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def read_params(path: str | os.PathLike = PARAMS_FILE) -> dict:
    """A composed config file's sections, unchecked: missing, not YAML or not a mapping refused in one line."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(
            f"{path}: config file not found (run from the project root, or compose one from conf/)"
        )
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML ({str(exc).splitlines()[0]})") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: expected a mapping of config sections, got {type(raw).__name__}")
    return raw


def compose(overrides: list[str] | tuple[str, ...] = (), config_dir: str | os.PathLike = CONF_DIR) -> Config:
    """Compose `conf/` with Hydra overrides (the same grammar as `dvc exp run -S`), then validate."""
    return from_dict(compose_dict(overrides, config_dir), origin="conf/")


def compose_dict(
    overrides: list[str] | tuple[str, ...] = (), config_dir: str | os.PathLike = CONF_DIR
) -> dict:
    """The resolved composition as plain containers, exactly as DVC dumps it into params.yaml."""
    return resolved(compose_conf(overrides, config_dir), overrides)


def compose_conf(overrides: list[str] | tuple[str, ...] = (), config_dir: str | os.PathLike = CONF_DIR):
    """conf/ composed with the overrides (pre-checked first), interpolations kept: an OmegaConf DictConfig."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    config_dir = Path(config_dir).resolve()
    if not config_dir.is_dir():
        raise ConfigError(f"{config_dir}: Hydra config directory not found")
    check_overrides(overrides, config_dir)
    try:
        with initialize_config_dir(str(config_dir), version_base=None):
            return hydra_compose(config_name=CONFIG_NAME, overrides=list(overrides))
    except (HydraException, OmegaConfBaseException, ValueError) as exc:
        raise hydra_error(exc, overrides) from None


def resolved(cfg, overrides=()) -> dict:
    """A composed DictConfig resolved into plain containers; a bad interpolation is one line naming the override."""
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    cfg = copy.deepcopy(cfg)  # resolved in place; the caller's keeps its interpolations
    try:
        OmegaConf.resolve(cfg)  # a value interpolating a `???` stays `???`: the load names the required key
        return plain(cfg)
    except (OmegaConfBaseException, ValueError) as exc:
        raise hydra_error(exc, overrides) from None


def plain(cfg, resolve: bool = True) -> dict:
    """A DictConfig as plain dicts and lists (OmegaConf.to_container, whose result for a mapping is a dict)."""
    from omegaconf import OmegaConf

    container = OmegaConf.to_container(cfg, resolve=resolve)
    if not isinstance(container, dict):
        raise TypeError(f"a config mapping was expected, not {type(container).__name__}")
    return container


def compose_yaml(
    overrides: list[str] | tuple[str, ...] = (), config_dir: str | os.PathLike = CONF_DIR
) -> str:
    """params.yaml text for these overrides (what `dvc exp run -S` writes)."""
    from omegaconf import OmegaConf

    return OmegaConf.to_yaml(OmegaConf.create(compose_dict(overrides, config_dir)))


OVERRIDE_FORM = re.compile(
    r"^(?P<prefix>~|\+\+|\+)?(?P<key>[^=~+][^=]*?)(?:@[^=]*)?(?:=(?P<value>.*))?$", re.S
)


def check_overrides(overrides, config_dir: str | os.PathLike = CONF_DIR) -> None:
    """Refuse, before Hydra runs, what Hydra would report badly: a malformed override, an option that is not in
    its config group, a key the schema does not have (with a did-you-mean)."""
    config_dir = Path(config_dir)
    for override in overrides:
        match = OVERRIDE_FORM.match(override)
        if match is None or (match["value"] is None and match["prefix"] != "~"):
            raise ConfigError(
                f"override {override!r}: expected KEY=VALUE (e.g. train.epochs=1), +KEY=VALUE or ~KEY"
            )
        prefix, key, value = match["prefix"] or "", match["key"].strip(), match["value"]
        if key.startswith("hydra.") or key == "hydra":
            continue
        dirs = search_dirs(config_dir)
        if "." not in key and any((d / key).is_dir() for d in dirs):  # a config group: the option must exist
            if prefix != "~":
                _check_option(dirs, key, value)
            continue
        schema_key(key, value=value)


def search_dirs(config_dir: str | os.PathLike = CONF_DIR) -> list:
    """The folders Hydra finds config groups in: `config_dir`, then its primary config's `hydra.searchpath`
    entries (`pkg://tfpipe.conf`: tfpipe's packaged defaults, which a `tfpipe init` project extends)."""
    config_dir = Path(config_dir)
    dirs = [config_dir]
    try:
        raw = yaml.safe_load((config_dir / f"{CONFIG_NAME}.yaml").read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError):
        return dirs
    entries = ((raw.get("hydra") or {}) if isinstance(raw, dict) else {}).get("searchpath") or []
    for entry in entries:
        scheme, _, where = str(entry).partition("://")
        if scheme == "file":  # Hydra resolves a relative one from the working directory
            dirs.append(Path(where))
        elif scheme == "pkg":
            from importlib import resources

            try:
                dirs.append(Path(str(resources.files(where.replace("/", ".")))))
            except (ImportError, TypeError):  # Hydra itself reports a search path that does not import
                continue
    return dirs


def _check_option(dirs: list, group: str, value: str) -> None:
    options = sorted({p.stem for d in dirs for p in (d / group).glob("*.yaml")})
    if value not in options:
        drop = f" (or ~{group} to drop it)" if group == "experiment" else ""
        raise ConfigError(
            f"{group}={value!r}: no such option in config group '{group}'{did_you_mean(value, options)}; "
            f"allowed: {', '.join(options)}{drop}"
        )


def _override_value(overrides, key: str):
    return next((o.split("=", 1)[1] for o in overrides if o.split("=", 1)[0].lstrip("+~") == key), None)


def hydra_error(exc: BaseException, overrides) -> ConfigError:
    """Hydra/OmegaConf composition errors -> one line naming the override."""
    text = one_line(exc)
    match = re.search(r"Could not override '([^']+)'", text)
    if match:
        key = match.group(1)
        value = _override_value(overrides, key) or ""
        group = key.split(".", 1)[0]
        return ConfigError(
            f"{key}={value}: this key is not set by the selected '{group}' config option; add it with "
            f"+{key}={value}, or pick a {group} option that has it"
        )
    text = re.sub(r"\s*full_key: \S+.*$", "", text)  # OmegaConf appends key/object details
    key = None
    for err in (exc, exc.__cause__, exc.__context__):
        key = key or getattr(err, "full_key", None)
    if key:
        value = _override_value(overrides, key)
        return ConfigError(f"{key}={value}: {text}" if value is not None else f"{key}: {text}")
    bad = getattr(exc, "override", None) or getattr(exc.__cause__, "override", None)
    interpolated = [o for o in overrides if "${" in o]
    if bad is None and "interpolation" in text.lower() and len(interpolated) == 1:
        return ConfigError(f"{interpolated[0].lstrip('+~')}: {text}")
    if bad is not None:
        return ConfigError(f"override {str(bad)!r}: {text}")
    return ConfigError(f"override {' '.join(overrides) or '(none)'}: {text}")
