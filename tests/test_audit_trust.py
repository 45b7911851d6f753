"""Run records are untrusted input: a --rerun refuses hostile recorded diffs (stage command edits, symlinks,
a diff on a clean-tagged run, no --apply-diff DIGEST), an untrusted commit, and strips credentials from the
stages. Runs are forged in a real SQLite store with MLflow's public API, as anyone with EDIT on a server could."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tfpipe.audit.review import digest
from tfpipe.audit.trust import stage_env
from tfpipe.errors import UserError

ROOT = Path(__file__).resolve().parents[1]
STAGES = "stages:\n  prepare:\n    cmd: env > {out}\n"


def _sh(cwd, *cmd):
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t"}
    env.update(GIT_COMMITTER_NAME="t", GIT_COMMITTER_EMAIL="t@t", DVC_NO_ANALYTICS="1")
    return subprocess.run(cmd, cwd=cwd, env=env, check=True, capture_output=True, text=True).stdout


@pytest.fixture
def project(tmp_path):
    """A real git + DVC repo whose one stage writes its environment to tmp/env.txt; returns (repo, commit)."""
    repo = tmp_path / "repo"
    repo.mkdir()
    _sh(repo, "git", "init", "-q", "-b", "main")
    _sh(repo, sys.executable, "-m", "dvc", "init", "-q")
    (repo / "dvc.yaml").write_text(STAGES.format(out=tmp_path / "env.txt"))
    (repo / "params.yaml").write_text("seed: 1\n")
    (repo / "notes.txt").write_text("old\n")
    _sh(repo, "git", "add", "-A")
    _sh(repo, "git", "commit", "-qm", "init")
    return repo, _sh(repo, "git", "rev-parse", "HEAD").strip()


def _diff(repo, change) -> str:
    """A real `git diff` of `change` applied to the repo, which is then restored."""
    change(repo)
    text = _sh(repo, "git", "diff")
    _sh(repo, "git", "checkout", "--", ".")
    return text


def _forge(tmp_path, commit, diff=None, dirty="true", config="seed: 1\n") -> str:
    """A run in a real SQLite store with the tags and artifacts a rerun reads."""
    import mlflow
    import yaml

    from tfpipe.tracking.reading import config_params

    client = mlflow.MlflowClient(f"sqlite:///{tmp_path / 'store.db'}")
    found = client.get_experiment_by_name("forged")
    exp = (
        found.experiment_id
        if found
        else client.create_experiment("forged", artifact_location=(tmp_path / "art").as_uri())
    )
    run_id = client.create_run(exp).info.run_id
    client.set_tag(run_id, "git.commit", commit)
    client.set_tag(run_id, "git.dirty", dirty)
    client.log_text(run_id, config, "config/resolved.yaml")
    for key, value in config_params(yaml.safe_load(config)).items():  # the params that vouch for it
        client.log_param(run_id, key, value)
    if diff:
        client.log_text(run_id, diff, "provenance/git_diff.patch")
    return run_id


def _audit(repo, tmp_path, run_id, *flags, env=None, sandbox="off"):
    """`audit RUN --rerun`; unsandboxed unless asked (these stages report by writing outside the re-run's folder,
    which the sandbox forbids: tests of the sandbox below)."""
    env = {**(env or os.environ), "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "src")])}
    uri = f"sqlite:///{tmp_path / 'store.db'}"
    cmd = [
        sys.executable,
        "-m",
        "pipeline.audit",
        run_id,
        "--rerun",
        "--tracking-uri",
        uri,
        "--sandbox",
        sandbox,
    ]
    cmd += flags
    return subprocess.run(cmd, cwd=repo, env=env, capture_output=True, text=True, timeout=300)


def test_stage_env_keeps_the_allowlist_and_drops_credentials():
    env = {"PATH": "/bin", "LC_ALL": "C", "OMP_NUM_THREADS": "1", "AWS_SECRET_ACCESS_KEY": "x"}
    env.update(MLFLOW_TRACKING_PASSWORD="x", GITHUB_TOKEN="x", TF_API_TOKEN="x", MY_DB_PASSWORD="x")
    env.update(ONEDNN_MAX_CPU_ISA="AVX2", ONEDNN_API_KEY="x")  # the kernels the run used; no secret by prefix
    kept = {"PATH": "/bin", "LC_ALL": "C", "OMP_NUM_THREADS": "1", "ONEDNN_MAX_CPU_ISA": "AVX2"}
    assert stage_env(env) == kept
    assert stage_env(env, ("GITHUB_TOKEN",))["GITHUB_TOKEN"] == "x"


@pytest.mark.slow
def test_a_diff_editing_a_stage_command_never_runs_it(project, tmp_path):
    repo, commit = project
    marker = tmp_path / "MARKER"
    diff = _diff(
        repo, lambda r: (r / "dvc.yaml").write_text(f"stages:\n  prepare:\n    cmd: touch {marker}\n")
    )
    run_id = _forge(tmp_path, commit, diff)
    for flags in ((), ("--apply-diff", digest(diff))):
        proc = _audit(repo, tmp_path, run_id, *flags)
        assert proc.returncode == 2, proc.stderr
        assert proc.stderr.strip().splitlines()[-1].startswith("audit: error: ")
        assert not marker.exists()
    assert "dvc.yaml" in proc.stderr and "refused" in proc.stderr


@pytest.mark.slow
def test_a_diff_making_params_a_symlink_is_refused(project, tmp_path):
    repo, commit = project
    outside = tmp_path / "outside"
    outside.mkdir()

    def link(r):
        (r / "params.yaml").unlink()
        (r / "params.yaml").symlink_to(outside / "params.yaml")

    diff = _diff(repo, link)
    proc = _audit(repo, tmp_path, _forge(tmp_path, commit, diff), "--apply-diff", digest(diff))
    assert proc.returncode == 2, proc.stderr
    assert "symlink" in proc.stderr and "params.yaml" in proc.stderr
    assert list(outside.iterdir()) == []


@pytest.mark.slow
def test_a_diff_on_a_clean_tagged_run_is_refused(project, tmp_path):
    repo, commit = project
    diff = _diff(repo, lambda r: (r / "notes.txt").write_text("new\n"))
    proc = _audit(repo, tmp_path, _forge(tmp_path, commit, diff, dirty="false"), "--apply-diff", digest(diff))
    assert proc.returncode == 2 and "git.dirty=false" in proc.stderr
    assert not (tmp_path / "env.txt").exists()


@pytest.mark.slow
def test_a_dirty_run_needs_apply_diff(project, tmp_path):
    repo, commit = project
    diff = _diff(repo, lambda r: (r / "notes.txt").write_text("new\n"))
    proc = _audit(repo, tmp_path, _forge(tmp_path, commit, diff))
    assert proc.returncode == 2 and f"--apply-diff {digest(diff)[:16]}" in proc.stderr
    assert not (tmp_path / "env.txt").exists()


@pytest.mark.slow
def test_trusted_ref_refuses_a_commit_it_does_not_contain(project, tmp_path):
    repo, _ = project
    _sh(repo, "git", "checkout", "-qb", "side")
    _sh(repo, "git", "commit", "-qm", "side", "--allow-empty")
    side = _sh(repo, "git", "rev-parse", "HEAD").strip()
    _sh(repo, "git", "checkout", "-q", "main")
    proc = _audit(repo, tmp_path, _forge(tmp_path, side), "--trusted-ref", "main")
    assert proc.returncode == 2 and "not an ancestor of --trusted-ref main" in proc.stderr
    assert not (tmp_path / "env.txt").exists()


def test_a_commit_off_the_default_branch_runs_only_with_trusted_ref(project, tmp_path):
    """Without --trusted-ref the commit must be on the clone's default branch (origin's HEAD in a clone, else the
    checked-out branch): a teammate's side-branch commit named in a record is refused before anything runs."""
    from tfpipe.audit.trust import gate

    repo, commit = project
    _sh(repo, "git", "checkout", "-qb", "side")
    _sh(repo, "git", "commit", "-qm", "side", "--allow-empty")
    side = _sh(repo, "git", "rev-parse", "HEAD").strip()
    _sh(repo, "git", "checkout", "-q", "main")
    clone = tmp_path / "clone"
    _sh(tmp_path, "git", "clone", "-q", str(repo), str(clone))
    for root, branch in ((repo, "main"), (clone, "origin/main")):
        with pytest.raises(UserError) as refused:
            gate("RUN", {"tags": {"git.commit": side}}, root, False, None)
        assert str(refused.value) == (
            f"run RUN: commit {side[:12]} is not on {branch}, this clone's default branch; "
            "re-run it only if you trust it: --trusted-ref REF (a ref holding the commit)"
        )
        gate("RUN", {"tags": {"git.commit": side}}, root, False, "side" if root == repo else "origin/side")
        gate("RUN", {"tags": {"git.commit": commit}}, root, False, None)  # on the default branch


