"""Opt-in wall-clock phases of the stage processes (issue 52: where a small experiment's time goes).

With env TFPIPE_PHASES naming a file, `with phase("export"):` (or `@phase("export")` on a function) appends one
JSON line `{"pid", "phase", "start", "end"}` (time.time() seconds) to it when the block ends, raised or not; a
process's first phase also registers an exit record, `{"phase": "process", "start": <the process's start, from
/proc/self/stat>, "end": <its atexit>}`, so its start and imports are the gap from its start to its first phase.
Unset, a phase reads one environment variable and writes nothing. Lines from several processes interleave whole
(one short O_APPEND write each). It knows no stage, no TensorFlow and no MLflow; `benchmarks/experiment_phases.py`
reads the file back.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import time
from typing import Literal

ENV = "TFPIPE_PHASES"
PROCESS = "process"  # the exit record's phase name: the whole process, start to atexit
_registered: set = set()  # pids whose exit record is registered (a forked child registers its own)


class _Phase(contextlib.ContextDecorator):
    """One timed block; as a decorator, a fresh one per call."""

    __slots__ = ("name", "start")

    def __init__(self, name: str):
        self.name = name
        self.start: float | None = None

    def _recreate_cm(self):
        return _Phase(self.name)

    def __enter__(self):
        self.start = time.time() if os.environ.get(ENV) else None
        return self

    def __exit__(self, *exc) -> Literal[False]:
        if self.start is not None:
            record(self.name, self.start, time.time())
        return False


def phase(name: str) -> _Phase:
    """A context manager (or decorator) timing `name` into the TFPIPE_PHASES file; nothing when it is unset."""
    return _Phase(name)


def record(name: str, start: float, end: float) -> None:
    """Append one phase line to the TFPIPE_PHASES file (and, once per process, register its exit record)."""
    path = os.environ.get(ENV)
    if not path:
        return
    pid = os.getpid()
    if pid not in _registered:
        _registered.add(pid)
        atexit.register(_exit_record, path, pid)
    line = json.dumps({"pid": pid, "phase": name, "start": start, "end": end}) + "\n"
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(line)


def _exit_record(path: str, pid: int) -> None:
    started = process_start()
    if os.getpid() != pid or started is None:
        return
    line = json.dumps({"pid": pid, "phase": PROCESS, "start": started, "end": time.time()}) + "\n"
    with contextlib.suppress(OSError):  # the file's folder gone by now (a test's temporary one)
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(line)


def process_start() -> float | None:
    """This process's start as time.time() seconds (10 ms resolution: /proc/self/stat's starttime, in clock ticks
    since boot), or None where there is no /proc."""
    try:
        with open("/proc/self/stat", encoding="ascii") as fh:
            fields = fh.read().rpartition(")")[2].split()
        since_boot = int(fields[19]) / os.sysconf("SC_CLK_TCK")  # field 22, starttime
        return time.time() - (time.clock_gettime(time.CLOCK_BOOTTIME) - since_boot)
    except (OSError, ValueError, IndexError, AttributeError):
        return None


def read(path) -> list[dict]:
    """The phase lines of a TFPIPE_PHASES file, in file order (a torn last line is skipped)."""
    out = []
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            try:
                out.append(json.loads(line))
            except ValueError:
                continue
    return out
