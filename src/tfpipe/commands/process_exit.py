"""A stage process's exit without the interpreter's teardown (issue 52: a small experiment costs seconds).

After a stage has run, Python's own exit (`sys.exit`) joins the threads, runs the atexit handlers and then tears
the interpreter down: every module's objects freed one by one, TensorFlow's C++ objects destroyed. With
TensorFlow and MLflow loaded that teardown is 2 s of a quiet 2-core machine per stage process (3.5 s under load),
twice per experiment (train and evaluate), and DVC waits for it. `exit` does what the exit needs and skips the
teardown: the threads' shutdown as the interpreter does it (concurrent.futures' executors told to stop, non-daemon
threads joined), the atexit handlers (logging flushed and closed, MLflow's active run ended and its async queue
drained, weakref finalizers such as temporary folders removed, the phases' exit record), stdout and stderr
flushed, then `os._exit(code)`. Everything a stage writes is closed and renamed into place before it returns
(tfpipe.files.atomic_open; the TensorBoard writers are closed at the end of training), so what is skipped is only
freeing memory a process about to end holds: the same state as a process killed just after it returned, which
the crash sweeps already require to be consistent.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import sys
import threading
from typing import NoReturn


def exit(code: int) -> NoReturn:  # named as sys.exit: tests/test_docs_exits.py reads its argument as a code
    """End the process with exit code `code`, as `sys.exit(code)` would less the interpreter's teardown."""
    shutdown = getattr(threading, "_shutdown", None)  # what Py_FinalizeEx calls first (CPython 3.7 and later)
    if shutdown is not None:
        shutdown()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
        with contextlib.suppress(Exception):  # a stream closed, or a pipe whose reader is gone
            if stream is not None:
                stream.flush()
    os._exit(code)
