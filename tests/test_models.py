"""Model builders, the text vectorizer, and the SavedModel export on raw inputs."""

from __future__ import annotations

from pathlib import Path

import keras
import numpy as np
import pytest
import tensorflow as tf
from conftest import TINY_VOCAB as VOCAB  # noqa: E402

from tfpipe import models, precision

ROOT = Path(__file__).resolve().parents[1]


pytestmark = pytest.mark.usefixtures("restore_float32_policy")


@pytest.fixture(scope="module")
def image_cfg():
    from tfpipe import config

    return config.compose(
        ["model.filters=[8,16,16]", "model.dense_units=16", "model.dropout=0.2"], config_dir=ROOT / "conf"
    )


@pytest.fixture(scope="module")
def text_cfg():
    from tfpipe import config

    return config.compose(
        ["dataset=imdb", "dataset.sequence_length=12", "model.dropout=0.1"], config_dir=ROOT / "conf"
    )


def _images(n, seed=0):
    return np.random.default_rng(seed).integers(0, 256, size=(n, 32, 32, 3), dtype=np.uint8)


def test_cnn_takes_uint8_images_and_outputs_class_probabilities(image_cfg):
    model = models.build_model(image_cfg, num_classes=10)
    assert model.inputs[0].dtype == "uint8" and tuple(model.inputs[0].shape) == (None, 32, 32, 3)
    convs = [l for l in model.layers if isinstance(l, keras.layers.Conv2D)]
    pools = [l for l in model.layers if isinstance(l, keras.layers.MaxPooling2D)]
    assert [c.filters for c in convs] == [8, 16, 16] and len(pools) == 2  # last block unpooled
    assert any(isinstance(l, keras.layers.Rescaling) for l in model.layers)
    assert any(isinstance(l, keras.layers.Dropout) for l in model.layers)
    out = model.predict(_images(5), verbose=0)
    assert out.shape == (5, 10) and out.dtype == np.float32
    np.testing.assert_allclose(out.sum(axis=1), 1.0, atol=1e-5)


def test_cnn_rescales_inside_the_model(image_cfg):
    """Pixel values go through Rescaling(1/255): a white image is not 255x a grey-ish one's activations."""
    model = models.build_model(image_cfg, num_classes=3)
    scaled = model.get_layer("rescale")(tf.constant(np.full((1, 32, 32, 3), 255, np.uint8)))
    assert float(tf.reduce_max(scaled)) == pytest.approx(1.0)


def test_embedding_gap_takes_token_ids(text_cfg):
    model = models.build_model(text_cfg, num_classes=2, vocab_size=len(VOCAB))
    assert model.get_layer("embedding").input_dim == len(VOCAB) + models.NUM_SPECIAL_TOKENS
    assert model.get_layer("embedding").output_dim == text_cfg.model.embedding_dim
    assert tuple(model.inputs[0].shape) == (None, 12)
    tokens = np.random.default_rng(0).integers(0, len(VOCAB) + 2, size=(4, 12))
    out = model.predict(tokens, verbose=0)
    assert out.shape == (4, 2)
    np.testing.assert_allclose(out.sum(axis=1), 1.0, atol=1e-5)


def test_build_model_refuses_bad_arguments(text_cfg, image_cfg):
    import dataclasses

    with pytest.raises(ValueError, match="vocab_size"):
        models.build_model(text_cfg, num_classes=2)
    bad = dataclasses.replace(image_cfg, model=dataclasses.replace(image_cfg.model, name="vgg16"))
    with pytest.raises(ValueError, match="cnn"):
        models.build_model(bad, num_classes=2)


def test_text_vectorizer_adds_padding_and_oov_and_standardises():
    vec = models.make_text_vectorizer(VOCAB, sequence_length=6)
    assert vec.vocabulary_size() == len(VOCAB) + 2
    assert vec.get_vocabulary()[:2] == ["", "[UNK]"]
    ids = vec(tf.constant(["The FILM, great!", "unknownword the"])).numpy()
    assert ids.shape == (2, 6)
    assert list(ids[0]) == [
        2 + VOCAB.index("the"),
        2 + VOCAB.index("film"),
        2 + VOCAB.index("great"),
        0,
        0,
        0,
    ]
    assert list(ids[1][:2]) == [1, 2 + VOCAB.index("the")]


