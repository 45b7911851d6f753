"""Own data under its own name: `dataset=images` / `dataset=texts` with any safe `dataset.name`, any number of
classes from the folders, the split folder names of the user's layout. The name reaches the prepared and model
folders, the run name and tags and the registered model (made by `promote` by default, by evaluate with
tracking.register_model=true); images' per-channel normalisation statistics come from the train split (the
manifest) and the resnet normalises with them. Bad names: tests/test_bad_input_cli.py."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

ROOT = Path(__file__).resolve().parents[1]
SMALL = [
    "data.examples_per_shard=8",
    "train.epochs=1",
    "train.batch_size_per_replica=4",
    "train.log_every_steps=1",
    "train.tensorboard=false",
]


def _photos(root: Path) -> Path:
    """root/{train,val}/{cat,dog}/*.jpg of varying sizes, as a user's photo folder (no test/ folder)."""
    from PIL import Image

    rng = np.random.default_rng(1)
    for split, count in (("train", 10), ("val", 4)):
        for label, name in enumerate(("cat", "dog")):
            (root / split / name).mkdir(parents=True)
            for i in range(count):
                h, w = int(rng.integers(20, 70)), int(rng.integers(20, 70))
                pixels = rng.integers(0, 120, size=(h, w, 3)) + 100 * label
                Image.fromarray(pixels.astype(np.uint8), "RGB").save(
                    root / split / name / f"p{i}.jpg", quality=95
                )
    return root


def _tickets(root: Path) -> Path:
    """root/{train,test}/{billing,bug,praise}/*.txt: three classes of support tickets."""
    words = {"billing": "invoice refund charge", "bug": "crash error broken", "praise": "thanks great love"}
    for split, count in (("train", 8), ("test", 3)):
        for name, vocabulary in words.items():
            (root / split / name).mkdir(parents=True)
            for i in range(count):
                (root / split / name / f"{i}.txt").write_text(
                    f"ticket {i}: {vocabulary} please", encoding="utf-8"
                )
    return root


def _run_all(project: Path, overrides: list, monkeypatch):
    from tfpipe import config, stages

    monkeypatch.chdir(project)
    cfg = config.compose(
        [*overrides, *SMALL, f"tracking.uri=sqlite:///{project / 'mlflow.db'}"], config_dir=ROOT / "conf"
    )
    stages.run_all(cfg, project)
    return cfg


def _train_pixels(prepared: Path, shape: list) -> np.ndarray:
    """The train split's images, read back from the shards with TensorFlow alone (not tfpipe's reader)."""
    files = sorted(str(p) for p in prepared.glob("train-*"))
    spec = {"image": tf.io.FixedLenFeature([], tf.string), "label": tf.io.FixedLenFeature([], tf.int64)}
    images = [
        np.frombuffer(tf.io.parse_single_example(record, spec)["image"].numpy(), np.uint8).reshape(shape)
        for record in tf.data.TFRecordDataset(files)
    ]
    return np.stack(images)


def _client(project: Path):
    from mlflow import MlflowClient

    return MlflowClient(tracking_uri=f"sqlite:///{project / 'mlflow.db'}")


@pytest.mark.slow
def test_own_photos_train_under_their_name_with_their_statistics(tmp_path, monkeypatch):
    from tfpipe.tracking import registry

    project = tmp_path / "project"
    project.mkdir()
    photos = _photos(tmp_path / "photos")
    overrides = ["dataset=images", "dataset.name=pets", f"data.path={photos}", "data.test_split=val"]
    overrides += ["dataset.image_size=[24,20]", "model=resnet", "model.filters=[8,8]", "model.dense_units=0"]
    _run_all(project, overrides, monkeypatch)

    prepared = project / "data" / "prepared" / "pets"
    manifest = json.loads((prepared / "manifest.json").read_text())
    assert manifest["dataset"] == "pets" and manifest["class_names"] == ["cat", "dog"]
    pixels = _train_pixels(prepared, [24, 20, 3]).astype(np.float64) / 255.0
    assert len(pixels) == manifest["splits"]["train"]["num_examples"]
    norm = manifest["normalization"]
    np.testing.assert_allclose(norm["mean"], pixels.mean(axis=(0, 1, 2)), rtol=1e-9)
    np.testing.assert_allclose(norm["std"], pixels.std(axis=(0, 1, 2)), rtol=1e-9)
    assert (project / "models" / "pets" / "saved_model" / "saved_model.pb").is_file()

    client = _client(project)
    (run,) = client.search_runs([client.get_experiment_by_name("tfpipe").experiment_id])
    assert run.info.run_name.startswith("pets-resnet-") and run.data.tags["dataset"] == "pets"
    assert run.info.status == "FINISHED" and "test_accuracy" in run.data.metrics
    assert client.search_model_versions("") == []  # by default evaluate registers nothing; promote does
    promoted = registry.promote(f"sqlite:///{project / 'mlflow.db'}", run.info.run_id, "champion")
    assert (promoted["name"], promoted["version"], promoted["registered"]) == ("tfpipe-pets", "1", True)
    (version,) = client.search_model_versions("name='tfpipe-pets'")
    assert version.run_id == run.info.run_id


def test_the_resnet_normalises_with_the_statistics_it_is_given():
    from tfpipe import config, models

    cfg = config.compose(["model=resnet", "model.filters=[8]"], config_dir=ROOT / "conf")
    norm = {"mean": [0.1, 0.2, 0.3], "std": [0.4, 0.5, 0.6]}
    layer = models.build_model(cfg, num_classes=2, normalization=norm).get_layer("normalize")
    np.testing.assert_allclose(np.ravel(layer.mean), norm["mean"], rtol=1e-6)
    np.testing.assert_allclose(np.ravel(layer.variance), np.square(norm["std"]), rtol=1e-6)
    with pytest.raises(ValueError, match="per-channel mean/std"):
        models.build_model(cfg, num_classes=2)


@pytest.mark.slow
def test_own_texts_with_three_classes_train_under_their_name(tmp_path, monkeypatch):
    project = tmp_path / "project"
    project.mkdir()
    tickets = _tickets(tmp_path / "tickets")
    _run_all(
        project,
        [
            "dataset=texts",
            "dataset.name=tickets",
            f"data.path={tickets}",
            "model.dense_units=8",
            "tracking.register_model=true",  # evaluate registers every run's model under the run's name
        ],
        monkeypatch,
    )

    manifest = json.loads((project / "data" / "prepared" / "tickets" / "manifest.json").read_text())
    assert manifest["class_names"] == ["billing", "bug", "praise"] and manifest["num_classes"] == 3
    assert manifest["normalization"] is None
    client = _client(project)
    (run,) = client.search_runs([client.get_experiment_by_name("tfpipe").experiment_id])
    assert run.info.run_name.startswith("tickets-embedding_gap-")
    assert "accuracy" in json.loads((project / "metrics" / "eval.json").read_text())
    (version,) = client.search_model_versions("name='tfpipe-tickets'")
    assert version.run_id == run.info.run_id
