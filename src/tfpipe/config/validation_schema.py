"""The `data.validation` section: the data report prepare writes (report.json) and its leakage policy."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from tfpipe.config.checks import choice
from tfpipe.errors import ConfigError

LEAKAGE_POLICIES = ("warn", "fail", "drop")
DRIFT_POLICIES = ("warn", "fail")
MAX_HAMMING = 12  # the near-pair search compares hashes sharing one of threshold+1 bands: keep bands wide


def _int_range(key: str, value, low: int, high: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ConfigError(f"{key}={value!r}: must be an integer in [{low}, {high}]")


@dataclass
class ValidationConfig:
    report: bool = True
    leakage: str = "warn"
    near_image_hamming: int = 4
    near_image_max_colour_diff: int = 32
    near_empty_tokens: int = 3
    examples_listed: int = 5
    reference: Optional[str] = None
    drift: str = "warn"
    max_share_shift: float = 0.1
    max_oov_increase: float = 0.02

    def check(self) -> None:
        choice("data.validation.leakage", self.leakage, LEAKAGE_POLICIES)
        _int_range("data.validation.near_image_hamming", self.near_image_hamming, 0, MAX_HAMMING)
        _int_range("data.validation.near_image_max_colour_diff", self.near_image_max_colour_diff, 0, 255)
        _int_range("data.validation.near_empty_tokens", self.near_empty_tokens, 0, 1000)
        _int_range("data.validation.examples_listed", self.examples_listed, 0, 1000)
        choice("data.validation.drift", self.drift, DRIFT_POLICIES)
        for key in ("max_share_shift", "max_oov_increase"):
            value = getattr(self, key)
            if not 0.0 < value <= 1.0:
                raise ConfigError(f"data.validation.{key}={value!r}: must be in (0, 1]")
        if self.reference and not self.report:
            raise ConfigError(
                "data.validation.reference: needs data.validation.report=true (drift is checked on it)"
            )
        if self.leakage != "warn" and not self.report:
            raise ConfigError(
                f"data.validation.leakage={self.leakage!r}: needs data.validation.report=true (the report finds "
                "the leaks); allowed with report=false: warn"
            )
