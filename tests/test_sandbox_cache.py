"""Issue 50, the auditor's DVC cache: a re-run's prepared data comes out of the auditor's cache (`dvc checkout`),
and a hard link there would let a stage that runs as the auditor (anyone but root) write the cache through it.
A real git + DVC project whose committed `.dvc/config` says `cache.type = hardlink` (its own checkout is links
into the cache) is re-run as `audit --rerun` prepares it (`_make_worktree`, `restore_prepared`); a program run
through `sandbox.wrap` as the stages are then makes each file of the worktree writable and appends to it: the
prepared data, and a file hard-linked into the re-run's folder by hand. Its writes land in the worktree's own
copies; the cache files are unchanged, once as the test's user (root here: dropped to uid 65534 inside) and once
as an unprivileged auditor of uid 65534 who owns the project, the cache and the re-run's folder."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from test_sandbox_holds import NOBODY, _machine_can_sandbox, _need_root_or_skip, _nobody_python

from tfpipe.audit import sandbox, trust
from tfpipe.audit.prepared import FROM_CACHE, restore_prepared
from tfpipe.audit.rerun import _make_worktree

PREPARE = "python3 -c \"import pathlib; p = pathlib.Path('data/prepared'); p.mkdir(parents=True); (p / 'shard.txt').write_text('shard')\""
STAGES = f"stages:\n  prepare:\n    cmd: {json.dumps(PREPARE)}\n    outs:\n      - data/prepared\n"
ATTACK = r"""
import json, os, sys
seen = {}
for top, dirs, files in os.walk("."):
    dirs[:] = [d for d in dirs if d not in (".git", "raw")]
    for name in files:
        path = os.path.join(top, name)
        try:
            os.chmod(path, 0o644)
            with open(path, "a") as f:
                f.write("tampered")
            seen[path] = "written"
        except OSError as exc:
            seen[path] = "refused:" + type(exc).__name__
print(json.dumps(seen))
"""


def _sh(cwd, *cmd) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "DVC_NO_ANALYTICS": "1"}
    env.update(GIT_COMMITTER_NAME="t", GIT_COMMITTER_EMAIL="t@t")
    return subprocess.run(cmd, cwd=cwd, env=env, check=True, capture_output=True, text=True).stdout


def _digests(cache: Path) -> dict:
    return {str(p): hashlib.sha256(p.read_bytes()).hexdigest() for p in cache.rglob("*") if p.is_file()}


def _rerun_folder(base: Path) -> dict:
    """The project (its prepared data linked into its cache), and the re-run's folder as `audit --rerun` makes it
    before its first stage, with a file of the cache linked in by hand too."""
    project, folder = base / "project", base / "box"
    project.mkdir()
    folder.mkdir()
    _sh(project, "git", "init", "-q", "-b", "main")
    _sh(project, sys.executable, "-m", "dvc", "init", "-q")
    _sh(project, sys.executable, "-m", "dvc", "config", "cache.type", "hardlink")
    (project / "dvc.yaml").write_text(STAGES)
    (project / "params.yaml").write_text("seed: 1\n")
    _sh(project, sys.executable, "-m", "dvc", "repro", "-q", "prepare")
    cache = project / ".dvc" / "cache"
    assert (project / "data" / "prepared" / "shard.txt").stat().st_nlink > 1  # the project's own: a link
    _sh(project, "git", "add", "-A")
    _sh(project, "git", "commit", "-qm", "prepared")
    run = {
        "run_id": "RUN",
        "tags": {"git.commit": _sh(project, "git", "rev-parse", "HEAD").strip(), "git.dirty": "false"},
        "config": {"seed": 1},
        "dvc_lock": (project / "dvc.lock").read_text(),
    }
    lines: list = []
    wt = _make_worktree(project, run, folder, lines.append)
    env = {**trust.stage_env(dict(os.environ), ()), "DVC_NO_ANALYTICS": "1"}
    assert restore_prepared(wt, env, lines.append) == FROM_CACHE, lines
    shard = wt / "data" / "prepared" / "shard.txt"
    assert shard.read_text() == "shard" and shard.stat().st_nlink == 1, (
        "the checkout linked the auditor's cache"
    )
    (cached,) = [p for p in cache.rglob("*") if p.is_file() and p.read_text() == "shard"]
    os.link(cached, wt / "linked-by-hand.txt")  # whatever else might share a file with the cache
    return {"project": project, "folder": folder, "wt": wt, "cache": cache, "before": _digests(cache)}


def _attack(world: dict, argv: list, env: dict) -> dict:
    proc = subprocess.run(
        [*argv, "-I", "-c", ATTACK], cwd=world["wt"], env=env, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _assert_cache_unchanged(world: dict, seen: dict) -> None:
    assert seen["./data/prepared/shard.txt"] == "written", seen  # the stage writes its own copy
    assert seen["./linked-by-hand.txt"] == "written", seen
    assert _digests(world["cache"]) == world["before"], "the sandboxed stage changed the auditor's DVC cache"
    assert (world["project"] / "data" / "prepared" / "shard.txt").read_text() == "shard"


def _remove(world: dict) -> None:
    subprocess.run(["git", "worktree", "remove", "--force", str(world["wt"])], cwd=world["project"])


def test_the_sandboxed_stages_cannot_write_the_auditors_cache(tmp_path):
    """The test's user: root here (bwrap drops the stage to uid 65534), anyone else in a user namespace."""
    _machine_can_sandbox()
    world = _rerun_folder(tmp_path)
    try:
        argv = sandbox.wrap([sys.executable], world["folder"], world["project"])
        env = sandbox.environment(dict(os.environ), (), world["folder"])
        _assert_cache_unchanged(world, _attack(world, argv, env))
    finally:
        _remove(world)


def test_an_unprivileged_auditors_stages_cannot_write_their_cache(monkeypatch):
    """An auditor of uid 65534 who owns the project, its cache and the re-run's folder: the stages run as them.
    (The test builds their world as root, `wrap` included, then hands all of it to them.)"""
    _need_root_or_skip()
    base = Path(tempfile.mkdtemp(prefix="tfpipe-sandbox-cache-", dir="/tmp"))
    world = None
    try:
        base.chmod(0o755)
        world = _rerun_folder(base)
        python = _nobody_python()
        with monkeypatch.context() as theirs:  # the auditor's interpreter, as `wrap` reads it
            for name in ("executable", "prefix", "base_prefix", "path"):
                theirs.setattr(sys, name, python[name])
            theirs.setattr(sys, "exec_prefix", python["prefix"])
            argv = sandbox.wrap([python["executable"]], world["folder"], world["project"], privileged=False)
            env = sandbox.environment(dict(os.environ), (), world["folder"])
        for top, dirs, files in os.walk(base):
            for name in [".", *dirs, *files]:
                os.chown(os.path.join(top, name), 65534, 65534, follow_symlinks=False)
        _assert_cache_unchanged(world, _attack(world, [*NOBODY, *argv], env))
    finally:
        if world is not None:
            _remove(world)
        shutil.rmtree(base, ignore_errors=True)
