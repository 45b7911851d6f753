"""The airbench model (tfpipe.models.airbench) and train.optimizer.ema_momentum: the whitening kernel fitted
from the data, airbench's test-time views and weights, the faster BatchNorm biases, the preset training
through the train stage and ending on the weights' moving average."""

from __future__ import annotations

from pathlib import Path

import keras
import numpy as np
import pytest
import tensorflow as tf
from test_resume_augmentation import SignalAtStep  # a sink raising SIGTERM at a step

from tfpipe import config, interrupts, models, training
from tfpipe.models.airbench import ScaledBias
from tfpipe.models.image import RandomFlipCrop
from tfpipe.training.lookahead import Lookahead

ROOT = Path(__file__).resolve().parents[1]
NORM = {"mean": [0.47, 0.46, 0.43], "std": [0.24, 0.24, 0.26]}  # per channel, of pixels scaled to [0, 1]

pytestmark = pytest.mark.usefixtures("restore_float32_policy")


def _cfg(*overrides):
    return config.compose(["experiment=cifar10_airbench", *overrides], config_dir=ROOT / "conf")


def _smooth_images(n, seed=0):
    """Images whose neighbouring pixels and channels correlate, as in photographs."""
    rng = np.random.default_rng(seed)
    coarse = rng.normal(128, 50, size=(n, 8, 8, 3)) + rng.normal(0, 30, size=(n, 8, 8, 1))
    return np.clip(
        tf.image.resize(coarse, (32, 32)).numpy() + rng.normal(0, 4, (n, 32, 32, 3)), 0, 255
    ).astype(np.uint8)


def test_the_whitening_kernel_decorrelates_the_train_split_s_2x2_patches():
    cfg = _cfg("model.widths=[8,8,8]", "model.whitening_examples=48")
    model = models.build_model(cfg, num_classes=10, normalization=NORM)
    images = _smooth_images(64)
    batches = [(images[i : i + 16], np.zeros(16)) for i in range(0, 64, 16)]
    stats = models.fit_to_train_split(model, cfg.model, batches, num_classes=10)
    assert stats["whitening_examples"] == 48  # the first 48 images, not all 64
    # The whitening conv's outputs on the same images, computed here with NumPy from the patches.
    x = (images[:48].astype("float64") / 255.0 - np.array(NORM["mean"])) / np.array(NORM["std"])
    kernel = model.get_layer("whiten").kernel.numpy().astype("float64")
    assert kernel.shape == (2, 2, 3, 24)
    patches = np.stack([x[:, i : 31 + i, j : 31 + j] for i in (0, 1) for j in (0, 1)], axis=3).reshape(-1, 12)
    out = patches @ kernel.reshape(12, 24)
    cov = out[:, :12].T @ out[:, :12] / len(out)
    off_diagonal = cov - np.diag(np.diag(cov))
    assert np.abs(off_diagonal).max() < 1e-3  # decorrelated
    # Unit variance, slightly less for the smallest eigenvalues (eps).
    assert np.diag(cov).max() <= 1.0 + 1e-6 and np.diag(cov).min() > 0.5
    np.testing.assert_allclose(out[:, 12:], -out[:, :12], atol=1e-9)  # and their negatives


def _logits_model(model):
    return keras.Model(model.inputs, model.get_layer("logit_scale").output)


