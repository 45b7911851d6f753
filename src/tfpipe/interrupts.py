"""SIGTERM / SIGINT as a clean stop: checkpoint, flush, mark the MLflow run KILLED, exit 128+signal.

`graceful_stop()` is installed around a whole stage. Outside a `deferred()` block a signal raises
`Interrupted` at once (a KeyboardInterrupt subclass, so `with run:` ends the MLflow run KILLED and the
CLI exits 128 + signal number). Inside `deferred()` (the training loop) the signal only sets a flag;
the loop checks `requested()` after every step, saves a checkpoint at that step and then raises
`Interrupted` itself, so the resumed run continues exactly there. A second signal while a stop is
pending raises at once (the user insists). Only the main thread can install handlers; elsewhere
(tests calling the library from threads) this is a no-op.

`die_with_launcher()`: a task the local launcher (or the tuner) started gets SIGKILL when that parent dies.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from typing import Iterator, Optional

from tfpipe.exits import EXIT_FAILED

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class Interrupted(KeyboardInterrupt):
    """The stage was stopped by a signal; `signum` says which (exit code 128 + signum)."""

    def __init__(self, signum: int, where: str = ""):
        self.signum = int(signum)
        name = signal.Signals(self.signum).name
        super().__init__(f"stopped by {name}" + (f" {where}" if where else ""))


class _State:
    installed = False
    defer_depth = 0
    pending: Optional[int] = None


_state = _State()


def _handler(signum, frame):
    if _state.defer_depth > 0 and _state.pending is None:
        _state.pending = signum  # the training loop stops at the next step boundary
        return
    raise Interrupted(signum)


@contextlib.contextmanager
def graceful_stop() -> Iterator[None]:
    """Route SIGTERM/SIGINT through `_handler` for the duration (main thread only; nestable)."""
    if _state.installed or threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.signal(sig, _handler) for sig in STOP_SIGNALS}
    _state.installed, _state.pending = True, None
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        _state.installed, _state.pending, _state.defer_depth = False, None, 0


def reclaim() -> None:
    """Point SIGTERM/SIGINT at our handler again inside `graceful_stop`: TensorFlow's coordination service
    (multi-worker strategies) installs a native SIGTERM handler of its own that only records the signal, so
    without this a SIGTERM to a multi_worker_mirrored worker is silently ignored. Main thread only."""
    if _state.installed and threading.current_thread() is threading.main_thread():
        for sig in STOP_SIGNALS:
            signal.signal(sig, _handler)


@contextlib.contextmanager
def deferred() -> Iterator[None]:
    """Within this block a stop signal is only recorded (see `requested`)."""
    _state.defer_depth += 1
    try:
        yield
    finally:
        _state.defer_depth = max(_state.defer_depth - 1, 0)


def requested() -> Optional[int]:
    """The signal number of a pending stop request, or None."""
    return _state.pending


def raise_if_requested(where: str = "") -> None:
    if _state.pending is not None:
        signum, _state.pending = _state.pending, None
        raise Interrupted(signum, where)


def raise_stop(where: str = "") -> None:
    """Raise `Interrupted` for a stop the cluster agreed on: this worker's own pending signal, else SIGTERM
    (a peer's preemption stops this worker as a cluster manager's SIGTERM would)."""
    signum, _state.pending = _state.pending or signal.SIGTERM, None
    raise Interrupted(signum, where)


# ----------------------------------------------------------------------------- a task dies with its launcher

LAUNCHER_PID_ENV = "TFPIPE_LAUNCHER_PID"
PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def die_with_launcher() -> None:
    """In a task the launcher started: get SIGKILL when the launcher dies, even by kill -9, so that no task
    outlives its job (and trains on beside the restarted one). Linux's prctl(PR_SET_PDEATHSIG), which no kept
    library wraps; elsewhere a no-op."""
    parent = os.environ.get(LAUNCHER_PID_ENV, "")
    if not parent.isdigit() or not sys.platform.startswith("linux"):
        return
    import ctypes

    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != int(parent):  # the launcher died before the line above took effect
        os._exit(EXIT_FAILED)