def _serve(saved_dir, **inputs):
    loaded = tf.saved_model.load(str(saved_dir))
    fn = loaded.signatures["serving_default"]
    return loaded, fn, fn(**inputs)


def test_export_image_round_trip(tmp_path, image_cfg):
    model = models.build_model(image_cfg, num_classes=3)
    export_dir = tmp_path / "saved_model"
    models.export_saved_model(
        model, export_dir, modality="image", image_shape=[32, 32, 3], class_names=["blue", "green", "red"]
    )
    images = _images(4, seed=1)
    loaded, fn, out = _serve(export_dir, image=tf.constant(images))
    _, kwargs = fn.structured_input_signature
    assert set(kwargs) == {"image"} and kwargs["image"].dtype == tf.uint8
    assert kwargs["image"].shape.as_list() == [None, 32, 32, 3]
    assert set(out) == {"probabilities"} and out["probabilities"].dtype == tf.float32
    probs = out["probabilities"].numpy()
    np.testing.assert_allclose(probs.sum(axis=1), 1.0, atol=1e-5)
    np.testing.assert_allclose(probs, model.predict(images, verbose=0), atol=1e-6)
    assert [c.decode() for c in loaded.class_names.numpy()] == ["blue", "green", "red"]
    assert models.load_class_names(export_dir) == ["blue", "green", "red"]


def test_export_replaces_an_existing_model_and_leaves_no_temp_dirs(tmp_path, image_cfg):
    export_dir = tmp_path / "saved_model"
    first = models.build_model(image_cfg, num_classes=3)
    models.export_saved_model(first, export_dir, modality="image", image_shape=[32, 32, 3], class_names="abc")
    second = models.build_model(image_cfg, num_classes=2)
    models.export_saved_model(
        second, export_dir, modality="image", image_shape=[32, 32, 3], class_names=["x", "y"]
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["saved_model"]
    _, _, out = _serve(export_dir, image=tf.constant(_images(2)))
    assert out["probabilities"].shape == (2, 2)
    assert models.load_class_names(export_dir) == ["x", "y"]


def test_export_text_takes_raw_strings(tmp_path, text_cfg):
    model = models.build_model(text_cfg, num_classes=2, vocab_size=len(VOCAB))
    vec = models.make_text_vectorizer(VOCAB, text_cfg.dataset.sequence_length)
    export_dir = tmp_path / "text_model"
    models.export_saved_model(model, export_dir, modality="text", vectorizer=vec, class_names=["neg", "pos"])
    reviews = ["A great film!", "Boring, AWFUL... the worst", ""]
    _, fn, out = _serve(export_dir, text=tf.constant(reviews))
    _, kwargs = fn.structured_input_signature
    assert (
        set(kwargs) == {"text"}
        and kwargs["text"].dtype == tf.string
        and kwargs["text"].shape.as_list() == [None]
    )
    probs = out["probabilities"].numpy()
    assert probs.shape == (3, 2) and probs.dtype == np.float32
    np.testing.assert_allclose(probs.sum(axis=1), 1.0, atol=1e-5)
    expected = model.predict(vec(tf.constant(reviews)), verbose=0)
    np.testing.assert_allclose(probs, expected, atol=1e-6)


def test_export_under_mixed_bfloat16_serves_float32(tmp_path, image_cfg):
    from tfpipe.config import PrecisionConfig

    precision.apply_policy(PrecisionConfig(policy="mixed_bfloat16"))
    model = models.build_model(image_cfg, num_classes=3)
    models.export_saved_model(
        model, tmp_path / "m", modality="image", image_shape=[32, 32, 3], class_names="abc"
    )
    keras.mixed_precision.set_global_policy("float32")
    _, _, out = _serve(tmp_path / "m", image=tf.constant(_images(3)))
    assert out["probabilities"].dtype == tf.float32
    np.testing.assert_allclose(out["probabilities"].numpy().sum(axis=1), 1.0, atol=1e-3)


def test_export_refuses_missing_pieces(tmp_path, image_cfg):
    model = models.build_model(image_cfg, num_classes=3)
    with pytest.raises(ValueError, match="image_shape"):
        models.export_saved_model(model, tmp_path / "a", modality="image", class_names="abc")
    with pytest.raises(ValueError, match="vectorizer"):
        models.export_saved_model(model, tmp_path / "b", modality="text", class_names="abc")
    assert not list(tmp_path.iterdir())
