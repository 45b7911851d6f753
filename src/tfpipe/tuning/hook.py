"""The trial's side of pruning, in the training process: a `Hook` that reports every epoch's validation metric
to the Optuna trial the tuner started this process for (env TFPIPE_TUNE_TRIAL, JSON) and stops training
when the study's pruner says so (the MLflow run then ends KILLED; the tuner tags it `tune.pruned=true`)."""

from __future__ import annotations

import json
import logging
import os
import signal

from tfpipe import interrupts
from tfpipe.hooks import Hook

log = logging.getLogger(__name__)

TRIAL_ENV = "TFPIPE_TUNE_TRIAL"  # {"storage", "study", "trial_id", "metric", "pruner"}
PRUNED_ATTR = "pruned_at_epoch"


def hooks_from_env() -> list:
    """[TrialHook] in a trial's process, else []."""
    raw = os.environ.get(TRIAL_ENV, "").strip()
    return [TrialHook(json.loads(raw))] if raw else []


class TrialHook(Hook):
    def __init__(self, info: dict):
        from tfpipe.tuning.study import open_trial

        self.trial = open_trial(info)
        self.metric = info["metric"]
        self._prune_epoch = None

    def on_epoch_end(self, epoch: int, row: dict) -> None:
        self.trial.report(float(row[self.metric]), epoch)
        if self.trial.should_prune():
            self._prune_epoch = epoch

    def stop_requested(self) -> bool:
        return self._prune_epoch is not None

    def stop(self, where: str) -> None:
        self.trial.set_user_attr(PRUNED_ATTR, self._prune_epoch)  # what the tuner reads to mark it PRUNED
        log.warning("trial %d pruned %s", self.trial.number, where)
        raise interrupts.Interrupted(signal.SIGTERM, f"(pruned by the tuner) {where}")
