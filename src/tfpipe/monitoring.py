"""TensorBoard summaries and the TensorBoard profiler for the custom training loop.

Three hooks of the training loop (`tfpipe.hooks.Hook`), built by `build_hooks` / `hooks_from_config`:
`TensorBoardHook` (model graph at the start, step scalars at every log step, epoch scalars and weight
histograms at epoch ends), `ProfilerHook` (traces `train.profile_steps`, with a step marker per step) and
`DevicePlacementHook` (`tf.debugging.set_log_device_placement` for the run only).

Layout of the log directory (`train.tensorboard_dir`, relative to the train stage's output
`models/<dataset>/`, so DVC tracks it and `tfpipe.workdir` gives one directory per run):

    tensorboard/train/       step scalars (step_loss, step_accuracy, learning_rate, examples_per_sec,
                             loss_scale under mixed_float16), epoch scalars (epoch_loss,
                             epoch_accuracy, epoch_examples_per_sec, epoch_seconds), weight
                             histograms, the model graph
    tensorboard/validation/  epoch_loss, epoch_accuracy (same tags: TensorBoard overlays train/validation)
    tensorboard/plugins/profile/<timestamp>/<host>.xplane.pb   the profiler trace of train.profile_steps

Only the chief writes summaries (other workers of a multi-worker strategy get a disabled
monitor). Step numbers are global optimizer steps (1-based); epochs are 0-based, as in MLflow.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import TYPE_CHECKING, Dict, List, Mapping, Optional, Tuple

from tfpipe.hooks import Hook
from tfpipe.profiling import PROFILE_SUBDIR, ProfilerHook  # noqa: F401 - PROFILE_SUBDIR: the log layout

if TYPE_CHECKING:
    import tensorflow as tf

log = logging.getLogger(__name__)

TRAIN_DIR = "train"
VALIDATION_DIR = "validation"

# loop metric name -> TensorBoard tag (train writer)
STEP_TAGS = {
    "train_loss": "step_loss",
    "train_accuracy": "step_accuracy",
    "learning_rate": "learning_rate",
    "examples_per_sec": "examples_per_sec",
    "loss_scale": "loss_scale",
}
EPOCH_TRAIN_TAGS = {
    "epoch_train_loss": "epoch_loss",
    "epoch_train_accuracy": "epoch_accuracy",
    "epoch_examples_per_sec": "epoch_examples_per_sec",
    "epoch_seconds": "epoch_seconds",
}
EPOCH_VALIDATION_TAGS = {"val_loss": "epoch_loss", "val_accuracy": "epoch_accuracy"}

_RANGE = re.compile(r"^\s*(\d+)\s*-\s*(\d+)\s*$")


def parse_profile_steps(value: Optional[str], key: str = "train.profile_steps") -> Optional[Tuple[int, int]]:
    """'10-20' -> (10, 20): the first and last global step (1-based, inclusive) to trace; None -> None.
    Raises ConfigError naming the key and the allowed form."""
    if value is None:
        return None
    match = _RANGE.match(str(value))
    if not match:
        from tfpipe.errors import ConfigError

        raise ConfigError(
            f"{key}={value!r}: expected 'FIRST-LAST' global steps, e.g. '10-20' (or null: no profiling)"
        )
    first, last = int(match.group(1)), int(match.group(2))
    if not 1 <= first <= last:
        from tfpipe.errors import ConfigError

        raise ConfigError(f"{key}={value!r}: need 1 <= FIRST <= LAST, e.g. '10-20'")
    return first, last


def log_dir_for(train_cfg, output_dir) -> Path:
    """Where the train stage writes TensorBoard logs: train.tensorboard_dir under output_dir (absolute
    paths are used as given)."""
    return Path(output_dir) / train_cfg.tensorboard_dir


def build_hooks(
    log_dir,
    *,
    model=None,
    optimizer=None,
    tensorboard: bool = True,
    chief: bool = True,
    histogram_every_epochs: int = 1,
    profile_steps: Optional[Tuple[int, int]] = None,
    log_device_placement: bool = False,
) -> List[Hook]:
    """The monitoring hooks for what is switched on; summaries and traces are written by the chief only."""
    hooks: List[Hook] = []
    if log_device_placement:
        hooks.append(DevicePlacementHook())
    if tensorboard and chief:
        hooks.append(TensorBoardHook(log_dir, model, optimizer, histogram_every_epochs))
    if profile_steps and chief:
        hooks.append(ProfilerHook(log_dir, profile_steps))
    return hooks


def hooks_from_config(train_cfg, output_dir, *, chief: bool, model, optimizer) -> List[Hook]:
    return build_hooks(
        log_dir_for(train_cfg, output_dir),
        model=model,
        optimizer=optimizer,
        tensorboard=train_cfg.tensorboard,
        chief=chief,
        histogram_every_epochs=train_cfg.histogram_every_epochs,
        profile_steps=parse_profile_steps(train_cfg.profile_steps),
        log_device_placement=train_cfg.log_device_placement,
    )


class DevicePlacementHook(Hook):
    """Logs every op's device while training; switched back off at the end."""

    def __init__(self):
        import tensorflow as tf

        tf.debugging.set_log_device_placement(True)

    def on_train_end(self) -> None:
        import tensorflow as tf

        tf.debugging.set_log_device_placement(False)


