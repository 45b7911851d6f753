"""What every model's schema has (`ModelConfig`, the classifier head's keys) and shares; each model's schema
subclasses it (schema.py, airbench_schema.py, backbone_schema.py, custom_model_schema.py). A built-in model's
schema registers itself with `@built_in(NAME, modality=...)`: the names config accepts, each name's modality
and whether its hidden dense layer may be left out are read from there, never listed elsewhere (its builder
registers under the same name in tfpipe.models; tests/test_config.py checks that they agree)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from tfpipe.config.checks import choice, non_negative, positive
from tfpipe.errors import ConfigError

BUILT_IN: dict = {}  # model.name -> its schema class, for every built-in model, in the order registered


def built_in(*names: str, modality: str, optional_dense: bool = False):
    """Class decorator: a built-in model's schema under each of `names`; `modality`: image | text;
    `optional_dense`: model.dense_units=0 (no hidden dense layer) is allowed."""

    def _register(cls):
        cls.MODALITY, cls.OPTIONAL_DENSE = modality, optional_dense
        BUILT_IN.update(dict.fromkeys(names, cls))
        return cls

    return _register


@dataclass
class ModelConfig:
    """What every model has: the classifier head (tfpipe.models.head)."""

    MODALITY: ClassVar[str] = ""  # set by @built_in
    OPTIONAL_DENSE: ClassVar[bool] = False

    name: str = "cnn"
    dense_units: int = 64  # hidden dense layer before the logits (0: none, where the model allows it)
    dropout: float = 0.0

    def check(self, cfg) -> None:
        choice("model.name", self.name, tuple(BUILT_IN))
        modality = cfg.dataset.modality
        if self.MODALITY != modality:
            wanted = [name for name, cls in BUILT_IN.items() if cls.MODALITY == modality]
            raise ConfigError(
                f"model.name={self.name!r}: is not a {modality} model, but dataset {cfg.dataset.name!r} is "
                f"{modality}; allowed: {', '.join(wanted)}"
            )
        (non_negative if self.OPTIONAL_DENSE else positive)("model.dense_units", self.dense_units)
        if not 0.0 <= self.dropout < 1.0:
            raise ConfigError(f"model.dropout={self.dropout!r}: must be in [0, 1)")


def check_filters(values, key: str = "model.filters") -> None:
    if not values or min(values) <= 0:
        raise ConfigError(f"{key}={values!r}: expected a non-empty list of positive integers")
