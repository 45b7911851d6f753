"""Issue 49, item 3: an `audit --rerun` killed with SIGKILL never runs its own cleanup; the next re-run removes
the folder and git worktree it left (the worktree's registration pruned: `git worktree list` no longer names it),
and leaves alone those of an audit still running beside it. Real `rerun()` calls on a real git repo in tmp_path,
held or stopped right after their worktree exists (the run record read from a dict, not a store); no stage runs."""

from __future__ import annotations

import fcntl
import importlib
import os
import select
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from test_audit_diff_refusals import _sh

from tfpipe.audit import scratch, trust
from tfpipe.tracking import reading

NO_SEAL = {"weights_sha256": None, "seal_fact": None, "source": None, "why": "no store is read here"}

pytestmark = pytest.mark.slow  # starts processes (git, a Python per audit)
rerun_module = importlib.import_module("tfpipe.audit.rerun")  # `tfpipe.audit.rerun` is also the function

# An audit's re-run held once its worktree exists (where it prints its plan): prints the worktree, then waits.
HELD = """
import importlib, sys, time
from tfpipe.audit import trust
from tfpipe.tracking import reading
rerun = importlib.import_module("tfpipe.audit.rerun")
record = {"run_id": "RUN", "tags": {"git.commit": sys.argv[2]}, "config": {}, "metrics": {}}
rerun.load_recorded = lambda run_id, uri: record
reading.sealed_weights = lambda uri, run_id: {"weights_sha256": None, "why": "a held audit reads no store"}
def hold(wt, *args):
    print(wt, flush=True)
    time.sleep(600)
trust.print_plan = hold
rerun.rerun("RUN", sys.argv[1], "sqlite:///never-opened.db", sandbox_mode="off", log=lambda line: None)
"""


class _Planned(Exception):
    """Raised where the in-process re-run prints its plan: its worktree exists, nothing runs."""


@pytest.fixture
def repo(tmp_path, monkeypatch):
    """(a committed git repo, its commit); the temp dir of this process and its children is tmp_path/tmp."""
    temp = tmp_path / "tmp"
    temp.mkdir()
    monkeypatch.setenv("TMPDIR", str(temp))
    monkeypatch.setattr("tempfile.tempdir", str(temp))
    repo = tmp_path / "repo"
    repo.mkdir()
    _sh(repo, "git", "init", "-q", "-b", "main")
    (repo / "train.py").write_text("print('train')\n")
    _sh(repo, "git", "add", "-A")
    _sh(repo, "git", "commit", "-qm", "init")
    return repo, _sh(repo, "git", "rev-parse", "HEAD").strip()


def _held(repo: Path, commit: str) -> tuple:
    """(process, its worktree): an audit's re-run started and held once its worktree exists."""
    proc = subprocess.Popen(
        [sys.executable, "-c", HELD, str(repo), commit],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    ready, _, _ = select.select([proc.stdout], [], [], 180)
    line = proc.stdout.readline().strip() if ready else ""
    if not line:
        proc.kill()
        raise AssertionError(f"the held re-run never made its worktree: {proc.communicate()[1][-2000:]}")
    return proc, Path(line)


def _listed(repo: Path) -> list:
    """The worktree paths `git worktree list` names, resolved."""
    out = _sh(repo, "git", "worktree", "list", "--porcelain")
    return [
        Path(line[len("worktree ") :]).resolve() for line in out.splitlines() if line.startswith("worktree ")
    ]


def test_the_next_rerun_removes_what_a_killed_one_left_and_not_a_running_ones(repo, monkeypatch):
    repo, commit = repo
    killed, killed_wt = _held(repo, commit)
    running, running_wt = _held(repo, commit)
    try:
        assert (killed_wt / "train.py").is_file() and killed_wt.resolve() in _listed(repo)
        killed.send_signal(signal.SIGKILL)
        killed.wait(timeout=30)  # reaped: its pid is gone
        assert killed_wt.parent.is_dir(), "SIGKILL runs no cleanup: the folder stays until the next audit"

        record = {"run_id": "RUN", "tags": {"git.commit": commit}, "config": {}, "metrics": {}}
        made: list = []

        def planned(wt, *args):
            made.append(wt)
            assert (wt / "train.py").is_file()
            raise _Planned

        monkeypatch.setattr(rerun_module, "load_recorded", lambda run_id, uri: record)
        monkeypatch.setattr(reading, "sealed_weights", lambda uri, run_id: dict(NO_SEAL))  # no store read
        monkeypatch.setattr(trust, "print_plan", planned)
        lines: list = []
        with pytest.raises(_Planned):
            rerun_module.rerun("RUN", repo, "sqlite:///never-opened.db", sandbox_mode="off", log=lines.append)

        assert not killed_wt.parent.exists(), "the killed audit's folder is removed by the next one"
        assert killed_wt.resolve() not in _listed(repo), "and its worktree is no longer registered"
        assert any(f"removed what 1 killed audit(s) left: {killed_wt.parent}" in line for line in lines)
        assert running.poll() is None and (running_wt / "train.py").is_file(), "a running audit's stays"
        assert running_wt.resolve() in _listed(repo)
        assert not made[0].parent.exists() and made[0].resolve() not in _listed(repo), "its own, at its end"
    finally:
        for proc in (killed, running):
            proc.kill()
            proc.communicate(timeout=30)
    assert scratch.remove_leftovers() == [running_wt.parent]  # ended too: the last one goes as well
    assert _listed(repo) == [repo.resolve()]


def test_a_folder_is_a_leftover_once_nobody_holds_its_lock_and_a_kept_one_never(repo, tmp_path):
    repo, _ = repo
    temp = tmp_path / "tmp"
    dead = subprocess.Popen(["true"])
    dead.wait()
    unlocked = temp / f"{scratch.PREFIX}{dead.pid}-nolock"  # killed before its lock file existed
    unlocked.mkdir()
    held = (
        temp / f"{scratch.PREFIX}{dead.pid}-held"
    )  # its pid seen as gone (another pid namespace), lock held
    held.mkdir()
    fd = os.open(held / scratch.LOCK, os.O_RDWR | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        own = scratch.folder(lambda line: None)
        assert not unlocked.exists() and held.is_dir()
    finally:
        os.close(fd)
    assert own.name.startswith(f"{scratch.PREFIX}{os.getpid()}-") and scratch.remove_leftovers() == [held]
    (own / "mlflow.db").write_text("x")
    lines: list = []
    scratch.remove(repo, own / "worktree", own, True, lines.append)
    (kept,) = temp.glob(f"{scratch.KEPT}*")
    assert (kept / "mlflow.db").read_text() == "x" and lines == [f"rerun: kept {kept}"]
    assert scratch.remove_leftovers() == [] and kept.is_dir()  # no pid in its name: kept for good
