"""The MLflow backend going away mid-run: metrics are buffered and retried with backoff, training never
waits long or crashes, and every value arrives exactly once when the server is back.

Runs a real `mlflow server` (SQLite store) on a loopback port: stops it mid-run and starts it again on the
same port and store (connections refused meanwhile), then freezes it at close (SIGSTOP: requests time
out) and thaws it; and stops it while a small model trains, so every checkpoint's flush runs during the outage.
Bounded: each server start waits at most 90 s, every loop is counted.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest

from tfpipe.errors import TrackingError

MLFLOW_ENV = ("MLFLOW_TRACKING_URI", "MLFLOW_RUN_ID", "MLFLOW_EXPERIMENT_ID", "MLFLOW_EXPERIMENT_NAME")
START_TIMEOUT_S = 90.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class MlflowServer:
    """`mlflow server` as its own process group, so stop() ends it and its workers."""

    def __init__(self, workdir: Path, port: int):
        self.workdir, self.port, self.proc = workdir, port, None
        self.url = f"http://127.0.0.1:{port}"

    def start(self) -> float:
        mlflow_bin = Path(sys.executable).with_name("mlflow")
        log = open(self.workdir / "server.log", "ab")
        started = time.monotonic()
        self.proc = subprocess.Popen(
            [
                str(mlflow_bin),
                "server",
                "--backend-store-uri",
                f"sqlite:///{self.workdir / 'mlflow.db'}",
                "--default-artifact-root",
                str(self.workdir / "artifacts"),
                "--host",
                "127.0.0.1",
                "--port",
                str(self.port),
                "--workers",
                "1",
            ],
            cwd=self.workdir,
            # without MLflow's job runner, as deploy/mlflow/server.sh starts it: its huey consumers (GenAI jobs)
            # are 5+ processes per start, and this server starts several times per test
            env={**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"},
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        while time.monotonic() - started < START_TIMEOUT_S:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"mlflow server exited: {(self.workdir / 'server.log').read_text()[-2000:]}"
                )
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=1) as resp:
                    if resp.status == 200:
                        print(f"mlflow server up in {time.monotonic() - started:.1f}s", file=sys.stderr)
                        return time.monotonic() - started
            except OSError:
                time.sleep(0.3)
        self.stop()
        raise RuntimeError(f"mlflow server did not answer within {START_TIMEOUT_S}s")

    def freeze(self) -> None:
        """SIGSTOP: the port still accepts connections but nothing answers (a hung server)."""
        os.killpg(self.proc.pid, signal.SIGSTOP)

    def thaw(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGCONT)

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.thaw()
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=15)
        # the port must refuse connections before the test goes on
        for _ in range(50):
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                time.sleep(0.1)
            except OSError:
                return


@pytest.fixture
def server(tmp_path, monkeypatch):
    import mlflow

    for name in MLFLOW_ENV:
        monkeypatch.delenv(name, raising=False)
    srv = MlflowServer(tmp_path, _free_port())
    srv.start()
    monkeypatch.setenv("MLFLOW_TRACKING_URI", srv.url)
    yield srv
    while mlflow.active_run() is not None:
        mlflow.end_run()
    srv.stop()


@pytest.fixture
def cfg(make_config):
    return make_config("experiment=smoke")


def _history(url, run_id, key):
    from mlflow import MlflowClient

    return MlflowClient(tracking_uri=url).get_metric_history(run_id, key)


@pytest.mark.slow  # a real mlflow server stopped, restarted and frozen (about 30 s)
def test_metrics_survive_server_restarts_mid_run_and_at_close(server, cfg, tmp_path, monkeypatch):
    from tfpipe import tracking
    from tfpipe.tracking import sink as run_module

    monkeypatch.setattr(run_module, "RETRY_BASE_SECONDS", 0.5)
    monkeypatch.setattr(run_module, "RETRY_MAX_SECONDS", 2.0)
    monkeypatch.setattr(run_module, "FLUSH_HTTP_TIMEOUT_SECONDS", 2)
    monkeypatch.setenv(run_module.FLUSH_TIMEOUT_ENV, "90")
    run = tracking.start_run(cfg, tmp_path, stage="train", flush_every=4, flush_seconds=3600)
    step = 0

    def log(n):
        nonlocal step
        slowest = 0.0
        for _ in range(n):
            started = time.monotonic()
            run.log_metrics({"train_loss": 1.0 / (step + 1), "lr": 0.01}, step=step)
            slowest = max(slowest, time.monotonic() - started)
            step += 1
        return slowest

    log(10)  # flushed in batches (by the sink's background thread) while the server is up
    for _ in range(100):
        if len(_history(server.url, run.run_id, "train_loss")) >= 8:
            break
        time.sleep(0.1)
    assert len(_history(server.url, run.run_id, "train_loss")) >= 8

    server.stop()  # ---- outage: the loop keeps going, values are buffered
    outage_started = time.monotonic()
    slowest = log(30)
    # Generous for a loaded machine, still far below what blocking costs: 30 calls each waiting out the 2 s retry
    # window and 2 s HTTP timeout would take over 60 s.
    assert slowest < 10.0, f"a log_metrics call blocked {slowest:.1f}s while the server was down"
    assert time.monotonic() - outage_started < 40.0
    assert run.metrics.pending, "values must be kept while the store is down"

    server.start()  # ---- back: the next due flush after the backoff sends everything buffered
    backlog_end = step  # values of the steps before this one were buffered during the outage

    def backlog_sent() -> (
        bool
    ):  # the newest values may wait in the buffer (sent in the background, 4 at a time)
        return all(m.step >= backlog_end for m in list(run.metrics.pending))

    for _ in range(200):  # bounded: at most ~20 s of steps
        log(1)
        if backlog_sent():
            break
        time.sleep(0.1)
    assert backlog_sent(), "buffered values were not sent after the server came back"

    server.freeze()  # ---- hung at close (requests time out): closing retries until it answers again
    log(5)
    thaw = threading.Timer(3.0, server.thaw)
    thaw.start()
    try:
        run.close("FINISHED")
    finally:
        thaw.join()
        server.thaw()

    history = _history(server.url, run.run_id, "train_loss")
    steps = sorted(m.step for m in history)
    assert steps == list(range(step)), "every step exactly once"
    assert len(_history(server.url, run.run_id, "lr")) == step
    from mlflow import MlflowClient

    assert MlflowClient(tracking_uri=server.url).get_run(run.run_id).info.status == "FINISHED"

    # ---- a second run whose store never comes back: close gives up after the flush timeout, in one line
    monkeypatch.setenv(run_module.FLUSH_TIMEOUT_ENV, "3")
    second = tracking.start_run(cfg, tmp_path, stage="train", flush_every=1000, flush_seconds=3600)
    second.log_metrics({"train_loss": 1.0}, step=0)
    server.stop()
    started = time.monotonic()
    with pytest.raises(TrackingError) as info:
        second.close("FINISHED")
    assert time.monotonic() - started < 30, "closing must not wait for MLflow's own minutes of retries"
    assert "\n" not in str(info.value) and second.run_id in str(info.value)


class _Seen(logging.Handler):
    """Sets `event` when a log record contains `text` (from any thread)."""

    def __init__(self, text: str):
        super().__init__(logging.WARNING)
        self.text, self.event = text, threading.Event()

    def emit(self, record):
        if self.text in record.getMessage():
            self.event.set()


@pytest.mark.slow  # a real mlflow server stopped while the run's last calls are made, then started again
def test_tags_params_and_the_end_of_a_run_ride_through_an_outage(server, cfg, tmp_path, monkeypatch):
    """The store goes away after training, as the stage logs its tags and params and ends the run: each call
    waits for it (one warning line per attempt) and lands once it is back; a store that stays away is one line
    naming the call, the run and the same command to finish it, after the deadline."""
    from mlflow import MlflowClient

    from tfpipe import tracking
    from tfpipe.tracking import calls
    from tfpipe.tracking import sink as sink_module

    monkeypatch.setattr(calls, "RETRY_MAX_SECONDS", 1.0)
    monkeypatch.setenv(sink_module.FLUSH_TIMEOUT_ENV, "90")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR", "0")  # MLflow's own retries inside each attempt
    seen = _Seen("did not answer set_tags")
    logging.getLogger("tfpipe.tracking.calls").addHandler(seen)
    try:
        run = tracking.start_run(cfg, tmp_path, stage="train", flush_every=1000, flush_seconds=3600)
        run.log_metrics({"train_loss": 0.5}, step=0)
        server.stop()  # ---- outage: started again once the first attempt has failed
        back = threading.Thread(target=lambda: seen.event.wait(60) and server.start())
        back.start()
        run.set_tags({"tfpipe.outage_test": "kept"})
        run.log_params({"outage.param": 7})
        run.close("FINISHED")
        back.join()
    finally:
        logging.getLogger("tfpipe.tracking.calls").removeHandler(seen)
    assert seen.event.is_set(), "the store was never found away: the test did not test the outage"
    stored = MlflowClient(tracking_uri=server.url).get_run(run.run_id)
    assert stored.data.tags["tfpipe.outage_test"] == "kept" and stored.data.params["outage.param"] == "7"
    assert stored.data.tags["tfpipe.stage.train"] == "FINISHED" and stored.info.status == "FINISHED"
    assert [m.step for m in _history(server.url, run.run_id, "train_loss")] == [0]

    # ---- a store that never comes back: one line after the deadline, naming what to do
    monkeypatch.setenv(sink_module.FLUSH_TIMEOUT_ENV, "3")
    second = tracking.start_run(cfg, tmp_path, stage="train", flush_every=1000, flush_seconds=3600)
    server.stop()
    started = time.monotonic()
    with pytest.raises(TrackingError) as info:
        second.set_tags({"tfpipe.outage_test": "lost"})
    message = str(info.value)
    assert time.monotonic() - started < 60, "giving up must not wait for MLflow's own minutes of retries"
    assert "\n" not in message and message.startswith(f"MLflow set_tags failed for run {second.run_id}: ")
    assert "the store did not answer for 3 s" in message and "run the same command again" in message
    server.start()  # the run the stage would finish on its next start
    second.close("KILLED")


OUTAGE_CAP_S = 120.0  # a flush that blocks until the store is back shows as a long flush, never as a hang


@pytest.mark.slow  # a real mlflow server stopped while a small CNN trains and checkpoints every step
def test_training_checkpoints_through_an_outage_and_every_value_arrives_once(
    server, make_config, prepared_image, tmp_path, monkeypatch
):
    """The store goes away while training runs: every checkpoint's flush (SinkHook -> Run.flush, as in the
    train stage) returns within its bound without raising, the checkpoints are written, and once the server is
    back and the run closes, every value the loop logged is in the store exactly once."""
    from tfpipe import tracking, training
    from tfpipe.tracking import sink as sink_module

    monkeypatch.setattr(sink_module, "RETRY_BASE_SECONDS", 0.5)
    monkeypatch.setattr(sink_module, "RETRY_MAX_SECONDS", 2.0)
    monkeypatch.setattr(sink_module, "FLUSH_HTTP_TIMEOUT_SECONDS", 2)
    monkeypatch.setenv(sink_module.FLUSH_TIMEOUT_ENV, "90")
    cfg = make_config(
        "model.filters=[8,8]",
        "model.dense_units=16",
        "train.batch_size_per_replica=4",  # prepared_image: 21 train examples -> 5 steps
        "train.epochs=1",
        "train.log_every_steps=1",
        "train.checkpoint_every_steps=1",
    )
    run = tracking.start_run(cfg, tmp_path, stage="train", flush_every=1, flush_seconds=3600)
    logged, flushes = [], []
    log_metrics, flush = run.log_metrics, run.flush

    def spy_log(metrics, step):
        logged.extend((key, int(step)) for key in metrics)
        log_metrics(metrics, step)

    def timed_flush():
        started = time.monotonic()
        try:
            return flush()
        finally:
            flushes.append(time.monotonic() - started)

    monkeypatch.setattr(run, "log_metrics", spy_log)  # the instance's: SinkHook calls these very two
    monkeypatch.setattr(run, "flush", timed_flush)
    lock = threading.Lock()

    def bring_back():
        with lock:
            if server.proc.poll() is not None:
                server.start()

    seen = _Seen("MLflow metric flush failed")
    logging.getLogger("tfpipe.tracking.sink").addHandler(seen)
    server.stop()  # ---- outage for the whole training
    cap = threading.Timer(OUTAGE_CAP_S, bring_back)
    cap.start()
    try:
        result = training.train(
            cfg, prepared_dir=prepared_image.prepared_dir, output_dir=tmp_path / "model", sink=run
        )
    except BaseException:
        bring_back()  # so that the fixture can end the run this failure left open
        raise
    finally:
        logging.getLogger("tfpipe.tracking.sink").removeHandler(seen)
        cap.cancel()
        cap.join()
    assert server.proc.poll() is not None, (
        f"training outlived the {OUTAGE_CAP_S:.0f} s outage: flushes {flushes}"
    )
    assert seen.event.is_set(), "the sink never found the store away: the test did not test the outage"
    assert len(flushes) >= result.steps >= 5, "a checkpoint (and its flush) at every step"
    assert list(Path(result.checkpoint_dir).glob("*.index")), "the checkpoints were written"
    # 2 s flush timeout (patched) plus slack for a loaded machine; blocking until the store is back is minutes
    assert max(flushes) < 10.0, f"a checkpoint's flush blocked while the store was away: {flushes}"
    assert run.metrics.pending, "values must be kept while the store is down"

    bring_back()  # ---- back: closing sends everything buffered
    run.close("FINISHED")
    wanted: dict = {}
    for key, step in logged:
        wanted.setdefault(key, []).append(step)
    assert "train_loss" in wanted and "val_loss" in wanted
    for key, steps in wanted.items():
        stored = sorted(m.step for m in _history(server.url, run.run_id, key))
        assert stored == sorted(steps), f"{key}: every logged value exactly once"


def test_only_a_store_that_does_not_answer_is_waited_for():
    import requests
    from mlflow.exceptions import MlflowException, RestException

    from tfpipe.tracking.calls import unanswered

    url = "API request to http://127.0.0.1:5000/api/2.0/mlflow/runs/log-batch"
    waited = [
        requests.ConnectionError("refused"),
        requests.Timeout("slow"),
        MlflowException(f"{url} failed with exception HTTPConnectionPool(...): Max retries exceeded"),
        MlflowException(f"{url} failed with timeout exception ReadTimeout(...)."),
        MlflowException(f"{url} failed with error code 503 != 200. Response body: ''"),
        RestException({"error_code": "TEMPORARILY_UNAVAILABLE", "message": "busy"}),
    ]
    not_waited = [
        MlflowException(f"{url} failed with error code 403 != 200. Response body: 'PermissionException'"),
        RestException({"error_code": "INVALID_PARAMETER_VALUE", "message": "param changed"}),
        RestException({"error_code": "RESOURCE_DOES_NOT_EXIST", "message": "no run"}),
        MlflowException("Run 'x' not found"),
        ValueError("a bug"),
    ]
    assert [unanswered(e) for e in waited] == [True] * len(waited)
    assert [unanswered(e) for e in not_waited] == [False] * len(not_waited)
