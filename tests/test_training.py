"""The custom training loop on tiny prepared datasets (the session fixtures from conftest.py)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import keras
import numpy as np
import pytest
import tensorflow as tf
from conftest import default_policy  # noqa: E402

from tfpipe import config, training
from tfpipe.config import PRECISIONS
from tfpipe.errors import DataError, UserError

ROOT = Path(__file__).resolve().parents[1]
SMALL_CNN = ("model.filters=[8,8]", "model.dense_units=16")
# prepared_image: 21 train / 3 validation examples -> 5 steps per epoch at batch 4 (remainder dropped)
IMAGE_BATCH = 4
IMAGE_STEPS = 21 // IMAGE_BATCH


class ListSink:
    """A MetricsSink that keeps everything in memory."""

    def __init__(self):
        self.calls: list[tuple[int, dict]] = []

    def log_metrics(self, metrics: dict, step: int) -> None:
        assert isinstance(step, int)
        self.calls.append((step, dict(metrics)))

    def rows(self, key: str) -> list[tuple[int, dict]]:
        return [(s, m) for s, m in self.calls if key in m]


def _cfg(*overrides: str):
    return config.compose(list(overrides), config_dir=ROOT / "conf")


def _image_cfg(*overrides: str):
    return _cfg(*SMALL_CNN, f"train.batch_size_per_replica={IMAGE_BATCH}", *overrides)


@pytest.fixture(autouse=True)
def _policy_is_restored():
    yield
    assert keras.mixed_precision.global_policy().name == "float32", "train() must restore the global policy"


@pytest.fixture(scope="module")
def image_run(prepared_image, tmp_path_factory):
    cfg = _image_cfg(
        "train.epochs=3",
        "train.log_every_steps=2",
        "train.checkpoint_every_steps=2",
        "train.optimizer.learning_rate=0.003",
    )
    out = tmp_path_factory.mktemp("image_run")
    sink = ListSink()
    result = training.train(cfg, prepared_dir=prepared_image.prepared_dir, output_dir=out, sink=sink)
    return cfg, result, sink, out


def _serve(saved_model_dir, **inputs) -> np.ndarray:
    fn = tf.saved_model.load(str(saved_model_dir)).signatures["serving_default"]
    out = fn(**{k: tf.constant(v) for k, v in inputs.items()})["probabilities"]
    assert out.dtype == tf.float32
    return out.numpy()


def _test_images(prepared_dir, n=9):
    from tfpipe import data

    images, labels = next(
        iter(data.make_dataset(prepared_dir, "test", batch_size=n, training=False, seed=0, cache=False))
    )
    return images.numpy(), labels.numpy()


# ----------------------------------------------------------------------------- one full run


def test_loss_decreases_and_the_model_learns(image_run):
    _, result, _, _ = image_run
    losses = [row["epoch_train_loss"] for row in result.history]
    assert [row["epoch"] for row in result.history] == [0, 1, 2]
    assert losses[-1] < losses[0] * 0.9, losses
    assert result.history[-1]["epoch_train_accuracy"] > 0.6
    assert result.final_metrics["val_accuracy"] == result.history[-1]["val_accuracy"]
    assert set(result.final_metrics) == {"train_loss", "train_accuracy", "val_loss", "val_accuracy"}


def test_result_describes_the_run(image_run, prepared_image):
    cfg, result, _, out = image_run
    assert result.global_batch_size == IMAGE_BATCH
    assert result.steps == 3 * IMAGE_STEPS
    assert result.strategy["name"] == "DefaultStrategy" and result.strategy["num_replicas_in_sync"] == 1
    assert result.precision == default_policy() and result.epochs_run == 3 and not result.resumed
    from tfpipe import models

    assert result.num_params == models.build_model(cfg, 3).count_params()
    assert result.train_seconds > 0
    assert result.saved_model_dir == out / "saved_model" and result.checkpoint_dir == out / "checkpoints"


def test_checkpoints_are_written_and_pruned(image_run):
    _, result, _, _ = image_run
    ckpt = result.checkpoint_dir
    assert tf.train.latest_checkpoint(str(ckpt)).endswith(f"ckpt-{result.steps}")
    assert len(list(ckpt.glob("ckpt-*.index"))) == 3  # max_checkpoints_to_keep
    history = json.loads((ckpt / "history.json").read_text())
    assert [row["epoch"] for row in history] == [0, 1, 2]


def test_sink_gets_step_and_epoch_metrics(image_run):
    _, result, sink, _ = image_run
    steps = sink.rows("train_loss")
    assert [s for s, _ in steps][:3] == [2, 4, 5]  # every 2 steps plus the tail of each epoch
    for _, metrics in steps:
        assert set(metrics) == set(training.STEP_METRICS)
        assert all(math.isfinite(v) for v in metrics.values())
        assert metrics["learning_rate"] == pytest.approx(0.003)
        assert 0.0 <= metrics["train_accuracy"] <= 1.0 and metrics["examples_per_sec"] > 0
    epochs = sink.rows("val_loss")
    assert [s for s, _ in epochs] == [0, 1, 2]
    for (_, metrics), row in zip(epochs, result.history):
        assert set(metrics) == set(training.EPOCH_METRICS)
        assert metrics["val_accuracy"] == pytest.approx(row["val_accuracy"])


def test_saved_model_serves_raw_images(image_run, prepared_image):
    _, result, _, _ = image_run
    images, labels = _test_images(prepared_image.prepared_dir)
    probs = _serve(result.saved_model_dir, image=images)
    assert probs.shape == (len(images), 3)
    np.testing.assert_allclose(probs.sum(axis=1), 1.0, atol=1e-5)
    from tfpipe import data, models

    assert (
        models.load_class_names(result.saved_model_dir)
        == data.load_manifest(prepared_image.prepared_dir)["class_names"]
    )


# ----------------------------------------------------------------------------- resume


@pytest.mark.slow
def test_resume_continues_at_the_saved_epoch(prepared_image, tmp_path):
    overrides = ("train.lr_schedule.name=cosine", "train.log_every_steps=1")
    first_sink, second_sink = ListSink(), ListSink()
    first = training.train(
        _image_cfg("train.epochs=1", *overrides),
        prepared_dir=prepared_image.prepared_dir,
        output_dir=tmp_path,
        sink=first_sink,
    )
    assert first.epochs_run == 1 and first.steps == IMAGE_STEPS

    cfg = _image_cfg("train.epochs=2", *overrides)
    second = training.train(
        cfg, prepared_dir=prepared_image.prepared_dir, output_dir=tmp_path, sink=second_sink
    )
    assert second.resumed and second.initial_epoch == 1 and second.epochs_run == 1
    assert second.steps == 2 * IMAGE_STEPS
    assert [row["epoch"] for row in second.history] == [0, 1]
    assert second.history[0] == first.history[0]
    assert [s for s, _ in second_sink.rows("val_loss")] == [1]
    step_rows = second_sink.rows("train_loss")
    assert [s for s, _ in step_rows] == list(range(IMAGE_STEPS + 1, 2 * IMAGE_STEPS + 1))
    # The optimizer's step counter came back too: the cosine schedule continues, it does not restart.
    schedule = training.make_lr_schedule(cfg.train, IMAGE_STEPS)
    for step, metrics in step_rows:
        assert metrics["learning_rate"] == pytest.approx(float(schedule(step)), rel=1e-5)
    # A third call has nothing left to train but still exports.
    third = training.train(cfg, prepared_dir=prepared_image.prepared_dir, output_dir=tmp_path)
    assert third.epochs_run == 0 and third.steps == second.steps
    assert third.final_metrics == second.final_metrics


@pytest.mark.slow
def test_resume_mid_epoch_skips_the_batches_already_trained(prepared_image, tmp_path):
    cfg = _image_cfg(
        "train.epochs=1",
        "train.checkpoint_every_steps=1",
        "train.max_checkpoints_to_keep=10",
        "train.log_every_steps=1",
    )
    training.train(cfg, prepared_dir=prepared_image.prepared_dir, output_dir=tmp_path)
    ckpt = tmp_path / "checkpoints"
    # Pretend the run died right after step 2 of epoch 0: only ckpt-1 and ckpt-2 were written.
    for path in ckpt.glob("ckpt-*"):
        if int(path.name.split(".")[0].split("-")[1]) > 2:
            path.unlink()
    tf.compat.v1.train.update_checkpoint_state(str(ckpt), str(ckpt / "ckpt-2"))
    assert tf.train.latest_checkpoint(str(ckpt)).endswith("ckpt-2")
    sink = ListSink()
    resumed = training.train(cfg, prepared_dir=prepared_image.prepared_dir, output_dir=tmp_path, sink=sink)
    assert resumed.resumed and resumed.initial_epoch == 0 and resumed.epochs_run == 1
    assert resumed.steps == IMAGE_STEPS
    assert [s for s, _ in sink.rows("train_loss")] == list(range(3, IMAGE_STEPS + 1))


@pytest.mark.slow
def test_resume_with_another_model_is_a_clear_error(prepared_image, tmp_path):
    training.train(
        _image_cfg("train.epochs=1", "train.steps_per_epoch=1"),
        prepared_dir=prepared_image.prepared_dir,
        output_dir=tmp_path,
    )
    other = _cfg(
        "model.filters=[4]",
        "model.dense_units=8",
        "train.epochs=2",
        f"train.batch_size_per_replica={IMAGE_BATCH}",
    )
    with pytest.raises(UserError, match="cannot resume"):
        training.train(other, prepared_dir=prepared_image.prepared_dir, output_dir=tmp_path)


# ----------------------------------------------------------------------------- options


@pytest.mark.parametrize("policy", PRECISIONS)
@pytest.mark.slow
def test_every_precision_trains_and_exports_float32(policy, prepared_image, tmp_path, recwarn):
    cfg = _image_cfg(f"precision={policy}", "train.epochs=1", "train.steps_per_epoch=2")
    result = training.train(cfg, prepared_dir=prepared_image.prepared_dir, output_dir=tmp_path)
    assert result.precision == policy and result.steps == 2
    assert math.isfinite(result.history[0]["epoch_train_loss"])
    images, _ = _test_images(prepared_image.prepared_dir, n=4)
    probs = _serve(result.saved_model_dir, image=images)
    np.testing.assert_allclose(probs.sum(axis=1), 1.0, atol=1e-3)


@pytest.mark.slow
def test_adamw_cosine_warmup_and_label_smoothing(prepared_image, tmp_path):
    cfg = _image_cfg(
        "train.epochs=2",
        "train.optimizer.name=adamw",
        "train.optimizer.weight_decay=0.01",
        "train.lr_schedule.name=cosine",
        "train.lr_schedule.warmup_epochs=1",
        "train.label_smoothing=0.1",
        "train.log_every_steps=1",
    )
    sink = ListSink()
    result = training.train(cfg, prepared_dir=prepared_image.prepared_dir, output_dir=tmp_path, sink=sink)
    lrs = [m["learning_rate"] for _, m in sink.rows("learning_rate")]
    peak = cfg.train.optimizer.learning_rate
    assert lrs[0] < lrs[IMAGE_STEPS - 2] < peak * 1.0001  # warming up over the first epoch
    assert max(lrs) == pytest.approx(peak, rel=0.05)
    assert lrs[-1] == pytest.approx(0.0, abs=1e-9)  # cosine reaches 0 at the last step
    assert all(math.isfinite(row["epoch_train_loss"]) for row in result.history)


@pytest.mark.slow
def test_sgd_trains(prepared_image, tmp_path):
    cfg = _image_cfg("train.epochs=2", "train.optimizer.name=sgd", "train.optimizer.learning_rate=0.05")
    result = training.train(cfg, prepared_dir=prepared_image.prepared_dir, output_dir=tmp_path)
    assert result.history[-1]["epoch_train_loss"] < result.history[0]["epoch_train_loss"]


def test_batch_larger_than_the_split_is_a_data_error(prepared_image, tmp_path):
    cfg = _cfg(*SMALL_CNN, "train.epochs=1", "train.batch_size_per_replica=64")
    with pytest.raises(DataError, match="no batches"):
        training.train(cfg, prepared_dir=prepared_image.prepared_dir, output_dir=tmp_path)


def test_schedule_shapes():
    constant = training.WarmupSchedule(0.1, total_steps=100, warmup_steps=10, decay="constant")
    assert float(constant(0)) == pytest.approx(0.01) and float(constant(9)) == pytest.approx(0.1)
    assert float(constant(99)) == pytest.approx(0.1)
    cosine = training.WarmupSchedule(0.1, total_steps=100, warmup_steps=0, decay="cosine")
    assert float(cosine(0)) == pytest.approx(0.1) and float(cosine(50)) == pytest.approx(0.05)
    assert float(cosine(100)) == pytest.approx(0.0, abs=1e-9) and float(cosine(500)) == pytest.approx(
        0.0, abs=1e-9
    )


def test_optimizers_and_loss_scaling(make_config):
    cfg = make_config("train.optimizer.name=sgd", "train.optimizer.momentum=0.8")
    sgd = training.make_optimizer(cfg.train, 0.1)
    assert isinstance(sgd, keras.optimizers.SGD) and sgd.momentum == pytest.approx(0.8)
    adamw = training.make_optimizer(
        make_config("train.optimizer.name=adamw", "train.optimizer.weight_decay=0.01").train, 0.1
    )
    assert isinstance(adamw, keras.optimizers.AdamW) and adamw.weight_decay == pytest.approx(0.01)
    scaled = training.make_optimizer(make_config().train, 0.1, policy="mixed_float16")
    assert isinstance(scaled, keras.optimizers.LossScaleOptimizer)
    assert isinstance(scaled.inner_optimizer, keras.optimizers.Adam)


# ----------------------------------------------------------------------------- text


@pytest.mark.slow
def test_text_model_trains_on_token_ids_and_serves_raw_strings(prepared_text, tmp_path):
    cfg = _cfg(
        "dataset=imdb",
        "dataset.sequence_length=32",
        "train.batch_size_per_replica=6",
        "train.epochs=10",
        "train.optimizer.learning_rate=0.01",
        "train.log_every_steps=3",
    )
    sink = ListSink()
    result = training.train(cfg, prepared_dir=prepared_text.prepared_dir, output_dir=tmp_path, sink=sink)
    losses = [row["epoch_train_loss"] for row in result.history]
    assert losses[-1] < losses[0] * 0.5, losses
    assert sink.rows("train_loss") and len(sink.rows("val_loss")) == 10
    reviews = ["wonderful great excellent film, loved it", "awful boring terrible movie, the worst waste", ""]
    probs = _serve(result.saved_model_dir, text=np.array(reviews, dtype=object))
    assert probs.shape == (3, 2)
    np.testing.assert_allclose(probs.sum(axis=1), 1.0, atol=1e-5)
    pos = ["neg", "pos"].index("pos")
    assert probs[0, pos] > 0.5 > probs[1, pos], probs


def test_sink_protocol_is_structural():
    assert isinstance(ListSink(), training.MetricsSink)


# ----------------------------------------------------------------------------- accumulation, lr scaling


def _one_sgd_step(prepared_image, out, *overrides):
    cfg = _cfg(
        "model.filters=[4]",
        "model.dense_units=8",
        "train.epochs=1",
        "train.optimizer.name=sgd",
        "train.optimizer.momentum=0.0",
        "train.optimizer.learning_rate=0.5",
        "precision=float32",
        *overrides,
    )  # float32: the sums must agree to 2e-5
    result = training.train(cfg, prepared_dir=prepared_image.prepared_dir, output_dir=out)
    images, _ = _test_images(prepared_image.prepared_dir)
    return result, _serve(result.saved_model_dir, image=images)


@pytest.mark.slow
def test_grad_accumulation_equals_one_step_on_the_larger_batch(prepared_image, tmp_path):
    big, big_probs = _one_sgd_step(
        prepared_image, tmp_path / "big", "train.batch_size_per_replica=8", "train.steps_per_epoch=1"
    )
    acc, acc_probs = _one_sgd_step(
        prepared_image,
        tmp_path / "acc",
        "train.batch_size_per_replica=4",
        "train.grad_accumulation_steps=2",
        "train.steps_per_epoch=2",
    )
    small, small_probs = _one_sgd_step(
        prepared_image, tmp_path / "small", "train.batch_size_per_replica=4", "train.steps_per_epoch=1"
    )
    assert big.steps == acc.steps == small.steps == 1  # one optimizer step each
    np.testing.assert_allclose(acc_probs, big_probs, atol=2e-5)
    assert np.abs(small_probs - big_probs).max() > 1e-4  # half the batch is a different step
    assert acc.history[0]["epoch_train_loss"] == pytest.approx(big.history[0]["epoch_train_loss"], rel=1e-5)


def test_linear_lr_scaling_multiplies_the_peak_by_the_replicas(make_config):
    linear = make_config(
        "train.lr_scaling=linear",
        "train.optimizer.learning_rate=0.01",
        "train.lr_schedule.warmup_epochs=1",
        "train.epochs=2",
    ).train
    assert training.lr_scale(linear, 4) == 4.0
    assert training.lr_scale(make_config().train, 4) == 1.0
    schedule = training.make_lr_schedule(linear, steps_per_epoch=10, scale=training.lr_scale(linear, 4))
    assert float(schedule(0)) == pytest.approx(0.04 / 10)  # warm-up starts low (Goyal et al.)
    assert float(schedule(9)) == pytest.approx(0.04)
    assert float(schedule(15)) == pytest.approx(0.04)


def test_batches_per_pipeline_never_leaves_a_worker_short():
    inputs = training.InputSpec(
        modality="image",
        num_classes=3,
        class_names=list("abc"),
        num_train_examples=21,
        train_shard_sizes=[8, 8, 5],
    )
    assert training.batches_per_pipeline(inputs, 1, 4) == 5
    # 2 workers, whole files: {8+5, 8} examples, 2 per worker per step -> the 8-example worker has 4 steps
    assert training.batches_per_pipeline(inputs, 2, 4) == 4
    # 4 workers > 3 files: every 4th record -> 5 examples each at least -> 5 // 2
    assert training.batches_per_pipeline(inputs, 4, 8) == 2


@pytest.mark.slow
def test_steps_per_execution_changes_neither_the_result_nor_the_logging_steps(prepared_image, tmp_path):
    """Several optimizer steps per compiled call: bit-identical weights, the same step metrics at the same
    steps, checkpoints at the same steps (calls end on every logging and checkpoint step)."""
    from tfpipe.hooks import Hook

    class CallEnds(Hook):  # the global step after every compiled call
        def __init__(self):
            self.steps = []

        def on_steps_end(self, step):
            self.steps.append(step)

    runs = {}
    for spe in (1, 3):
        sink, calls = ListSink(), CallEnds()
        cfg = _image_cfg(
            "train.epochs=2",
            "train.log_every_steps=6",
            "train.checkpoint_every_steps=6",
            "train.max_checkpoints_to_keep=10",
            f"train.steps_per_execution={spe}",
            "train.tensorboard=false",
        )
        out = tmp_path / f"spe{spe}"
        result = training.train(
            cfg, prepared_dir=prepared_image.prepared_dir, output_dir=out, sink=sink, hooks=[calls]
        )
        ckpts = sorted(
            int(p.name.split("-")[1].split(".")[0]) for p in (out / "checkpoints").glob("ckpt-*.index")
        )
        runs[spe] = (result, sink, ckpts, calls.steps)
    (one, sink1, ckpts1, calls1), (three, sink3, ckpts3, calls3) = runs[1], runs[3]
    assert calls1 == list(range(1, 11))
    # 3-step calls, cut at the epoch end (step 5) and at the logging/checkpoint step 6
    assert calls3 == [3, 5, 6, 9, 10]
    assert one.steps == three.steps == 2 * IMAGE_STEPS
    assert three.weights_sha256 == one.weights_sha256
    steps1 = [s for s, _ in sink1.rows("train_loss")]
    assert steps1 == [s for s, _ in sink3.rows("train_loss")] == [5, 6, 10]  # every 6th + epoch tails
    for (_, a), (_, b) in zip(sink1.rows("train_loss"), sink3.rows("train_loss")):
        assert a["train_loss"] == b["train_loss"] and a["train_accuracy"] == b["train_accuracy"]
    assert ckpts1 == ckpts3 == [5, 6, 10]  # every 6th step and every epoch end


@pytest.mark.slow  # trains a model for epochs
def test_each_checkpoint_step_is_saved_once_even_at_an_epoch_end(prepared_image, tmp_path):
    """5 steps an epoch, a checkpoint every 5: each epoch's last step is both a periodic checkpoint and the
    epoch's end, and is saved once, with the next epoch's counters (a second save rewrote ckpt-N in place: a
    kill -9 during it once lost ckpt-4 in test_dvc_resume)."""
    from tfpipe.hooks import Hook

    class Saves(Hook):  # after the built-in hooks: each call is a completed save
        calls: list = []

        def on_checkpoint(self, step, epoch, epoch_step):
            self.calls.append((step, epoch, epoch_step))

    cfg = _image_cfg("train.epochs=2", "train.checkpoint_every_steps=5", "train.tensorboard=false")
    saves = Saves()
    training.train(cfg, prepared_dir=prepared_image.prepared_dir, output_dir=tmp_path, hooks=[saves])
    assert saves.calls == [(5, 1, 0), (10, 2, 0)]
    cfg = _image_cfg("train.epochs=1", "train.checkpoint_every_steps=2", "train.tensorboard=false")
    saves.calls = []
    training.train(cfg, prepared_dir=prepared_image.prepared_dir, output_dir=tmp_path / "b", hooks=[saves])
    assert saves.calls == [(2, 0, 2), (4, 0, 4), (5, 1, 0)]
