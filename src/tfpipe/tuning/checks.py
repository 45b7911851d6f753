"""A tuning spec read and checked (`load_spec`: conf/tune/<name>.yaml -> `tfpipe.tuning.space.TuneSpec`) before
any trial: each bad setting is one ConfigError line naming the file, the key and what is allowed (the config keys themselves: `space.check_against_config`)."""

from __future__ import annotations

import inspect
import math
from pathlib import Path
from typing import TypeGuard

from tfpipe.errors import ConfigError
from tfpipe.tuning.space import METRICS, PRUNERS, SAMPLERS, SPEC_KEYS, TuneSpec, optuna_class

RANGE_KEYS = ("low", "high", "log", "step", "type")
CATEGORICAL = (str, int, float, bool, type(None))  # what Optuna stores as a categorical choice


def load_spec(name: str, conf_dir: Path) -> TuneSpec:
    """conf/tune/<name>.yaml composed by Hydra (it may use `defaults:` like any conf/ file), then checked."""
    raw = _compose(name, Path(conf_dir))
    unknown = sorted(set(raw) - set(SPEC_KEYS))
    if unknown:
        raise ConfigError(
            f"conf/tune/{name}.yaml: unknown key {unknown[0]!r} (allowed: {', '.join(SPEC_KEYS)})"
        )
    if not isinstance(raw.get("space"), dict) or not raw["space"]:
        raise ConfigError(f"conf/tune/{name}.yaml: `space` must map config keys to distributions")
    if isinstance(raw.get("sampler"), str):  # `sampler: random`: the name alone, seeded like the default
        raw["sampler"] = {"name": raw["sampler"], "seed": 0}
    if isinstance(raw.get("pruner"), str):  # `pruner: median`: the name alone, Optuna's default options
        raw["pruner"] = {"name": raw["pruner"]}
    spec = TuneSpec(name=name, **{k: v for k, v in raw.items() if v is not None or k == "storage"})
    check_spec(spec)
    return spec


def _compose(name: str, conf_dir: Path) -> dict:
    from hydra import compose, initialize_config_dir
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    from tfpipe.config.compose import plain, search_dirs

    dirs = search_dirs(
        conf_dir
    )  # the project's conf/, then tfpipe's packaged presets (a `tfpipe init` project)
    found = next((d for d in dirs if (d / "tune" / f"{name}.yaml").is_file()), None)
    if found is None:
        options = sorted({p.stem for d in dirs for p in (d / "tune").glob("*.yaml")})
        raise ConfigError(f"conf/tune/{name}.yaml not found (options: {', '.join(options) or 'none'})")
    try:
        with initialize_config_dir(str(found.resolve()), version_base=None):
            cfg = compose(config_name=f"tune/{name}")
    except (HydraException, OmegaConfBaseException) as exc:
        raise ConfigError(f"conf/tune/{name}.yaml: {str(exc).splitlines()[0]}") from None
    raw = plain(cfg)
    return raw["tune"] if set(raw) == {"tune"} else raw  # a primary config in conf/tune/ lands under `tune`


def check_spec(spec: TuneSpec) -> None:
    """Impossible settings and ranges, before any trial (config keys: `check_against_config`)."""
    where = f"conf/tune/{spec.name}.yaml"
    if not isinstance(spec.n_trials, int) or isinstance(spec.n_trials, bool) or spec.n_trials < 1:
        raise ConfigError(f"{where}: n_trials must be an integer >= 1, got {spec.n_trials!r}")
    if spec.metric not in METRICS:
        raise ConfigError(
            f"{where}: metric {spec.metric!r} is not a validation metric ({', '.join(METRICS)})"
        )
    if spec.direction not in ("minimize", "maximize"):
        raise ConfigError(f"{where}: direction must be minimize or maximize, got {spec.direction!r}")
    if not isinstance(spec.overrides, list) or not all(isinstance(o, str) for o in spec.overrides):
        raise ConfigError(
            f"{where}: overrides must be a list of Hydra overrides (e.g. [experiment=smoke]), "
            f"got {spec.overrides!r}"
        )
    if spec.storage is not None and (not isinstance(spec.storage, str) or not spec.storage.strip()):
        raise ConfigError(f"{where}: storage must be an Optuna storage URL or null, got {spec.storage!r}")
    _check_named(where, "sampler", spec.sampler, SAMPLERS)
    _check_named(where, "pruner", spec.pruner, PRUNERS)
    for key, dist in spec.space.items():
        if not isinstance(key, str) or not key:
            raise ConfigError(f"{where}: space key {key!r} must be a config key (e.g. train.epochs)")
        _check_distribution(f"{where}: space.{key}", dist)
    _check_enqueue(where, spec.enqueue, spec.space)


