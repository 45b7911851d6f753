"""The buffered metrics sink of a run: the training loop's `log_metrics` only appends to a buffer; a background
thread sends it with `log_batch` every `flush_every` values or `flush_seconds` seconds, so a slow or frozen
tracking server never stalls a training step.

Exactly once: a value leaves the buffer only once the store accepted its batch; a failed attempt keeps it and
the next one waits with exponential backoff (`RETRY_BASE_SECONDS` doubling up to `RETRY_MAX_SECONDS`). Re-sending
is harmless (the store ignores a metric it already has: same key, value, step and timestamp), and a resumed run
drops the steps the store already holds (`skip_logged_steps`). `flush()`, called before every checkpoint, waits
up to `FLUSH_HTTP_TIMEOUT_SECONDS` for the buffer to reach the store (without waiting while the store is known
down); closing keeps trying for up to `FINAL_FLUSH_SECONDS` (env TFPIPE_MLFLOW_FLUSH_TIMEOUT), then raises."""

from __future__ import annotations

import logging
import os
import re
import threading
import time
from typing import Any, Optional

from mlflow.entities import Metric

from tfpipe.errors import one_line

log = logging.getLogger(__name__)

BATCH_METRICS = 1000  # MLflow's per-request limit for metrics
MAX_KEY = 250
MAX_BUFFERED = 100_000  # if the store stays down, keep at most this many metric values
RETRY_BASE_SECONDS = 1.0  # first wait after a failed metric flush; doubles per failure
RETRY_MAX_SECONDS = 60.0  # longest wait between flush attempts
FLUSH_HTTP_TIMEOUT_SECONDS = 10  # how long a checkpoint's flush() waits for the buffer to reach the store
FINAL_FLUSH_SECONDS = 120.0  # how long closing the run keeps retrying unsent metrics
FLUSH_TIMEOUT_ENV = "TFPIPE_MLFLOW_FLUSH_TIMEOUT"
_BAD_KEY_CHARS = re.compile(r"[^\w\-. :/]")


def final_flush_seconds() -> float:
    try:
        return max(0.0, float(os.environ.get(FLUSH_TIMEOUT_ENV, FINAL_FLUSH_SECONDS)))
    except ValueError:
        return FINAL_FLUSH_SECONDS


def metric_key(key: str) -> str:
    return _BAD_KEY_CHARS.sub("_", str(key))[:MAX_KEY]


def to_float(value: Any) -> Optional[float]:
    if hasattr(value, "numpy"):
        value = value.numpy()
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


class MetricsBuffer:
    """Metric values on their way to one run; see the module docstring."""

    def __init__(self, client, run_id: str, *, flush_every: int = BATCH_METRICS, flush_seconds: float = 15.0):
        self.client = client
        self.run_id = run_id
        self.flush_every = max(1, int(flush_every))
        self.flush_seconds = float(flush_seconds)
        self.pending: list[Metric] = []  # not yet accepted by the store (in flight included)
        self._cond = threading.Condition()
        self._wake = False
        self._stopped = False
        self._failures = 0  # consecutive failed attempts
        self._retry_at = 0.0  # monotonic time before which no attempt is made (backoff)
        self._last_error: Optional[BaseException] = None
        self._warned: set = set()
        self._logged_up_to: dict[str, int] = {}  # key -> last step already in the store (a resumed run)
        self._sent_at = time.monotonic()
        self._thread = threading.Thread(target=self._run, name=f"tfpipe-metrics-{run_id[:8]}", daemon=True)
        self._thread.start()

    def add(self, metrics: dict, step: int) -> None:
        timestamp = int(time.time() * 1000)
        with self._cond:
            for key, value in metrics.items():
                number = to_float(value)
                if number is None:
                    if key not in self._warned:
                        self._warned.add(key)
                        log.warning("metric %s=%r is not a number; not logged", key, value)
                    continue
                name = metric_key(key)
                if int(step) <= self._logged_up_to.get(name, -1):
                    continue  # replayed after a resume: the interrupted run logged this step already
                self.pending.append(Metric(name, number, timestamp, int(step)))
            if len(self.pending) > MAX_BUFFERED:
                log.warning(
                    "MLflow down too long: dropping the %d oldest unsent metric values (buffer limit %d)",
                    len(self.pending) - MAX_BUFFERED,
                    MAX_BUFFERED,
                )
                del self.pending[: len(self.pending) - MAX_BUFFERED]
            if len(self.pending) >= self.flush_every:
                self._wake = True
                self._cond.notify_all()

    def skip_logged_steps(self) -> None:
        """Drop from now on values of (key, step) at or below the last step the store holds for key: a resumed
        training replays the steps between its last checkpoint and the interruption."""
        for key in self.client.get_run(self.run_id).data.metrics:
            steps = [m.step for m in self.client.get_metric_history(self.run_id, key)]
            if steps:
                self._logged_up_to[key] = max(steps)

    def flush(self, timeout: Optional[float] = None) -> bool:
        """Ask the thread to send everything now and wait up to `timeout` (default FLUSH_HTTP_TIMEOUT_SECONDS)
        for the buffer to empty; while the store is known down (backing off) do not wait. True when empty."""
        wait = FLUSH_HTTP_TIMEOUT_SECONDS if timeout is None else timeout
        deadline = time.monotonic() + wait
        with self._cond:
            self._wake = True
            self._cond.notify_all()
            while self.pending and (timeout is not None or not self._failures):
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._cond.wait(min(left, 0.5))
            return not self.pending

    def close(self) -> None:
        """Send what is left (retrying for up to final_flush_seconds()), then stop the thread; raises the last
        error when values could not be sent."""
        self._retry_at = min(self._retry_at, time.monotonic() + 1.0)  # closing: no long backoff
        sent = self.flush(timeout=final_flush_seconds())
        with self._cond:
            self._stopped = True
            self._cond.notify_all()
            error, left = self._last_error, len(self.pending)
        if not sent:
            raise RuntimeError(f"{left} metric values unsent: {one_line(error or 'timed out', 300)}")

    # -- the thread

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._stopped and not self._due():
                    self._cond.wait(self._sleep())
                if self._stopped:
                    return
                self._wake = False
                batch = list(self.pending[:BATCH_METRICS])
            self._send(batch)

    def _due(self) -> bool:
        now = time.monotonic()
        if not self.pending or now < self._retry_at:
            return False
        return (
            self._wake or len(self.pending) >= self.flush_every or now - self._sent_at >= self.flush_seconds
        )

    def _sleep(self) -> float:
        until_retry = self._retry_at - time.monotonic()
        return max(0.05, min(self.flush_seconds, until_retry if until_retry > 0 else 0.5))

    def _send(self, batch: list) -> None:
        try:
            self.client.log_batch(self.run_id, metrics=batch)
        except Exception as exc:  # any store failure: keep the values, back off
            with self._cond:
                self._failures += 1
                self._last_error = exc
                delay = min(RETRY_BASE_SECONDS * 2 ** (self._failures - 1), RETRY_MAX_SECONDS)
                self._retry_at = time.monotonic() + delay
                self._cond.notify_all()
            log.warning(
                "MLflow metric flush failed (attempt %d; %d values kept, next try in %.0fs): %s",
                self._failures,
                len(self.pending),
                delay,
                one_line(exc, 500),
            )
            return
        with self._cond:
            del self.pending[: len(batch)]
            if self._failures:
                log.info("MLflow store reachable again after %d failed attempt(s)", self._failures)
            self._failures, self._retry_at, self._last_error = 0, 0.0, None
            self._sent_at = time.monotonic()
            if self.pending:
                self._wake = True
            self._cond.notify_all()
