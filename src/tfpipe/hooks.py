"""Hooks: what happens at the training loop's step boundaries. The loop calls every hook at the same points
(through `HookList`: one method per event) and knows none of them; each hook owns one concern (metrics sink,
checkpoint + history, stop signals; TensorBoard, profiler and device placement live in `tfpipe.monitoring`).
A team's own hooks come from the config (`train.hooks`: `_target_` entries naming `Hook` subclasses, called
with plain keyword arguments, `from_config`) and are called after the built-in ones. TensorFlow-free."""

from __future__ import annotations

import contextlib
import logging
from typing import Dict, Optional, Protocol, Sequence, runtime_checkable

from tfpipe import interrupts

log = logging.getLogger(__name__)

STEP_METRICS = ("train_loss", "train_accuracy", "learning_rate", "examples_per_sec")
EPOCH_METRICS = (
    "epoch_train_loss",
    "epoch_train_accuracy",
    "val_loss",
    "val_accuracy",
    "epoch_seconds",
    "epoch_examples_per_sec",
)


@runtime_checkable
class MetricsSink(Protocol):
    def log_metrics(self, metrics: dict[str, float], step: int) -> None: ...


class Hook:
    """The loop's call points; every method is a no-op unless overridden. Steps are global optimizer steps
    (1-based after a step ran), epochs 0-based."""

    def on_train_begin(self, step: int) -> None:
        """Before the first step of this call (`step`: steps already done, > 0 when resumed)."""

    def on_steps_end(self, step: int) -> None:
        """After every compiled call of one or more steps."""

    def on_log(self, step: int, metrics: Dict[str, float]) -> None:
        """Every `train.log_every_steps` steps and at epoch ends: the step metrics (STEP_METRICS)."""

    def on_checkpoint(self, step: int, epoch: int, epoch_step: int) -> None:
        """Save what a resume needs: `epoch` and `epoch_step` are where the resumed run continues."""

    def on_epoch_end(self, epoch: int, row: Dict[str, float]) -> None:
        """After validation: the history row (EPOCH_METRICS + 'epoch')."""

    def on_train_end(self) -> None:
        """Always called, also when the loop raised."""

    def finished(self) -> bool:
        """True once training should end at the next epoch boundary (early stopping); checked before every epoch."""
        return False

    def stop_requested(self) -> bool:
        return False

    def stop(self, where: str) -> None:
        """Called after the stop checkpoint of a hook that requested a stop; may raise."""


class HookList:
    """The loop's hooks as one (like Keras's CallbackList): one method per event of `Hook`, calling that
    method of each hook in order. The loop calls these, so a misspelt event is a type error, not a run-time
    one."""

    def __init__(self, hooks: Sequence[Hook]):
        self.hooks = list(hooks)

    def on_train_begin(self, step: int) -> None:
        for hook in self.hooks:
            hook.on_train_begin(step)

    def on_steps_end(self, step: int) -> None:
        for hook in self.hooks:
            hook.on_steps_end(step)

    def on_log(self, step: int, metrics: Dict[str, float]) -> None:
        for hook in self.hooks:
            hook.on_log(step, metrics)

    def on_checkpoint(self, step: int, epoch: int, epoch_step: int) -> None:
        for hook in self.hooks:
            hook.on_checkpoint(step, epoch, epoch_step)

    def on_epoch_end(self, epoch: int, row: Dict[str, float]) -> None:
        for hook in self.hooks:
            hook.on_epoch_end(epoch, row)

    def on_train_end(self) -> None:
        for hook in self.hooks:
            hook.on_train_end()

    def finished(self) -> bool:
        """Any hook ends training at this epoch boundary (early stopping)."""
        return any(hook.finished() for hook in self.hooks)

    def stopper(self) -> Optional[Hook]:
        """The first hook that requested a stop, or None."""
        return next((hook for hook in self.hooks if hook.stop_requested()), None)


class SinkHook(Hook):
    """Step and epoch metrics into a MetricsSink (the MLflow run). Before every checkpoint the sink is flushed:
    once a checkpoint exists, every metric of the steps before it is in the store (a resumed run never replays
    them, so a value still in a buffer would be lost for good). Add it before the CheckpointHook."""

    def __init__(self, sink: MetricsSink):
        self.sink = sink

    def on_log(self, step: int, metrics: Dict[str, float]) -> None:
        self.sink.log_metrics(metrics, step)

    def on_checkpoint(self, step: int, epoch: int, epoch_step: int) -> None:
        flush = getattr(self.sink, "flush", None)
        if callable(flush):
            flush()

    def on_epoch_end(self, epoch: int, row: Dict[str, float]) -> None:
        self.sink.log_metrics({k: float(row[k]) for k in EPOCH_METRICS}, epoch)