@pytest.mark.slow  # builds and fits two airbench models
def test_test_time_views_are_averaged_with_airbench_s_weights_and_training_sees_one_view():
    cfg = _cfg("model.widths=[8,8,8]")
    tta = models.build_model(cfg, num_classes=10, normalization=NORM)
    single = models.build_model(
        _cfg("model.widths=[8,8,8]", "model.tta_level=0"), num_classes=10, normalization=NORM
    )
    fit = [(_smooth_images(32, seed=2), np.zeros(32))]
    models.fit_to_train_split(
        tta, cfg.model, fit, num_classes=10
    )  # an unfitted whitening kernel is all zeros
    head = tta.get_layer("logits")
    head.kernel.assign(head.kernel * 1000.0)  # views' logits far apart, so that a wrong weight shows
    single.set_weights(tta.get_weights())
    images = _smooth_images(5, seed=1)
    padded = np.pad(images, [(0, 0), (1, 1), (1, 1), (0, 0)], mode="reflect")
    up_left, down_right = padded[:, :32, :32], padded[:, 2:, 2:]
    views = [images, images[:, :, ::-1], up_left, up_left[:, :, ::-1], down_right, down_right[:, :, ::-1]]
    logits = [_logits_model(single).predict(v, verbose=0) for v in views]
    merged = 0.25 * (logits[0] + logits[1]) + 0.125 * (logits[2] + logits[3] + logits[4] + logits[5])
    spread = max(np.abs(view - logits[0]).max() for view in logits[1:])
    assert spread > 0.1  # the views differ: equal weights (1/6 each) would miss by ~spread/8
    merged_out = keras.Model(tta.inputs, tta.get_layer("tta_merge").output).predict(images, verbose=0)
    np.testing.assert_allclose(merged_out, merged, rtol=1e-4, atol=1e-3 * spread)
    np.testing.assert_allclose(tta.predict(images, verbose=0), tf.nn.softmax(merged).numpy(), atol=1e-4)
    assert tta(images, training=True).shape == (5, 10)  # training: one view per image (augmented)
    mirror = models.build_model(
        _cfg("model.widths=[8,8,8]", "model.tta_level=1"), num_classes=10, normalization=NORM
    )
    mirror.set_weights(tta.get_weights())
    np.testing.assert_allclose(  # level 1: mirror-invariant
        mirror.predict(images, verbose=0), mirror.predict(images[:, :, ::-1].copy(), verbose=0), atol=1e-5
    )


def test_a_scaled_bias_learns_scale_squared_times_faster_under_sgd():
    x = tf.ones((4, 3))
    fast, plain = ScaledBias(8.0), ScaledBias(1.0)
    for layer in (fast, plain):
        layer.build(x.shape)
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(layer(x))
        keras.optimizers.SGD(0.01).apply([tape.gradient(loss, layer.bias)], [layer.bias])
    # What the layer adds to x moved by 8 * 8 = 64 times as much.
    np.testing.assert_allclose(8.0 * fast.bias.numpy(), 64 * plain.bias.numpy(), rtol=1e-6)


def test_batchnorm_keeps_airbench_s_running_statistics_weight_and_the_head_starts_as_pytorch_s():
    model = models.build_model(_cfg("model.widths=[8,16,16]"), num_classes=10, normalization=NORM)
    norms = [layer for layer in model.layers if isinstance(layer, keras.layers.BatchNormalization)]
    assert len(norms) == 6
    # airbench94 passes momentum=1-0.6 to PyTorch (the new batch's weight): the old statistics keep 0.6.
    x = tf.random.stateless_normal((64, 4, 4, 16), seed=(1, 2)) * 3.0 + 5.0
    bn = norms[-1]
    bn(x, training=True)
    batch_mean = tf.reduce_mean(x, axis=[0, 1, 2]).numpy()
    np.testing.assert_allclose(bn.moving_mean.numpy(), 0.4 * batch_mean, rtol=1e-4)
    # The classifier starts uniform within 1/sqrt(fan_in) (PyTorch's Linear), not Glorot's wider limit.
    kernel = model.get_layer("logits").kernel.numpy()
    assert kernel.shape == (16, 10)
    assert 0.8 / 4.0 < np.abs(kernel).max() <= 1.0 / 4.0


