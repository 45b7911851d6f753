"""The strategy factory: registry names, the CPU fallback of `auto`, and describe_strategy."""

from __future__ import annotations

import dataclasses

import pytest
import tensorflow as tf

from tfpipe import distribute
from tfpipe.config import StrategyConfig

HAS_GPU = bool(tf.config.list_physical_devices("GPU"))


def test_registry_holds_the_config_names():
    from tfpipe.config import STRATEGIES

    assert set(STRATEGIES) <= set(distribute.available_strategies())


def test_one_device_uses_the_configured_device_and_defaults_to_cpu():
    strategy = distribute.build_strategy(StrategyConfig(name="one_device", device="/cpu:0"))
    assert isinstance(strategy, tf.distribute.OneDeviceStrategy)
    info = distribute.describe_strategy(strategy)
    assert info["name"] == "OneDeviceStrategy"
    assert info["num_replicas_in_sync"] == 1 and info["worker_count"] == 1
    assert len(info["devices"]) == 1 and info["devices"][0].endswith("CPU:0")

    default = distribute.build_strategy(StrategyConfig(name="one_device", device=None))
    assert distribute.describe_strategy(default)["devices"][0].endswith("CPU:0")


def test_one_device_strategy_places_variables_and_runs_replica_fns():
    strategy = distribute.build_strategy(StrategyConfig(name="one_device", device="/cpu:0"))
    with strategy.scope():
        v = tf.Variable(2.0)
    assert v.device.endswith("CPU:0")

    @tf.function
    def step(x):
        per_replica = strategy.run(lambda t: t * v, args=(x,))
        return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=0)

    assert float(step(tf.constant([1.0, 2.0]))) == pytest.approx(6.0)


@pytest.mark.skipif(HAS_GPU, reason="checks the CPU-only fallback")
def test_auto_without_gpu_is_one_device_on_cpu(make_config):
    cfg = make_config("strategy=auto")
    assert cfg.strategy.name == "auto"
    strategy = distribute.build_strategy(cfg.strategy)
    assert isinstance(strategy, tf.distribute.OneDeviceStrategy)
    info = distribute.describe_strategy(strategy)
    assert info["num_replicas_in_sync"] == 1 and info["devices"][0].endswith("CPU:0")


def test_unknown_name_lists_the_valid_names():
    with pytest.raises(ValueError) as err:
        distribute.build_strategy(StrategyConfig(name="mirorred", device=None))
    message = str(err.value)
    assert "mirorred" in message
    for name in distribute.available_strategies():
        assert name in message


def test_new_strategies_plug_into_the_registry():
    @distribute.register("test_only_cpu")
    def _build(cfg):
        return tf.distribute.OneDeviceStrategy(cfg.device)

    try:
        cfg = dataclasses.replace(StrategyConfig(), name="test_only_cpu", device="/cpu:0")
        assert isinstance(distribute.build_strategy(cfg), tf.distribute.OneDeviceStrategy)
        assert "test_only_cpu" in distribute.available_strategies()
    finally:
        distribute.STRATEGY_BUILDERS.pop("test_only_cpu")
