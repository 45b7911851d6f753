"""Coordinated preemption for multi_worker_mirrored: a SIGTERM to any one worker stops every worker at the same step.

TensorFlow's `tf.distribute.experimental.PreemptionCheckpointHandler` does the coordination: a thread polls
the `termination_watcher_fn` (here: our own SIGTERM/SIGINT flag, `tfpipe.interrupts`, so one signal handler
serves every strategy); the signalled worker publishes "stop after call N+1" through the cluster's
coordination service and waits until every worker has acknowledged it; each worker checks after every
compiled call (`save_checkpoint_if_preempted`) and, at that call, runs the `save_fn`. Our `save_fn` only flags
the agreed stop and `exit_fn` does nothing: the loop then takes its usual stop path on every worker (step
metrics logged and flushed, the checkpoint through `CheckpointHook` at that very step, `Interrupted(SIGTERM)`,
exit 143), so checkpoints keep one writer and one format. The handler's own CheckpointManager is a scratch one
that is never written: its call counter (`checkpointed_runs`) starts at 0 on every worker of every attempt,
which is all the agreement needs (calls are the same on every worker: the schedule is deterministic), and our
checkpoints do not grow a variable older ones lack. Other strategies keep `StopHook`."""

from __future__ import annotations

import logging
import shutil
from typing import Optional

import tensorflow as tf

from tfpipe import distribute, files, interrupts
from tfpipe.hooks import Hook, StopHook

log = logging.getLogger(__name__)


def _signalled() -> bool:
    """The termination watcher: this worker got SIGTERM/SIGINT (recorded by tfpipe.interrupts)."""
    return interrupts.requested() is not None


def _stay() -> None:
    """exit_fn: the loop exits itself, after its checkpoint."""


class PreemptionHook(StopHook):
    """StopHook whose stop is agreed by the cluster (PreemptionCheckpointHandler) instead of taken alone."""

    def __init__(self, cluster_resolver):
        super().__init__()
        self.cluster_resolver = cluster_resolver
        self._handler: Optional[tf.distribute.experimental.PreemptionCheckpointHandler] = None
        self._scratch: Optional[str] = None
        self._agreed = False

    def on_train_begin(self, step: int) -> None:
        super().on_train_begin(step)  # signals are only recorded from here on
        self._scratch = str(files.scratch_folder("tfpipe-preemption-"))
        manager = tf.train.CheckpointManager(tf.train.Checkpoint(), self._scratch, max_to_keep=1)
        config = tf.distribute.experimental.TerminationConfig(
            termination_watcher_fn=_signalled, exit_fn=_stay, grace_period=0, save_fn=self._agree
        )
        self._handler = tf.distribute.experimental.PreemptionCheckpointHandler(
            self.cluster_resolver, manager, termination_config=config
        )

    def _agree(self) -> None:
        self._agreed = True

    def on_steps_end(self, step: int) -> None:
        assert self._handler is not None, "on_train_begin made the handler"
        if not self._agreed:
            self._handler.save_checkpoint_if_preempted()  # may block until every worker acknowledged

    def stop_requested(self) -> bool:
        return self._agreed

    def stop(self, where: str) -> None:
        log.warning("stop agreed by every worker: checkpoint saved %s", where)
        interrupts.raise_stop(where)

    def on_train_end(self) -> None:
        super().on_train_end()
        if self._handler is not None:
            # The handler stops its watcher threads only in __del__, which those threads' own references to it
            # keep from running (they would stay blocked on the coordination service until the process exits).
            self._handler.__del__()
            self._handler = None
        if self._scratch is not None:
            shutil.rmtree(self._scratch, ignore_errors=True)
            self._scratch = None


def stop_hook(strategy: tf.distribute.Strategy) -> Hook:
    """The hook that turns SIGTERM/SIGINT into a checkpoint and a stop: coordinated across the workers of a
    multi_worker_mirrored job, else this process's own (`StopHook`)."""
    if distribute.coordinates_preemption(strategy):
        return PreemptionHook(strategy.cluster_resolver)
    return StopHook()
