"""The tuning spec `conf/tune/<name>.yaml`: loaded with Hydra like conf/, checked before any trial.

overrides: [experiment=smoke]        # the base composition every trial starts from
metric: val_loss                     # a per-epoch validation metric (history row), reported for pruning
direction: minimize                  # or maximize
n_trials: 4                          # finished (COMPLETE) + PRUNED trials the study runs to
sampler: {name: tpe, seed: 0}        # tpe | random
pruner: {name: median, n_startup_trials: 1, n_warmup_steps: 0}   # median | none
enqueue: []                          # parameter sets tried first (once per study), e.g. the defaults
storage: null                        # Optuna storage URL; null: env TFPIPE_TUNE_STORAGE, else optuna.db
space:                               # distributions over any key of the composed config
  train.optimizer.learning_rate: {low: 1.0e-4, high: 0.1, log: true}   # float
  train.batch_size_per_replica: {type: int, low: 8, high: 64, step: 8}
  model.ngrams: {choices: [1, 2, 3]}                                 # categorical
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from tfpipe.errors import ConfigError

METRICS = ("val_loss", "val_accuracy")
SAMPLERS = ("tpe", "random")
PRUNERS = ("median", "none")
SPEC_KEYS = (
    "overrides",
    "metric",
    "direction",
    "n_trials",
    "sampler",
    "pruner",
    "enqueue",
    "storage",
    "space",
)


@dataclass
class TuneSpec:
    name: str
    space: dict
    overrides: list = field(default_factory=list)
    metric: str = "val_loss"
    direction: str = "minimize"
    n_trials: int = 10
    sampler: dict = field(default_factory=lambda: {"name": "tpe", "seed": 0})
    pruner: dict = field(default_factory=lambda: {"name": "median"})
    enqueue: list = field(default_factory=list)
    storage: str | None = None


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
    spec = TuneSpec(name=name, **{k: v for k, v in raw.items() if v is not None or k == "storage"})
    check_spec(spec)
    return spec


def _compose(name: str, conf_dir: Path) -> dict:
    from hydra import compose, initialize_config_dir
    from hydra.errors import HydraException
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    if not (conf_dir / "tune" / f"{name}.yaml").is_file():
        options = sorted(p.stem for p in (conf_dir / "tune").glob("*.yaml"))
        raise ConfigError(f"conf/tune/{name}.yaml not found (options: {', '.join(options) or 'none'})")
    try:
        with initialize_config_dir(str(conf_dir.resolve()), version_base=None):
            cfg = compose(config_name=f"tune/{name}")
    except (HydraException, OmegaConfBaseException) as exc:
        raise ConfigError(f"conf/tune/{name}.yaml: {str(exc).splitlines()[0]}") from None
    raw = OmegaConf.to_container(cfg, resolve=True)
    return raw["tune"] if set(raw) == {"tune"} else raw  # a primary config in conf/tune/ lands under `tune`


def check_spec(spec: TuneSpec) -> None:
    """Impossible settings and ranges, before any trial (config keys: `check_against_config`)."""
    where = f"conf/tune/{spec.name}.yaml"
    if not isinstance(spec.n_trials, int) or spec.n_trials < 1:
        raise ConfigError(f"{where}: n_trials must be an integer >= 1, got {spec.n_trials!r}")
    if spec.metric not in METRICS:
        raise ConfigError(
            f"{where}: metric {spec.metric!r} is not a validation metric ({', '.join(METRICS)})"
        )
    if spec.direction not in ("minimize", "maximize"):
        raise ConfigError(f"{where}: direction must be minimize or maximize, got {spec.direction!r}")
    if spec.sampler.get("name") not in SAMPLERS:
        raise ConfigError(f"{where}: sampler.name must be one of {', '.join(SAMPLERS)}")
    if spec.pruner.get("name") not in PRUNERS:
        raise ConfigError(f"{where}: pruner.name must be one of {', '.join(PRUNERS)}")
    for key, dist in spec.space.items():
        _check_distribution(f"{where}: space.{key}", dist)


def _check_distribution(where: str, dist) -> None:
    if not isinstance(dist, dict):
        raise ConfigError(f"{where}: expected {{low, high[, log, step, type]}} or {{choices}}, got {dist!r}")
    if "choices" in dist:
        if not isinstance(dist["choices"], list) or not dist["choices"]:
            raise ConfigError(f"{where}: choices must be a non-empty list")
        return
    low, high = dist.get("low"), dist.get("high")
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (low, high)):
        raise ConfigError(f"{where}: low and high must be numbers, got low={low!r} high={high!r}")
    if low > high:
        raise ConfigError(f"{where}: low {low} > high {high}")
    if dist.get("log") and low <= 0:
        raise ConfigError(f"{where}: log scale needs low > 0, got {low}")
    if dist.get("type", "float") not in ("float", "int"):
        raise ConfigError(f"{where}: type must be float or int, got {dist.get('type')!r}")


def suggest(trial, space: dict) -> dict:
    """One value per key from the Optuna trial."""
    values = {}
    for key, dist in space.items():
        if "choices" in dist:
            values[key] = trial.suggest_categorical(key, dist["choices"])
        elif dist.get("type") == "int":
            values[key] = trial.suggest_int(
                key, dist["low"], dist["high"], step=dist.get("step", 1), log=bool(dist.get("log"))
            )
        else:
            values[key] = trial.suggest_float(
                key, dist["low"], dist["high"], step=dist.get("step"), log=bool(dist.get("log"))
            )
    return values


def as_overrides(values: dict) -> list:
    return [
        f"{key}={value!r}" if isinstance(value, float) else f"{key}={value}" for key, value in values.items()
    ]


def check_against_config(spec: TuneSpec, conf_dir: Path, base: list) -> None:
    """Every key exists in the composed config and every range end / choice is a valid value of it:
    conf/ composed (and validated like params.yaml) with each extreme, so a bad one fails with one line."""
    from tfpipe import config

    for key, dist in spec.space.items():
        ends = dist["choices"] if "choices" in dist else [dist["low"], dist["high"]]
        for value in ends:
            try:
                config.compose([*base, *as_overrides({key: value})], config_dir=conf_dir)
            except ConfigError as exc:
                raise ConfigError(f"conf/tune/{spec.name}.yaml: space.{key}={value!r}: {exc}") from None