HOOKED = "seed: 1\ntrain:\n  hooks:\n  - _target_: {target}\n    command: touch {marker}\n"


@pytest.mark.slow
def test_a_recorded_hook_is_called_only_when_it_is_code_of_the_commit(project, tmp_path):
    """train.hooks names what the train stage instantiates: a record naming os.system (or anything the run's
    commit does not name in its conf/ at that key) is refused before any stage runs; a hook module the commit
    holds and its conf/ names passes the check (the whole rule: tests/test_record_values.py)."""
    repo, commit = project
    marker = tmp_path / "MARKER"
    proc = _audit(
        repo, tmp_path, _forge(tmp_path, commit, config=HOOKED.format(target="os.system", marker=marker))
    )
    assert proc.returncode == 2, proc.stderr
    assert "train.hooks[0]._target_='os.system' names code the commit's conf/ does not name" in proc.stderr
    assert not marker.exists() and not (tmp_path / "env.txt").exists()
    builder = "seed: 1\nmodel:\n  name: team\n  builder: subprocess:getoutput\n"  # a team model's builder
    proc = _audit(repo, tmp_path, _forge(tmp_path, commit, config=builder))
    assert proc.returncode == 2 and "model.builder='subprocess:getoutput' names code" in proc.stderr
    (repo / "team_hooks.py").write_text("from tfpipe.hooks import Hook\n\n\nclass Notify(Hook):\n    pass\n")
    (repo / "conf" / "train").mkdir(parents=True)
    (repo / "conf" / "train" / "default.yaml").write_text("hooks:\n  - _target_: team_hooks.Notify\n")
    _sh(repo, "git", "add", "-A")
    _sh(repo, "git", "commit", "-qm", "a hook")
    ours = _sh(repo, "git", "rev-parse", "HEAD").strip()
    proc = _audit(
        repo,
        tmp_path,
        _forge(tmp_path, ours, config=HOOKED.format(target="team_hooks.Notify", marker=marker)),
    )
    assert "train.hooks" not in proc.stderr and (tmp_path / "env.txt").exists(), proc.stderr