class CheckpointHook(Hook):
    """Counters + checkpoint through the work directory's CheckpointManager, and the epoch history file."""

    def __init__(self, workdir, steps):
        self.workdir = workdir
        self.steps = steps

    def on_checkpoint(self, step: int, epoch: int, epoch_step: int) -> None:
        self.steps.set_counters(step, epoch, epoch_step)
        self.workdir.save_checkpoint(step)

    def on_epoch_end(self, epoch: int, row: Dict[str, float]) -> None:
        self.workdir.append_history(row)  # a row past the checkpoint's epoch is dropped on resume


class StopHook(Hook):
    """SIGTERM/SIGINT during training only flag a stop (`interrupts.deferred`); the loop checkpoints at the
    next step boundary, then `stop` raises `Interrupted` so the run ends KILLED and resumes exactly there."""

    def __init__(self):
        self._stack: Optional[contextlib.ExitStack] = None

    def on_train_begin(self, step: int) -> None:
        interrupts.reclaim()  # the strategy may have replaced our SIGTERM handler
        self._stack = contextlib.ExitStack()
        self._stack.enter_context(interrupts.deferred())

    def stop_requested(self) -> bool:
        return interrupts.requested() is not None

    def stop(self, where: str) -> None:
        log.warning("stop requested: checkpoint saved %s", where)
        interrupts.raise_if_requested(where)

    def on_train_end(self) -> None:
        if self._stack is not None:
            self._stack.close()
            self._stack = None


# Hydra's instantiation keys: below an entry's own `_target_`, a mapping holding one is an object to build.
_OBJECT_KEYS = ("_target_", "_partial_", "_args_", "_recursive_", "_convert_")


def _object_key(value, key: str):
    """The dotted key of the first instantiation key in `value` (a hook's arguments), or None."""
    if isinstance(value, dict):
        for name, inner in value.items():
            if name in _OBJECT_KEYS:
                return f"{key}.{name}"
            found = _object_key(inner, f"{key}.{name}")
            if found:
                return found
    elif isinstance(value, (list, tuple)):
        for i, inner in enumerate(value):
            found = _object_key(inner, f"{key}[{i}]")
            if found:
                return found
    return None


def from_config(entries) -> list:
    """`train.hooks` built: each entry `{_target_: package.module.Class, **kwargs}` names a `Hook` subclass,
    called with those keyword arguments. Only Hook subclasses are called, and only the entry's own `_target_`:
    its arguments are plain values (a mapping or list holding `_target_`, `_partial_`, `_args_` ... at any
    depth is refused before anything is imported, never built; Hydra's recursive instantiate is not used), so
    a config (or a run record re-run by an audit) cannot make the loop call any other callable. A bad entry is
    one ConfigError line."""
    from hydra.errors import HydraException
    from hydra.utils import get_object

    from tfpipe.errors import ConfigError, one_line

    built = []
    for i, entry in enumerate(entries or []):
        key = f"train.hooks[{i}]._target_"
        target = entry["_target_"]
        args = {k: v for k, v in dict(entry).items() if k != "_target_"}
        nested = _object_key(args, f"train.hooks[{i}]")
        if nested:
            raise ConfigError(
                f"{nested}: a hook's arguments are plain values; only the entry's own _target_ is built "
                f"(a nested object is never instantiated; the hook builds what it needs)"
            )
        if not isinstance(target, str):
            raise ConfigError(f"{key}={target!r}: expected package.module.HookClass")
        try:
            cls = get_object(target)
        except (HydraException, ImportError, ValueError) as exc:
            raise ConfigError(f"{key}={target}: cannot be imported ({one_line(exc, 200)})") from None
        if not (isinstance(cls, type) and issubclass(cls, Hook)):
            raise ConfigError(f"{key}={target}: not a subclass of tfpipe.hooks.Hook; only hooks are called")
        try:
            built.append(cls(**args))
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"train.hooks[{i}] ({target}): {one_line(exc, 300)}") from None
    return built
