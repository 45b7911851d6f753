"""The strategy factory (tfpipe.strategies) and TensorFlow's side of it (tfpipe.distribute): registry names, the
CPU fallback of `auto`, and describe_strategy."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import tensorflow as tf

from tfpipe import distribute, strategies
from tfpipe.config import StrategyConfig

HAS_GPU = bool(tf.config.list_physical_devices("GPU"))


def test_registry_holds_the_config_names():
    from tfpipe.config.schema import StrategyConfig

    assert StrategyConfig().name in strategies.names()
    assert {p.stem for p in (ROOT / "conf" / "strategy").glob("*.yaml")} <= set(strategies.names())


def _is_default(strategy) -> bool:
    return type(strategy).__name__ == "_DefaultDistributionStrategy"


@pytest.mark.skipif(HAS_GPU, reason="checks the CPU-only host")
def test_one_device_on_the_only_cpu_is_the_default_strategy():
    """OneDeviceStrategy("/cpu:0") halves a CPU step's throughput (docs/benchmarks.md): the factory gives TF's
    default strategy for the host's only CPU, and a OneDeviceStrategy for any other device."""
    strategy = strategies.build_strategy(StrategyConfig(name="one_device", device="/cpu:0"))
    assert _is_default(strategy) and strategy.extended.should_checkpoint
    info = distribute.describe_strategy(strategy)
    assert info["name"] == "DefaultStrategy"
    assert info["num_replicas_in_sync"] == 1 and info["worker_count"] == 1
    assert len(info["devices"]) == 1 and info["devices"][0].endswith("CPU:0")

    default = strategies.build_strategy(StrategyConfig(name="one_device", device=None))
    assert distribute.describe_strategy(default)["devices"][0].endswith("CPU:0")


def test_one_device_strategy_places_variables_and_runs_replica_fns():
    strategy = strategies.build_strategy(StrategyConfig(name="one_device", device="/cpu:0"))
    with strategy.scope():
        v = tf.Variable(2.0)
    assert v.device.endswith("CPU:0")

    @tf.function
    def step(x):
        per_replica = strategy.run(lambda t: t * v, args=(x,))
        return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=0)

    assert float(step(tf.constant([1.0, 2.0]))) == pytest.approx(6.0)


@pytest.mark.skipif(HAS_GPU, reason="checks the CPU-only fallback")
def test_auto_without_gpu_is_the_default_strategy_on_cpu(make_config):
    cfg = make_config("strategy=auto")
    assert cfg.strategy.name == "auto"
    strategy = strategies.build_strategy(cfg.strategy)
    assert _is_default(strategy)
    info = distribute.describe_strategy(strategy)
    assert info["num_replicas_in_sync"] == 1 and info["devices"][0].endswith("CPU:0")


def test_unknown_name_lists_the_valid_names():
    with pytest.raises(ValueError) as err:
        strategies.build_strategy(StrategyConfig(name="mirorred", device=None))
    message = str(err.value)
    assert "mirorred" in message
    for name in strategies.names():
        assert name in message


def test_new_strategies_plug_into_the_registry():
    def _build(cfg):
        return tf.distribute.OneDeviceStrategy(cfg.device)

    strategies.register(strategies.StrategySpec("test_only_cpu", _build, replicas="device"))
    try:
        cfg = dataclasses.replace(StrategyConfig(), name="test_only_cpu", device="/cpu:0")
        assert isinstance(strategies.build_strategy(cfg), tf.distribute.OneDeviceStrategy)
        assert "test_only_cpu" in strategies.names()
    finally:
        strategies.REGISTRY.pop("test_only_cpu")


# ----------------------------------------------------------------------------- issue 3: every strategy

import json  # noqa: E402
import os  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

from tfpipe.errors import ConfigError, UserError  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]

