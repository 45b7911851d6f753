"""The schema of the keras.applications backbones (model=mobilenet_v3_small | efficientnet_b0)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from tfpipe import choices
from tfpipe.config.checks import choice
from tfpipe.config.model_base import ModelConfig, built_in
from tfpipe.errors import ConfigError


@built_in("mobilenet_v3_small", "efficientnet_b0", modality="image", optional_dense=True)
@dataclass
class BackboneConfig(ModelConfig):
    name: str = "mobilenet_v3_small"
    dense_units: int = 0
    dropout: float = 0.2
    pretrained: Optional[str] = None  # imagenet: Keras downloads the ImageNet weights (network); null: random

    def check(self, cfg) -> None:
        super().check(cfg)
        if self.pretrained is not None:
            choice("model.pretrained", self.pretrained, choices.PRETRAINED)
        if cfg.dataset.channels != 3:
            raise ConfigError(
                f"dataset.channels={cfg.dataset.channels!r}: model {self.name!r} takes RGB images; allowed: 3"
            )
        if min(cfg.dataset.image_size) < 32:
            raise ConfigError(
                f"dataset.image_size={list(cfg.dataset.image_size)!r}: model {self.name!r} needs at least 32x32"
            )
