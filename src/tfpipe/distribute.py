"""The one tf.distribute strategy factory.

`build_strategy(cfg.strategy)` looks the name up in `STRATEGY_BUILDERS`, a registry of
`name -> builder(strategy_cfg) -> tf.distribute.Strategy`. New strategies (mirrored,
central_storage, multi_worker_mirrored, parameter_server, tpu) are added with `register()`
without touching the callers; `tfpipe.config.STRATEGIES` lists the names the config accepts.
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Dict

import tensorflow as tf

log = logging.getLogger(__name__)

Builder = Callable[[Any], tf.distribute.Strategy]
STRATEGY_BUILDERS: Dict[str, Builder] = {}


def register(name: str) -> Callable[[Builder], Builder]:
    """Decorator: add a builder to the registry under `name`."""

    def _register(fn: Builder) -> Builder:
        STRATEGY_BUILDERS[name] = fn
        return fn

    return _register


def available_strategies() -> tuple[str, ...]:
    return tuple(STRATEGY_BUILDERS)


def build_strategy(strategy_cfg) -> tf.distribute.Strategy:
    """cfg.strategy (name, device) -> a tf.distribute.Strategy; ValueError on an unknown name."""
    name = getattr(strategy_cfg, "name", None)
    builder = STRATEGY_BUILDERS.get(name)
    if builder is None:
        raise ValueError(
            f"strategy.name={name!r}: unknown strategy; valid names: {', '.join(available_strategies())}"
        )
    strategy = builder(strategy_cfg)
    log.info("strategy %s: %s", name, describe_strategy(strategy))
    return strategy


def _gpus() -> list:
    return tf.config.list_logical_devices("GPU")


@register("one_device")
def _one_device(strategy_cfg) -> tf.distribute.Strategy:
    device = getattr(strategy_cfg, "device", None) or "/cpu:0"
    return tf.distribute.OneDeviceStrategy(device)


@register("auto")
def _auto(strategy_cfg) -> tf.distribute.Strategy:
    """>1 GPU -> MirroredStrategy over all of them, 1 GPU -> that GPU, none -> the CPU."""
    gpus = _gpus()
    if len(gpus) > 1:
        return tf.distribute.MirroredStrategy([g.name for g in gpus])
    if len(gpus) == 1:
        return tf.distribute.OneDeviceStrategy("/gpu:0")
    return tf.distribute.OneDeviceStrategy("/cpu:0")


def worker_count(strategy: tf.distribute.Strategy) -> int:
    """Number of worker tasks (chief + workers) of a multi-worker strategy; 1 for local ones."""
    resolver = getattr(strategy, "cluster_resolver", None)
    if resolver is None:
        return 1
    try:
        spec = resolver.cluster_spec()
        jobs = spec.jobs
    except Exception:  # a resolver without a cluster (local)
        return 1
    count = sum(spec.num_tasks(job) for job in ("chief", "worker") if job in jobs)
    return max(count, 1)


def describe_strategy(strategy: tf.distribute.Strategy) -> dict:
    """Facts for logging and tags: class name, replicas, devices, workers."""
    try:
        devices = list(strategy.extended.worker_devices)
    except (AttributeError, NotImplementedError, RuntimeError):
        devices = []
    return {
        "name": type(strategy).__name__,
        "num_replicas_in_sync": int(strategy.num_replicas_in_sync),
        "devices": devices,
        "worker_count": worker_count(strategy),
    }