# Logical CPUs must be configured before TF initialises its devices, so the multi-replica local
# strategies train in one fresh process (the way `python -m pipeline.train` starts).
_LOCAL_SCRIPT = r"""
import json, sys
from tfpipe import config, training
prepared, out = sys.argv[1], sys.argv[2]
results = {}
for strategy, precision, *extra in [("mirrored", "float32"), ("central_storage", "mixed_bfloat16"),
                                    ("mirrored", "mixed_float16"), ("mirrored", "float32", "lookahead"),
                                    ("mirrored", "float32", "airbench")]:
    lookahead = ["train.optimizer.lookahead_every=2"] if extra else []  # synced in cross-replica context
    model = ["model.filters=[4]", "model.dense_units=8", "train.optimizer.learning_rate=0.01"]
    if extra == ["airbench"]:  # its flips' epoch set and its whitening bias frozen between epochs
        model = ["experiment=cifar10_airbench", "model.widths=[4,4,4]", "model.whiten_bias_epochs=1",
                 "train.lr_schedule.warmup_epochs=0.5", "train.tensorboard=false"]
    cfg = config.compose([*model, "train.batch_size_per_replica=2", "train.epochs=3", f"strategy={strategy}",
                          f"precision={precision}", "train.lr_scaling=linear", *lookahead], config_dir=sys.argv[3])
    key = "-".join([strategy, precision, *extra])
    r = training.train(cfg, prepared_dir=prepared, output_dir=f"{out}/{key}")
    import tensorflow as tf
    fn = tf.saved_model.load(str(r.saved_model_dir)).signatures["serving_default"]
    probs = fn(image=tf.zeros([2, 32, 32, 3], tf.uint8))["probabilities"]
    results[key] = {"strategy": r.strategy, "losses": [h["epoch_train_loss"] for h in r.history],
        "global_batch": r.global_batch_size, "out_dtype": probs.dtype.name, "precision": r.precision,
        "steps": r.steps, "examples": [round(h["epoch_examples_per_sec"] * h["epoch_seconds"]) for h in r.history],
        "probs_sum": probs.numpy().sum(axis=1).tolist()}
    if extra == ["airbench"]:
        import numpy as np
        with np.load(r.saved_model_dir / "keras_weights.npz") as npz:
            results[key]["flip_epoch"] = int(npz["augment/epoch"])
print("RESULT " + json.dumps(results))
"""


