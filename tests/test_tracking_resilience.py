"""The MLflow backend going away mid-run: metrics are buffered and retried with backoff, training never
waits long or crashes, and every value arrives exactly once when the server is back.

Runs a real `mlflow server` (SQLite store) on a loopback port: stops it mid-run and starts it again on the
same port and store (connections refused meanwhile), then freezes it at close (SIGSTOP: requests time
out) and thaws it. Bounded: each server start waits at most 90 s, every loop is counted.
"""

from __future__ import annotations

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
