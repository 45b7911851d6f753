"""Progress bars for the train and evaluate stages on a terminal; nothing drawn otherwise (DVC, CI and Slurm logs
keep the stages' log lines). tqdm: the prepare stage's bar already (a runtime pin); Keras' Progbar is
per-epoch and would need the loop's metrics at every step. `TFPIPE_PROGRESS=auto|bar|log` chooses (auto: a bar
when stderr is a terminal): a display choice, so not a config key (one would change params and retrain)."""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

from tfpipe.errors import UserError
from tfpipe.hooks import Hook

if TYPE_CHECKING:
    from tqdm import tqdm

ENV = "TFPIPE_PROGRESS"
MODES = ("auto", "bar", "log")


def wanted(stream=None) -> bool:
    """Whether to draw bars: TFPIPE_PROGRESS=bar, or auto (the default) on a terminal."""
    mode = os.environ.get(ENV, "auto").strip() or "auto"
    if mode not in MODES:
        raise UserError(f"{ENV}={mode!r}: allowed: {', '.join(MODES)}")
    stream = stream or sys.stderr
    return mode == "bar" or (mode == "auto" and stream.isatty())


def bar(total: int, desc: str, unit: str, initial: int = 0, stream=None, iterable=None) -> tqdm:
    """A tqdm bar on `stream` (stderr); over `iterable` when given (closed when it is exhausted)."""
    from tqdm.auto import tqdm

    stream = stream or sys.stderr
    return tqdm(iterable, total=total, initial=initial, desc=desc, unit=unit, file=stream, dynamic_ncols=True)


class ProgressHook(Hook):
    """Steps done of the whole training, the epoch, the latest train loss and examples/s. Updated at the loop's
    existing boundaries (after each compiled call, at log steps): no per-example work and no device sync."""

    def __init__(self, epochs: int, steps_per_epoch: int, stream=None):
        self.epochs, self.steps_per_epoch, self.stream = epochs, steps_per_epoch, stream
        self.bar: tqdm | None = None
        self.step = 0

    def on_train_begin(self, step: int) -> None:
        self.step = step
        self.bar = bar(self.epochs * self.steps_per_epoch, self._desc(step), "step", step, self.stream)

    def on_steps_end(self, step: int) -> None:
        self._open().update(step - self.step)
        self.step = step
        self._open().set_description(self._desc(step), refresh=False)

    def on_log(self, step: int, metrics) -> None:
        self._open().set_postfix(
            loss=f"{metrics['train_loss']:.4f}", ex_s=f"{metrics['examples_per_sec']:.0f}"
        )

    def on_epoch_end(self, epoch: int, row) -> None:
        self._open().set_postfix(val_loss=f"{row['val_loss']:.4f}", val_acc=f"{row['val_accuracy']:.4f}")

    def on_train_end(self) -> None:
        if self.bar is not None:
            self.bar.close()

    def _open(self) -> tqdm:
        assert self.bar is not None, "on_train_begin opens the bar"
        return self.bar

    def _desc(self, step: int) -> str:
        epoch = min(step // max(self.steps_per_epoch, 1) + 1, self.epochs)
        return f"train epoch {epoch}/{self.epochs}"
