"""Seconds, no data: the config composes with the team's model, and the model builds for images and texts."""

import tfpipe.models
from tfpipe.config import compose
from tfpipe.config.schema import CustomModelConfig


def test_the_config_composes_with_the_teams_model():
    cfg = compose(["train.epochs=1"])
    assert isinstance(cfg.model, CustomModelConfig), type(
        cfg.model
    )  # conf/model/__MODEL__.yaml names a builder
    assert cfg.model.name == "__MODEL__" and cfg.model.builder == "__PACKAGE__.model:build"


def test_the_model_builds_one_probability_per_class():
    cfg = compose()
    for inputs in (
        tfpipe.models.ModelInputs("image", num_classes=10, image_shape=(32, 32, 3)),
        tfpipe.models.ModelInputs("text", num_classes=2, vocab_size=100, sequence_length=16),
    ):
        model = tfpipe.models.custom.build(cfg, inputs)
        assert tuple(model.output.shape[1:]) == (inputs.num_classes,)
