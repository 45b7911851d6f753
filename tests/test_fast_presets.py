"""The performance presets' pieces: resnet (augmentation, test-time flip), ngram_bag, the one-cycle
schedule, precision `auto`, and the cifar10_fast / imdb_fast presets training on the tiny fixtures."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf
from conftest import TINY_VOCAB as VOCAB  # noqa: E402
from conftest import default_policy

from tfpipe import config, hardware, models, precision, training
from tfpipe.errors import ConfigError
from tfpipe.models.image import RandomFlipCrop
from tfpipe.models.text import HashedNgrams

ROOT = Path(__file__).resolve().parents[1]


pytestmark = pytest.mark.usefixtures("restore_float32_policy")


def _cfg(*overrides):
    return config.compose(list(overrides), config_dir=ROOT / "conf")


def _images(n, seed=0):
    return np.random.default_rng(seed).integers(0, 256, size=(n, 32, 32, 3), dtype=np.uint8)


def _serve(saved_dir, **inputs):
    fn = tf.saved_model.load(str(saved_dir)).signatures["serving_default"]
    out = fn(**{k: tf.constant(v) for k, v in inputs.items()})["probabilities"]
    assert out.dtype == tf.float32
    return out.numpy()


def test_resnet_exports_raw_uint8_and_its_flip_tta_is_mirror_invariant(tmp_path):
    cfg = _cfg("model=resnet", "model.filters=[8,16]")
    model = models.build_model(cfg, num_classes=10, normalization={"mean": [0.5] * 3, "std": [0.25] * 3})
    assert model.inputs[0].dtype == "uint8" and tuple(model.inputs[0].shape) == (None, 32, 32, 3)
    images = _images(3)
    probs = model.predict(images, verbose=0)
    assert probs.shape == (3, 10) and probs.dtype == np.float32
    np.testing.assert_allclose(probs.sum(axis=1), 1.0, atol=1e-5)
    # Test-time flip: an image and its mirror get the same (averaged) prediction.
    np.testing.assert_allclose(model.predict(images[:, :, ::-1], verbose=0), probs, atol=1e-5)
    models.export_saved_model(
        model,
        tmp_path / "m",
        modality="image",
        image_shape=[32, 32, 3],
        class_names=[str(i) for i in range(10)],
    )
    np.testing.assert_allclose(_serve(tmp_path / "m", image=images), probs, atol=1e-5)
    # In training the batch is not doubled: one output row per image.
    assert model(images, training=True).shape == (3, 10)


def test_random_flip_crop_only_in_training_and_crops_from_the_padded_image():
    layer = RandomFlipCrop(pad=4, seed=1)
    images = _images(16, seed=2)
    np.testing.assert_array_equal(layer(images, training=False), images)
    out = layer(images, training=True).numpy()
    assert out.shape == images.shape and out.dtype == np.uint8
    assert (out != images).any(axis=(1, 2, 3)).sum() >= 8  # most images moved or flipped
    padded = np.pad(images, [(0, 0), (4, 4), (4, 4), (0, 0)], mode="reflect")
    for i in range(16):  # every output is a 32x32 window of the padded image, possibly mirrored
        windows = [padded[i, y : y + 32, x : x + 32] for y in range(9) for x in range(9)]
        assert any((out[i] == w).all() or (out[i] == w[:, ::-1]).all() for w in windows)


def test_hashed_ngrams_keep_padding_and_hash_after_the_vocabulary():
    layer = HashedNgrams(base=7, ngrams=3, buckets=50)
    ids = tf.constant([[2, 3, 4, 0, 0], [5, 5, 0, 0, 0]], tf.int64)
    out = layer(ids).numpy()
    assert out.shape == (2, 5 + 4 + 3)
    np.testing.assert_array_equal(out[:, :5], ids.numpy())
    bigrams, trigrams = out[:, 5:9], out[:, 9:]
    assert (bigrams[0, :2] >= 7).all() and (bigrams[0, 2:] == 0).all()  # (4, 0), (0, 0) touch padding
    assert bigrams[1, 0] >= 7 and (bigrams[1, 1:] == 0).all()
    assert trigrams[0, 0] >= 7 and (trigrams[0, 1:] == 0).all() and (trigrams[1] == 0).all()
    assert out.max() < 7 + 50
    # the same bigram gets the same id wherever it occurs
    again = layer(tf.constant([[9, 2, 3, 0, 0]], tf.int64)).numpy()
    assert again[0, 6] == out[0, 5]


@pytest.mark.slow  # trains and exports a model (about 20 s)
def test_ngram_bag_exports_raw_strings(tmp_path):
    cfg = _cfg("dataset=imdb", "model=ngram_bag", "dataset.sequence_length=12", "model.hash_buckets=64")
    model = models.build_model(cfg, num_classes=2, vocab_size=len(VOCAB))
    assert model.get_layer("embedding").input_dim == len(VOCAB) + models.NUM_SPECIAL_TOKENS + 64
    vec = models.make_text_vectorizer(VOCAB, 12)
    models.export_saved_model(
        model, tmp_path / "t", modality="text", vectorizer=vec, class_names=["neg", "pos"]
    )
    reviews = ["A great film!", "Boring, AWFUL... the worst", ""]
    probs = _serve(tmp_path / "t", text=reviews)
    assert probs.shape == (3, 2)
    np.testing.assert_allclose(probs, model.predict(vec(tf.constant(reviews)), verbose=0), atol=1e-6)


def test_onecycle_schedule_rises_linearly_then_falls_to_zero():
    s = training.WarmupSchedule(0.2, total_steps=100, warmup_steps=25, decay="onecycle")
    assert float(s(0)) == pytest.approx(0.2 / 25)
    assert float(s(24)) == pytest.approx(0.2) and float(s(25)) == pytest.approx(0.2)
    assert float(s(62.5)) == pytest.approx(0.1, rel=1e-5)
    assert float(s(100)) == pytest.approx(0.0, abs=1e-9) and float(s(400)) == pytest.approx(0.0, abs=1e-9)
    cfg = _cfg("experiment=cifar10_fast")
    sched = training.make_lr_schedule(cfg.train, steps_per_epoch=10)
    assert sched.decay == "onecycle" and sched.warmup_steps == 30 and sched.total_steps == 150


def test_onecycle_schedule_can_start_and_end_at_fractions_of_the_peak():
    # airbench94's triangle: 0.2 x peak at step 0, the peak at 23 of 100 steps, 0.07 x peak at the end.
    s = training.WarmupSchedule(1.0, total_steps=100, warmup_steps=23, decay="onecycle", start=0.2, end=0.07)
    assert float(s(0)) == pytest.approx(0.2 + 0.8 / 23)
    assert float(s(22)) == pytest.approx(1.0) and float(s(23)) == pytest.approx(1.0)
    assert float(s(23 + 77 / 2)) == pytest.approx((1.0 + 0.07) / 2, rel=1e-5)
    assert float(s(100)) == pytest.approx(0.07, rel=1e-5) and float(s(400)) == pytest.approx(0.07, rel=1e-5)
    cosine = training.WarmupSchedule(0.5, total_steps=10, decay="cosine", end=0.1)
    assert float(cosine(0)) == pytest.approx(0.5) and float(cosine(10)) == pytest.approx(0.05, rel=1e-5)
    sched = training.make_lr_schedule(_cfg("experiment=cifar10_airbench").train, steps_per_epoch=10)
    assert (sched.start, sched.end, sched.warmup_steps, sched.total_steps) == (0.2, 0.07, 23, 100)
    for bad in ("train.lr_schedule.start_fraction=-0.1", "train.lr_schedule.end_fraction=1.5"):
        with pytest.raises(ConfigError, match=bad.split("=")[0].replace(".", r"\.")):
            _cfg(bad)


def test_precision_auto_follows_the_cpu_flags(tmp_path, monkeypatch):
    amx = tmp_path / "amx"
    amx.write_text("processor\t: 0\nflags\t\t: fpu sse avx512f amx_bf16 amx_tile\n")
    plain = tmp_path / "plain"
    plain.write_text("processor\t: 0\nflags\t\t: fpu sse avx2\n")
    assert precision.cpu_has_fast_bf16(str(amx)) and not precision.cpu_has_fast_bf16(str(plain))
    assert not precision.cpu_has_fast_bf16(str(tmp_path / "missing"))
    # oneDNN capped below AVX512_CORE_BF16 runs bf16 on slow kernels whatever the flags say
    for cap, fast in (("avx2", False), ("AVX512_CORE", False), ("AVX512_CORE_BF16", True), ("ALL", True)):
        assert precision.cpu_has_fast_bf16(str(amx), environ={"ONEDNN_MAX_CPU_ISA": cap}) is fast, cap
    assert not precision.cpu_has_fast_bf16(str(amx), environ={"DNNL_MAX_CPU_ISA": "AVX512_CORE_VNNI"})
    assert hardware.cpu_kernels(str(amx), environ={}) == "avx512f amx_bf16"
    assert hardware.cpu_kernels(str(plain), environ={"ONEDNN_MAX_CPU_ISA": "sse41"}) == (
        "avx2; ONEDNN_MAX_CPU_ISA=SSE41"
    )
    assert precision.resolve_policy("float32") == "float32"
    expected = default_policy()  # read from /proc/cpuinfo by the test, not by the code under test
    assert precision.resolve_policy("auto") == expected
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # auto never picks a policy it warns about
        assert precision.apply_policy("auto") == expected == precision.current_policy()
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX2")
    assert precision.resolve_policy("auto") == "float32"
    with pytest.raises(ConfigError, match="ONEDNN_MAX_CPU_ISA=AVX2 leaves oneDNN without bfloat16 kernels"):
        precision.apply_policy("mixed_bfloat16")  # not through the CLI's preflight either
    assert precision.current_policy() == expected
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX512_CORE")  # bf16 kernels, emulated: allowed, not auto
    assert precision.resolve_policy("auto") == "float32"
    with pytest.warns(RuntimeWarning, match="bfloat16 compute is emulated and slower than float32"):
        with precision.policy_scope("mixed_bfloat16") as name:
            assert name == "mixed_bfloat16"
    assert hardware.bf16_refusal("mixed_bfloat16") is None and hardware.bf16_refusal("float32") is None
    monkeypatch.delenv("ONEDNN_MAX_CPU_ISA")
    from tfpipe import tracking

    tags = tracking.run_tags(_cfg("precision=auto"), None, None, {})
    assert tags["precision"] == "auto" and tags["precision.resolved"] == expected


def test_bad_preset_values_are_refused_in_one_line():
    from tfpipe.errors import ConfigError

    with pytest.raises(ConfigError, match="model.ngrams"):
        _cfg("experiment=imdb_fast", "model.ngrams=0")
    with pytest.raises(ConfigError, match="model.min_documents"):
        _cfg("experiment=imdb_fast", "model.min_documents=0")
    with pytest.raises(ConfigError, match="dataset.standardize='keep'"):
        _cfg("dataset=imdb", "dataset.standardize=keep")
    with pytest.raises(ConfigError, match="onecycle"):
        _cfg("train.lr_schedule.name=triangle")
    with pytest.raises(ConfigError, match="auto"):
        _cfg("precision.policy=fastest")


@pytest.mark.slow
def test_cifar10_fast_preset_trains_two_steps(prepared_image, tmp_path):
    cfg = _cfg(
        "experiment=cifar10_fast",
        "model.filters=[8,8]",
        "train.batch_size_per_replica=4",
        "train.epochs=1",
        "train.steps_per_epoch=2",
        "train.lr_schedule.warmup_epochs=0.5",
        "train.tensorboard=false",
    )
    assert cfg.model.name == "resnet" and cfg.train.optimizer.nesterov and cfg.precision.policy == "auto"
    result = training.train(cfg, prepared_dir=prepared_image.prepared_dir, output_dir=tmp_path)
    assert result.steps == 2 and result.precision == default_policy()
    assert np.isfinite(result.history[0]["epoch_train_loss"])
    probs = _serve(result.saved_model_dir, image=_images(2))
    np.testing.assert_allclose(probs.sum(axis=1), 1.0, atol=1e-3)


def test_split_punctuation_makes_marks_tokens_and_drops_html_breaks():
    from tfpipe.textnorm import split_punctuation

    out = split_punctuation(tf.constant(["Great!<br /><br />Don't MISS it (9/10)?"])).numpy()[0].decode()
    assert out.split() == ["great", "!", "don't", "miss", "it", "(", "9", "/", "10", ")", "?"]
    vec = models.make_text_vectorizer(["great", "!", "awful"], 4, "split_punctuation")
    np.testing.assert_array_equal(vec(tf.constant(["GREAT!! awful"])).numpy(), [[2, 3, 3, 4]])
    strip = models.make_text_vectorizer(["great", "!", "awful"], 4)  # the default drops the marks
    np.testing.assert_array_equal(strip(tf.constant(["GREAT!! awful"])).numpy(), [[2, 4, 0, 0]])


def test_distinct_ids_keep_each_feature_once_per_row():
    from tfpipe.models.text import DistinctIds

    out = DistinctIds()(tf.constant([[5, 3, 5, 0, 3, 9], [0, 0, 0, 0, 0, 0]], tf.int64)).numpy()
    assert sorted(out[0][out[0] > 0].tolist()) == [3, 5, 9] and (out[1] == 0).all()


def test_nb_ratios_are_the_smoothed_log_count_ratios():
    cfg = _cfg(
        "dataset=imdb", "model=nbsvm", "dataset.sequence_length=4", "model.ngrams=1", "model.min_documents=1"
    )
    model = models.build_model(cfg, num_classes=2, vocab_size=3)  # ids 2, 3, 4 (0 padding, 1 OOV)
    tokens = tf.constant([[2, 2, 3, 0], [2, 4, 0, 0], [4, 0, 0, 0]], tf.int64)  # id 2 twice: counted once
    labels = tf.constant([1, 1, 0], tf.int64)
    stats = models.fit_to_train_split(model, cfg.model, [(tokens, labels)], num_classes=2)
    assert stats["documents"] == 3 and stats["features_seen"] == 3
    r = model.get_layer("nb_ratios").get_weights()[0]
    # class 1 documents hold 2:2, 3:1, 4:1 (sum+smoothing: 3,2,2 of 7 + ...); class 0 holds 4:1
    p1 = np.array([0, 0, 2 + 1, 1 + 1, 1 + 1], float)[2:]
    p0 = np.array([0, 0, 0 + 1, 0 + 1, 1 + 1], float)[2:]
    expected = np.log(p1 / p1.sum()) - np.log(p0 / p0.sum())
    np.testing.assert_allclose(r[2:5, 1], expected, rtol=1e-5)
    np.testing.assert_allclose(r[2:5, 0], -expected, rtol=1e-5)
    assert (r[:2] == 0).all()  # padding and (unseen) OOV carry no evidence
    # min_documents: a feature in fewer documents gets no ratio
    cfg.model.min_documents = 2
    models.fit_to_train_split(model, cfg.model, [(tokens, labels)], num_classes=2)
    r = model.get_layer("nb_ratios").get_weights()[0]
    assert r[2, 1] != 0 and r[4, 1] != 0 and r[3, 1] == 0
    # The naive Bayes ratios alone already classify: w starts near 0, so the logits are ~0.04 sum(r).
    probs = model.predict(tf.constant([[2, 0, 0, 0], [4, 0, 0, 0]], tf.int64), verbose=0)
    assert probs[0, 1] > 0.5 > probs[1, 1]


@pytest.mark.slow
def test_imdb_fast_preset_trains_two_steps_and_serves_raw_strings(text_dir, tmp_path):
    from conftest import prepare_tree

    prepared = prepare_tree(text_dir, tmp_path / "prepared", "experiment=imdb_fast")
    cfg = _cfg(
        "experiment=imdb_fast",
        "model.hash_buckets=256",
        "model.min_documents=1",
        "train.batch_size_per_replica=4",
        "train.epochs=1",
        "train.steps_per_epoch=2",
        "train.tensorboard=false",
    )
    assert cfg.model.name == "nbsvm" and cfg.dataset.standardize == "split_punctuation"
    result = training.train(cfg, prepared_dir=prepared.prepared_dir, output_dir=tmp_path / "out")
    assert result.steps == 2 and np.isfinite(result.history[0]["epoch_train_loss"])
    assert result.history[0]["val_accuracy"] == 1.0  # the fixture's sentiment words separate the classes
    probs = _serve(result.saved_model_dir, text=["a wonderful, great film!", "awful and boring..."])
    assert probs[0, 1] > 0.5 > probs[1, 1]


def test_a_vocabulary_standardised_otherwise_is_refused(prepared_text, tmp_path):
    from tfpipe.errors import DataError

    cfg = _cfg(
        "dataset=imdb", "dataset.standardize=split_punctuation", "train.epochs=1", "train.steps_per_epoch=1"
    )
    with pytest.raises(
        DataError, match="standardize='strip_punctuation' but the config wants 'split_punctuation'"
    ):
        training.train(cfg, prepared_dir=prepared_text.prepared_dir, output_dir=tmp_path)


@pytest.mark.parametrize("model, refused", [("resnet", True), ("airbench", True), ("cnn", False)])
def test_a_model_registered_as_normalized_refuses_a_manifest_without_the_statistics(
    prepared_image, make_config, model, refused
):
    """resnet and airbench normalise with the train split's statistics (their registry entries say so, no name
    check elsewhere): a manifest prepared without them is one line naming the model; others do not need them."""
    import json

    from tfpipe.errors import DataError
    from tfpipe.training.task import read_input_spec

    manifest = json.loads((prepared_image.prepared_dir / "manifest.json").read_text())
    assert manifest["normalization"]  # what prepare writes today
    del manifest["normalization"]
    cfg = make_config(*prepared_image_overrides(prepared_image), f"model={model}")
    if refused:
        with pytest.raises(DataError, match=f"which model {model} needs"):
            read_input_spec(cfg, manifest, prepared_image.prepared_dir)
    else:
        assert read_input_spec(cfg, manifest, prepared_image.prepared_dir).normalization is None


def prepared_image_overrides(prepared) -> list:
    return ["data.source=directory", f"data.output_dir={prepared.prepared_dir}"]
