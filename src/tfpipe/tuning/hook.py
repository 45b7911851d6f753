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
from tfpipe.tuning.study import PRUNED_ATTR, TRIAL_ENV, open_trial  # the tuner's contract

log = logging.getLogger(__name__)


def hooks_from_env(epochs: int) -> list:
    """[TrialHook] in a trial's process (training for `epochs` epochs), else []."""
    raw = os.environ.get(TRIAL_ENV, "").strip()
    return [TrialHook(json.loads(raw), epochs)] if raw else []


class TrialHook(Hook):
    def __init__(self, info: dict, epochs: int):
        self.trial = open_trial(info)
        self.metric, self.run_file = info["metric"], info["run_file"]
        self.epochs = epochs
        self._prune_epoch: int | None = None

    def on_train_begin(self, step: int) -> None:
        """The trial names its MLflow run (the train stage wrote the run file): if the tuner dies, the one
        that takes over ends that run FAILED."""
        if os.path.isfile(self.run_file):  # the chief's (workers of a multi-process strategy have none)
            with open(self.run_file, encoding="utf-8") as fh:
                self.trial.set_user_attr("mlflow_run_id", json.load(fh)["run_id"])

    def on_epoch_end(self, epoch: int, row: dict) -> None:
        self.trial.report(float(row[self.metric]), epoch)
        if epoch + 1 < self.epochs and self.trial.should_prune():  # a finished training is not pruned
            self._prune_epoch = epoch

    def stop_requested(self) -> bool:
        return self._prune_epoch is not None

    def stop(self, where: str) -> None:
        self.trial.set_user_attr(PRUNED_ATTR, self._prune_epoch)  # what the tuner reads to mark it PRUNED
        log.warning("trial %d pruned %s", self.trial.number, where)
        raise interrupts.Interrupted(signal.SIGTERM, f"(pruned by the tuner) {where}")