def test_lookahead_averages_weights_and_batchnorm_statistics_every_n_steps_on_airbench_s_ramp():
    inputs = keras.Input((3,))
    dense, norm = keras.layers.Dense(2), keras.layers.BatchNormalization()
    model = keras.Model(inputs, norm(dense(inputs)))
    lookahead = Lookahead(model, every=5, momentum=0.95, total_steps=20)
    kernel, mean = dense.kernel.numpy(), norm.moving_mean.numpy()
    dense.kernel.assign(kernel + 1.0)  # what training moved
    norm.moving_mean.assign(mean + 2.0)
    lookahead.sync(tf.constant(9, tf.int64))  # not a multiple of 5: nothing happens
    np.testing.assert_allclose(dense.kernel.numpy(), kernel + 1.0)
    lookahead.sync(tf.constant(10, tf.int64))
    decay = 0.95**5 * (10 / 20) ** 3  # airbench94: alpha = 0.95^5 (step / total)^3 at every 5th step
    # float32 arithmetic on values up to ~3: a random kernel entry near 0 needs an absolute tolerance (one
    # came out 1.5e-8 off at 0.0012 under another test order); the claim's steps differ by ~0.03.
    close = dict(rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(dense.kernel.numpy(), kernel + (1 - decay), **close)
    np.testing.assert_allclose(norm.moving_mean.numpy(), mean + 2 * (1 - decay), **close)
    dense.kernel.assign(kernel + 7.0)
    lookahead.finalize()  # the run ends on the slow copies, not on where training left the weights
    np.testing.assert_allclose(dense.kernel.numpy(), kernel + (1 - decay), **close)


def test_alternating_flips_mirror_each_image_every_other_epoch_from_its_own_start():
    layer = RandomFlipCrop(pad=0, seed=0, alternate=True)
    images = _smooth_images(16)

    def mirrored(batch, epoch):
        layer.set_epoch(epoch)
        out = layer(batch, training=True).numpy()
        flips = np.array([np.array_equal(o, b[:, ::-1]) for o, b in zip(out, batch)])
        assert all(f or np.array_equal(o, b) for f, o, b in zip(flips, out, batch))  # as is, or its mirror
        return flips

    first, second, third = mirrored(images, 0), mirrored(images, 1), mirrored(images, 2)
    assert (first != second).all() and (first == third).all()  # every other epoch
    # The start is the parity of the image's pixel sum: its own, wherever it sits in a batch.
    np.testing.assert_array_equal(first, images.reshape(16, -1).sum(axis=1) % 2 == 1)
    assert 0 < first.sum() < 16
    order = np.random.default_rng(1).permutation(16)
    np.testing.assert_array_equal(mirrored(images[order], 0), first[order])
    np.testing.assert_array_equal(layer(images, training=False).numpy(), images)  # inference: untouched


def test_the_whitening_bias_leaves_the_trainable_variables_from_its_last_epoch_on():
    model = models.build_model(
        _cfg("model.widths=[8,8,8]", "model.whiten_bias_epochs=3"), num_classes=10, normalization=NORM
    )
    whiten = model.get_layer("whiten")

    def trained():
        return any(v is whiten.bias for v in model.trainable_variables)

    assert trained() and whiten.set_epoch(2) is False and trained()  # epochs 0-2 train it
    assert whiten.set_epoch(3) is True and not trained()  # changed: the step must be traced anew
    assert whiten.set_epoch(4) is False and not trained()


def test_the_preset_flips_and_freezes_the_whitening_bias_as_airbench():
    cfg = _cfg()
    assert cfg.model.alternate_flips is True and cfg.model.whiten_bias_epochs == 3  # airbench94's hyp


def test_bad_airbench_values_are_refused_in_one_line():
    from tfpipe.errors import ConfigError

    for override, key in [
        ("model.tta_level=3", "model.tta_level=3"),
        ("model.widths=[]", "model.widths"),
        ("model.bn_momentum=1.5", "model.bn_momentum"),
        ("model.dense_units=16", "model.dense_units=16"),
        ("model.whiten_bias_epochs=-1", "model.whiten_bias_epochs=-1"),
        ("model.alternate_flips=true model.flip=false", "model.alternate_flips=true: needs model.flip=true"),
        ("train.optimizer.ema_momentum=1.0", "train.optimizer.ema_momentum"),
        ("train.optimizer.lookahead_every=-1", "train.optimizer.lookahead_every"),
        ("train.optimizer.lookahead_momentum=1.0", "train.optimizer.lookahead_momentum"),
        (
            "train.optimizer.ema_momentum=0.9",
            "train.optimizer.lookahead_every=5: the run ends on one average",
        ),
    ]:
        with pytest.raises(ConfigError, match=key.replace("[", r"\[")):
            _cfg(*override.split())


def _train(prepared, out, *overrides, sink=None):
    cfg = _cfg(
        "model.widths=[8,8,8]",
        "train.batch_size_per_replica=4",
        "train.lr_schedule.warmup_epochs=0.5",
        "train.tensorboard=false",
        "train.steps_per_execution=1",
        *overrides,
    )
    return training.train(cfg, prepared_dir=prepared.prepared_dir, output_dir=out, sink=sink)


def _exported(result) -> dict:
    with np.load(result.saved_model_dir / "keras_weights.npz") as npz:
        return {k: npz[k] for k in npz.files}


@pytest.mark.slow
def test_the_preset_trains_ends_on_the_weight_average_and_resumes_it_bit_identically(
    prepared_image, tmp_path
):
    # Lookahead every 3 of the 10 steps: synced at 3, 6 and 9, so the end (step 10) takes the slow copies.
    args = ("train.epochs=2", "train.log_every_steps=1", "train.optimizer.lookahead_every=3")
    full = _train(prepared_image, tmp_path / "full", *args)
    assert full.steps == 10 and np.isfinite(full.history[-1]["epoch_train_loss"])  # 21 train images, batch 4
    probs = tf.saved_model.load(str(full.saved_model_dir)).signatures["serving_default"](
        image=tf.constant(_smooth_images(2))
    )["probabilities"]
    np.testing.assert_allclose(probs.numpy().sum(axis=1), 1.0, atol=1e-4)  # 6 views inside the export
    # Without lookahead, and with the per-step EMA instead, the same run ends on other weights.
    off = ("train.optimizer.lookahead_every=0",)
    raw = _train(prepared_image, tmp_path / "raw", *args, *off)
    ema = _train(prepared_image, tmp_path / "ema", *args, *off, "train.optimizer.ema_momentum=0.9")
    a, b, c = _exported(full), _exported(raw), _exported(ema)
    for other in (b, c):
        assert any(not np.array_equal(a[k], other[k]) for k in a if "kernel" in k)
    assert any(not np.array_equal(b[k], c[k]) for k in b if "kernel" in k)
    # The slow copies start from the fitted (not the built, all-zero) whitening kernel.
    assert np.abs(a["whiten/kernel"]).max() > 0
    np.testing.assert_allclose(a["whiten/kernel"], b["whiten/kernel"], rtol=1e-5)
    # Lookahead with momentum 0 takes the trained weights at every sync, so syncing at step 10 (every 5) ends
    # on the run without it, bit for bit, while syncing last at step 9 (every 3) ends on step 9's weights.
    zero = ("train.optimizer.lookahead_momentum=0",)
    every5 = _train(prepared_image, tmp_path / "z5", *args, *zero, "train.optimizer.lookahead_every=5")
    every3 = _train(prepared_image, tmp_path / "z3", *args, *zero)
    assert every5.weights_sha256 == raw.weights_sha256 != every3.weights_sha256
    # Stopped by SIGTERM mid-epoch (after the lookahead at step 6) and resumed: the checkpoint carried the slow
    # weights on, so the end is bit-identical.
    out = tmp_path / "resumed"
    with interrupts.graceful_stop(), pytest.raises(interrupts.Interrupted):
        _train(prepared_image, out, *args, sink=SignalAtStep(7))
    resumed = _train(prepared_image, out, *args)
    assert resumed.resumed and resumed.resumed_at_step == 7 and resumed.weights_sha256 == full.weights_sha256


@pytest.mark.slow
def test_the_whitening_bias_stays_after_its_epochs_and_flips_follow_the_epoch_also_when_resumed(
    prepared_image, tmp_path
):
    # A constant learning rate and no weight average: epoch 1 of a 2-epoch run is a 1-epoch run, step for step.
    args = (
        "train.lr_schedule.name=constant",
        "train.optimizer.lookahead_every=0",
        "model.alternate_flips=true",
    )
    one = _exported(_train(prepared_image, tmp_path / "one", *args, "train.epochs=1"))
    two = ("train.epochs=2", "model.whiten_bias_epochs=1", "train.log_every_steps=1")
    frozen = _train(prepared_image, tmp_path / "frozen", *args, *two)
    trained = _exported(_train(prepared_image, tmp_path / "trained", *args, "train.epochs=2"))
    after = _exported(frozen)
    np.testing.assert_array_equal(after["whiten/bias"], one["whiten/bias"])  # not trained in epoch 2
    assert not np.array_equal(trained["whiten/bias"], one["whiten/bias"])  # trained without the freeze
    assert not np.array_equal(after["block1_conv1/kernel"], one["block1_conv1/kernel"])  # the rest trained on
    assert int(after["augment/epoch"]) == 2  # the flips' epoch followed the loop's (set after each epoch)
    # Stopped by SIGTERM in epoch 2 (step 7) and resumed: the bias is frozen again, the end bit-identical.
    out = tmp_path / "resumed"
    with interrupts.graceful_stop(), pytest.raises(interrupts.Interrupted):
        _train(prepared_image, out, *args, *two, sink=SignalAtStep(7))
    resumed = _train(prepared_image, out, *args, *two)
    assert resumed.resumed_at_step == 7 and resumed.weights_sha256 == frozen.weights_sha256
