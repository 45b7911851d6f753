"""A teammate audits a teammate's run: clone A runs `dvc repro` against a shared tracking store, clone B (another
folder, its own DVC cache, its own copy of the raw data) re-runs that run with `audit --rerun`. The verdict is
REPRODUCED and nothing in A changes: every path the record holds is re-rooted into B's worktree."""

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
    alice, env = _make_project(
        tmp_path / "alice", image_dir, text_dir, f"tracking.artifact_location={artifacts}"
    )
    env = {**env, "MLFLOW_TRACKING_URI": uri}
    _run([sys.executable, "-m", "dvc", "repro"], alice, env)
    run_id = json.loads((alice / "run.json").read_text())["run_id"]
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t"]
    _run([*git, "add", "-A"], alice, env)
    _run([*git, "commit", "-qm", "results"], alice, env)

    bob = tmp_path / "bob" / "project"
    _run(["git", "clone", "-q", str(alice), str(bob)], tmp_path, env)
    shutil.copytree(
        alice / "data" / "raw", bob / "data" / "raw", dirs_exist_ok=True
    )  # the team's shared source
    before = _tree_digest(alice)

    bob_env = {**env, "PYTHONPATH": os.pathsep.join([str(bob), str(bob / "src")])}
    proc = subprocess.run(
        [sys.executable, "-m", "pipeline.audit", run_id, "--rerun"],
        cwd=bob,
        env=bob_env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr[-4000:]
    assert proc.stdout.strip().splitlines()[-1] == "REPRODUCED", proc.stdout
    after = _tree_digest(alice)
    changed = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
    assert not changed, changed  # nothing of A was read-write: not its data, models, run file or git
    from mlflow import MlflowClient

    assert MlflowClient(tracking_uri=uri).get_run(run_id).data.tags["audit.verdict"] == "REPRODUCED"
    runs = {
        p.parent.name for p in artifacts.rglob("artifacts") if re.fullmatch(r"[0-9a-f]{32}", p.parent.name)
    }
    assert runs == {run_id}, runs  # the re-run's own run went to its temporary store, not the team's
