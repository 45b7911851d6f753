"""The one tf.distribute strategy factory.

`build_strategy(cfg.strategy)` looks the name up in `STRATEGY_BUILDERS`, a registry of
`name -> builder(strategy_cfg) -> tf.distribute.Strategy`: one_device, auto, mirrored and
central_storage (over GPUs, or `num_logical_cpus` logical CPUs set up by `configure_devices` before TF
initialises), multi_worker_mirrored and parameter_server (from TF_CONFIG, see `tfpipe.tfconfig`; ps and
worker tasks of parameter_server run `run_server`), tpu (a TPUStrategy, or a one-line UserError where no
TPU is reachable). `tfpipe.choices.STRATEGIES` names the strategies the config accepts, and tests/test_config.py
asserts it names exactly the registered builders.
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Dict

import tensorflow as tf

from tfpipe.errors import UserError

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
    name = strategy_cfg.name
    builder = STRATEGY_BUILDERS.get(name)
    if builder is None:
        raise ValueError(
            f"strategy.name={name!r}: unknown strategy; valid names: {', '.join(available_strategies())}"
        )
    strategy = builder(strategy_cfg)
    log.debug("strategy %s: %s", name, describe_strategy(strategy))  # tags (strategy, replicas); -v
    return strategy


def _gpus() -> list:
    return tf.config.list_logical_devices("GPU")


_CPU0 = ("/cpu:0", "cpu:0", "/device:cpu:0", "/job:localhost/replica:0/task:0/device:cpu:0")


def _single_cpu(device: str) -> tf.distribute.Strategy:
    """One CPU device: TensorFlow's default strategy on a host without GPUs, else OneDeviceStrategy(device).
    OneDeviceStrategy("/cpu:0") feeding the step through a distributed iterator halves a CPU train step's
    throughput (measured on an AVX2 EPYC: docs/benchmarks.md); the default strategy runs the same step on the
    only device there is, with the same API (scope, run, distribute_datasets_from_function)."""
    if device.lower() in _CPU0 and not tf.config.list_physical_devices("GPU"):
        return tf.distribute.get_strategy()
    return tf.distribute.OneDeviceStrategy(device)


@register("one_device")
def _one_device(strategy_cfg) -> tf.distribute.Strategy:
    return _single_cpu(strategy_cfg.device or "/cpu:0")


def auto_plan(gpus: list) -> tuple:
    """What `strategy=auto` builds on a host with these GPUs (device names): >1 -> ("mirrored", all of them),
    1 -> ("one_device", ["/gpu:0"]), none -> ("cpu", [])."""
    if len(gpus) > 1:
        return "mirrored", list(gpus)
    return ("one_device", ["/gpu:0"]) if gpus else ("cpu", [])


@register("auto")
def _auto(strategy_cfg) -> tf.distribute.Strategy:
    kind, devices = auto_plan([g.name for g in _gpus()])
    if kind == "mirrored":
        return tf.distribute.MirroredStrategy(devices)
    return tf.distribute.OneDeviceStrategy(devices[0]) if kind == "one_device" else _single_cpu("/cpu:0")


def configure_devices(strategy_cfg) -> None:
    """Split the CPU into `strategy.num_logical_cpus` logical devices. Must run before TF initialises
    its devices (the start of the train process); later, it only checks enough devices exist."""
    n = int(strategy_cfg.num_logical_cpus or 0)
    if n <= 1 or tf.config.list_physical_devices("GPU"):
        return
    cpus = tf.config.list_physical_devices("CPU")
    try:
        tf.config.set_logical_device_configuration(cpus[0], [tf.config.LogicalDeviceConfiguration()] * n)
    except RuntimeError:
        have = len(tf.config.list_logical_devices("CPU"))
        if have < n:
            raise UserError(
                f"strategy.num_logical_cpus={n}: TensorFlow already started with {have} CPU device(s) in this "
                f"process; the logical CPUs must be configured before TF initialises (use a fresh process)"
            ) from None


def local_devices(configured: list, gpus: list, cpus: list, num_logical_cpus: int) -> list:
    """The replicas of mirrored / central_storage: `strategy.devices` when given, else every GPU, else the first
    `strategy.num_logical_cpus` logical CPUs (at least one)."""
    if configured:
        return list(configured)
    return list(gpus) if gpus else list(cpus[: max(int(num_logical_cpus or 0), 1)])


def mirrored_reduction(gpus: list):
    """Cross-device ops of mirrored: TensorFlow's choice (NCCL all-reduce) over GPUs; on CPUs a reduction to
    /cpu:0 (NCCL needs GPUs)."""
    return None if gpus else tf.distribute.ReductionToOneDevice(reduce_to_device="/cpu:0")


def _local_devices(strategy_cfg) -> list:
    cpus = [d.name for d in tf.config.list_logical_devices("CPU")]
    gpus = [g.name for g in _gpus()]
    return local_devices(strategy_cfg.devices, gpus, cpus, strategy_cfg.num_logical_cpus)


@register("mirrored")
def _mirrored(strategy_cfg) -> tf.distribute.Strategy:
    configure_devices(strategy_cfg)
    devices = _local_devices(strategy_cfg)
    return tf.distribute.MirroredStrategy(devices, cross_device_ops=mirrored_reduction(_gpus()))


@register("central_storage")
def _central_storage(strategy_cfg) -> tf.distribute.Strategy:
    configure_devices(strategy_cfg)
    devices = _local_devices(strategy_cfg)
    parameter_device = strategy_cfg.device or "/cpu:0"
    return tf.distribute.experimental.CentralStorageStrategy(devices, parameter_device=parameter_device)


def _tf_config_resolver(strategy_cfg):
    from tfpipe import tfconfig

    spec = tfconfig.read_tf_config()  # UserError when TF_CONFIG is missing or malformed
    return tf.distribute.cluster_resolver.TFConfigClusterResolver(), spec


@register("multi_worker_mirrored")
def _multi_worker_mirrored(strategy_cfg) -> tf.distribute.Strategy:
    resolver, _ = _tf_config_resolver(strategy_cfg)
    impl = tf.distribute.experimental.CommunicationImplementation
    communication = {"auto": impl.AUTO, "ring": impl.RING, "nccl": impl.NCCL}[strategy_cfg.communication]
    options = tf.distribute.experimental.CommunicationOptions(implementation=communication)
    return tf.distribute.MultiWorkerMirroredStrategy(cluster_resolver=resolver, communication_options=options)


@register("parameter_server")
def _parameter_server(strategy_cfg) -> tf.distribute.Strategy:
    resolver, _ = _tf_config_resolver(strategy_cfg)
    max_shards = int(strategy_cfg.max_shards or 1)
    partitioner = None
    if max_shards > 1:
        partitioner = tf.distribute.experimental.partitioners.MinSizePartitioner(
            min_shard_bytes=int(strategy_cfg.min_shard_bytes), max_shards=max_shards
        )
    return tf.distribute.experimental.ParameterServerStrategy(resolver, variable_partitioner=partitioner)


@register("tpu")
def _tpu(strategy_cfg) -> tf.distribute.Strategy:
    name = strategy_cfg.tpu or ""
    try:
        resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu=name)
        tf.config.experimental_connect_to_cluster(resolver)
        tf.tpu.experimental.initialize_tpu_system(resolver)
        return tf.distribute.TPUStrategy(resolver)
    except Exception as exc:  # no TPU here: the resolver or the TPU system init fails
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
        raise UserError(
            f"strategy.name=tpu (strategy.tpu={name or None!r}): no TPU reachable ({type(exc).__name__}: {first}); "
            f"use another strategy on this host, e.g. strategy=one_device or strategy=mirrored"
        ) from None


def run_server(strategy_cfg) -> None:
    """A parameter_server worker or ps task: serve the cluster from TF_CONFIG until killed."""
    import os

    from tfpipe import tfconfig

    spec = tfconfig.read_tf_config()
    os.environ.setdefault("GRPC_FAIL_FAST", "use_caller")
    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    server = tf.distribute.Server(
        resolver.cluster_spec(),
        job_name=spec["task"]["type"],
        task_index=spec["task"]["index"],
        protocol="grpc",
        start=True,
    )
    log.info("%s:%d serving at %s", spec["task"]["type"], spec["task"]["index"], server.target)
    server.join()


def is_coordinated(strategy: tf.distribute.Strategy) -> bool:
    """Whether steps are scheduled by a ClusterCoordinator (parameter-server training)."""
    return isinstance(strategy, tf.distribute.experimental.ParameterServerStrategy)


def coordinates_preemption(strategy: tf.distribute.Strategy) -> bool:
    """Whether a stop signal must be agreed by the workers (tfpipe.training.preemption): multi_worker_mirrored
    with more than one worker, where a worker stopping alone leaves the others blocked in a collective."""
    return isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy) and worker_count(strategy) > 1


def worker_count(strategy: tf.distribute.Strategy) -> int:
    """Number of worker tasks (chief + workers) of a multi-worker strategy; 1 for local ones."""
    resolver = getattr(strategy, "cluster_resolver", None) or getattr(strategy, "_cluster_resolver", None)
    if resolver is None:
        return 1
    try:
        spec = resolver.cluster_spec()
        jobs = spec.jobs
    except Exception:  # a resolver without a cluster (local)
        return 1
    jobs_counted = ("worker",) if is_coordinated(strategy) else ("chief", "worker")
    count = sum(spec.num_tasks(job) for job in jobs_counted if job in jobs)
    return max(count, 1)


DEFAULT_STRATEGY = "DefaultStrategy"  # how describe_strategy names TensorFlow's default strategy


def describe_strategy(strategy: tf.distribute.Strategy) -> dict:
    """Facts for logging and tags: class name, replicas, devices, workers."""
    default = not tf.distribute.has_strategy() and strategy is tf.distribute.get_strategy()
    try:
        devices = (
            ["/job:localhost/replica:0/task:0/device:CPU:0"]
            if default
            else list(strategy.extended.worker_devices)
        )
    except (AttributeError, NotImplementedError, RuntimeError):
        devices = []
    return {
        "name": DEFAULT_STRATEGY if default else type(strategy).__name__,
        "num_replicas_in_sync": int(strategy.num_replicas_in_sync),
        "devices": devices,
        "worker_count": worker_count(strategy),
    }
