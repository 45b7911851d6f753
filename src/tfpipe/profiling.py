"""The TensorBoard profiler as a training hook: traces `train.profile_steps` (FIRST-LAST global steps) into
`<log dir>/plugins/profile/<timestamp>/`, with a step marker per optimizer step (the overview and input-pipeline
pages need them). Built by `tfpipe.monitoring.build_hooks`, chief only."""

from __future__ import annotations

import logging
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, Dict, Tuple

from tfpipe.hooks import Hook

log = logging.getLogger(__name__)

PROFILE_SUBDIR = "plugins/profile"


class ProfilerHook(Hook):
    """Traces global steps FIRST-LAST (1-based, inclusive) into log_dir/plugins/profile/<timestamp>/."""

    def __init__(self, log_dir, profile_steps: Tuple[int, int]):
        self.log_dir = Path(log_dir)
        self.profile_steps = profile_steps
        self._profiling = False
        self._profiled = False
        self._trace: AbstractContextManager[Any] | None = None  # a tf.profiler.experimental.Trace

    @property
    def profile_dir(self) -> Path:
        return self.log_dir / PROFILE_SUBDIR

    def on_train_begin(self, step: int) -> None:
        """Start now if the range begins with the next step (or a resumed run starts inside it)."""
        if self.profile_steps[0] - 1 <= step < self.profile_steps[1]:
            self._start_profiler(step + 1)

    def on_steps_end(self, step: int) -> None:
        self._profile_transition(step)

    def on_epoch_end(self, epoch: int, row: Dict[str, float]) -> None:
        self._end_step_trace()  # validation and checkpointing are not a training step

    def on_train_end(self) -> None:
        """Stop a profiler still running (range past the last step)."""
        self._stop_profiler()

    def _profile_transition(self, step: int) -> None:
        first, last = self.profile_steps
        if self._profiling:
            self._end_step_trace()
            if step >= last:
                self._stop_profiler()
            else:
                self._begin_step_trace(step + 1)
        elif step == first - 1 and not self._profiled:
            self._start_profiler(step + 1)

    def _start_profiler(self, next_step: int) -> None:
        import tensorflow as tf

        self.log_dir.mkdir(parents=True, exist_ok=True)
        try:  # a run that failed in this process may have left a session open
            tf.profiler.experimental.stop()
        except Exception:  # noqa: BLE001 - "no profiler running" is the normal case
            pass
        options = tf.profiler.experimental.ProfilerOptions(
            host_tracer_level=2, python_tracer_level=0, device_tracer_level=1
        )
        tf.profiler.experimental.start(str(self.log_dir), options=options)
        self._profiling = True
        self._profiled = True
        log.info("profiler: tracing steps %d-%d into %s", next_step, self.profile_steps[1], self.profile_dir)
        self._begin_step_trace(next_step)

    def _stop_profiler(self) -> None:
        self._end_step_trace()
        if not self._profiling:
            return
        import tensorflow as tf

        tf.profiler.experimental.stop()
        self._profiling = False
        log.info("profiler: trace saved under %s", self.profile_dir)

    def _begin_step_trace(self, step: int) -> None:
        """A step marker from the end of the previous step to the end of this one (input + compute),
        which the profiler's overview and input-pipeline pages need."""
        import tensorflow as tf

        trace = tf.profiler.experimental.Trace("train", step_num=int(step), _r=1)
        trace.__enter__()
        self._trace = trace

    def _end_step_trace(self) -> None:
        if self._trace is not None:
            self._trace.__exit__(None, None, None)
            self._trace = None
