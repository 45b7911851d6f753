"""The `tracking` section's schema: the MLflow store, experiment, logged model, registry and promotion."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

from tfpipe.config import checks
from tfpipe.config.checks import choice, positive, tracking_uri
from tfpipe.errors import ConfigError


@dataclass
class TrackingConfig:
    uri: Optional[str] = None
    experiment_name: str = "tfpipe"
    artifact_location: Optional[str] = "mlartifacts"
    log_model: bool = True
    run_file: str = "run.json"
    register_model: bool = False  # True: evaluate registers every run's model; else `promote` registers it
    registered_model_name: Optional[str] = None  # None: tfpipe-<dataset.name>
    promote_metric: str = "test_accuracy"
    promote_mode: str = "max"
    promote_min_delta: float = 0.0  # promotion: the group must beat the champion's by more than this; 0: off
    promote_min_relative: float = 0.0  # ... and by this fraction of the champion's mean; 0: off
    auto_promote_alias: Optional[str] = None
    system_metrics: bool = False  # MLflow's CPU/memory/disk sampling thread in the train and evaluate runs
    system_metrics_interval: float = 10.0  # seconds between system metric samples

    def check(self, cfg) -> None:
        tracking_uri("tracking.uri", self.uri)
        if not self.experiment_name:
            raise ConfigError("tracking.experiment_name: empty; name the MLflow experiment")
        if not self.run_file:
            raise ConfigError("tracking.run_file: empty; name the file that hands the run id to evaluate")
        checks.registry_name("tracking.registered_model_name", self.registered_model_name)
        choice("tracking.promote_mode", self.promote_mode, ("max", "min"))
        checks.registry_alias("tracking.auto_promote_alias", self.auto_promote_alias, allow_none=True)
        positive("tracking.system_metrics_interval", self.system_metrics_interval)
        for key in ("promote_min_delta", "promote_min_relative"):
            value = getattr(self, key)
            if not math.isfinite(value) or value < 0:  # (a NaN passes `non_negative`)
                raise ConfigError(f"tracking.{key}={value!r}: must be a number >= 0 (0: off)")
        if not self.promote_metric:
            raise ConfigError("tracking.promote_metric: empty; name the run metric promotion compares")

    def model_name(self, dataset: str) -> str:
        return self.registered_model_name or f"tfpipe-{dataset}"