@pytest.fixture(scope="module")
def local_multi_replica(prepared_image, tmp_path_factory):
    out = tmp_path_factory.mktemp("local_strategies")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run(
        [sys.executable, "-c", _LOCAL_SCRIPT, str(prepared_image.prepared_dir), str(out), str(ROOT / "conf")],
        env=env,
        capture_output=True,
        text=True,
        timeout=400,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    line = [l for l in proc.stdout.splitlines() if l.startswith("RESULT ")][-1]
    return {**json.loads(line[len("RESULT ") :]), "prepared_dir": str(prepared_image.prepared_dir)}


@pytest.mark.slow  # one subprocess trains every local multi-replica strategy (about 15 s)
@pytest.mark.parametrize(
    "key, cls",
    [
        ("mirrored-float32", "MirroredStrategy"),
        ("central_storage-mixed_bfloat16", "CentralStorageStrategy"),
        ("mirrored-mixed_float16", "MirroredStrategy"),
        ("mirrored-float32-lookahead", "MirroredStrategy"),
    ],
)
def test_local_multi_replica_strategies_train_on_logical_cpus(local_multi_replica, key, cls):
    r = local_multi_replica[key]
    assert r["strategy"]["name"] == cls
    assert r["strategy"]["num_replicas_in_sync"] == 2 and len(r["strategy"]["devices"]) == 2
    assert r["global_batch"] == 4  # 2 per replica x 2 replicas
    assert r["losses"][-1] < r["losses"][0], r["losses"]
    assert r["out_dtype"] == "float32"
    assert r["precision"] == key.split("-")[1]
    # Throughput counts the examples the steps read: the train split's records, counted here from the shards
    # with plain tf.data, in whole global batches of 4 (remainder dropped), every epoch.
    records = _train_records(local_multi_replica["prepared_dir"])
    assert records == 21 and r["steps"] == 3 * (records // 4), r
    assert r["examples"] == [records // 4 * 4] * 3, r


@pytest.mark.slow
def test_airbench_s_epoch_layers_follow_the_epochs_under_mirrored_strategy(local_multi_replica):
    r = local_multi_replica["mirrored-float32-airbench"]
    assert r["strategy"]["name"] == "MirroredStrategy" and r["strategy"]["num_replicas_in_sync"] == 2
    assert r["steps"] == 15 and all(np.isfinite(r["losses"])), r  # 3 epochs of 5 global batches of 4
    assert r["flip_epoch"] == 3  # the mirrored epoch variable was set after each of the 3 epochs
    np.testing.assert_allclose(r["probs_sum"], 1.0, atol=1e-4)  # the export serves (6 views inside)


def _train_records(prepared_dir: str) -> int:
    shards = sorted(Path(prepared_dir).glob("train-*.tfrecord"))
    assert shards, prepared_dir
    return sum(1 for _ in tf.data.TFRecordDataset([str(p) for p in shards]))


def test_logical_cpus_after_tf_started_is_a_clear_error():
    tf.config.list_logical_devices("CPU")  # TF is initialised in this process by now
    have = len(tf.config.list_logical_devices("CPU"))
    cfg = StrategyConfig(name="mirrored", device=None, num_logical_cpus=have + 3)
    with pytest.raises(UserError, match="strategy.num_logical_cpus"):
        strategies.build_strategy(cfg)


def test_mirrored_over_an_explicit_device_list():
    strategy = strategies.build_strategy(StrategyConfig(name="mirrored", device=None, devices=["/cpu:0"]))
    assert isinstance(strategy, tf.distribute.MirroredStrategy) and strategy.num_replicas_in_sync == 1


def test_tpu_without_a_tpu_fails_at_start_with_a_clear_message():
    with pytest.raises(UserError) as err:
        strategies.build_strategy(StrategyConfig(name="tpu", device=None))
    message = str(err.value)
    assert message.startswith("strategy.name=tpu") and "no TPU reachable" in message and "\n" not in message


@pytest.mark.parametrize("name", ["multi_worker_mirrored", "parameter_server"])
def test_multi_process_strategies_need_tf_config(name, monkeypatch):
    monkeypatch.delenv("TF_CONFIG", raising=False)
    with pytest.raises(UserError, match="TF_CONFIG: not set"):
        strategies.build_strategy(StrategyConfig(name=name, device=None))


def test_every_strategy_option_composes(make_config):
    for name in strategies.names():
        assert make_config(f"strategy={name}").strategy.name == name
    ps = make_config("strategy=parameter_server", "strategy.max_shards=4")
    assert (ps.strategy.num_workers, ps.strategy.num_ps, ps.strategy.max_shards) == (2, 1, 4)
    assert make_config("strategy=multi_worker_mirrored").strategy.communication == "auto"


@pytest.mark.parametrize(
    "overrides, needle",
    [
        (("strategy=multi_worker_mirrored", "strategy.communication=mpi"), "strategy.communication='mpi'"),
        (("strategy=parameter_server", "strategy.num_ps=0"), "strategy.num_ps=0"),
        (("strategy=parameter_server", "train.grad_accumulation_steps=2"), "train.grad_accumulation_steps=2"),
        (
            ("train.grad_accumulation_steps=2", "train.steps_per_epoch=3"),
            "multiple of train.grad_accumulation_steps",
        ),
        (("train.lr_scaling=sqrt",), "train.lr_scaling='sqrt'"),
        (("strategy=mirrored", "strategy.devices=[]"), "strategy.devices"),
    ],
)
def test_bad_distributed_settings_are_refused(make_config, overrides, needle):
    with pytest.raises(ConfigError) as err:
        make_config(*overrides)
    assert needle in str(err.value)


# ----------------------------------------------------------------------------- GPU hosts, with faked device lists

GPUS = [f"/job:localhost/replica:0/task:0/device:GPU:{i}" for i in range(8)]
CPUS = ["/job:localhost/replica:0/task:0/device:CPU:0"]


@pytest.mark.parametrize(
    "gpus, expected",
    [
        (GPUS, ("mirrored", GPUS)),  # 8 GPUs: one replica per GPU
        (GPUS[:2], ("mirrored", GPUS[:2])),
        (GPUS[:1], ("one_device", ["/gpu:0"])),  # 1 GPU: no replication overhead
        ([], ("cpu", [])),
    ],
)
def test_auto_strategy_on_gpu_hosts(gpus, expected):
    assert strategies.auto_plan(gpus) == expected


def test_mirrored_on_gpu_hosts_replicates_over_every_gpu_with_tensorflows_all_reduce():
    assert distribute.local_devices([], GPUS, CPUS, num_logical_cpus=4) == GPUS  # GPUs win over logical CPUs
    assert distribute.local_devices(["/gpu:1", "/gpu:3"], GPUS, CPUS, 0) == ["/gpu:1", "/gpu:3"]
    assert distribute.mirrored_reduction(GPUS) is None  # TensorFlow's default: NCCL all-reduce
    on_cpu = distribute.mirrored_reduction([])
    assert isinstance(on_cpu, tf.distribute.ReductionToOneDevice)
    assert distribute.local_devices([], [], CPUS * 3, num_logical_cpus=2) == CPUS * 2
