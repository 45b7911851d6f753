"""Network exposure (issue 22, item 5): the credential probe and redirects, the local cluster's addresses,
and what TensorFlow's gRPC server binds to. Real loopback servers and processes, no mocks."""

from __future__ import annotations

import http.server
import json
import os
import subprocess
import sys
import threading
from contextlib import contextmanager

import pytest

from tfpipe.errors import UserError
from tfpipe.launch import cluster
from tfpipe.tracking import backend


class _Recorder(http.server.BaseHTTPRequestHandler):
    """Answers 200 and remembers every request's headers (the server's `seen` list)."""

    def do_GET(self):  # noqa: N802 - http.server's name
        self.server.seen.append(dict(self.headers))
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(b"{}")

    def log_message(self, *args):
        pass


class _Redirector(_Recorder):
    """Records, then sends every request on to `server.target` (307 keeps method and headers)."""

    def do_GET(self):  # noqa: N802
        self.server.seen.append(dict(self.headers))
        self.send_response(self.server.code)
        self.send_header("Location", self.server.target + self.path)
        self.end_headers()


@contextmanager
def _serve(handler, **attrs):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.seen = []
    for key, value in attrs.items():
        setattr(server, key, value)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server, f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


@pytest.mark.parametrize("code", [301, 302, 307, 308])
def test_credential_probe_does_not_send_authorization_to_another_origin(code, monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_USERNAME", "alice")
    monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", "alice-secret-password")
    monkeypatch.delenv("MLFLOW_TRACKING_TOKEN", raising=False)
    with (
        _serve(_Recorder) as (other, other_url),
        _serve(_Redirector, target=other_url, code=code) as (first, url),
    ):
        backend.check_credentials(url)
    assert first.seen and first.seen[0].get("Authorization", "").startswith("Basic ")  # the probe did ask
    assert other.seen, "the redirect was followed"  # the probe still learns where the server is
    assert not [h for h in other.seen if "Authorization" in h], other.seen


def test_credential_probe_keeps_authorization_on_a_same_origin_redirect(monkeypatch):
    """A redirect within the server (a proxy adding a slash) still carries the credentials."""
    monkeypatch.setenv("MLFLOW_TRACKING_USERNAME", "alice")
    monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", "alice-secret-password")

    class Both(_Recorder):
        def do_GET(self):  # noqa: N802
            if self.path.startswith("/old/"):
                self.send_response(307)
                self.send_header("Location", self.path.replace("/old/", "/", 1))
                self.end_headers()
                return
            super().do_GET()

    with _serve(Both) as (server, url):
        backend.check_credentials(url + "/old")
    assert [h.get("Authorization", "") for h in server.seen][-1].startswith("Basic ")


# ----------------------------------------------------------------------------- the local cluster


def test_the_launchers_cluster_is_on_loopback_only():
    for strategy, ps in (("multi_worker_mirrored", 0), ("parameter_server", 1)):
        spec = cluster.local_cluster(strategy, 2, ps)
        hosts = {a.rsplit(":", 1)[0] for addresses in spec.values() for a in addresses}
        assert hosts == {"127.0.0.1"}, spec
    from tfpipe.launch.local import Launcher

    job = Launcher("parameter_server", 2, 1, [], ".")  # the cluster a launch would start (nothing started)
    for ttype, index in job.roles:
        spec = json.loads(cluster.tf_config(job.cluster, ttype, index))["cluster"]
        assert {a.rsplit(":", 1)[0] for addresses in spec.values() for a in addresses} == {"127.0.0.1"}
    with pytest.raises(UserError, match="loopback"):
        cluster.local_cluster("multi_worker_mirrored", 2, host="0.0.0.0")
    with pytest.raises(UserError, match="loopback"):
        cluster.local_cluster("parameter_server", 2, 1, host="node7.example")


_LISTEN = r"""
import json, os, sys, tensorflow as tf
spec = json.loads(sys.argv[1])
server = tf.distribute.Server(tf.train.ClusterSpec(spec), job_name="worker", task_index=0, start=True)
port = spec["worker"][0].rsplit(":", 1)[1]
hexport = "%04X" % int(port)
rows = []
for table in ("/proc/net/tcp", "/proc/net/tcp6"):
    for line in open(table).read().splitlines()[1:]:
        local, state = line.split()[1], line.split()[3]
        if state == "0A" and local.endswith(":" + hexport):
            rows.append(local.rsplit(":", 1)[0])
print(json.dumps(rows))
"""


@pytest.mark.slow
def test_tensorflow_grpc_server_binds_every_interface_whatever_the_cluster_spec_says():
    """The statement in docs/tutorials/cluster.md, checked on the installed TensorFlow: a task whose cluster address is
    127.0.0.1 still listens on the wildcard address (grpc_server_lib.cc binds "0.0.0.0:<port>"). When a
    TensorFlow release binds the given host instead, this fails: then bind the launcher to loopback and
    update docs/tutorials/cluster.md."""
    spec = cluster.local_cluster("multi_worker_mirrored", 1)
    proc = subprocess.run(
        [sys.executable, "-c", _LISTEN, json.dumps(spec)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = json.loads(proc.stdout.strip().splitlines()[-1])
    assert rows and all(set(addr) == {"0"} for addr in rows), rows  # only the all-zero (wildcard) address