class TensorBoardHook(Hook):
    def __init__(self, log_dir, model=None, optimizer=None, histogram_every_epochs: int = 1):
        self.log_dir = Path(log_dir)
        self.model = model
        self.optimizer = optimizer
        self.histogram_every_epochs = int(histogram_every_epochs)
        self._writers: Dict[str, tf.summary.SummaryWriter] = {}

    def on_train_begin(self, step: int) -> None:
        if self.model is not None:
            self._write_graph(self.model)

    def on_log(self, step: int, metrics: Dict[str, float]) -> None:
        """The step metrics (plus the loss scale of a LossScaleOptimizer)."""
        values = dict(metrics)
        scale = self._loss_scale()
        if scale is not None:
            values.setdefault("loss_scale", scale)
        self._scalars(TRAIN_DIR, values, STEP_TAGS, step)

    def on_epoch_end(self, epoch: int, row: Dict[str, float]) -> None:
        """Epoch scalars into train/ and validation/, weight histograms every histogram_every_epochs."""
        train = {k: v for k, v in row.items() if k not in EPOCH_VALIDATION_TAGS and k != "epoch"}
        self._scalars(TRAIN_DIR, train, EPOCH_TRAIN_TAGS, epoch)
        val = {k: v for k, v in row.items() if k in EPOCH_VALIDATION_TAGS}
        self._scalars(VALIDATION_DIR, val, EPOCH_VALIDATION_TAGS, epoch)
        every = self.histogram_every_epochs
        if self.model is not None and every > 0 and (epoch + 1) % every == 0:
            self._histograms(self.model, epoch)
        for writer in self._writers.values():
            writer.flush()

    def on_train_end(self) -> None:
        for writer in self._writers.values():
            writer.flush()
            writer.close()
        self._writers.clear()

    def _writer(self, name: str):
        import tensorflow as tf

        if name not in self._writers:
            self._writers[name] = tf.summary.create_file_writer(str(self.log_dir / name))
        return self._writers[name]

    def _scalars(
        self, writer_name: str, values: Mapping[str, float], tags: Mapping[str, str], step: int
    ) -> None:
        import math

        import tensorflow as tf

        with self._writer(writer_name).as_default(step=int(step)):
            for key, value in values.items():
                try:
                    value = float(value)
                except (TypeError, ValueError):
                    continue
                if math.isnan(value):
                    continue
                tf.summary.scalar(tags.get(key, key), value)

    def _histograms(self, model, epoch: int) -> None:
        import keras
        import tensorflow as tf

        with self._writer(TRAIN_DIR).as_default(step=int(epoch)):
            for variable in model.weights:
                name = getattr(variable, "path", None) or variable.name
                try:
                    values = keras.ops.convert_to_numpy(variable)
                except (
                    TypeError,
                    ValueError,
                    tf.errors.OpError,
                ) as exc:  # e.g. a remote variable not readable
                    log.warning("TensorBoard: no histogram for %s (%s)", name, str(exc).splitlines()[0])
                    continue
                tf.summary.histogram(name, values)

    def _write_graph(self, model) -> None:
        """The inference graph of the model (Graphs tab), traced once from its input spec."""
        import tensorflow as tf

        try:
            specs = [tf.TensorSpec(t.shape, t.dtype) for t in model.inputs]
            fn = tf.function(lambda *x: model(x[0] if len(x) == 1 else list(x), training=False))
            graph = fn.get_concrete_function(*specs).graph
            with self._writer(TRAIN_DIR).as_default(step=0):
                tf.summary.graph(graph)
        except (AttributeError, TypeError, ValueError) as exc:  # a subclassed model without inputs
            log.warning(
                "TensorBoard: model graph not written (%s)", str(exc).splitlines()[0] if str(exc) else exc
            )

    def _loss_scale(self) -> Optional[float]:
        scale = getattr(self.optimizer, "dynamic_scale", None)
        if scale is None:
            return None
        import keras

        return float(keras.ops.convert_to_numpy(scale))
