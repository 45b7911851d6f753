"""A refused command changes nothing (issue 49): every check that can refuse the train stage runs before the stage
opens an MLflow run, clears `models/<dataset>/` or writes run.json. Each case starts from a project holding a
finished run's outputs and a store, refuses in one line, and leaves every file of the project (the store's bytes
included) and the store's rows as they were."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sqlite3
from pathlib import Path

import pytest
from conftest import ROOT, seed_store
from test_own_model import GOOD

from tfpipe import config, stages
from tfpipe.errors import UserError


def _project(tmp_path: Path) -> Path:
    """conf/ with a team's model file, a store, and what a finished cifar10 run left (outputs DVC tracks)."""
    project = tmp_path / "project"
    shutil.copytree(ROOT / "conf", project / "conf")
    (project / "conf" / "model" / "tiny_team.yaml").write_text(GOOD)
    seed_store(project)
    models = project / "models" / "cifar10"
    (models / "saved_model" / "variables").mkdir(parents=True)
    (models / "saved_model" / "saved_model.pb").write_bytes(b"a finished run's export")
    (models / "checkpoints").mkdir()
    (models / "checkpoints" / "ckpt-3.index").write_bytes(b"a finished run's checkpoint")
    (models / "training_state.json").write_text('{"complete": true, "fingerprint": "f"}\n')
    (models / "weights.sha256").write_text("0" * 64 + "\n")
    (project / "run.json").write_text('{"run_id": "a finished run"}\n')
    return project


def _files(project: Path) -> dict:
    """Every file (its sha256), folder and symlink (its target) under `project`: a folder made or a link replaced
    shows too."""

    def state(p: Path) -> str:
        if p.is_symlink():
            return f"-> {os.readlink(p)}"
        return hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "folder"

    return {p.relative_to(project).as_posix(): state(p) for p in sorted(project.rglob("*"))}


def _rows(project: Path) -> dict:
    """Row counts of the store's tables, read with sqlite3 (not with MLflow, not with tfpipe)."""
    with sqlite3.connect(project / "mlflow.db") as db:
        tables = [r[0] for r in db.execute("select name from sqlite_master where type='table'")]
        return {t: db.execute(f'select count(*) from "{t}"').fetchone()[0] for t in tables}


REFUSALS = [
    (["model=tiny_team", "+model.params.widht=3"], "unexpected keyword argument 'widht'"),
    (
        ["model=tiny_team", "model.builder=test_own_model:build_wrong_width"],
        "unexpected keyword argument 'units'",
    ),
    (["train.batch_size_per_replica=64"], "train split gives no full batch of 64 (21 examples)"),
    (["model=tiny_team", "model.builder=test_own_model:build_tinny"], "cannot be imported"),
    (  # a builder whose model gives another width than the classes: found by a build before the run opens
        ["model=tiny_team", "model.builder=test_own_model:build_wrong_width", "~model.params.units"],
        "the model's output is (4,) per example; expected (3,): one logit per class",
    ),
    (
        ["model=tiny_team", "model.builder=test_own_model:build_nothing", "~model.params.units"],
        "returned str, not a keras.Model",
    ),
    (["model=tiny_team", "+model.fit=test_own_model:no_such_fit"], "model.fit=test_own_model:no_such_fit"),
    (["dataset=imdb", "model=embedding_gap"], "prepared data is 'image'"),
    (["dataset.image_size=[16,16]"], "prepared images are [32, 32, 3]"),
    (["+train.hooks=[{_target_: test_own_model.NoSuchHook}]"], "cannot be imported"),
    (["train.init_from=/nonexistent/tfpipe/model"], "/nonexistent/tfpipe/model"),
]


@pytest.mark.parametrize("overrides, expected", REFUSALS, ids=[" ".join(o) for o, _ in REFUSALS])
def test_a_refused_training_changes_nothing(prepared_image, tmp_path, overrides, expected):
    project = _project(tmp_path)
    cfg = config.compose(
        ["train.batch_size_per_replica=4", *overrides, f"data.output_dir={prepared_image.prepared_dir}"],
        config_dir=project / "conf",
    )
    files, rows = _files(project), _rows(project)
    with pytest.raises(UserError) as refused:
        stages.run_train(cfg, project)
    message = str(refused.value)
    assert expected in message and "\n" not in message, message
    assert _files(project) == files  # models/ kept, run.json kept, the store's file not written
    assert _rows(project) == rows  # no run opened (not even one left FAILED)
    assert json.loads((project / "run.json").read_text()) == {"run_id": "a finished run"}


