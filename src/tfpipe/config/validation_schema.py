"""The `data.validation` section: the data report prepare writes (report.json), its leakage policy and its drift
checks against a reference report (tfpipe.data.drift)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from tfpipe import files
from tfpipe.config.checks import choice, did_you_mean
from tfpipe.errors import ConfigError

LEAKAGE_POLICIES = ("warn", "fail", "drop")
DRIFT_POLICIES = ("warn", "fail")
# what tfpipe.data.drift compares against the reference, each with its own policy (data.validation.drift)
DRIFT_CHECKS = ("classes", "class_share", "oov", "text_length", "image_modes", "image_stats")
SHARE_DISTANCES = ("linf", "js")  # L-infinity (largest single share move) | Jensen-Shannon divergence
AUTO_REFERENCE = "auto"  # data.validation.reference=auto: the first prepared version's report, pinned
# the largest data.validation.max_length_shift: a median or p95 text length 11 times the reference's
MAX_LENGTH_SHIFT = 10.0
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
    auto_reference: str = "data/reference/report.json"
    drift: Any = "warn"  # one policy, or {check: policy}
    share_distance: str = "linf"
    max_share_shift: float = 0.1
    max_share_divergence: float = 0.02
    max_oov_increase: float = 0.02
    max_pixel_shift: float = 32.0
    max_length_shift: float = 0.5

    def check(self, output_dir: str = "") -> None:
        choice("data.validation.leakage", self.leakage, LEAKAGE_POLICIES)
        _int_range("data.validation.near_image_hamming", self.near_image_hamming, 0, MAX_HAMMING)
        _int_range("data.validation.near_image_max_colour_diff", self.near_image_max_colour_diff, 0, 255)
        _int_range("data.validation.near_empty_tokens", self.near_empty_tokens, 0, 1000)
        _int_range("data.validation.examples_listed", self.examples_listed, 0, 1000)
        self.drift_policies()
        choice("data.validation.share_distance", self.share_distance, SHARE_DISTANCES)
        for key in ("max_share_shift", "max_share_divergence", "max_oov_increase"):
            value = getattr(self, key)
            if not 0.0 < value <= 1.0:
                raise ConfigError(f"data.validation.{key}={value!r}: must be in (0, 1]")
        if not 0.0 < self.max_pixel_shift <= 255.0:
            raise ConfigError(
                f"data.validation.max_pixel_shift={self.max_pixel_shift!r}: must be in (0, 255]"
            )
        if not 0.0 < self.max_length_shift <= MAX_LENGTH_SHIFT:
            raise ConfigError(
                f"data.validation.max_length_shift={self.max_length_shift!r}: must be in (0, {MAX_LENGTH_SHIFT:g}]"
            )
        if self.reference == AUTO_REFERENCE and not str(self.auto_reference or "").strip():
            raise ConfigError("data.validation.auto_reference: empty; expected the path reference=auto pins")
        if self.reference == AUTO_REFERENCE and output_dir and files.within(self.auto_reference, output_dir):
            raise ConfigError(
                f"data.validation.auto_reference={self.auto_reference!r}: inside data.output_dir, which prepare "
                "replaces; pin it elsewhere, e.g. data/reference/<dataset>/report.json"
            )
        if self.reference and not self.report:
            raise ConfigError(
                "data.validation.reference: needs data.validation.report=true (drift is checked on it)"
            )
        if self.leakage != "warn" and not self.report:
            raise ConfigError(
                f"data.validation.leakage={self.leakage!r}: needs data.validation.report=true (the report finds "
                "the leaks); allowed with report=false: warn"
            )

    def drift_policies(self) -> dict:
        """{check: warn|fail} from data.validation.drift: one policy for every check, or a mapping (checks
        it does not name: warn); an unknown check or policy is refused in one line."""
        if not isinstance(self.drift, dict):
            choice("data.validation.drift", self.drift, DRIFT_POLICIES)
            return dict.fromkeys(DRIFT_CHECKS, self.drift)
        policies = dict.fromkeys(DRIFT_CHECKS, "warn")
        for check, policy in self.drift.items():
            if check not in DRIFT_CHECKS:
                raise ConfigError(
                    f"data.validation.drift.{check}: unknown drift check{did_you_mean(check, DRIFT_CHECKS)}; "
                    f"allowed: {', '.join(DRIFT_CHECKS)}"
                )
            choice(f"data.validation.drift.{check}", policy, DRIFT_POLICIES)
            policies[check] = policy
        return policies