@pytest.mark.slow
def test_the_stages_do_not_see_credentials(project, tmp_path):
    """The forged run has no train stage, so the rerun stops after prepare: prepare's env is what we read."""
    repo, commit = project
    env = {**os.environ, "AWS_SECRET_ACCESS_KEY": "planted", "MLFLOW_TRACKING_TOKEN": "planted"}
    proc = _audit(repo, tmp_path, _forge(tmp_path, commit), env=env)
    seen = (tmp_path / "env.txt").read_text()
    assert "PATH=" in seen and "planted" not in seen, proc.stderr
    assert f"rerun: executes commit {commit}" in proc.stderr and "stage prepare" in proc.stderr


def _cmdline(proc: Path) -> str:
    try:
        return (proc / "cmdline").read_bytes().decode(errors="replace")
    except OSError:
        return ""


def _running(pid: int) -> bool:
    """Whether `pid` runs: gone, or a zombie its new parent has not reaped yet, is not running."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


@pytest.mark.slow
def test_a_stopped_audit_leaves_no_stage_process_and_no_worktree(project, tmp_path):
    """A timeout's SIGTERM to `audit --rerun` while a stage runs: the stage's whole process group is stopped,
    the worktree and the temporary folder are removed, exit 128 + 15 with one line saying so."""
    import signal
    import time

    repo, _ = project
    mark = f"600.{os.getpid()}{int(time.time() * 1000) % 10**6}"  # this test's sleep, found by its arguments
    stages = f"stages:\n  prepare:\n    cmd: echo ok\n  train:\n    cmd: echo ok > stage.pid && exec sleep {mark}\n"
    (repo / "dvc.yaml").write_text(stages)
    _sh(repo, "git", "commit", "-qam", "a long train stage")
    commit = _sh(repo, "git", "rev-parse", "HEAD").strip()
    run_id = _forge(tmp_path, commit, dirty="false")
    scratch = tmp_path / "scratch"  # the audit's TMPDIR: its temporary folder lands here
    scratch.mkdir()
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "src")]),
        "TMPDIR": str(scratch),
    }
    uri = f"sqlite:///{tmp_path / 'store.db'}"
    cmd = [sys.executable, "-m", "pipeline.audit", run_id, "--rerun", "--tracking-uri", uri]
    audit = subprocess.Popen(
        cmd, cwd=repo, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    deadline = time.monotonic() + 240

    def started() -> list:  # the event: the train stage wrote in its worktree (sandboxed by default)
        return [p for p in scratch.glob("*/worktree/stage.pid") if p.read_text().strip()]

    def stage_pids() -> (
        list
    ):  # host pids: in the sandbox's pid namespace the stage's own $$ means nothing here
        return [int(p.name) for p in Path("/proc").glob("[0-9]*") if _cmdline(p) == f"sleep\0{mark}\0"]

    while not (started() and stage_pids()):
        assert audit.poll() is None, audit.communicate()
        assert time.monotonic() < deadline, "the train stage never started"
        time.sleep(0.2)
    running = stage_pids()
    assert list(scratch.iterdir())  # the worktree is there while the stage runs
    audit.send_signal(signal.SIGTERM)
    _, err = audit.communicate(timeout=120)
    assert audit.returncode == 128 + signal.SIGTERM, err
    assert err.strip().splitlines()[-1].startswith("audit: stopped"), err
    assert not any(_running(pid) for pid in running)
    assert list(scratch.iterdir()) == []
    assert len(_sh(repo, "git", "worktree", "list").strip().splitlines()) == 1


@pytest.mark.parametrize(
    "recorded, key",
    [
        (
            {"data": {"output_dir": "../../../../../outside"}},
            "data.output_dir=../../../../../outside points outside",
        ),
        ({"tracking": {"run_file": "../../run.json"}}, "tracking.run_file=../../run.json points outside"),
        ({"train": {"tensorboard_dir": "../../../tb"}}, "train.tensorboard_dir=../../../tb points outside"),
        (
            {"data": {"validation": {"auto_reference": "/etc/tfpipe-ref.json"}}},
            "auto_reference=/etc/tfpipe-ref.json cannot be re-rooted",
        ),
    ],
)
def test_a_recorded_path_escaping_the_worktree_is_refused(tmp_path, recorded, key):
    """Relative paths are resolved in the re-run's worktree, where they must stay; an absolute path under a key
    that holds one (also data.validation.auto_reference) must re-root into it. (`reroot` runs in the rerun before
    any stage: the test below shows it once end to end.)"""
    from tfpipe.audit import trust
    from tfpipe.errors import UserError

    wt = tmp_path / "worktree"
    wt.mkdir()
    with pytest.raises(UserError, match=re.escape(key)):
        trust.reroot(recorded, tmp_path / "project", wt)
    kept = {
        "data": {"output_dir": "data/prepared/x", "validation": {"reference": "auto"}},
        "strategy": {"device": "/cpu:0"},
    }
    assert trust.reroot(kept, tmp_path / "project", wt) == kept  # inside the worktree, or no path: unchanged


@pytest.mark.slow
def test_a_recorded_path_escaping_the_worktree_stops_the_rerun_before_any_stage(project, tmp_path):
    repo, commit = project
    recorded = "seed: 1\ndata:\n  output_dir: ../../../../../outside\n"
    proc = _audit(repo, tmp_path, _forge(tmp_path, commit, dirty="false", config=recorded))
    assert proc.returncode == 2 and "data.output_dir=../../../../../outside points outside" in proc.stderr
    assert not (tmp_path / "env.txt").exists()


@pytest.mark.parametrize("key", ["builder", "fit"])
def test_a_recorded_model_function_must_be_a_module_of_the_commit(tmp_path, key):
    """model.builder and model.fit name functions a re-run calls: only modules the commit holds pass."""
    from tfpipe.audit import trust

    (tmp_path / "src" / "team").mkdir(parents=True)
    (tmp_path / "src" / "team" / "models.py").write_text("def f(*a): pass\n")
    ours = {"model": {"name": "team", "builder": "team.models:f", key: "team.models:f"}}
    trust.check_named_code(ours, tmp_path)
    theirs = {"model": {**ours["model"], key: "subprocess:getoutput"}}
    with pytest.raises(UserError, match=f"recorded model.{key}='subprocess:getoutput' is no module"):
        trust.check_named_code(theirs, tmp_path)


PROBE = """import os, socket, subprocess, sys
seen = []
git = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True)  # in the worktree
seen.append("git=" + ("works" if git.returncode == 0 else "refused"))
seen.append("home=" + ("visible" if os.path.exists({netrc!r}) else "hidden"))
seen.append("dvc_local=" + ("visible" if os.path.exists({local!r}) and "s3cret" in open({local!r}).read() else "hidden"))
seen.append("git_config=" + ("visible" if "t0ken" in open({git_config!r}).read() else "hidden"))
try:
    open({outside!r}, "w").write("escaped")
    seen.append("write=done")
