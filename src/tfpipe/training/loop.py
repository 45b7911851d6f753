"""The loop: epochs of optimizer steps, with the step boundaries where hooks log, checkpoint and stop, and the
epoch boundaries where a hook may end training (early stopping).

It knows a runner (`train(k)`, `sync`, `end_epoch`, `evaluate`), the step metrics (`Steps`, with the examples
actually trained on) and its hooks (`tfpipe.hooks.HookList`: one typed method per event); not strategies,
datasets, files or MLflow. Calls run `train.steps_per_execution` steps and end exactly on every logging and
checkpoint step, so the setting changes neither results nor logs."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Protocol, Sequence

from tfpipe.errors import DataError
from tfpipe.hooks import Hook, HookList

log = logging.getLogger(__name__)


class Runner(Protocol):
    """What the loop calls on a runner (tfpipe.training.runners: SyncRunner, CoordinatedRunner)."""

    def train(self, num_steps: int) -> int:
        """Up to `num_steps` optimizer steps; how many ran (0: the stream ended)."""
        ...

    def sync(self) -> None: ...

    def end_epoch(self) -> None: ...

    def evaluate(self) -> Dict[str, float]: ...


class StepMetrics(Protocol):
    """What the loop reads of the steps (tfpipe.training.steps.Steps): examples trained on and their metrics."""

    global_batch_size: int

    def reset_train_metrics(self) -> None: ...

    def examples(self, window: bool = False) -> float: ...

    def take_window(self) -> Dict[str, float]: ...

    def epoch_metrics(self) -> Dict[str, float]: ...


@dataclass
class Schedule:
    """The loop's step arithmetic (all in optimizer steps)."""

    epochs: int
    steps_per_epoch: int
    log_every: int
    checkpoint_every: int
    steps_per_execution: int = 1

    def next_call(self, step: int, remaining: int) -> int:
        """Steps of the next call: up to steps_per_execution, ending on every step that logs or checkpoints."""
        k = self.steps_per_execution
        for every in (self.log_every, self.checkpoint_every):
            k = min(k, every - step % every)
        return max(min(k, remaining), 1)


@dataclass
class LoopResult:
    step: int  # global optimizer steps done, earlier (resumed) runs included
    epochs_run: int = 0
    train_seconds: float = 0.0
    rows: List[Dict[str, float]] = field(default_factory=list)  # history rows of the epochs run by this call


class Loop:
    def __init__(self, runner: Runner, steps: StepMetrics, hooks: Sequence[Hook], schedule: Schedule):
        self.runner = runner
        self.steps = steps
        self.hooks = HookList(hooks)
        self.schedule = schedule
        self.step = 0
        self._window_start = 0.0

    def fit(self, start_epoch: int, start_epoch_step: int, step: int) -> LoopResult:
        self.step = step
        result = LoopResult(step=step)
        t_start = time.perf_counter()
        self.hooks.on_train_begin(step)
        try:
            for epoch in range(start_epoch, self.schedule.epochs):
                if self.hooks.finished():  # early stopping (also when resumed after it)
                    break
                skip = start_epoch_step if epoch == start_epoch else 0
                result.rows.append(self._epoch(epoch, skip))
                result.epochs_run += 1
        finally:
            self.hooks.on_train_end()
        result.step = self.step
        result.train_seconds = time.perf_counter() - t_start
        return result

    def _epoch(self, epoch: int, skip: int) -> Dict[str, float]:
        self.steps.reset_train_metrics()
        t_epoch = self._window_start = time.perf_counter()
        ran = self._train_steps(epoch, skip)
        self.runner.end_epoch()
        self._log_window()  # the tail of the epoch, so short epochs still report step metrics
        seconds = time.perf_counter() - t_epoch
        examples = self.steps.examples()
        if ran == 0 and not skip:
            raise DataError(
                f"train split gives no full batch of {self.steps.global_batch_size} (no batches); "
                f"lower train.batch_size_per_replica"
            )
        nan = float("nan")  # a resumed epoch whose batches were all trained before the interruption
        train = (
            self.steps.epoch_metrics() if examples else {"epoch_train_loss": nan, "epoch_train_accuracy": nan}
        )
        row = {
            "epoch": epoch,
            **train,
            **self.runner.evaluate(),
            "epoch_seconds": seconds,
            "epoch_examples_per_sec": examples / max(seconds, 1e-9),
        }
        self.hooks.on_epoch_end(epoch, row)
        self._checkpoint(epoch + 1, 0)
        self._stop_if_requested(f"at step {self.step} (end of epoch {epoch})")
        log.info(
            "epoch %d/%d: %s",
            epoch + 1,
            self.schedule.epochs,
            ", ".join(f"{k}={v:.4g}" for k, v in row.items() if k != "epoch"),
        )
        return row

    def _train_steps(self, epoch: int, skip: int) -> int:
        """The epoch's remaining optimizer steps; returns how many ran."""
        schedule = self.schedule
        done, todo = 0, schedule.steps_per_epoch - skip
        while done < todo:
            ran = self.runner.train(schedule.next_call(self.step, todo - done))
            if ran == 0:
                break  # the stream ended early (a split with no full batch)
            done += ran
            self.step += ran
            self.hooks.on_steps_end(self.step)
            if self.step % schedule.log_every == 0:
                self._log_window()
            if self._stopper() is not None:  # SIGTERM/SIGINT: checkpoint this very step, then stop
                self.runner.sync()  # the steps scheduled so far are done
                self._log_window()
                self._checkpoint(epoch, skip + done)
                self._stop_if_requested(f"at step {self.step} (epoch {epoch}, batch {skip + done})")
            # The epoch's last step is saved once, by the epoch's end: a second save of ckpt-N rewrote it in
            # place, and a kill during that rewrite lost it (the resume fell back to the checkpoint before).
            if self.step % schedule.checkpoint_every == 0 and done < todo:
                self._checkpoint(epoch, skip + done)
        return done

    def _log_window(self) -> None:
        examples = self.steps.examples(window=True)
        if examples <= 0:
            return
        now = time.perf_counter()
        metrics = {
            **self.steps.take_window(),
            "examples_per_sec": examples / max(now - self._window_start, 1e-9),
        }
        self._window_start = now
        self.hooks.on_log(self.step, metrics)

    def _checkpoint(self, epoch: int, epoch_step: int) -> None:
        self.hooks.on_checkpoint(self.step, epoch, epoch_step)

    def _stopper(self) -> Optional[Hook]:
        return self.hooks.stopper()

    def _stop_if_requested(self, where: str) -> None:
        stopper = self._stopper()
        if stopper is not None:
            stopper.stop(where)
