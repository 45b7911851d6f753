"""Layers that change with the epoch: before each epoch the loop's hook calls `set_epoch(epoch)` on every layer of
the model that has it (airbench's alternating flips and its whitening bias, trained for the first epochs only).
A layer returns True when its trainable variables changed; the runner then traces a new step, since the
compiled step reads them when traced (as for train.freeze_epochs). Keras callbacks would do this for `fit`; the
custom loop has its own hooks, so this is one."""

from __future__ import annotations

from tfpipe.hooks import Hook


class EpochLayersHook(Hook):
    def __init__(self, model, start_epoch: int, runner):
        self.layers = [layer for layer in model.layers if callable(getattr(layer, "set_epoch", None))]
        self.start_epoch, self.runner = start_epoch, runner

    def on_train_begin(self, step: int) -> None:
        self._set(self.start_epoch)

    def on_epoch_end(self, epoch: int, row) -> None:
        self._set(epoch + 1)

    def _set(self, epoch: int) -> None:
        changed = [layer.set_epoch(epoch) for layer in self.layers]
        if any(changed):
            self.runner.retrace()
