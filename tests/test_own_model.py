"""A team's own model by import path (issue 34, item 1): `conf/model/<name>.yaml` with `builder:` and `params:`,
no edit to tfpipe. The builder gets what the task knows and its params, returns logits; tfpipe trains it under the
policy, appends the float32 softmax and exports it serving raw input. Bad builders are one line before training."""

from __future__ import annotations

import shutil
from pathlib import Path

import keras
import numpy as np
import pytest
import tensorflow as tf

from tfpipe import config, training
from tfpipe.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]
SEEN: list = []  # what build_tiny was called with (module state: the test reads it back)


def build_tiny(inputs, units: int = 4, scale: float = 255.0):
    """A team's builder: its own layers, its own rescaling, one logit per class."""
    SEEN.append((inputs, units, scale))
    x = inputs.input()
    h = keras.layers.Rescaling(1.0 / scale)(x)
    h = keras.layers.GlobalAveragePooling2D()(h)
    h = keras.layers.Dense(units, activation="relu", name="team_hidden")(h)
    return keras.Model(x, keras.layers.Dense(inputs.num_classes, name="team_logits")(h))


def build_wrong_width(inputs):
    x = inputs.input()
    return keras.Model(x, keras.layers.Dense(inputs.num_classes + 1)(keras.layers.Flatten()(x)))


def build_nothing(inputs):
    return "not a model"


def _conf(tmp_path: Path, body: str) -> Path:
    """conf/ plus the team's one model file, conf/model/tiny_team.yaml."""
    conf = tmp_path / "conf"
    shutil.copytree(ROOT / "conf", conf)
    (conf / "model" / "tiny_team.yaml").write_text(body)
    return conf


GOOD = "name: tiny_team\nbuilder: test_own_model:build_tiny\nparams:\n  units: 6\n"


def test_a_team_model_trains_and_exports_serving_raw_images(prepared_image, tmp_path):
    SEEN.clear()
    conf = _conf(tmp_path, GOOD)
    cfg = config.compose(
        ["model=tiny_team", "train.epochs=1", "train.batch_size_per_replica=4"], config_dir=conf
    )
    assert cfg.model.name == "tiny_team" and cfg.model.params == {"units": 6}
    result = training.train(cfg, prepared_dir=prepared_image.prepared_dir, output_dir=tmp_path / "out")
    ((inputs, units, scale),) = SEEN
    assert (inputs.modality, inputs.num_classes, inputs.image_shape, units, scale) == (
        "image",
        3,
        (32, 32, 3),
        6,
        255.0,
    )
    assert inputs.normalization and len(inputs.normalization["mean"]) == 3  # the manifest's statistics
    assert len(result.history) == 1
    serve = tf.saved_model.load(str(result.saved_model_dir)).signatures["serving_default"]
    images = np.random.default_rng(0).integers(0, 256, size=(2, 32, 32, 3), dtype=np.uint8)
    (probabilities,) = serve(
        **{next(iter(serve.structured_input_signature[1])): tf.constant(images)}
    ).values()
    assert probabilities.dtype == tf.float32 and probabilities.shape == (2, 3)
    np.testing.assert_allclose(probabilities.numpy().sum(axis=1), 1.0, atol=1e-5)


@pytest.mark.parametrize(
    "body, expected",
    [
        (
            GOOD.replace("build_tiny", "build_tinny"),
            "model.builder=test_own_model:build_tinny: cannot be imported",
        ),
        (GOOD.replace("units: 6", "unit: 6"), "model.builder=test_own_model:build_tiny: "),
        (
            GOOD.replace("build_tiny", "build_nothing").replace("  units: 6\n", "  {}\n"),
            "returned str, not a keras.Model",
        ),
        (
            GOOD.replace("build_tiny", "build_wrong_width").replace("  units: 6\n", "  {}\n"),
            "expected (3,): one logit per class",
        ),
    ],
)
def test_a_bad_builder_is_one_line_before_training(prepared_image, tmp_path, body, expected):
    cfg = config.compose(["model=tiny_team", "train.epochs=1"], config_dir=_conf(tmp_path, body))
    with pytest.raises(ConfigError) as info:
        training.train(cfg, prepared_dir=prepared_image.prepared_dir, output_dir=tmp_path / "out")
    assert expected in str(info.value) and "\n" not in str(info.value)
    assert not (tmp_path / "out" / "checkpoints").exists()


