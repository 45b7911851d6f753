"""`Config`: the whole checked configuration, one schema instance per section."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from tfpipe.config import schema
from tfpipe.config.train_schema import TrainConfig


@dataclass
class Config:
    model: schema.ModelConfig = field(default_factory=schema.CnnConfig)
    dataset: schema.DatasetConfig = field(default_factory=schema.DatasetConfig)
    data: schema.DataConfig = field(default_factory=schema.DataConfig)
    strategy: schema.StrategyConfig = field(default_factory=schema.StrategyConfig)
    precision: schema.PrecisionConfig = field(default_factory=schema.PrecisionConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    tracking: schema.TrackingConfig = field(default_factory=schema.TrackingConfig)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def flat(self) -> dict:
        """Dotted keys -> values, e.g. {'train.optimizer.learning_rate': 0.001}."""
        return flatten(self.to_dict())


def flatten(tree: dict, prefix: str = "") -> dict:
    out = {}
    for key, value in tree.items():
        dotted = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(flatten(value, dotted + "."))
        else:
            out[dotted] = value
    return out
