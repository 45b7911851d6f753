"""Warm start (`train.init_from`) against a real SQLite MLflow store: a run's logged model, a registry alias and a
local export each seed the matching layers of a new model (a 2-class head stays fresh over a 3-class source), the
run records the source (tags), and a missing or incompatible source is one line, exit 2, before any run opens."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
SMALL = [
    "dataset=images",
    "dataset.image_size=[16,16]",
    "model.filters=[4,8]",
    "model.dense_units=8",
    "data.examples_per_shard=8",
    "train.epochs=1",
    "train.batch_size_per_replica=4",
    "train.tensorboard=false",
]


def _compose(project: Path, *overrides):
    from tfpipe import config

    uri = f"tracking.uri=sqlite:///{project / 'mlflow.db'}"
    return config.compose([*SMALL, uri, *overrides], config_dir=ROOT / "conf")


@pytest.fixture(scope="module")
def source(tmp_path_factory, image_dir):
    """A project whose 3-class `colours` model is trained, evaluated and promoted (registered as tfpipe-colours,
    'champion'); a 2-class copy of the images for the warm-started runs. (project, run id, two-class folder)"""
    from mlflow import MlflowClient

    from tfpipe import stages
    from tfpipe.tracking import registry

    project = tmp_path_factory.mktemp("warm") / "project"
    project.mkdir()
    two = project.parent / "two"
    for split in ("train", "test"):
        for name in ("blue", "red"):
            shutil.copytree(image_dir / split / name, two / split / name)
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(project)
        stages.run_all(_compose(project, "dataset.name=colours", f"data.path={image_dir}"), project)
    client = MlflowClient(f"sqlite:///{project / 'mlflow.db'}")
    (run,) = client.search_runs([client.get_experiment_by_name("tfpipe").experiment_id])
    registry.promote(f"sqlite:///{project / 'mlflow.db'}", run.info.run_id, "champion")  # registers version 1
    return project, run.info.run_id, two


def _train(project: Path, two: Path, init_from: str, monkeypatch):
    from tfpipe import stages

    monkeypatch.chdir(project)
    cfg = _compose(project, "dataset.name=pair", f"data.path={two}", f"train.init_from={init_from}")
    stages.run_prepare(cfg, project)
    return stages.run_train(cfg, project)


def _tags(project: Path) -> dict:
    from mlflow import MlflowClient

    client = MlflowClient(f"sqlite:///{project / 'mlflow.db'}")
    runs = client.search_runs(
        [client.get_experiment_by_name("tfpipe").experiment_id], order_by=["start_time DESC"]
    )
    return runs[0].data.tags


@pytest.mark.slow
def test_a_run_s_model_seeds_the_matching_layers_and_the_run_says_so(source, monkeypatch):
    project, run_id, two = source
    result = _train(project, two, f"runs:/{run_id}/model", monkeypatch)
    assert result.warm_start == {"loaded": ["conv0", "conv1", "dense"], "fresh": ["logits"]}
    tags = _tags(project)
    assert tags["init.from"] == f"runs:/{run_id}/model" and tags["init.source_run"] == run_id
    assert tags["init.layers_loaded"] == "conv0,conv1,dense" and tags["init.layers_fresh"] == "logits"
    assert len(tags["init.sha256"]) == 64
    from tfpipe import audit

    run = _runs(project)[0]  # newest first
    line = audit.warm_start_line(run.info.run_id, project, f"sqlite:///{project / 'mlflow.db'}")
    assert line.startswith(f"warm start: runs:/{run_id}/model ({run_id}); layers loaded: conv0,conv1,dense;")


@pytest.mark.slow
def test_the_champion_alias_resolves_to_its_version(source, monkeypatch):
    from tfpipe.errors import UserError

    project, run_id, two = source
    _train(project, two, "models:/tfpipe-colours@champion", monkeypatch)
    tags = _tags(project)
    assert tags["init.source_model"] == "tfpipe-colours version 1" and tags["init.source_run"] == run_id
    # what `audit --rerun` starts from: the registered version the run resolved, its digest checked
    from tfpipe.audit.warmstart import recorded_source

    tmp = project.parent / "rerun-tmp"
    tmp.mkdir()
    path = recorded_source("warm", tags, project, f"sqlite:///{project / 'mlflow.db'}", tmp, print)
    exported = project / "models" / "colours" / "saved_model" / "keras_weights.npz"  # the source's export
    with np.load(path, allow_pickle=False) as got, np.load(exported, allow_pickle=False) as want:
        assert sorted(got.files) == sorted(want.files)
        assert all(np.array_equal(got[k], want[k]) for k in want.files)
    with pytest.raises(UserError, match="now holds other weights"):
        recorded_source(
            "warm",
            {**tags, "init.sha256": "0" * 64},
            project,
            f"sqlite:///{project / 'mlflow.db'}",
            tmp,
            print,
        )


@pytest.mark.slow
def test_applied_weights_are_the_source_s_by_layer_name(source):
    """The exported by-path weights, read with NumPy alone, are what a fresh 2-class model holds after apply;
    the head keeps its own initialisation."""
    from tfpipe import models
    from tfpipe.models import warmstart

    project = source[0]
    exported = project / "models" / "colours" / "saved_model" / warmstart.WEIGHTS_FILE
    with np.load(exported) as archive:
        stored = {k: archive[k] for k in archive.files}
    model = models.build_model(_compose(project, "dataset.name=pair"), num_classes=2)
    report = warmstart.apply(model, warmstart.read_source(exported.parent))
    assert report["fresh"] == ["logits"]
    np.testing.assert_array_equal(model.get_layer("conv1").kernel.numpy(), stored["conv1/kernel"])
    assert model.get_layer("logits").kernel.shape == (8, 2) and stored["logits/kernel"].shape == (8, 3)


@pytest.mark.parametrize(
    "init_from, expected",
    [
        ("runs:/0123456789abcdef0123456789abcdef/model", "run '0123456789abcdef0123456789abcdef' not found"),
        ("models:/tfpipe-colours@gold", "has no alias 'gold' (its aliases: champion)"),
        ("models:/nosuch@champion", "no registered model 'nosuch'"),
        ("no/such/folder", "'no/such/folder': not found; allowed: a tfpipe SavedModel folder"),
        ("mlflow.db", "unknown kind of file"),
    ],
)
@pytest.mark.slow
def test_a_missing_source_is_one_line_before_any_run(source, capsys, monkeypatch, init_from, expected):
    from pipeline import _cli
    from pipeline import train as train_entry

    project, _, two = source
    monkeypatch.chdir(project)
    if not (project / "conf").exists():
        shutil.copytree(ROOT / "conf", project / "conf")
    before = len(_runs(project))
    argv = [*SMALL, "dataset.name=colours", f"train.init_from={init_from}"]
    argv.append(f"tracking.uri=sqlite:///{project / 'mlflow.db'}")
    code = _cli.cli("train", train_entry.run, "test", argv, project, configure_logging=False)
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1 and expected in lines[0], lines
    assert len(_runs(project)) == before  # refused before a run was opened


def test_an_incompatible_source_is_one_line(tmp_path):
    """Text weights offered to an image model: no layer matches by name and shape."""
    from tfpipe import models
    from tfpipe.errors import UserError
    from tfpipe.models import warmstart

    model = models.build_model(_compose(tmp_path, "dataset.name=x"), num_classes=2)
    with pytest.raises(UserError, match="no layer of model 'cnn' matches the source"):
        warmstart.apply(model, {"embedding/embeddings": np.zeros((10, 4), np.float32)})


def _runs(project: Path) -> list:
    from mlflow import MlflowClient

    client = MlflowClient(f"sqlite:///{project / 'mlflow.db'}")
    experiments = [e.experiment_id for e in client.search_experiments()]
    return client.search_runs(experiments, order_by=["start_time DESC"])


@pytest.mark.slow
def test_freeze_epochs_keep_the_loaded_layers_fixed_then_train_them(source, monkeypatch):
    """freeze_epochs=epochs: every loaded weight leaves training as it came, the fresh
    head learns; freeze_epochs=1 of 2: the loaded layers then train too."""
    project, _, two = source
    exported = project / "models" / "colours" / "saved_model"
    with np.load(exported / "keras_weights.npz") as archive:
        stored = {k: archive[k] for k in archive.files}
    frozen = _trained_weights(project, two, exported, monkeypatch, "train.epochs=2", "train.freeze_epochs=2")
    loaded = [k for k in stored if not k.startswith("logits/")]
    assert loaded and all(np.array_equal(frozen[k], stored[k]) for k in loaded)
    assert frozen["logits/kernel"].shape == (8, 2)
    thawed = _trained_weights(project, two, exported, monkeypatch, "train.epochs=2", "train.freeze_epochs=1")
    assert not np.array_equal(thawed["conv1/kernel"], stored["conv1/kernel"])
    assert not np.array_equal(thawed["logits/kernel"], frozen["logits/kernel"])  # the head trained on


def _trained_weights(project: Path, two: Path, init_from: Path, monkeypatch, *overrides) -> dict:
    from tfpipe import stages

    monkeypatch.chdir(project)
    cfg = _compose(
        project, "dataset.name=pair", f"data.path={two}", f"train.init_from={init_from}", *overrides
    )
    stages.run_prepare(cfg, project)
    stages.run_train(cfg, project)
    with np.load(project / "models" / "pair" / "saved_model" / "keras_weights.npz") as archive:
        return {k: archive[k] for k in archive.files}
