"""TensorBoard summaries, the profiler trace and their MLflow artifact (tfpipe.monitoring), on real tiny runs.

Event files are read with TensorBoard's EventAccumulator, never judged by file name.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import keras
import numpy as np
import pytest
import tensorflow as tf

from tfpipe import config, monitoring, training
from tfpipe.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]
# prepared_image: 21 train examples -> 5 steps per epoch at batch 4
TINY = ("model.filters=[8,8]", "model.dense_units=16", "train.batch_size_per_replica=4")
STEP_TAGS = {"step_loss", "step_accuracy", "learning_rate", "examples_per_sec"}
EPOCH_TAGS = {"epoch_loss", "epoch_accuracy", "epoch_examples_per_sec", "epoch_seconds"}


class ListSink:
    def __init__(self):
        self.calls: list[tuple[int, dict]] = []

    def log_metrics(self, metrics: dict, step: int) -> None:
        self.calls.append((step, dict(metrics)))


def _cfg(*overrides: str):
    return config.compose([*TINY, *overrides], config_dir=ROOT / "conf")


def _events(folder: Path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(folder), size_guidance={"tensors": 0, "scalars": 0, "histograms": 0})
    acc.Reload()
    return acc


def _plugin_tags(acc, plugin: str) -> set[str]:
    return {t for t in acc.Tags()["tensors"] if acc.SummaryMetadata(t).plugin_data.plugin_name == plugin}


def _series(acc, tag: str) -> dict[int, float]:
    return {e.step: float(tf.make_ndarray(e.tensor_proto)) for e in acc.Tensors(tag)}


@pytest.fixture(scope="module")
def monitored_run(prepared_image, tmp_path_factory):
    """2 epochs x 5 steps, step metrics every 2 steps, profiler on steps 3-5."""
    cfg = _cfg("train.epochs=2", "train.log_every_steps=2", "train.profile_steps=3-5")
    out = tmp_path_factory.mktemp("monitored")
    sink = ListSink()
    result = training.train(cfg, prepared_dir=prepared_image.prepared_dir, output_dir=out, sink=sink)
    return result, sink, out / "tensorboard"


def test_step_and_epoch_scalars_are_in_the_event_files(monitored_run):
    result, sink, log_dir = monitored_run
    train = _events(log_dir / "train")
    scalars = _plugin_tags(train, "scalars")
    assert STEP_TAGS | EPOCH_TAGS <= scalars, sorted(scalars)
    assert "loss_scale" not in scalars  # float32: no LossScaleOptimizer
    # the values TensorBoard holds are the ones the loop sent to MLflow, at the same global steps
    logged = {step: m["train_loss"] for step, m in sink.calls if "train_loss" in m}
    assert _series(train, "step_loss") == pytest.approx(logged)
    assert max(_series(train, "step_loss")) == result.steps == 10
    epoch_loss = _series(train, "epoch_loss")
    assert sorted(epoch_loss) == [0, 1]
    assert epoch_loss[1] == pytest.approx(result.history[1]["epoch_train_loss"])

    validation = _events(log_dir / "validation")
    val_acc = _series(validation, "epoch_accuracy")
    assert sorted(val_acc) == [0, 1]
    assert val_acc[1] == pytest.approx(result.final_metrics["val_accuracy"])


def test_weight_histograms_and_model_graph(monitored_run):
    _, _, log_dir = monitored_run
    train = _events(log_dir / "train")
    histograms = _plugin_tags(train, "histograms")
    kernels = [t for t in histograms if t.endswith("kernel")]
    assert len(kernels) >= 3, sorted(histograms)  # 2 conv + dense layers
    assert sorted(e.step for e in train.Tensors(kernels[0])) == [0, 1]  # histogram_every_epochs=1
    assert train.Tags()["graph"] is True
    graph = train.Graph()
    assert any(node.op == "Conv2D" for node in graph.node), {n.op for n in graph.node}


def test_profiler_trace_of_the_step_range(monitored_run):
    _, _, log_dir = monitored_run
    traces = list((log_dir / "plugins" / "profile").glob("*/*.xplane.pb"))
    assert len(traces) == 1, traces
    assert traces[0].stat().st_size > 1000
    assert _traced_steps(traces[0]) == [3, 4, 5]  # the step markers of exactly the requested steps


def _traced_steps(path) -> list:
    """step_num of every "train" step marker (TraceMe) in an XSpace trace file, read with TF's own proto."""
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    space = xplane_pb2.XSpace.FromString(path.read_bytes())
    steps = []
    for plane in space.planes:
        stat_names = {i: m.name for i, m in plane.stat_metadata.items()}
        for line in plane.lines:
            for event in line.events:
                if plane.event_metadata[event.metadata_id].name != "train":
                    continue
                steps += [
                    s.int64_value or s.uint64_value
                    for s in event.stats
                    if stat_names[s.metadata_id] == "step_num"
                ]
    return sorted(steps)