@pytest.mark.parametrize(
    "body, expected",
    [
        (
            "name: cnn\nbuilder: test_own_model:build_tiny\n",
            "model.name='cnn': a model with a builder needs its own name",
        ),
        (
            "name: tiny_team\nbuilder: 'os system'\n",
            "model.builder='os system': expected package.module:function",
        ),
    ],
)
def test_a_bad_model_file_is_refused_when_the_config_is_read(tmp_path, body, expected):
    with pytest.raises(ConfigError, match=expected.replace("(", r"\(")):
        config.compose(["model=tiny_team"], config_dir=_conf(tmp_path, body))


FITTED: list = []  # what fit_priors was called with


def fit_priors(model, batches, num_classes):
    """A team's fit: counts the train split's labels and starts the logits at the log class priors."""
    counts = np.zeros(num_classes)
    for _, labels in batches:
        counts += np.bincount(np.asarray(labels).reshape(-1), minlength=num_classes)  # class ids
    FITTED.append((model.name, num_classes, counts.tolist()))
    (network,) = [layer for layer in model.layers if isinstance(layer, keras.Model)]  # the team's, inside
    network.get_layer("team_logits").bias.assign(np.log(counts / counts.sum()).astype("float32"))
    return {"examples": int(counts.sum())}


@pytest.mark.slow  # trains a model for epochs
def test_a_team_fit_runs_on_the_train_split_before_training(prepared_image, tmp_path, caplog):
    """model.fit names the team's second function: called once with the built model, the whole train split
    (21 examples in the session's tiny tree) and the class count, before the first step."""
    import logging

    FITTED.clear()
    body = GOOD.replace("params:", "fit: test_own_model:fit_priors\nparams:")
    cfg = config.compose(
        ["model=tiny_team", "train.epochs=1", "train.batch_size_per_replica=4"],
        config_dir=_conf(tmp_path, body),
    )
    with caplog.at_level(logging.INFO, logger="tfpipe"):
        training.train(cfg, prepared_dir=prepared_image.prepared_dir, output_dir=tmp_path / "out")
    ((name, num_classes, counts),) = FITTED
    assert (name, num_classes, sum(counts), len(counts)) == ("tiny_team", 3, 21, 3) and min(counts) > 0
    assert "fitted tiny_team to the train split" in caplog.text and "'examples': 21" in caplog.text


def test_a_bad_fit_is_one_line(prepared_image, tmp_path):
    body = GOOD.replace("params:", "fit: test_own_model:fit_prior\nparams:")
    cfg = config.compose(["model=tiny_team", "train.epochs=1"], config_dir=_conf(tmp_path, body))
    with pytest.raises(ConfigError) as info:
        training.train(cfg, prepared_dir=prepared_image.prepared_dir, output_dir=tmp_path / "out")
    assert "model.fit=test_own_model:fit_prior: cannot be imported" in str(info.value)
    assert "\n" not in str(info.value)
    with pytest.raises(ConfigError, match="model.fit='os system': expected package.module:function"):
        config.compose(["model=tiny_team"], config_dir=_conf(tmp_path / "b", GOOD + "fit: 'os system'\n"))


def test_a_built_in_model_is_one_registered_builder(make_config):
    """The built-in models go through the registry's door: a name registered by its module is what build_model
    builds and fit_to_train_split fits; nothing else names it."""
    import dataclasses

    from tfpipe import models
    from tfpipe.models import registry

    calls = []

    def fit(model, model_cfg, batches, num_classes):
        calls.append((model.name, model_cfg.name, num_classes))
        return {"fitted": True}

    @registry.register("test_only_model", fit=fit)
    def build(cfg, inputs):
        x = inputs.input()
        return keras.Model(x, keras.layers.Dense(inputs.num_classes)(keras.layers.Flatten()(x)), name="t")

    cfg = make_config()
    cfg = dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, name="test_only_model"))
    try:
        model = models.build_model(cfg, 3, normalization=None)
        assert model.name == "t" and model.output_shape == (None, 3)
        assert models.fit_to_train_split(model, cfg.model, [], 3) == {"fitted": True}
        assert calls == [("t", "test_only_model", 3)]
    finally:
        registry.ENTRIES.pop("test_only_model")
    with pytest.raises(ValueError, match="model.name='test_only_model': unknown model; valid names: "):
        models.build_model(cfg, 3)
