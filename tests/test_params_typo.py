"""A typo through `dvc exp run -S` (issue 53): DVC refuses `-S train.epohcs=2` and suggests `+train.epohcs=2`,
which composes the new key into params.yaml; the train stage then meets it. Its refusal is one line naming the
key, the key meant and that it is in params.yaml (how it got there, how to undo it), exit 2, before the MLflow
run opens or models/ is touched; the typo stays in the workspace's params.yaml until undone."""

from __future__ import annotations

import subprocess
import sys

import pytest
import yaml
from test_pipeline_e2e import TINY, _make_project, _run

from tfpipe import exits

pytestmark = pytest.mark.slow  # a tiny `dvc repro train`, then the refused experiment


def _models(project) -> dict:
    """Every file under models/: its size, modification time and bytes."""
    return {
        str(p.relative_to(project)): (p.stat().st_size, p.stat().st_mtime_ns, p.read_bytes())
        for p in sorted((project / "models").rglob("*"))
        if p.is_file()
    }


def _runs(project) -> list:
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{project / 'mlflow.db'}")
    return sorted(run.info.run_id for run in client.search_runs(client.search_experiments()[0].experiment_id))


def test_a_plus_key_typo_is_refused_in_one_line_naming_params_yaml_before_any_run(
    tmp_path, image_dir, text_dir
):
    project, env = _make_project(tmp_path, image_dir, text_dir)
    dvc = [sys.executable, "-m", "dvc"]
    _run([*dvc, "repro", "train"], project, env)  # a trained model and its run: what must stay as it is
    _run(["git", "add", "-A"], project, env)  # dvc.lock: prepare's outputs are then up to date
    _run(["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "trained"], project, env)
    models, runs = _models(project), _runs(project)
    assert models and len(runs) == 1

    # DVC composes conf/ with the -S overrides given alone: the tiny ones again, so prepare stays cached
    tiny = [arg for o in TINY for arg in ("-S", o)]
    cmd = [*dvc, "exp", "run", *tiny, "-S", "train.epohcs=2"]
    proc = subprocess.run(cmd, cwd=project, env=env, capture_output=True, text=True)
    assert proc.returncode != 0 and "+train.epohcs=2" in proc.stdout + proc.stderr  # DVC's own hint

    cmd = [*dvc, "exp", "run", *tiny, "-S", "+train.epohcs=2"]
    proc = subprocess.run(cmd, cwd=project, env=env, capture_output=True, text=True)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out
    assert f"python -m pipeline.train, exited with {exits.EXIT_BAD_INPUT}" in out, out
    (line,) = [line for line in out.splitlines() if "train.epohcs" in line]
    assert line.startswith("train: error: train.epohcs=2: unknown config key (did you mean 'train.epochs'?)")
    assert ", in params.yaml: `dvc exp run -S +train.epohcs=2` (or an edit) wrote it there" in line
    assert "undo: `git checkout params.yaml`, or `dvc exp run -S train.epochs=2`" in line
    assert yaml.safe_load((project / "params.yaml").read_text())["train"]["epohcs"] == 2  # still there
    assert _runs(project) == runs  # no run opened
    assert _models(project) == models  # nothing written, nothing removed
