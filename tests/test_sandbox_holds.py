"""The audit's sandbox holds for root and for anyone else (issue 50): a probe program runs through
`sandbox.wrap` with the environment of `sandbox.environment`, as `rerun._run_stages` runs the stages (in the
re-run's worktree, in a session of its own), and tries each way out; the verdicts are read from outside. The same
probe run unwrapped, as the same auditor, gets through each (so each check can see a breach).

The world: a real git project with a `.env`, a `.dvc/config.local` and a token in its remote URL, a worktree
of it in the re-run's folder (its raw data hard links, its root-owned 0600 `.lock`), a home with a `.netrc`, a
process of uid 65534 holding a marker in its environment, Unix sockets listening in host folders (/tmp, /run,
the test's own) and in the abstract namespace, a TCP listener on loopback, credentials in the environment."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

import pytest

from tfpipe.audit import sandbox

ROOT = Path(__file__).resolve().parents[1]
NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
PLANTED = {
    "MLFLOW_TRACKING_PASSWORD": "x",
    "MLFLOW_TRACKING_USERNAME": "u",
    "MLFLOW_TRACKING_TOKEN": "t",
    "GITHUB_TOKEN": "y",
    "AWS_ACCESS_KEY_ID": "a",
    "AWS_SECRET_ACCESS_KEY": "s",
}
ROOTS_ONLY = {"/etc/shadow", "capabilities", "uid 0"}  # only root's processes have these outside
PASSED = ("HF_TOKEN",)  # credential-looking, passed by the auditor with --pass-env: it must get in

PROBE = r"""
import json, os, socket, subprocess, sys
spec, seen = json.loads(sys.argv[1]), {}

def attempt(name, fn):
    try:
        seen[name] = "ok:" + str(fn())
    except Exception as exc:  # a refusal, named
        seen[name] = "refused:" + type(exc).__name__

def read(path):
    with open(path, "rb") as f:
        return f.read().decode(errors="replace")

def status(key):
    return next(line.split()[1] for line in read("/proc/self/status").splitlines() if line.startswith(key + ":"))

def connect(family, address):
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.settimeout(5)
        s.connect(address)
    return "connected"

def write(path):
    with open(path, "w") as f:
        f.write("escaped")
    return "written"

def environs():
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            found += [pid] if spec["marker"] in read(f"/proc/{pid}/environ") else []
        except OSError:
            pass
    return ",".join(found) or "none"

attempt("uid", os.getuid)
attempt("prefix", lambda: sys.prefix)  # the interpreter found its own installation, not a fallback
attempt("session", lambda: os.getsid(0) != 0)  # its session's leader inside (0: the auditor's, outside)
attempt("cap_eff", lambda: status("CapEff"))
attempt("cap_bnd", lambda: status("CapBnd"))
attempt("no_new_privs", lambda: status("NoNewPrivs"))
attempt("pid1", lambda: read("/proc/1/cmdline").split("\0")[0])
attempt("pids", lambda: sorted(int(p) for p in os.listdir("/proc") if p.isdigit()))
attempt("helper_environ", lambda: spec["marker"] in read(f"/proc/{spec['helper']}/environ"))
attempt("marker_environs", environs)
attempt("host_root_via_1", lambda: read("/proc/1/root" + spec["marker_file"]))
attempt("host_root_via_helper", lambda: read(f"/proc/{spec['helper']}/root" + spec["marker_file"]))
attempt("marker_file", lambda: read(spec["marker_file"]))
attempt("lock", lambda: read(spec["lock"]))
attempt("shadow", lambda: len(read("/etc/shadow")))
attempt("home", lambda: sorted(os.listdir(os.environ["HOME"])))
attempt("netrc", lambda: read(spec["netrc"]))
attempt("dotenv", lambda: read(spec["dotenv"]))
attempt("dvc_local", lambda: read(spec["dvc_local"]))
attempt("git_config", lambda: read(spec["git_config"]))
git = ["git", "rev-parse", "HEAD"]
attempt("git", lambda: subprocess.run(git, capture_output=True, text=True, check=True).stdout.strip())
for path in spec["sockets"]:
    attempt("unix:" + path, lambda p=path: connect(socket.AF_UNIX, p))
