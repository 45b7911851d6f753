"""`train.freeze_epochs`: after a warm start, the layers it loaded stay fixed for the first N epochs while the
fresh ones (the head) learn, then every layer trains. Keras' own switch, `layer.trainable = False`, does it: the
layer's weights leave `model.trainable_variables` (the compiled step reads them when traced, so the runner traces
a new step at the switch) and a frozen BatchNormalization runs in inference mode. The optimizer was built over
every variable beforehand, so checkpoints hold the same slots frozen or not; a resumed run decides by its epoch."""

from __future__ import annotations

import logging

from tfpipe.hooks import Hook

log = logging.getLogger(__name__)


class FreezeHook(Hook):
    def __init__(self, model, layers: list, freeze_epochs: int, start_epoch: int, runner):
        self.model, self.layers, self.until, self.runner = model, list(layers), freeze_epochs, runner
        self.frozen = start_epoch < freeze_epochs and bool(self.layers)

    def on_train_begin(self, step: int) -> None:
        if self.frozen:
            self._set_trainable(False)
            log.info("warm start: %d loaded layer(s) frozen for epochs 1-%d", len(self.layers), self.until)

    def on_epoch_end(self, epoch: int, row) -> None:
        if self.frozen and epoch + 1 >= self.until:
            self.frozen = False
            self._set_trainable(True)
            log.info("warm start: loaded layers unfrozen from epoch %d", epoch + 2)

    def _set_trainable(self, trainable: bool) -> None:
        for name in self.layers:
            self.model.get_layer(name).trainable = trainable
        self.runner.retrace()