# ----------------------------------------------------------------------------- the train preflight's build
# A team's builder is built once before the run opens (custom.check_build): symbolically, leaving no trace the
# training's own build would see.


def build_reading_weights(inputs):
    """A team's builder that reads its weights while it builds: TensorFlow computes them, its runtime starts."""
    import keras

    x = inputs.input()
    dense = keras.layers.Dense(inputs.num_classes)
    logits = dense(keras.layers.Flatten()(x))
    dense.set_weights([w * 0 for w in dense.get_weights()])
    return keras.Model(x, logits)


def build_with_an_array_variable(inputs):
    """A team's builder that makes a variable from an array: fine in a real build, refused by a symbolic one."""
    import keras
    import numpy as np

    keras.Variable(np.zeros(inputs.num_classes, "float32"), name="prior")
    x = inputs.input()
    return keras.Model(x, keras.layers.Dense(inputs.num_classes)(keras.layers.Flatten()(x)))


def _preflight(prepared_image, tmp_path, *overrides):
    from tfpipe import data, training

    conf = _project(tmp_path) / "conf"
    cfg = config.compose(["model=tiny_team", "train.batch_size_per_replica=4", *overrides], config_dir=conf)
    prepared = prepared_image.prepared_dir
    training.preflight(cfg, data.load_manifest(prepared), prepared)


def _number(name: str) -> int:
    return int(name.rsplit("_", 1)[1]) if name[-1].isdigit() else 0


def test_the_preflight_build_leaves_the_trainings_layer_names_as_they_were(prepared_image, tmp_path):
    """tiny_team's Rescaling is named automatically: the preflight's build takes no name from the training's."""
    import keras

    before = keras.layers.Rescaling(1.0).name
    _preflight(prepared_image, tmp_path)
    assert _number(keras.layers.Rescaling(1.0).name) == _number(before) + 1


def test_a_builder_that_cannot_build_symbolically_is_left_to_the_trainings_build(prepared_image, tmp_path):
    _preflight(
        prepared_image,
        tmp_path,
        "model.builder=test_refusal_before_effect:build_with_an_array_variable",
        "~model.params.units",
    )


PREFLIGHTS = """
import sys
from pathlib import Path
from tensorflow.python.eager import context
from tfpipe import config, data, distribute, training
conf, prepared = Path(sys.argv[1]), Path(sys.argv[2])
reads = ["model.builder=test_refusal_before_effect:build_reading_weights", "~model.params.units"]
def preflight(*overrides):
    cfg = config.compose(["model=tiny_team", "train.batch_size_per_replica=4", *overrides], config_dir=conf)
    training.preflight(cfg, data.load_manifest(prepared), prepared)
    return cfg
preflight("strategy=one_device")
print("tiny_team started TensorFlow:", context.context()._context_handle is not None)
preflight("strategy=multi_worker_mirrored", *reads)
print("multi-worker started TensorFlow:", context.context()._context_handle is not None)
cfg = preflight("strategy=mirrored", "strategy.num_logical_cpus=2", *reads)
distribute.configure_devices(cfg.strategy)  # refused when TensorFlow started with fewer
import tensorflow as tf
print("logical CPUs:", len(tf.config.list_logical_devices("CPU")))
"""


def test_the_preflight_build_leaves_tensorflow_to_the_strategy(prepared_image, tmp_path):
    """In one process, as a stage runs: a layers-only builder built ahead allocates nothing, so TensorFlow's runtime
    has not started; under a strategy that connects to a cluster as TensorFlow starts nothing is built ahead; and
    before a builder that starts TensorFlow (it reads its weights) mirrored's logical CPUs are already split."""
    import os
    import subprocess
    import sys

    conf = _project(tmp_path) / "conf"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT / "tests")])}
    done = subprocess.run(
        [sys.executable, "-c", PREFLIGHTS, str(conf), str(prepared_image.prepared_dir)],
        env={**env, "TF_CPP_MIN_LOG_LEVEL": "2", "CUDA_VISIBLE_DEVICES": ""},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.splitlines() == [
        "tiny_team started TensorFlow: False",
        "multi-worker started TensorFlow: False",
        "logical CPUs: 2",
    ], done.stdout
