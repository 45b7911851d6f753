"""The `data` section's schema: where the examples come from and how prepare writes them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from tfpipe import choices
from tfpipe.config.checks import choice, positive
from tfpipe.config.validation_schema import ValidationConfig
from tfpipe.errors import ConfigError


@dataclass
class DataConfig:
    source: str = "auto"
    path: str = "data/raw"
    tfds_data_dir: Optional[str] = None
    train_split: str = "train"
    test_split: str = "test"
    validation_split: Optional[str] = None
    validation_fraction: float = 0.1
    max_examples_per_split: Optional[int] = None
    examples_per_shard: int = 10000
    on_bad_file: str = "fail"
    max_text_bytes: int = 10_000_000
    max_image_pixels: int = 40_000_000
    output_dir: str = "data/prepared"
    seed: int = 42
    validation: ValidationConfig = field(default_factory=ValidationConfig)

    def check(self, cfg) -> None:
        choice("data.source", self.source, choices.SOURCES)
        if self.source == "tfds" and not cfg.dataset.tfds_name:
            raise ConfigError(
                "dataset.tfds_name: empty; the tfds source needs the TensorFlow Datasets name (e.g. cifar10)"
            )
        choice("data.on_bad_file", self.on_bad_file, choices.ON_BAD_FILE)
        if self.source == "directory" and not self.path:
            raise ConfigError(
                "data.path: empty; the directory source needs the folder holding the split folders"
            )
        if not self.train_split or not self.test_split:
            raise ConfigError("data.train_split / data.test_split: must name a split")
        if self.validation_split is None and not 0.0 < self.validation_fraction < 1.0:
            raise ConfigError(f"data.validation_fraction={self.validation_fraction!r}: must be in (0, 1)")
        positive("data.max_examples_per_split", self.max_examples_per_split, allow_none=True)
        positive("data.examples_per_shard", self.examples_per_shard)
        positive("data.max_text_bytes", self.max_text_bytes)
        positive("data.max_image_pixels", self.max_image_pixels)
        if not self.output_dir:
            raise ConfigError("data.output_dir: empty; name the folder for the prepared TFRecords")
        self.validation.check(self.output_dir)
