"""The strategies: one frozen `StrategySpec` each, in one registry, the only module that writes their names.

A descriptor holds a strategy's builder and what the rest of the code asks of it instead of comparing names:
the device rule (`replicas`, `parameter_device`, `needs_tpu`), whether it runs one process per task with
TF_CONFIG (`multi_process`), whether a chief coordinates workers and parameter servers (`coordinated`), and
whether its workers stop together (`stops_together`). Config validation accepts exactly `names()`;
`build_strategy(cfg.strategy)` is the one strategy factory. A new strategy is a builder and a descriptor here,
and its conf/strategy/<name>.yaml.

What it does not know: TensorFlow at import (each builder imports it when called, so the config is checked
without it); the devices and servers of a built strategy (tfpipe.distribute); launchers and checks, which ask.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Callable, Dict

from tfpipe.errors import ConfigError, UserError

log = logging.getLogger(__name__)

Builder = Callable[[Any], Any]  # cfg.strategy -> tf.distribute.Strategy
REPLICAS = {  # the device rule: where a strategy's replicas run
    "device": "one replica on strategy.device",
    "devices": "one per device of strategy.devices, else per GPU, else per logical CPU (strategy.num_logical_cpus)",
    "host": "what this host has, chosen as it starts",
    "cluster": "the devices of a cluster TensorFlow connects to as it starts (TF_CONFIG's tasks, a TPU)",
}


@dataclass(frozen=True)
class StrategySpec:
    """One strategy: how it is built and every property the code asks about it."""

    name: str
    build: Builder  # TensorFlow is imported when it is called
    replicas: str  # one of REPLICAS
    parameter_device: bool = False  # strategy.device holds the variables, the replicas compute
    needs_tpu: bool = False  # a TPU must be reachable (strategy.tpu, else a local one); computes in bfloat16
    multi_process: bool = False  # one process per task, each with TF_CONFIG (tfpipe.launch starts them)
    coordinated: bool = False  # a chief coordinates workers, ps hold the variables: asynchronous updates
    stops_together: bool = False  # a SIGTERM to one worker stops every worker at one agreed step (preemption)

    def __post_init__(self) -> None:
        if self.replicas not in REPLICAS:
            raise ValueError(
                f"strategy {self.name!r}: replicas={self.replicas!r}; allowed: {', '.join(REPLICAS)}"
            )
        if (self.coordinated or self.stops_together) and not self.multi_process:
            raise ValueError(f"strategy {self.name!r}: coordinated or stops_together needs multi_process")

    @property
    def device_keys(self) -> tuple:
        """The strategy.* keys that name the devices it runs on (preflight checks they exist here)."""
        keys = ("device",) if self.replicas == "device" or self.parameter_device else ()
        return keys + (("devices",) if self.replicas == "devices" else ())

    @property
    def splits_cpu(self) -> bool:
        """strategy.num_logical_cpus > 1 splits a CPU-only host into its replicas, before TensorFlow starts."""
        return self.replicas == "devices"

    @property
    def joins_cluster(self) -> bool:
        """TensorFlow connects to a cluster as it starts (collective ops, TF_CONFIG's tasks, a TPU)."""
        return self.replicas == "cluster"

    @property
    def jobs(self) -> tuple:
        """Its TF_CONFIG cluster's jobs: a chief (the coordinator), workers and ps; or workers alone (worker 0 the
        chief); none for a single process."""
        if not self.multi_process:
            return ()
        return ("chief", "worker", "ps") if self.coordinated else ("worker",)

    @property
    def workers_only(self) -> bool:
        """Its cluster is workers alone: what Slurm's and Ray Train's TF_CONFIG describe."""
        return self.jobs == ("worker",)

    def task_counts(self, num_workers: int, num_ps: int) -> Dict[str, int]:
        """Its cluster's tasks by job: one chief, `num_workers` workers, `num_ps` ps, as far as it has them."""
        counts = {"chief": 1, "worker": num_workers, "ps": num_ps}
        return {job: counts[job] for job in self.jobs}


REGISTRY: Dict[str, StrategySpec] = {}  # name -> descriptor, in the order config messages list them


def register(strategy: StrategySpec) -> StrategySpec:
    if strategy.name in REGISTRY:
        raise ValueError(f"strategy {strategy.name!r}: registered twice")
    REGISTRY[strategy.name] = strategy
    return strategy


def spec(name: str) -> StrategySpec:
    """The descriptor of `name`; ConfigError naming the registered names for any other."""
    found = REGISTRY.get(name)
    if found is None:
        raise ConfigError(f"strategy.name={name!r}: unknown strategy; allowed: {', '.join(REGISTRY)}")
    return found


def names(**properties: Any) -> tuple:
    """The registered names; with properties, those whose descriptors have them, e.g. names(multi_process=True)."""
    return tuple(s.name for s in REGISTRY.values() if all(getattr(s, k) == v for k, v in properties.items()))


def first(**properties: Any) -> StrategySpec:
    """The first registered strategy with these properties, e.g. what a cluster of workers alone runs."""
    return spec(names(**properties)[0])


def local_examples() -> str:
    """Strategies any host runs, for a message suggesting another: on one device, and over local devices."""
    return f"{first(replicas='device').name}, {first(replicas='devices').name}"


def build_strategy(strategy_cfg) -> Any:
    """cfg.strategy -> a tf.distribute.Strategy; ConfigError (a ValueError) on an unknown name."""
    from tfpipe import distribute

    strategy = spec(strategy_cfg.name).build(strategy_cfg)
    log.debug("strategy %s: %s", strategy_cfg.name, distribute.describe_strategy(strategy))  # -v
    return strategy


# ----------------------------------------------------------------------------- builders

_CPU0 = ("/cpu:0", "cpu:0", "/device:cpu:0", "/job:localhost/replica:0/task:0/device:cpu:0")


def _single_cpu(device: str) -> Any:
    """One CPU device: TensorFlow's default strategy on a host without GPUs, else OneDeviceStrategy(device).
    OneDeviceStrategy("/cpu:0") feeding the step through a distributed iterator halves a CPU train step's
    throughput (measured on an AVX2 EPYC: docs/benchmarks.md); the default strategy runs the same step on the
    only device there is, with the same API (scope, run, distribute_datasets_from_function)."""
    import tensorflow as tf

    if device.lower() in _CPU0 and not tf.config.list_physical_devices("GPU"):
        return tf.distribute.get_strategy()
    return tf.distribute.OneDeviceStrategy(device)


def _one_device(strategy_cfg) -> Any:
    return _single_cpu(strategy_cfg.device or "/cpu:0")


def auto_plan(gpus: list) -> tuple:
    """What `strategy=auto` builds on a host with these GPUs (device names): >1 -> ("mirrored", all of them),
    1 -> ("one_device", ["/gpu:0"]), none -> ("cpu", [])."""
    if len(gpus) > 1:
        return "mirrored", list(gpus)
    return ("one_device", ["/gpu:0"]) if gpus else ("cpu", [])


def _auto(strategy_cfg) -> Any:
    import tensorflow as tf

    from tfpipe import distribute

    kind, devices = auto_plan(distribute.gpus())
    if kind == "mirrored":
        return tf.distribute.MirroredStrategy(devices)
    return tf.distribute.OneDeviceStrategy(devices[0]) if kind == "one_device" else _single_cpu("/cpu:0")


def _mirrored(strategy_cfg) -> Any:
    import tensorflow as tf

    from tfpipe import distribute

    distribute.configure_devices(strategy_cfg)
    devices = distribute.replica_devices(strategy_cfg)
    return tf.distribute.MirroredStrategy(
        devices, cross_device_ops=distribute.mirrored_reduction(distribute.gpus())
    )


def _central_storage(strategy_cfg) -> Any:
    import tensorflow as tf

    from tfpipe import distribute

    distribute.configure_devices(strategy_cfg)
    devices = distribute.replica_devices(strategy_cfg)
    parameter_device = strategy_cfg.device or "/cpu:0"
    return tf.distribute.experimental.CentralStorageStrategy(devices, parameter_device=parameter_device)


def _tf_config_resolver() -> Any:
    import tensorflow as tf

    from tfpipe import tfconfig

    tfconfig.read_tf_config()  # UserError when TF_CONFIG is missing or malformed
    return tf.distribute.cluster_resolver.TFConfigClusterResolver()


def _multi_worker_mirrored(strategy_cfg) -> Any:
    import tensorflow as tf

    resolver = _tf_config_resolver()
    impl = tf.distribute.experimental.CommunicationImplementation
    communication = {"auto": impl.AUTO, "ring": impl.RING, "nccl": impl.NCCL}[strategy_cfg.communication]
    options = tf.distribute.experimental.CommunicationOptions(implementation=communication)
    return tf.distribute.MultiWorkerMirroredStrategy(cluster_resolver=resolver, communication_options=options)


def _parameter_server(strategy_cfg) -> Any:
    import tensorflow as tf

    resolver = _tf_config_resolver()
    max_shards = int(strategy_cfg.max_shards or 1)
    partitioner = None
    if max_shards > 1:
        partitioner = tf.distribute.experimental.partitioners.MinSizePartitioner(
            min_shard_bytes=int(strategy_cfg.min_shard_bytes), max_shards=max_shards
        )
    return tf.distribute.experimental.ParameterServerStrategy(resolver, variable_partitioner=partitioner)


def _tpu(strategy_cfg) -> Any:
    import tensorflow as tf

    name = strategy_cfg.tpu or ""
    try:
        resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu=name)
        tf.config.experimental_connect_to_cluster(resolver)
        tf.tpu.experimental.initialize_tpu_system(resolver)
        return tf.distribute.TPUStrategy(resolver)
    except Exception as exc:  # no TPU here: the resolver or the TPU system init fails
        first_line = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
        raise UserError(
            f"strategy.name=tpu (strategy.tpu={name or None!r}): no TPU reachable ({type(exc).__name__}: "
            f"{first_line}); use another strategy on this host, e.g. strategy=one_device or strategy=mirrored"
        ) from None


# ----------------------------------------------------------------------------- the registry's entries

DEFAULT = "one_device"  # strategy.name when a config names none (the schema's; conf/config.yaml picks it too)
for _strategy in (
    StrategySpec("one_device", _one_device, replicas="device"),
    StrategySpec("auto", _auto, replicas="host"),
    StrategySpec("mirrored", _mirrored, replicas="devices"),
    StrategySpec("central_storage", _central_storage, replicas="devices", parameter_device=True),
    StrategySpec(
        "multi_worker_mirrored", _multi_worker_mirrored, "cluster", multi_process=True, stops_together=True
    ),
    StrategySpec("parameter_server", _parameter_server, "cluster", multi_process=True, coordinated=True),
    StrategySpec("tpu", _tpu, replicas="cluster", needs_tpu=True),
):
    register(_strategy)
