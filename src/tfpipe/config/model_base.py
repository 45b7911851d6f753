"""What every model's schema has (`ModelConfig`, the classifier head's keys) and shares; each model's schema
subclasses it (schema.py, airbench_schema.py, backbone_schema.py, custom_model_schema.py)."""

from __future__ import annotations

from dataclasses import dataclass

from tfpipe import choices
from tfpipe.config.checks import choice, non_negative, positive
from tfpipe.errors import ConfigError


@dataclass
class ModelConfig:
    """What every model has: the classifier head (tfpipe.models.head)."""

    name: str = "cnn"
    dense_units: int = 64  # hidden dense layer before the logits (0: none, where the model allows it)
    dropout: float = 0.0

    def check(self, cfg) -> None:
        choice("model.name", self.name, choices.MODELS)
        modality = cfg.dataset.modality
        wanted = choices.IMAGE_MODELS if modality == "image" else choices.TEXT_MODELS
        if self.name not in wanted:
            raise ConfigError(
                f"model.name={self.name!r}: is not a {modality} model, but dataset {cfg.dataset.name!r} is "
                f"{modality}; allowed: {', '.join(wanted)}"
            )
        if self.name in (
            "resnet",
            "airbench",
            "ngram_bag",
            "nbsvm",
            "nblr",
            *choices.BACKBONES,
        ):  # 0: no hidden dense layer
            non_negative("model.dense_units", self.dense_units)
        else:
            positive("model.dense_units", self.dense_units)
        if not 0.0 <= self.dropout < 1.0:
            raise ConfigError(f"model.dropout={self.dropout!r}: must be in [0, 1)")


def _filters(values, key: str = "model.filters") -> None:
    if not values or min(values) <= 0:
        raise ConfigError(f"{key}={values!r}: expected a non-empty list of positive integers")
