"""model=airbench's schema (tfpipe.models.airbench)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import List

from tfpipe.config.checks import non_negative, positive
from tfpipe.config.model_base import ModelConfig, built_in, check_filters
from tfpipe.errors import ConfigError


@built_in("airbench", modality="image", optional_dense=True)
@dataclass
class AirbenchConfig(ModelConfig):
    name: str = "airbench"
    dense_units: int = 0  # the logits come straight from the pooled features
    widths: List[int] = field(default_factory=lambda: [64, 256, 256])
    bn_momentum: float = 0.6  # Keras convention: weight of the old running statistics at each batch
    bias_lr_scale: float = 64.0  # BatchNorm biases learn this many times faster (ScaledBias)
    logit_scale: float = 0.111111  # the logits' multiplier (airbench's 1/9)
    whitening_examples: int = 5000  # train images whose 2x2 patches set the whitening kernel
    whiten_bias_epochs: int = 0  # the whitening bias trains this many epochs, then stays (0: all of them)
    flip: bool = True  # random mirror images while training
    alternate_flips: bool = False  # each image mirrored every other epoch (airbench's scheme), not at random
    translate: int = 2  # random translation by up to this many pixels while training (0: none)
    tta_level: int = 2  # test-time views: 0 none, 1 + mirror, 2 + one-pixel translations

    def check(self, cfg) -> None:
        super().check(cfg)
        check_filters(self.widths, "model.widths")
        if self.dense_units:
            raise ConfigError(
                f"model.dense_units={self.dense_units!r}: airbench has no hidden dense layer; allowed: 0"
            )
        if not 0.0 <= self.bn_momentum < 1.0:
            raise ConfigError(f"model.bn_momentum={self.bn_momentum!r}: must be in [0, 1)")
        positive("model.bias_lr_scale", self.bias_lr_scale)
        positive("model.logit_scale", self.logit_scale)
        positive("model.whitening_examples", self.whitening_examples)
        non_negative("model.translate", self.translate)
        non_negative("model.whiten_bias_epochs", self.whiten_bias_epochs)
        if self.alternate_flips and not self.flip:
            raise ConfigError(
                "model.alternate_flips=true: needs model.flip=true (it says how images are flipped)"
            )
        if self.tta_level not in (0, 1, 2):
            raise ConfigError(f"model.tta_level={self.tta_level!r}: allowed: 0, 1, 2")