attempt("unix:abstract", lambda: connect(socket.AF_UNIX, "\0" + spec["abstract"]))
attempt("tcp", lambda: connect(socket.AF_INET, ("127.0.0.1", spec["port"])))
attempt("write_host_tmp", lambda: write(spec["host_drop"]))
attempt("write_project", lambda: write(spec["project_drop"]))
attempt("write_raw", lambda: os.close(os.open(spec["raw"], os.O_WRONLY)) or "opened")
attempt("read_raw", lambda: read(spec["raw_private"]))
attempt("write_raw_private", lambda: os.close(os.open(spec["raw_private"], os.O_WRONLY)) or "opened")
attempt("write_inside", lambda: write(spec["inside"]))
attempt("env", lambda: ",".join(sorted(os.environ)))
seen["passed"] = os.environ.get("HF_TOKEN")
print(json.dumps(seen))
"""


def _git(cwd, *args) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t"}
    env["GIT_COMMITTER_EMAIL"] = "t@t"
    return subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True, text=True).stdout


def _listen_unix(path: str) -> socket.socket:
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(8)
    if not path.startswith("\0"):
        os.chmod(path, 0o777)  # anyone may connect: only the sandbox may stop them
    return server


@pytest.fixture
def host_dir():
    """A folder of the host every user can pass and write in (/tmp/...): a marker file, a socket, a drop box."""
    path = Path(tempfile.mkdtemp(prefix="tfpipe-sandbox-test-", dir="/tmp"))
    path.chmod(0o755)
    (path / "marker.txt").write_text("host-only marker\n")
    (path / "drop").mkdir(mode=0o777)
    (path / "drop").chmod(0o777)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _world(base: Path, host: Path, owner) -> dict:
    """The project, its worktree in the re-run's folder, the home; owned by `owner` (None: the test's user)."""
    project, folder, home = base / "project", base / "box", base / "home"
    for made in (project / "data" / "raw" / "cat", folder / "tmp", home, base / "outside"):
        made.mkdir(parents=True)
    _git(project, "init", "-q", "-b", "main")
    (project / ".gitignore").write_text(".env\ndata/raw/\n")
    (project / "file.txt").write_text("tracked\n")
    _git(project, "add", "-A")
    _git(project, "commit", "-qm", "init")
    _git(project, "config", "remote.origin.url", "https://me:t0ken@git.example.invalid/team.git")
    (project / ".env").write_text("API_KEY=planted-dotenv\n")
    (project / ".dvc").mkdir()
    (project / ".dvc" / "config.local").write_text("['remote \"team\"']\n    password = s3cret\n")
    (project / "data" / "raw" / "cat" / "a.txt").write_text("raw bytes\n")
    (home / ".netrc").write_text("machine example.com login me password planted\n")
    _git(project, "worktree", "add", "--detach", "-q", str(folder / "worktree"), "HEAD")
    (folder / "worktree" / "data" / "raw" / "cat").mkdir(parents=True)
    os.link(
        project / "data" / "raw" / "cat" / "a.txt", folder / "worktree" / "data" / "raw" / "cat" / "a.txt"
    )
    private = project / "data" / "raw" / "private"  # the auditor's own raw data: a 0700 folder, a 0600 file
    private.mkdir(mode=0o700)
    (private / "b.txt").write_text("private raw bytes\n")
    (private / "b.txt").chmod(0o600)
    shutil.copytree(private, folder / "worktree" / "data" / "raw" / "private", copy_function=os.link)
    if owner is not None:
        for top, dirs, files in os.walk(base):
            for name in [".", *dirs, *files]:
                os.chown(os.path.join(top, name), owner, owner, follow_symlinks=False)
    lock = folder / ".lock"  # the re-run's lock: root's (the test's user's), 0600
    lock.write_text("planted-lock\n")
    lock.chmod(0o600)
    sockets = [str(host / "s.sock"), str(base / "outside" / "s.sock")]
    if os.geteuid() == 0 and os.access("/run", os.W_OK):
        sockets.append(f"/run/tfpipe-sandbox-test-{uuid.uuid4().hex[:12]}.sock")
    return {
        "commit": _git(project, "-c", "safe.directory=*", "rev-parse", "HEAD").strip(),
        "project": project,
        "folder": folder,
        "home": home,
        "sockets": sockets,
        "abstract": f"tfpipe-sandbox-test-{uuid.uuid4().hex}",
        "marker": f"TFPIPE_TEST_MARK=planted-{uuid.uuid4().hex}",
        "marker_file": str(host / "marker.txt"),
        "lock": str(lock),
        "netrc": str(home / ".netrc"),
        "dotenv": str(project / ".env"),
        "dvc_local": str(project / ".dvc" / "config.local"),
        "git_config": str(project / ".git" / "config"),
        "host_drop": str(host / "drop" / "escaped.txt"),
        "project_drop": str(project / "escaped.txt"),
        "raw": str(folder / "worktree" / "data" / "raw" / "cat" / "a.txt"),
        "raw_private": str(folder / "worktree" / "data" / "raw" / "private" / "b.txt"),
        "raw_original": str(project / "data" / "raw" / "private" / "b.txt"),
        "inside": str(folder / "worktree" / "inside.txt"),
    }


def _probe(world: dict, argv: list, env: dict, helper: int, port: int) -> dict:
    """The probe's verdicts, run as `argv` (ending in the probe's interpreter) in the worktree, new session."""
    keys = ("sockets", "abstract", "marker", "marker_file", "lock", "netrc", "dotenv", "dvc_local")
    keys += ("git_config", "host_drop", "project_drop", "raw", "raw_private", "inside")
    spec = {**{k: world[k] for k in keys}, "helper": helper, "port": port}
    proc = subprocess.run(
        [*argv, "-I", "-c", PROBE, json.dumps(spec)],
        cwd=world["folder"] / "worktree",
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        start_new_session=True,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _breaches(seen: dict, world: dict) -> set:
    """The ways out the probe found, read from its verdicts and from outside."""
    ok = {name for name, verdict in seen.items() if isinstance(verdict, str) and verdict.startswith("ok:")}
    found = {
        "capabilities": seen["cap_eff"] != "ok:0000000000000000",
        "bounding set": seen["cap_bnd"] != "ok:0000000000000000",
        "new privileges (setuid files)": seen["no_new_privs"] != "ok:1",
        "uid 0": seen["uid"] == "ok:0",
        "host processes": seen["helper_environ"] == "ok:True" or seen["marker_environs"] != "ok:none",
        "host root through /proc": bool({"host_root_via_1", "host_root_via_helper"} & ok),
        "host files": "marker_file" in ok,
        "root's 0600 file": "lock" in ok,
        "/etc/shadow": "shadow" in ok,
        "home": "netrc" in ok or seen["home"] != "ok:[]",
        "project secrets": bool({"dotenv", "dvc_local"} & ok) or "t0ken" in seen["git_config"],
        "unix sockets": any(name.startswith("unix:") for name in ok),
        "network": "tcp" in ok,
        "writes outside": any(os.path.exists(world[k]) for k in ("host_drop", "project_drop"))
        or bool({"write_raw", "write_raw_private"} & ok),
        "credentials in env": any(name in seen["env"].split(",") for name in PLANTED),
        "the auditor's session": seen["session"] != "ok:True",
    }
    return {name for name, breached in found.items() if breached}


def _listeners(world: dict):
    servers = [_listen_unix(path) for path in world["sockets"]]
    servers.append(_listen_unix("\0" + world["abstract"]))
    tcp = socket.create_server(("127.0.0.1", 0))
    return [*servers, tcp], tcp.getsockname()[1]


def _helper(world: dict) -> subprocess.Popen:
    """A host process of uid 65534 (the uid inside) with the marker in its environment."""
    name, _, value = world["marker"].partition("=")
    drop = NOBODY if os.geteuid() == 0 else []
    return subprocess.Popen([*drop, "sleep", "120"], env={"PATH": os.defpath, name: value})


def _host_init() -> str:
    return Path("/proc/1/cmdline").read_bytes().split(b"\0")[0].decode()


def _assert_held(seen: dict, world: dict, prefix: str, allowed: frozenset = frozenset()) -> None:
    """Nothing got out (but `allowed`); what the stages need works: git in the worktree, writing in the folder,
    the passed name, an empty home, pid 1 the sandbox's own, a handful of processes."""
    assert _breaches(seen, world) - allowed == set(), seen
    assert seen["uid"] != "ok:0" and seen["pid1"] != f"ok:{_host_init()}", seen
    assert seen["prefix"] == "ok:" + prefix, seen
    assert len(json.loads(seen["pids"][3:])) < 10, seen
    assert seen["git"] == "ok:" + world["commit"], seen
    assert Path(world["inside"]).read_text() == "escaped" and seen["passed"] == "planted-passed", seen
    assert Path(world["raw"]).read_text() == "raw bytes\n", seen
    assert seen["read_raw"] == "ok:private raw bytes\n", seen  # a stage input: readable, never writable
    original = os.stat(world["raw_original"])
    assert stat.S_IMODE(original.st_mode) == 0o600, oct(original.st_mode)  # the auditor's file as it was


