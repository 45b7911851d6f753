"""A teammate audits a teammate's run: clone A runs `dvc repro` against a shared tracking store and pushes to
the team's DVC remote. A audits its own run from its own DVC cache (precision=auto re-run with the policy
the run resolved to, the verdict recorded, the metrics untouched, no worktree left). Clone B (another folder, its own empty DVC cache) re-runs that run with `audit --rerun`:
first with its own copy of the raw data and no reachable remote (prepared again, and the report says so), then
without raw data but with the remote (the prepared data pulled by hash). Both verdicts are REPRODUCED and nothing
in A changes: every path the record holds is re-rooted into B's worktree."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from test_pipeline_e2e import _make_project, _run

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow


def _tree_digest(folder: Path) -> dict:
    """sha256 of every file under `folder` (git's objects and index included), by relative path."""
    out = {}
    for path in sorted(folder.rglob("*")):
        if path.is_file() and not path.is_symlink():
            out[str(path.relative_to(folder))] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


def test_an_audit_from_another_clone_reproduces_and_leaves_the_first_clone_untouched(
    tmp_path, image_dir, text_dir
):
    store = tmp_path / "team-store"
    store.mkdir()
    uri = f"sqlite:///{store / 'mlflow.db'}"
    artifacts = store / "mlartifacts"  # the team store's artifact root, outside both clones
    # precision=auto: a re-run must use the policy the run resolved to, whatever the auditor's host would pick.
    alice, env = _make_project(
        tmp_path / "alice", image_dir, text_dir, f"tracking.artifact_location={artifacts}", "precision=auto"
    )
    env = {**env, "MLFLOW_TRACKING_URI": uri}
    _run([sys.executable, "-m", "dvc", "repro"], alice, env)
    run_id = json.loads((alice / "run.json").read_text())["run_id"]
    _own_audit(alice, run_id, uri, env)  # before committing what dvc repro changed (dvc.lock, .gitignore)
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t"]
    _run([*git, "add", "-A"], alice, env)
    _run([*git, "commit", "-qm", "results"], alice, env)
    remote = (
        tmp_path / "team-dvc-remote"
    )  # the team's DVC remote, set per clone as the .dvc/config comment says
    dvc = [sys.executable, "-m", "dvc"]
    _run([*dvc, "remote", "modify", "--local", "team", "url", str(remote)], alice, env)
    _run([*dvc, "push", "prepare"], alice, env)

    bob = tmp_path / "bob" / "project"
    _run(["git", "clone", "-q", str(alice), str(bob)], tmp_path, env)
    raw = bob / "data" / "raw"
    shutil.copytree(alice / "data" / "raw", raw, dirs_exist_ok=True)  # the team's shared source
    before = _tree_digest(alice)
    bob_env = {**env, "PYTHONPATH": os.pathsep.join([str(bob), str(bob / "src")])}

    out = _audit(bob, run_id, bob_env)  # the committed remote URL leads nowhere from B: prepared again
    assert "prepared data: prepared again from the auditor's raw data" in out.splitlines(), out
    shutil.rmtree(raw)
    shutil.rmtree(bob / ".dvc" / "cache")  # where the first audit's re-prepared data went
    _run([*dvc, "remote", "modify", "--local", "team", "url", str(remote)], bob, env)
    out = _audit(bob, run_id, bob_env)  # no raw data: only the remote's copy can feed the re-run
    assert "prepared data: pulled from the DVC remote" in out.splitlines(), out
    assert not (bob / "data" / "prepared").exists()  # restored into the worktree, not into B's own tree
    after = _tree_digest(alice)
    changed = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
    assert not changed, changed  # nothing of A was read-write: not its data, models, run file or git
    from mlflow import MlflowClient

    assert MlflowClient(tracking_uri=uri).get_run(run_id).data.tags["audit.verdict"] == "REPRODUCED"
    runs = {
        p.parent.name for p in artifacts.rglob("artifacts") if re.fullmatch(r"[0-9a-f]{32}", p.parent.name)
    }
    assert runs == {run_id}, runs  # the re-run's own run went to its temporary store, not the team's


def _own_audit(project: Path, run_id: str, uri: str, env: dict) -> None:
    """The clone that made the run audits it: check, then --rerun from its own DVC cache."""
    from tfpipe.tracking import reading

    before = reading.load_run(uri, run_id)
    resolved = before["tags"]["precision.resolved"]
    assert before["params"]["precision.policy"] == "auto" and resolved in ("float32", "mixed_bfloat16")
    env = {**env, "PYTHONPATH": os.pathsep.join([str(ROOT), str(project / "src")])}
    check = subprocess.run(
        [sys.executable, "-m", "pipeline.audit", run_id], cwd=project, env=env, capture_output=True, text=True
    )
    assert check.returncode == 0, (
        check.stdout + check.stderr
    )  # DVC's dvc.lock/.gitignore are not code changes
    proc = subprocess.run(
        [sys.executable, "-m", "pipeline.audit", run_id, "--rerun"],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    assert proc.stdout.strip().splitlines()[-1] == "REPRODUCED", proc.stdout
    assert "prepared data: restored from the DVC cache" in proc.stdout.splitlines()
    assert f"precision.policy=auto ran as {resolved}: the re-run uses {resolved}" in proc.stderr
    after = reading.load_run(uri, run_id)
    assert after["tags"]["audit.verdict"] == "REPRODUCED" and after["tags"]["audit.time"]
    assert after["metrics"] == before["metrics"]  # the verdict never alters the run's metrics
    worktrees = subprocess.run(["git", "worktree", "list"], cwd=project, capture_output=True, text=True)
    assert "worktree" not in worktrees.stdout.split("\n", 1)[-1]


def _audit(project: Path, run_id: str, env: dict) -> str:
    proc = subprocess.run(
        [sys.executable, "-m", "pipeline.audit", run_id, "--rerun"],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr[-4000:]
    assert proc.stdout.strip().splitlines()[-1] == "REPRODUCED", proc.stdout
    return proc.stdout