def _check_named(where: str, kind: str, named, names: dict) -> None:
    """`sampler`/`pruner`: {name, OPTION: VALUE ...} with a known name and options its Optuna class takes."""
    if not isinstance(named, dict):
        raise ConfigError(
            f"{where}: {kind} must be a name ({' | '.join(names)}) or a mapping {{name: ..., OPTION: VALUE}}, "
            f"got {named!r}"
        )
    name = named.get("name")
    if not isinstance(name, str) or name not in names:
        raise ConfigError(f"{where}: {kind}.name must be one of {', '.join(names)}, got {name!r}")
    options = [k for k in named if k != "name"]
    allowed = list(inspect.signature(optuna_class(kind, name)).parameters)
    if options and not allowed:
        takers = [n for n in names if inspect.signature(optuna_class(kind, n)).parameters]
        raise ConfigError(
            f"{where}: {kind} {name} takes no options, got {', '.join(map(str, options))} "
            f"(options only apply to {', '.join(takers)})"
        )
    for option in options:
        if option not in allowed:
            raise ConfigError(
                f"{where}: {kind}.{option}: not an option of the {name} {kind} "
                f"(Optuna {optuna_class(kind, name).__name__}; allowed: {', '.join(allowed)})"
            )


def _number(value) -> TypeGuard[int | float]:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _check_distribution(where: str, dist) -> None:
    if not isinstance(dist, dict):
        raise ConfigError(f"{where}: expected {{low, high[, log, step, type]}} or {{choices}}, got {dist!r}")
    if "choices" in dist:
        _check_choices(where, dist)
        return
    unknown = [k for k in dist if k not in RANGE_KEYS]
    if unknown:
        raise ConfigError(
            f"{where}: unknown key {unknown[0]!r} (allowed: {', '.join(RANGE_KEYS)}; or choices alone)"
        )
    low, high, step, kind = dist.get("low"), dist.get("high"), dist.get("step"), dist.get("type", "float")
    if not (_number(low) and _number(high)):
        raise ConfigError(f"{where}: low and high must be numbers, got low={low!r} high={high!r}")
    if low > high:
        raise ConfigError(f"{where}: low {low} > high {high}")
    if kind not in ("float", "int"):
        raise ConfigError(f"{where}: type must be float or int, got {kind!r}")
    if dist.get("log", False) not in (True, False):
        raise ConfigError(f"{where}: log must be true or false, got {dist['log']!r}")
    if dist.get("log") and low <= 0:
        raise ConfigError(f"{where}: log scale needs low > 0, got {low}")
    if kind == "int" and not all(isinstance(v, int) for v in (low, high)):
        raise ConfigError(f"{where}: type int needs integer low and high, got low={low!r} high={high!r}")
    if step is None:
        return
    if not _number(step) or step <= 0 or (kind == "int" and not isinstance(step, int)):
        raise ConfigError(
            f"{where}: step must be {'an integer' if kind == 'int' else 'a number'} > 0, got {step!r}"
        )
    if dist.get("log"):
        raise ConfigError(f"{where}: step and log: true cannot be combined (Optuna samples either)")


def _check_choices(where: str, dist: dict) -> None:
    if set(dist) != {"choices"}:
        other = sorted(set(dist) - {"choices"})
        raise ConfigError(f"{where}: choices takes no other key, got {', '.join(other)}")
    choices = dist["choices"]
    if not isinstance(choices, list) or not choices:
        raise ConfigError(f"{where}: choices must be a non-empty list")
    bad = [c for c in choices if not isinstance(c, CATEGORICAL)]
    if bad:
        raise ConfigError(
            f"{where}: choice {bad[0]!r} is not a number, string, boolean or null (the values Optuna can store as choices)"
        )


def _check_enqueue(where: str, enqueue, space: dict) -> None:
    """Each entry: some space keys, each with a value its distribution can draw."""
    if not isinstance(enqueue, list):
        raise ConfigError(
            f"{where}: enqueue must be a list of {{space key: value}} mappings, got {enqueue!r}"
        )
    for index, entry in enumerate(enqueue):
        if not isinstance(entry, dict) or not entry:
            raise ConfigError(f"{where}: enqueue[{index}] must map space keys to values, got {entry!r}")
        for key, value in entry.items():
            if key not in space:
                raise ConfigError(
                    f"{where}: enqueue[{index}]: {key!r} is not a key of space (space keys: {', '.join(space)})"
                )
            problem = _outside(space[key], value)
            if problem:
                raise ConfigError(f"{where}: enqueue[{index}].{key}: {value!r} {problem}")


def _outside(dist: dict, value) -> str | None:
    """Why `value` is not a value of the checked distribution `dist`, else None."""
    if "choices" in dist:
        same = any(value == c and isinstance(value, bool) == isinstance(c, bool) for c in dist["choices"])
        return None if same else f"is not one of the choices {dist['choices']}"
    low, high, step = dist["low"], dist["high"], dist.get("step")
    if dist.get("type") == "int" and not (isinstance(value, int) and not isinstance(value, bool)):
        return "is not an integer (type: int)"
    if not _number(value):
        return f"is not a number (range [{low}, {high}])"
    if not low <= value <= high:
        return f"is outside the range [{low}, {high}]"
    if step and not math.isclose((value - low) / step, round((value - low) / step), abs_tol=1e-8):
        return f"is not on the grid low + k * step ({low} + k * {step})"
    return None