def _plant(monkeypatch, world: dict) -> None:
    monkeypatch.setenv("HOME", str(world["home"]))
    for name, value in PLANTED.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("HF_TOKEN", "planted-passed")


def _machine_can_sandbox(*drop: str) -> None:
    """Skip where this machine cannot sandbox at all (no bwrap; namespaces refused to the user `drop` makes):
    not where `sandbox.wrap` builds a sandbox that fails, which these tests are here to catch."""
    if shutil.which("bwrap") is None or (os.geteuid() == 0 and shutil.which("setpriv") is None):
        pytest.skip("bubblewrap (or, for root, setpriv) is not installed")
    bare = [*drop, "bwrap", "--unshare-all", "--ro-bind", "/", "/", "--proc", "/proc", "true"]
    proc = subprocess.run(bare, capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.skip(f"this machine refuses bwrap's namespaces: {proc.stderr.strip()[:200]}")


def _need_root_or_skip():
    if os.geteuid() != 0:
        pytest.skip("becoming uid 65534 needs root; as another user the first test is that case")
    _machine_can_sandbox(*NOBODY)


def test_the_sandbox_holds_for_the_auditor_root_included(tmp_path, host_dir, monkeypatch):
    """The test's user (root here: root's bwrap builds the view, setpriv drops to uid 65534 inside; the world
    under pytest's 0700 folder, where uid 65534 could not reach it without root's bwrap)."""
    _machine_can_sandbox()
    world = _world(tmp_path, host_dir, None)
    _plant(monkeypatch, world)
    servers, port = _listeners(world)
    helper = _helper(world)
    # not root: the lock is the auditor's own file, and shadow, capabilities and uid 0 were never theirs
    theirs = frozenset() if os.geteuid() == 0 else frozenset({"root's 0600 file", *ROOTS_ONLY})
    try:
        env = sandbox.environment(dict(os.environ), PASSED, world["folder"])
        argv = sandbox.wrap([sys.executable], world["folder"], world["project"])
        seen = _probe(world, argv, env, helper.pid, port)
        _assert_held(seen, world, sys.prefix, allowed=theirs & {"root's 0600 file"})
        assert seen["uid"] == ("ok:65534" if os.geteuid() == 0 else f"ok:{os.geteuid()}"), seen
        loose = _probe(world, [sys.executable], dict(os.environ), helper.pid, port)  # unwrapped: all get out
        assert _breaches(loose, world) == _all_breaches() - (theirs - {"root's 0600 file"}), loose
        assert sandbox.problem() is None  # the audit's own check agrees: it sandboxes here
    finally:
        helper.send_signal(signal.SIGKILL)
        helper.wait()
        for server in servers:
            server.close()
        _unlink_sockets(world)


def _all_breaches() -> set:
    return {
        "capabilities",
        "bounding set",
        "new privileges (setuid files)",
        "uid 0",
        "host processes",
        "host root through /proc",
        "host files",
        "root's 0600 file",
        "/etc/shadow",
        "home",
        "project secrets",
        "unix sockets",
        "network",
        "writes outside",
        "credentials in env",
    }  # not "the auditor's session": unwrapped, the probe leads a session of its own too (as the stages do)


def _unlink_sockets(world: dict) -> None:
    for path in world["sockets"]:
        if os.path.exists(path) and stat.S_ISSOCK(os.lstat(path).st_mode):
            os.unlink(path)


def _nobody_python() -> dict:
    """An interpreter uid 65534 can run (this one, else the system's), and its prefixes and import path."""
    show = "import json, os, sys; os.stat(sys.executable); os.stat(sys.prefix)"  # reachable by uid 65534
    show += "; print(json.dumps([sys.executable, sys.prefix, sys.base_prefix, sys.path]))"
    for python in (sys.executable, "/usr/bin/python3"):
        proc = subprocess.run([*NOBODY, python, "-I", "-c", show], capture_output=True, text=True)
        if proc.returncode == 0:
            executable, prefix, base, path = json.loads(proc.stdout)
            return {"executable": executable, "prefix": prefix, "base_prefix": base, "path": path}
    pytest.skip("no Python that uid 65534 can run")


def test_the_sandbox_holds_for_an_unprivileged_auditor(host_dir, monkeypatch):
    """An auditor of uid 65534 (bwrap makes a user namespace, `--cap-drop ALL`): their world in a folder they
    own, their Python (wrap binds its prefixes as it would binds theirs), the root-owned lock in their folder."""
    _need_root_or_skip()
    base = Path(tempfile.mkdtemp(prefix="tfpipe-sandbox-nobody-", dir="/tmp"))
    try:
        base.chmod(0o755)
        world = _world(base, host_dir, 65534)
        _plant(monkeypatch, world)
        python = _nobody_python()  # may skip: before anything listens or runs
        servers, port = _listeners(world)
        helper = _helper(world)
        try:
            with monkeypatch.context() as their:  # the auditor's interpreter, as `wrap` reads it
                for name in ("executable", "prefix", "base_prefix", "path"):
                    their.setattr(sys, name, python[name])
                their.setattr(sys, "exec_prefix", python["prefix"])
                env = sandbox.environment(dict(os.environ), PASSED, world["folder"])
                argv = sandbox.wrap(
                    [python["executable"]], world["folder"], world["project"], privileged=False
                )
            probe = [*NOBODY, *argv]
            assert probe.count("setpriv") == 1  # no drop inside: the auditor is unprivileged already
            seen = _probe(world, probe, env, helper.pid, port)
            _assert_held(seen, world, python["prefix"])
            loose = _probe(world, [*NOBODY, python["executable"]], dict(os.environ), helper.pid, port)
            assert seen["uid"] == "ok:65534", seen
            theirs = {"root's 0600 file", *ROOTS_ONLY}  # not theirs outside either
            assert _breaches(loose, world) == _all_breaches() - theirs, loose
        finally:
            helper.send_signal(signal.SIGKILL)
            helper.wait()
            for server in servers:
                server.close()
            _unlink_sockets(world)
    finally:
        shutil.rmtree(base, ignore_errors=True)


def test_no_working_sandbox_is_refused_unless_off(tmp_path, monkeypatch):
    """`auto` (the default) and `on` refuse in one line saying how to install bubblewrap where bwrap is missing;
    only `off` runs unsandboxed, saying so. Root without setpriv is refused too (nothing would drop its uid)."""
    from tfpipe.errors import UserError

    empty = tmp_path / "bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    lines = []
    for mode in ("auto", "on"):
        with pytest.raises(UserError) as refused:
            sandbox.decide(mode, lines.append)
        assert str(refused.value) == (
            f"audit: --sandbox {mode}: bubblewrap (bwrap) is not installed; install bubblewrap "
            "(Debian/Ubuntu: apt-get install bubblewrap), or choose --sandbox off"
        )
    assert lines == []
    assert sandbox.decide("off", lines.append) is False
    assert lines == ["rerun: not sandboxed (--sandbox off): the stages run with your files, home and network"]
    if os.geteuid() == 0 and shutil.which("bwrap", path=os.defpath + ":/usr/bin"):
        (empty / "bwrap").symlink_to(shutil.which("bwrap", path=os.defpath + ":/usr/bin"))
        with pytest.raises(
            UserError, match="setpriv, which drops root to uid 65534 .* apt-get install util-linux"
        ):
            sandbox.decide("auto", lines.append)


def _sleepers(mark: str) -> list:
    """Host pids of `sleep MARK` (whoever runs them, in whatever pid namespace)."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and (entry / "cmdline").read_bytes() == f"sleep\0{mark}\0".encode():
                found.append(int(entry.name))
        except OSError:
            continue
    return found


def test_the_sandbox_dies_with_the_audit(tmp_path):
    """An audit killed outright (SIGKILL, the OOM killer: no cleanup of its own runs) takes the sandboxed stage
    with it: bwrap's --die-with-parent."""
    import time

    _machine_can_sandbox()
    folder = tmp_path / "box"
    folder.mkdir()
    mark = f"{300 + uuid.uuid4().int % 1000}.{uuid.uuid4().int % 10**6}"  # a sleep of its own
    argv = sandbox.wrap(["sleep", mark], folder, None)
    starter = "import subprocess, sys, time; subprocess.Popen(sys.argv[1:]); time.sleep(300)"
    env = sandbox.environment(dict(os.environ), (), folder)
    audit = subprocess.Popen([sys.executable, "-c", starter, *argv], cwd=folder, env=env)
    try:
        deadline = time.monotonic() + 60
        while not _sleepers(mark):
            assert audit.poll() is None and time.monotonic() < deadline, "the sandboxed stage never started"
            time.sleep(0.1)
        audit.kill()
        audit.wait()
        deadline = time.monotonic() + 10
        while _sleepers(mark) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _sleepers(mark) == [], "the stage outlived the audit"
    finally:
        for pid in _sleepers(mark):
            os.kill(pid, signal.SIGKILL)


def test_a_project_in_a_system_folder_shows_only_its_git(tmp_path, host_dir, monkeypatch):
    """A project inside a folder bound read-only (as one under /opt is; here tmp_path/opt made one): a tmpfs
    over the project hides its files, its .git (config reduced) is bound back and git works."""
    _machine_can_sandbox()
    world = _world(tmp_path / "opt", host_dir, None)
    _plant(monkeypatch, world)
    monkeypatch.setattr(sandbox, "SYSTEM", (*sandbox.SYSTEM, str(tmp_path / "opt")))
    servers, port = _listeners(world)
    helper = _helper(world)
    try:
        env = sandbox.environment(dict(os.environ), PASSED, world["folder"])
        argv = sandbox.wrap([sys.executable], world["folder"], world["project"])
        seen = _probe(world, argv, env, helper.pid, port)
        assert "project secrets" not in _breaches(seen, world), seen
        assert seen["git"] == "ok:" + world["commit"] and seen["write_inside"] == "ok:written", seen
    finally:
        helper.send_signal(signal.SIGKILL)
        helper.wait()
        for server in servers:
            server.close()
        _unlink_sockets(world)


@pytest.mark.slow
def test_the_default_audit_refuses_without_bwrap_before_making_anything(tmp_path):
    """`audit RUN --rerun` (the default `--sandbox auto`) where bwrap is missing: exit 2, one line saying how to
    install bubblewrap, and neither a re-run folder nor a worktree made."""
    import mlflow

    repo, scratch, bin_dir = tmp_path / "repo", tmp_path / "scratch", tmp_path / "bin"
    for made in (repo, scratch, bin_dir):
        made.mkdir()
    _git(repo, "init", "-q", "-b", "main")
    (repo / "params.yaml").write_text("seed: 1\n")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "init")
    client = mlflow.MlflowClient(f"sqlite:///{tmp_path / 'store.db'}")
    exp = client.create_experiment("forged", artifact_location=(tmp_path / "art").as_uri())
    run_id = client.create_run(exp).info.run_id
    client.set_tag(run_id, "git.commit", _git(repo, "rev-parse", "HEAD").strip())
    client.set_tag(run_id, "git.dirty", "false")
    client.log_text(run_id, "seed: 1\n", "config/resolved.yaml")
    client.log_param(run_id, "seed", "1")  # the param that vouches for it (tfpipe.tracking.reading)
    (bin_dir / "git").symlink_to(shutil.which("git"))  # a PATH with git and without bwrap
    env = {**os.environ, "PATH": str(bin_dir), "TMPDIR": str(scratch)}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(ROOT / "src")])
    cmd = [
        sys.executable,
        "-m",
        "pipeline.audit",
        run_id,
        "--rerun",
        "--tracking-uri",
        f"sqlite:///{tmp_path / 'store.db'}",
    ]
    proc = subprocess.run(cmd, cwd=repo, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().splitlines()[-1] == (
        "audit: error: audit: --sandbox auto: bubblewrap (bwrap) is not installed; install bubblewrap "
        "(Debian/Ubuntu: apt-get install bubblewrap), or choose --sandbox off"
    ), proc.stderr
    assert "rerun: not sandboxed" not in proc.stderr and "rerun: train" not in proc.stderr
    assert list(scratch.iterdir()) == []
    assert len(_git(repo, "worktree", "list").strip().splitlines()) == 1
