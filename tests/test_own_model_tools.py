"""A team's own model through tfpipe's tools (issue 34, item 5), as real processes: a study that tunes the model's
`model.params`, each trial a whole pipeline run that builds what it sampled, and a multi_worker_mirrored job of two
workers on loopback. The team's code is one module on the project's path and one conf file, as `tfpipe init`
leaves them; tfpipe is not edited."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # starts processes

TEAM_MODULE = """
import keras


def build(inputs, units: int = 4):
    x = inputs.input()
    h = keras.layers.Rescaling(1.0 / 255)(x)
    h = keras.layers.GlobalAveragePooling2D()(h)
    h = keras.layers.Dense(units, activation="relu", name="team_hidden")(h)
    return keras.Model(x, keras.layers.Dense(inputs.num_classes, name="team_logits")(h))
"""
TEAM_CONF = "name: team\nbuilder: team_models:build\nparams:\n  units: 4\n"
TUNE_SPEC = """overrides: [experiment=smoke, model=team, train.epochs=1, train.batch_size_per_replica=8]
metric: val_loss
direction: minimize
n_trials: 2
sampler: {name: random, seed: 0}
pruner: {name: none}
enqueue:
  - {model.params.units: 2}
  - {model.params.units: 5}
space:
  model.params.units: {choices: [2, 5]}
"""


def _params(units: int, classes: int = 3, channels: int = 3) -> int:
    """The team model's parameter count, by hand: Dense(units) on the pooled channels, Dense(classes) on it."""
    return (channels + 1) * units + (units + 1) * classes


def _add_the_team_model(project: Path) -> None:
    (project / "src" / "team_models.py").write_text(TEAM_MODULE)
    (project / "conf" / "model" / "team.yaml").write_text(TEAM_CONF)


def test_a_study_tunes_the_team_models_params_and_each_trial_builds_what_it_sampled(
    tmp_path, image_dir, text_dir
):
    from mlflow import MlflowClient
    from test_pipeline_e2e import _make_project, _run

    project, env = _make_project(tmp_path, image_dir, text_dir)
    _add_the_team_model(project)
    (project / "conf" / "tune" / "team.yaml").write_text(TUNE_SPEC)
    _run([sys.executable, "-m", "pipeline.tune", "team", "data.source=directory"], project, env)

    client = MlflowClient(f"sqlite:///{project / 'mlflow.db'}")
    runs = client.search_runs(
        [e.experiment_id for e in client.search_experiments()], "tags.`tune.trial` != ''"
    )
    assert sorted(r.data.params["model.params.units"] for r in runs) == ["2", "5"]
    for run in runs:
        assert run.info.status == "FINISHED" and run.data.params["model.builder"] == "team_models:build"
        with tempfile.TemporaryDirectory() as tmp:
            trained = json.loads(
                Path(client.download_artifacts(run.info.run_id, "metrics/train.json", tmp)).read_text()
            )
        assert trained["num_params"] == _params(int(run.data.params["model.params.units"]))
        assert "test_accuracy" in run.data.metrics  # each trial is a whole run: evaluate too


def test_a_multi_worker_job_trains_the_team_model_and_the_chief_exports_it(tmp_path, prepared_image):
    import numpy as np
    import tensorflow as tf
    from test_multiworker import TINY, make_project, project_env

    project = make_project(tmp_path)
    (project / "src").mkdir()
    _add_the_team_model(project)
    env = project_env()
    env["PYTHONPATH"] = f"{project / 'src'}{os.pathsep}{env['PYTHONPATH']}"
    cmd = [
        sys.executable,
        "-m",
        "pipeline.train",
        "strategy=multi_worker_mirrored",
        *(o for o in TINY if not o.startswith("model.")),
        "model=team",
        "model.params.units=5",
        f"data.output_dir={prepared_image.prepared_dir}",
        f"tracking.uri=sqlite:///{project / 'mlflow.db'}",
    ]
    proc = subprocess.run(cmd, cwd=project, env=env, capture_output=True, text=True, timeout=400)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "[worker:1]" in proc.stdout + proc.stderr  # two workers took part
    assert json.loads((project / "metrics" / "train.json").read_text())["num_params"] == _params(5)
    serve = tf.saved_model.load(str(project / "models" / "cifar10" / "saved_model")).signatures[
        "serving_default"
    ]
    out = serve(image=tf.constant(np.zeros((2, 32, 32, 3), np.uint8)))["probabilities"]
    assert out.dtype == tf.float32 and out.shape == (2, 3)