@pytest.mark.slow
def test_mixed_float16_logs_the_loss_scale_and_histograms_can_be_off(prepared_image, tmp_path):
    log_dir = tmp_path / "tb-elsewhere"
    cfg = _cfg(
        "precision=mixed_float16",
        "train.epochs=1",
        "train.steps_per_epoch=2",
        "train.log_every_steps=1",
        "train.histogram_every_epochs=0",
        f"train.tensorboard_dir={log_dir}",
    )
    training.train(cfg, prepared_dir=prepared_image.prepared_dir, output_dir=tmp_path / "out")
    assert not (tmp_path / "out" / "tensorboard").exists()  # an absolute tensorboard_dir is used as given
    train = _events(log_dir / "train")
    scales = _series(train, "loss_scale")
    assert sorted(scales) == [1, 2]
    assert all(s > 0 and np.isfinite(s) for s in scales.values())
    assert not _plugin_tags(train, "histograms")
    assert not (log_dir / "plugins").exists()  # profile_steps null: no trace


def test_switched_off_or_non_chief_writes_nothing(tmp_path):
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])
    off = monitoring.build_hooks(tmp_path / "off", model=model, tensorboard=False)
    worker = monitoring.build_hooks(tmp_path / "worker", model=model, chief=False, profile_steps=(1, 2))
    assert off == [] and worker == []
    assert [type(h).__name__ for h in monitoring.build_hooks(tmp_path / "on", profile_steps=(1, 2))] == [
        "TensorBoardHook",
        "ProfilerHook",
    ]
    assert not (tmp_path / "off").exists() and not (tmp_path / "worker").exists()


def test_device_placement_logging_is_switched_on_for_the_run_only(tmp_path):
    from tensorflow.python.eager import context

    hooks = monitoring.build_hooks(tmp_path, tensorboard=False, log_device_placement=True)
    assert context.context().log_device_placement is True
    for hook in hooks:
        hook.on_train_end()
    assert context.context().log_device_placement is False


@pytest.mark.parametrize("value", ["abc", "0-3", "7-2", "3-"])
def test_bad_profile_steps_is_a_config_error(make_config, value):
    with pytest.raises(ConfigError, match=r"train\.profile_steps=.*'10-20'"):
        make_config(f"train.profile_steps='{value}'")


def test_config_defaults(make_config):
    tr = make_config().train
    assert (
        tr.tensorboard,
        tr.tensorboard_dir,
        tr.histogram_every_epochs,
        tr.profile_steps,
        tr.log_device_placement,
    ) == (True, "tensorboard", 1, None, False)
    assert monitoring.parse_profile_steps("10-20") == (10, 20)
    with pytest.raises(ConfigError, match="train.histogram_every_epochs"):
        make_config("train.histogram_every_epochs=-1")


@pytest.mark.slow
def test_train_stage_logs_the_tensorboard_dir_to_mlflow(prepared_image, tmp_path, monkeypatch):
    from conftest import stages_in_process
    from mlflow import MlflowClient

    cfg = _cfg(
        "data.source=directory",
        f"data.output_dir={prepared_image.prepared_dir}",
        "train.epochs=1",
        "train.steps_per_epoch=2",
        "train.profile_steps=1-2",
        "tracking.log_model=false",
    )
    run_id = stages_in_process(cfg, tmp_path, monkeypatch, "train")
    assert (
        tmp_path / "models" / "cifar10" / "tensorboard" / "train"
    ).is_dir()  # under the DVC-tracked output
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")
    assert "tensorboard" in {a.path for a in client.list_artifacts(run_id)}
    logged = {a.path for a in client.list_artifacts(run_id, "tensorboard")}
    assert {"tensorboard/train", "tensorboard/validation", "tensorboard/plugins"} <= logged, logged
    # the downloaded copy is a working TensorBoard log dir, trace included
    local = Path(client.download_artifacts(run_id, "tensorboard", str(tmp_path / "download")))
    assert STEP_TAGS <= _plugin_tags(_events(local / "train"), "scalars")
    assert list(local.glob("plugins/profile/*/*.xplane.pb"))
    shutil.rmtree(tmp_path / "download")
