"""Early stopping (train.early_stopping): training ends once a validation metric has not improved by more than
`min_delta` for `patience` epochs; with `restore_best_weights` the run ends on the best epoch's weights.

It knows the epoch rows the loop hands its hooks and the model's variables; not files, strategies or MLflow. Its
state (the best value, its epoch, the epochs waited since) and the best epoch's weights are variables in the
training checkpoint, so a resumed run stops at the same epoch, on the same weights, as an uninterrupted one, and
every worker of a multi-worker job restores the same decision. Keras' EarlyStopping keeps its state in Python
attributes that no checkpoint holds, which is why this is not that callback."""

from __future__ import annotations

import logging
import math
from typing import Optional

import tensorflow as tf

from tfpipe.hooks import Hook

log = logging.getLogger(__name__)


class EarlyStopping(Hook):
    """Create under `strategy.scope()` (`from_config`); `checkpointed()` goes into the training checkpoint."""

    def __init__(self, model, es_cfg):
        self.monitor = es_cfg.monitor
        maximize = es_cfg.mode == "max" or (es_cfg.mode == "auto" and "accuracy" in es_cfg.monitor)
        self.sign = 1.0 if maximize else -1.0
        self.patience = int(es_cfg.patience)
        self.min_delta = float(es_cfg.min_delta)
        agg = tf.VariableAggregation.ONLY_FIRST_REPLICA
        self.best = tf.Variable(0.0, dtype=tf.float64, trainable=False, aggregation=agg, name="es_best")
        self.best_epoch = tf.Variable(
            -1, dtype=tf.int64, trainable=False, aggregation=agg, name="es_best_epoch"
        )
        self.wait = tf.Variable(0, dtype=tf.int64, trainable=False, aggregation=agg, name="es_wait")
        self.weights, self.copies = [], []  # the model's float variables and the best epoch's values of them
        if es_cfg.restore_best_weights:
            self.weights = [v.value for v in model.variables if "float" in str(v.dtype)]
            self.copies = [
                tf.Variable(v, trainable=False, name=f"es_weights_{i}") for i, v in enumerate(self.weights)
            ]

    @classmethod
    def from_config(cls, model, train_cfg) -> Optional["EarlyStopping"]:
        """train.early_stopping.monitor set: an EarlyStopping over `model`; else None."""
        es_cfg = train_cfg.early_stopping
        return cls(model, es_cfg) if es_cfg.monitor else None

    def checkpointed(self) -> dict:
        copies = {str(i): v for i, v in enumerate(self.copies)}
        return {"best": self.best, "best_epoch": self.best_epoch, "wait": self.wait, "weights": copies}

    def on_epoch_end(self, epoch: int, row) -> None:
        value = float(row[self.monitor])
        if self._improves(value):
            self.best.assign(value)
            self.best_epoch.assign(epoch)
            self.wait.assign(0)
            for copy, weight in zip(self.copies, self.weights):
                copy.assign(weight)
            return
        self.wait.assign_add(1)
        if self.finished():
            log.info(
                "early stopping after epoch %d: %s has not improved on epoch %d's %.6g by more than %g for %d "
                "epoch(s)%s",
                epoch + 1,
                self.monitor,
                int(self.best_epoch.numpy()) + 1,
                float(self.best.numpy()),
                self.min_delta,
                self.patience,
                "; ending on that epoch's weights" if self.copies else "",
            )

    def _improves(self, value: float) -> bool:
        if math.isnan(value):
            return False
        if int(self.best_epoch.numpy()) < 0:
            return True
        return self.sign * (value - float(self.best.numpy())) > self.min_delta

    def finished(self) -> bool:
        return int(self.wait.numpy()) >= self.patience

    def restore_best(self) -> Optional[int]:
        """After the loop: the model takes the best epoch's weights (restore_best_weights); that epoch, or None."""
        best = int(self.best_epoch.numpy())
        if not self.copies or best < 0:
            return None
        for copy, weight in zip(self.copies, self.weights):
            weight.assign(copy)
        return best

    def summary(self) -> dict:
        """What the run records (metrics): the best epoch (0-based, as history.csv's) and its value, whether
        training stopped early and whether the exported weights are the best epoch's; {} before any epoch."""
        best = int(self.best_epoch.numpy())
        if best < 0:
            return {}
        return {
            "early_stopping_best_epoch": float(best),
            f"early_stopping_best_{self.monitor}": float(self.best.numpy()),
            "early_stopping_stopped": float(self.finished()),
            "early_stopping_restored": float(bool(self.copies)),
        }