except OSError:
    seen.append("write=refused")
try:
    socket.create_connection(("127.0.0.1", {port}), timeout=5).close()
    seen.append("net=reached")
except OSError:
    seen.append("net=refused")
print("PROBE " + " ".join(seen))
sys.exit(3)
"""


def _bwrap_works() -> bool:
    from tfpipe.audit import sandbox

    why = sandbox.problem()
    if why and os.environ.get("CI") and shutil.which("bwrap") is None:
        pytest.fail(f"CI installs bubblewrap (.ci/run): {why}")
    return why is None  # installed but refused namespaces by the machine: skipped, saying why


@pytest.mark.slow
def test_the_sandboxed_stages_see_no_home_no_network_and_write_nowhere_else(project, tmp_path):
    """The default `--sandbox auto` with a working bwrap: a stage of the re-run (a probe script in the commit)
    cannot read a planted ~/.netrc, the project's .dvc/config.local (remote passwords) or a token in its .git/config
    remote URL (yet git works: the stage runs under `dvc repro` in a worktree), cannot write outside the
    re-run's folder, and cannot reach a server listening on this machine's loopback. Unsandboxed it can."""
    import socket

    if not _bwrap_works():
        from tfpipe.audit import sandbox

        pytest.skip(f"no sandbox here: {sandbox.problem()}")
    repo, _ = project
    home = tmp_path / "home"
    home.mkdir()
    (home / ".netrc").write_text("machine example.com login me password planted\n")
    (repo / ".dvc" / "config.local").write_text(
        "['remote \"team\"']\n    url = https://dvc.example.invalid/store\n    password = s3cret\n"
    )
    _sh(repo, "git", "config", "remote.origin.url", "https://me:t0ken@git.example.invalid/team.git")
    listener = socket.create_server(("127.0.0.1", 0))
    outside = tmp_path / "outside.txt"
    probe = PROBE.format(
        netrc=str(home / ".netrc"),
        local=str(repo / ".dvc" / "config.local"),
        git_config=str(repo / ".git" / "config"),
        outside=str(outside),
        port=listener.getsockname()[1],
    )
    (repo / "probe.py").write_text(probe)
    (repo / "dvc.yaml").write_text("stages:\n  prepare:\n    cmd: python probe.py\n")
    _sh(repo, "git", "add", "-A")
    _sh(repo, "git", "commit", "-qm", "a probing stage")
    commit = _sh(repo, "git", "rev-parse", "HEAD").strip()
    run_id = _forge(tmp_path, commit, dirty="false")
    env = {**os.environ, "HOME": str(home)}
    with listener:
        boxed = _audit(repo, tmp_path, run_id, env=env, sandbox="auto")
        assert boxed.returncode == 2, boxed.stderr
        assert "rerun: sandboxed (bubblewrap)" in boxed.stderr
        assert (
            "PROBE git=works home=hidden dvc_local=hidden git_config=hidden write=refused net=refused"
            in boxed.stderr
        ), boxed.stderr
        assert not outside.exists()
        loose = _audit(repo, tmp_path, run_id, env=env, sandbox="off")
        assert "rerun: not sandboxed (--sandbox off)" in loose.stderr
        assert (
            "PROBE git=works home=visible dvc_local=visible git_config=visible write=done net=reached"
            in loose.stderr
        ), loose.stderr


@pytest.mark.slow
def test_sandbox_on_without_bwrap_is_refused_in_one_line_before_any_stage(project, tmp_path):
    repo, commit = project
    bin_dir = tmp_path / "bin"  # a PATH with git and without bwrap
    bin_dir.mkdir()
    (bin_dir / "git").symlink_to(
        subprocess.run(["which", "git"], capture_output=True, text=True).stdout.strip()
    )
    env = {**os.environ, "PATH": str(bin_dir)}
    proc = _audit(repo, tmp_path, _forge(tmp_path, commit, dirty="false"), env=env, sandbox="on")
    assert proc.returncode == 2, proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert last == (
        "audit: error: audit: --sandbox on: bubblewrap (bwrap) is not installed; install bubblewrap "
        "(Debian/Ubuntu: apt-get install bubblewrap), or choose --sandbox off"
    ), proc.stderr
    assert "stage prepare" not in proc.stderr and not (tmp_path / "env.txt").exists()
