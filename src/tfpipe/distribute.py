"""TensorFlow's side of the strategies: the logical CPUs and replica devices the local strategies build on,
the servers of parameter-server tasks, and what a built strategy is (coordinated, its workers, its description).

What it does not know: strategy names, their builders and properties (`tfpipe.strategies`, the registry and the
one factory, whose builders call these helpers); TF_CONFIG's checks (`tfpipe.tfconfig`).
"""

from __future__ import annotations

import logging

import tensorflow as tf

from tfpipe.errors import UserError

log = logging.getLogger(__name__)


def gpus() -> list:
    """The names of the logical GPUs TensorFlow sees."""
    return [g.name for g in tf.config.list_logical_devices("GPU")]


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


def replica_devices(strategy_cfg) -> list:
    """This host's replicas of a strategy over local devices (`local_devices` of what TensorFlow lists)."""
    cpus = [d.name for d in tf.config.list_logical_devices("CPU")]
    return local_devices(strategy_cfg.devices, gpus(), cpus, strategy_cfg.num_logical_cpus)


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
