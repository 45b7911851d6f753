"""The tuning spec `conf/tune/<name>.yaml`: loaded with Hydra like conf/, checked before any trial.

overrides: [experiment=smoke]        # the base composition every trial starts from (a list of Hydra overrides)
metric: val_loss                     # a per-epoch validation metric (history row), reported for pruning
direction: minimize                  # or maximize
n_trials: 4                          # finished (COMPLETE) + PRUNED trials the study runs to
sampler: {name: tpe, seed: 0}        # tpe | random; a bare name (`sampler: random`) is {name: random, seed: 0}
pruner: {name: median, n_startup_trials: 1, n_warmup_steps: 0}   # median | none (no options); `pruner: none` too
enqueue: []                          # parameter sets tried first (once per study), e.g. the defaults
storage: null                        # Optuna storage URL; null: env TFPIPE_TUNE_STORAGE, else optuna.db
space:                               # distributions over any key of the composed config
  train.optimizer.learning_rate: {low: 1.0e-4, high: 0.1, log: true}   # float
  train.batch_size_per_replica: {type: int, low: 8, high: 64, step: 8}
  model.ngrams: {choices: [1, 2, 3]}                                 # categorical

Sampler and pruner options are the keyword arguments of Optuna's class (TPESampler, RandomSampler,
MedianPruner); an unknown one is refused with the allowed list. Each `enqueue` entry maps some space keys to
values inside their distributions (a key not in `space`, or a value outside its range or choices, is refused).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from tfpipe.errors import ConfigError

METRICS = ("val_loss", "val_accuracy")
SAMPLERS = {"tpe": "TPESampler", "random": "RandomSampler"}  # name -> optuna.samplers class
PRUNERS = {"median": "MedianPruner", "none": "NopPruner"}  # name -> optuna.pruners class
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
    direction: Literal["minimize", "maximize"] = "minimize"  # check_spec refuses any other
    n_trials: int = 10
    sampler: dict = field(default_factory=lambda: {"name": "tpe", "seed": 0})
    pruner: dict = field(default_factory=lambda: {"name": "median"})
    enqueue: list = field(default_factory=list)
    storage: str | None = None


def optuna_class(kind: str, name: str):
    """The Optuna class of a sampler or pruner name (kind: sampler | pruner)."""
    import optuna

    if kind == "sampler":
        return getattr(optuna.samplers, SAMPLERS[name])
    return getattr(optuna.pruners, PRUNERS[name])


def build(kind: str, named: dict, where: str = "conf/tune"):
    """The Optuna sampler or pruner of a checked {name, OPTION: VALUE} mapping; a bad value is one line."""
    from tfpipe.errors import one_line

    options = {k: v for k, v in named.items() if k != "name"}
    try:
        return optuna_class(kind, named["name"])(**options)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{where}: {kind} {named['name']}: {one_line(exc)}") from None


def suggest(trial, space: dict) -> dict:
    """One value per key from the Optuna trial."""
    values = {}
    for key, dist in space.items():
        if "choices" in dist:
            values[key] = trial.suggest_categorical(key, dist["choices"])
        elif dist.get("type") == "int":
            values[key] = trial.suggest_int(
                key, dist["low"], dist["high"], step=dist.get("step") or 1, log=bool(dist.get("log"))
            )
        else:
            values[key] = trial.suggest_float(
                key, dist["low"], dist["high"], step=dist.get("step"), log=bool(dist.get("log"))
            )
    return values


_BARE = re.compile(r"[A-Za-z_/][\w./-]*")


def hydra_value(value) -> str:
    """A sampled value in Hydra's override grammar: null, true/false, repr of floats, a string quoted when
    bare it would read as something else (`None` is the string 'None' to Hydra, `null` is None)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, str):
        if _BARE.fullmatch(value) and value.lower() not in ("true", "false", "null", "inf", "nan"):
            return value
        escaped = re.sub(r"(\\+)(?='|$)", r"\1\1", value)  # Hydra unescapes backslashes only before a quote
        return "'" + escaped.replace("'", "\\'") + "'"
    return str(value)


def as_overrides(values: dict) -> list:
    return [f"{key}={hydra_value(value)}" for key, value in values.items()]


def check_against_config(spec: TuneSpec, conf_dir: Path, base: list) -> None:
    """Every key exists in the composed config and every range end / choice is a valid value of it: the trial's
    config (params.yaml beside conf/, the overrides on top, as `tfpipe run-all` composes it) with each extreme,
    validated, so a bad one fails with one line."""
    from tfpipe import config
    from tfpipe.config import overlay

    for key, dist in spec.space.items():
        ends = dist["choices"] if "choices" in dist else [dist["low"], dist["high"]]
        for value in ends:
            try:
                overrides = [*base, *as_overrides({key: value})]
                overlay.load(overrides, Path(conf_dir).parent / config.PARAMS_FILE, conf_dir)
            except ConfigError as exc:
                raise ConfigError(
                    f"conf/tune/{spec.name}.yaml: space.{key}={hydra_value(value)}: {exc}"
                ) from None
