"""Queued and `--temp` DVC experiments on raw data that git ignores and nobody `dvc add`ed (issue 52): the
experiment's copy reads the project's folder read-only, records its digest (the one `dvc add` would record) in
the manifest and the MLflow dataset input, and DVC's run-cache never answers a later experiment with data
prepared from other raw data. Real dvc, git and MLflow in temporary projects, tiny data."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from test_pipeline_e2e import TINY

from tfpipe.data import lineage

DVC = [sys.executable, "-m", "dvc"]
# `-S` composes conf/ anew: the e2e tests' tiny settings, data.source left at its default (auto), one epoch.
QUICK = [a for o in TINY if not o.startswith("data.source=") for a in ("-S", o)] + ["-S", "train.epochs=1"]


def _run(cmd, cwd, env=None, timeout=900) -> str:
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    out = f"{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
    assert proc.returncode == 0, f"{' '.join(map(str, cmd))} ({proc.returncode}):\n{out}"
    return proc.stdout + proc.stderr


def dvc_add_digest(folder: Path, scratch: Path) -> str:
    """The md5 `dvc add` records for a copy of `folder`, in a scratch DVC repository: tfpipe computes nothing."""
    scratch.mkdir()
    shutil.copytree(folder, scratch / "data")
    env = {k: v for k, v in os.environ.items() if not k.startswith("DVC_")} | {"DVC_NO_ANALYTICS": "1"}
    _run([*DVC, "init", "--no-scm", "-q"], scratch, env)
    _run([*DVC, "add", "-q", "data"], scratch, env)
    return yaml.safe_load((scratch / "data.dvc").read_text())["outs"][0]["md5"]


def test_the_leave_note_goes_to_the_copy_only(tmp_path, image_dir, monkeypatch):
    """In a copy reading the project's folder the note names the folder and its digest, in the copy's data/raw;
    in the workspace, or for a folder the copy has, nothing is written."""
    project = tmp_path / "project"
    copy = project / ".dvc" / "tmp" / "exps" / "tmpab12"
    shutil.copytree(image_dir, project / "data" / "raw" / "cifar10")
    (copy / "data" / "raw").mkdir(parents=True)
    monkeypatch.setenv("DVC_ROOT", str(project))
    monkeypatch.setenv("DVC_EXP_NAME", "exp-1")
    folder = project.resolve() / "data" / "raw" / "cifar10"
    info = {"path": str(folder), "digest": lineage.folder_digest(folder)}
    note = lineage.leave_note(folder, info, copy)
    assert note == copy.resolve() / "data" / "raw" / ".tfpipe-read-cifar10.json"
    assert json.loads(note.read_text()) == info
    assert sorted(p.name for p in (project / "data" / "raw").iterdir()) == [
        "cifar10"
    ]  # the project untouched
    assert lineage.leave_note(folder, info, project) is None  # the workspace run
    monkeypatch.delenv("DVC_EXP_NAME")
    assert lineage.leave_note(folder, info, copy) is None  # not an experiment


@pytest.mark.slow  # starts dvc
def test_the_digest_is_the_one_dvc_add_records(tmp_path, image_dir):
    folder = tmp_path / "cifar10"
    shutil.copytree(image_dir, folder)
    (folder / "train" / ".hidden").write_bytes(b"dvc hashes hidden files too")
    assert lineage.folder_digest(folder) == dvc_add_digest(folder, tmp_path / "scratch")


# ----------------------------------------------------------------------------- real experiments


def _clone_with_raw_data(tmp_path: Path, image_dir: Path) -> tuple:
    """A fresh clone of a committed project, its data/raw/cifar10 put there untracked (git ignores it)."""
    from test_pipeline_e2e import copy_project

    origin = copy_project(tmp_path / "origin")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "DVC_"))}
    env.update(DVC_NO_ANALYTICS="1", TF_CPP_MIN_LOG_LEVEL="2")
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t"]
    _run(["git", "init", "-q", "-b", "main"], origin, env)
    _run([*git, "add", "-A"], origin, env)
    _run([*git, "commit", "-qm", "init"], origin, env)
    project = tmp_path / "clone"
    _run(["git", "clone", "-q", str(origin), str(project)], tmp_path, env)
    shutil.copytree(image_dir, project / "data" / "raw" / "cifar10")
    assert _run(["git", "status", "--porcelain"], project, env) == ""  # untracked and ignored
    env["PYTHONPATH"] = str(project / "src")
    return project, env


def _datasets_read(project: Path) -> dict:
    """{DVC experiment name: the `source` its MLflow run's training dataset input records}."""
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{project / 'mlflow.db'}")
    runs = client.search_runs([client.get_experiment_by_name("tfpipe").experiment_id])
    read = {}
    for run in runs:
        assert run.info.status == "FINISHED", run.info
        (train,) = [d for d in run.inputs.dataset_inputs if d.dataset.name.endswith("-train")]
        read[run.data.tags["dvc.exp_name"]] = json.loads(train.dataset.profile)["source"]
    return read


def _experiments(project: Path, env: dict) -> list:
    shown = json.loads(_run([*DVC, "exp", "show", "--json"], project, env))
    return [e["name"] for commit in shown for e in (commit.get("experiments") or [])]


@pytest.mark.slow
def test_queued_experiments_from_a_fresh_clone_need_no_dvc_add(tmp_path, image_dir):
    """`dvc exp run --queue -S train.epochs=1` (and the tiny settings) twice, then `dvc exp run --run-all`: both finish, `dvc exp show`
    lists both, HEAD did not move, and each run's dataset input names the project's folder and the digest
    `dvc add` would record."""
    project, env = _clone_with_raw_data(tmp_path, image_dir)
    head = _run(["git", "rev-parse", "HEAD"], project, env)
    for _ in range(2):
        _run([*DVC, "exp", "run", "--queue", *QUICK], project, env)
    _run([*DVC, "exp", "run", "--run-all"], project, env)
    names = _experiments(project, env)
    assert len(names) == 2, names
    assert _run(["git", "rev-parse", "HEAD"], project, env) == head
    folder = str(project.resolve() / "data" / "raw" / "cifar10")
    digest = dvc_add_digest(image_dir, tmp_path / "scratch")
    expected = {"type": "directory", "path": folder, "tfds_name": None, "version": None, "digest": digest}
    assert _datasets_read(project) == {name: expected for name in names}
    assert not list((project / "data" / "raw").glob(".tfpipe-read-*")), "the project's data/raw untouched"


@pytest.mark.slow
def test_an_experiment_after_the_raw_data_changed_is_not_served_stale_prepared_data(tmp_path, image_dir):
    """`dvc exp run --temp`, then the workspace's raw data changes (one image fewer), then a queued experiment
    with the same params: DVC's run-cache must not restore the data prepared from the old folder. It reads the
    new folder: its digest and its example count."""
    project, env = _clone_with_raw_data(tmp_path, image_dir)
    same = QUICK
    _run([*DVC, "exp", "run", "--temp", *same], project, env)
    removed = sorted((project / "data" / "raw" / "cifar10" / "test" / "red").iterdir())[0]
    removed.unlink()
    _run([*DVC, "exp", "run", "--queue", *same], project, env)
    _run([*DVC, "exp", "run", "--run-all"], project, env)
    shown = json.loads(_run([*DVC, "exp", "show", "--json"], project, env))
    exps = [e for commit in shown for e in (commit.get("experiments") or [])]
    assert len(exps) == 2, exps
    first, second = sorted(exps, key=lambda e: e["revs"][0]["data"]["timestamp"])
    read = _datasets_read(project)
    assert read[first["name"]]["digest"] == dvc_add_digest(image_dir, tmp_path / "before")
    changed = dvc_add_digest(project / "data" / "raw" / "cifar10", tmp_path / "after")
    assert read[second["name"]]["digest"] == changed != read[first["name"]]["digest"]
    # the test split each scored (the data report's figures are a prepare output, not one of exp show's metrics)
    counts = [e["revs"][0]["data"]["metrics"]["metrics/eval.json"]["data"] for e in (first, second)]
    assert counts[0]["num_examples"] - 1 == counts[1]["num_examples"], counts
