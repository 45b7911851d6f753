"""How a run's calls to the tracking store fail: through an outage they wait, otherwise in one line.

A params, tags, artifact, dataset or model call (and the run's end) that fails because the store does not
answer (connection refused or reset, a timeout, HTTP 5xx or 429) is tried again with backoff until the same
deadline as the metrics still buffered at close (`sink.final_flush_seconds()`, env TFPIPE_MLFLOW_FLUSH_TIMEOUT,
120 s by default), one warning line per failed attempt and one when the store answers again. Every call retried
is safe to send twice: params are re-read before the missing ones are sent, tags and artifacts are overwritten
with the same content, the run's end is a status. After the deadline the stage stops with one line that says
what is kept (the checkpoints and the files the stage wrote) and that the same command finishes the run. Any
other MLflow error is one line at once; a full or read-only local artifact folder is `files.saving`'s line.
What this module does not do: buffer (metrics are `sink`'s) or decide what a stage does after it gives up."""

from __future__ import annotations

import functools
import logging
import re
import time
from typing import Callable, TypeVar

import requests
from mlflow.exceptions import MlflowException, RestException

from tfpipe import files
from tfpipe.errors import TrackingError, one_line
from tfpipe.tracking.sink import final_flush_seconds

log = logging.getLogger(__name__)

RETRY_BASE_SECONDS = 1.0  # first wait after a call the store did not answer; doubles per failure
RETRY_MAX_SECONDS = 10.0  # longest wait between attempts
T = TypeVar("T")
# rest_utils' words for "failed with (timeout) exception ..." and "failed with error code 503 != 200"
_NO_ANSWER = re.compile(
    r"API request to (endpoint )?\S+ failed with ((timeout )?exception|error code (5\d\d|429)\b)"
)


def unanswered(exc: BaseException) -> bool:
    """The store did not answer (or answered 5xx/429): worth another try. A 4xx answer is not."""
    if isinstance(exc, (requests.ConnectionError, requests.Timeout)):
        return True
    if isinstance(exc, requests.HTTPError):  # the artifact proxy's answers
        status = getattr(exc.response, "status_code", None)
        return status is None or status >= 500 or status == 429
    if isinstance(exc, RestException):  # the server answered with an MLflow error
        return exc.get_http_status_code() >= 500 or exc.get_http_status_code() == 429
    if isinstance(
        exc, MlflowException
    ):  # rest_utils: no answer (or a non-JSON 5xx) after MLflow's own retries
        return bool(_NO_ANSWER.match(str(exc)))
    return False


def ride(call: Callable[[], T], what: str, run_id: str) -> T:
    """`call()`, tried again while the store does not answer, until the deadline; then one TrackingError line."""
    deadline = time.monotonic() + final_flush_seconds()
    failures = 0
    while True:
        try:
            result = call()
        except Exception as exc:
            if not unanswered(exc):
                raise
            failures += 1
            left = deadline - time.monotonic()
            if left <= 0:
                raise TrackingError(
                    f"MLflow {what} failed for run {run_id}: the store did not answer for {final_flush_seconds():.0f} s "
                    f"({one_line(exc, 200)}); the checkpoints and the stage's files are kept: run the same command "
                    f"again once the store answers, it finishes run {run_id}"
                ) from None
            wait = min(RETRY_BASE_SECONDS * 2 ** (failures - 1), RETRY_MAX_SECONDS, left)
            log.warning(
                "MLflow store did not answer %s (attempt %d): %s; next try in %.0fs, giving up in %.0fs",
                what,
                failures,
                one_line(exc, 200),
                wait,
                left,
            )
            time.sleep(wait)
            continue
        if failures:
            log.info("MLflow store answered %s again after %d failed attempt(s)", what, failures)
        return result


def store_call(method):
    """A Run method, ridden through an outage (`ride`); any other MlflowException -> one TrackingError line."""

    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        try:
            return ride(lambda: method(self, *args, **kwargs), method.__name__, self.run_id)
        except MlflowException as exc:
            raise TrackingError(
                f"MLflow {method.__name__} failed for run {self.run_id}: {one_line(exc, 500)}"
            ) from None
        except OSError:  # a full or read-only local artifact store: one line (files.saving)
            where = self.client.get_run(self.run_id).info.artifact_uri
            with files.saving(where, f"the artifacts of run {self.run_id}", fix="free space and run again"):
                raise

    return wrapper
