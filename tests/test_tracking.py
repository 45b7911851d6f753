"""tfpipe.tracking against a real SQLite MLflow store in tmp_path (no mocks of mlflow or TF)."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from conftest import default_policy  # noqa: E402

from tfpipe.errors import TrackingError

MLFLOW_ENV = ("MLFLOW_TRACKING_URI", "MLFLOW_RUN_ID", "MLFLOW_EXPERIMENT_ID", "MLFLOW_EXPERIMENT_NAME")


@pytest.fixture
def clean_mlflow(monkeypatch):
    import mlflow

    for name in MLFLOW_ENV:
        monkeypatch.delenv(name, raising=False)
    yield
    while mlflow.active_run() is not None:
        mlflow.end_run()
    mlflow.set_tracking_uri(None)


@pytest.fixture
def project(tmp_path, db_template, clean_mlflow) -> Path:
    """A project root whose default store (sqlite:///<root>/mlflow.db) is a fresh copy of the template."""
    shutil.copy(db_template, tmp_path / "mlflow.db")
    return tmp_path


@pytest.fixture
def cfg(make_config):
    return make_config("experiment=smoke")


def _client(root: Path):
    from mlflow import MlflowClient

    return MlflowClient(tracking_uri=f"sqlite:///{root / 'mlflow.db'}")


def _uri(root: Path) -> str:
    return f"sqlite:///{root / 'mlflow.db'}"


def _run_id(root: Path, cfg) -> str:
    return json.loads((root / cfg.tracking.run_file).read_text())["run_id"]


# ----------------------------------------------------------------------------- backend


def test_tracking_uri_precedence(cfg, tmp_path, monkeypatch):
    import dataclasses

    from tfpipe.tracking import resolve_tracking_uri

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    assert resolve_tracking_uri(cfg.tracking, tmp_path) == f"sqlite:///{tmp_path.resolve()}/mlflow.db"
    relative = dataclasses.replace(cfg.tracking, uri="sqlite:///stores/x.db")
    assert resolve_tracking_uri(relative, tmp_path) == f"sqlite:///{tmp_path.resolve()}/stores/x.db"
    remote = dataclasses.replace(cfg.tracking, uri="http://tracking.example:5000")
    assert resolve_tracking_uri(remote, tmp_path) == "http://tracking.example:5000"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://from-env:5000")
    assert resolve_tracking_uri(remote, tmp_path) == "http://from-env:5000"


def test_unreachable_backends_fail_fast_with_one_line(cfg, tmp_path, clean_mlflow, monkeypatch):
    from tfpipe import tracking

    started = time.monotonic()
    with pytest.raises(TrackingError) as down:
        tracking.check_reachable("http://127.0.0.1:9")
    assert "unreachable" in str(down.value) and "\n" not in str(down.value)

    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://127.0.0.1:9")
    with pytest.raises(TrackingError):
        tracking.start_run(cfg, tmp_path, stage="train")
    assert time.monotonic() - started < 10
    assert not (tmp_path / cfg.tracking.run_file).exists()

    with pytest.raises(TrackingError, match="does not exist"):
        tracking.check_reachable(f"sqlite:///{tmp_path}/missing/folder/mlflow.db")


# ----------------------------------------------------------------------------- run lifecycle


def test_start_run_names_run_writes_run_file_and_uses_project_artifacts(cfg, project):
    from tfpipe import tracking

    (project / "out").mkdir()
    (project / "out" / "a.txt").write_text("a")
    with tracking.start_run(cfg, project, stage="train") as run:
        run.log_artifact(project / "out" / "a.txt", "files")
        run.log_artifacts(project / "out", "dir")
        run.log_config(cfg)

    info = json.loads((project / "run.json").read_text())
    assert set(info) == {"run_id", "experiment_id", "tracking_uri", "run_name"}
    name = f"cifar10-cnn-one_device-{default_policy()}-{info['run_id'][:6]}"  # + the run id's head
    assert info["run_name"] == name == run.run_name
    assert info["tracking_uri"] == "sqlite:///mlflow.db"  # relative to the project (tests/test_run_names.py)
    assert not list(project.glob(".run.json*"))  # atomic write left no temp file

    client = _client(project)
    got = client.get_run(info["run_id"])
    assert got.info.run_name == name
    assert got.info.status == "FINISHED"
    assert got.data.tags["tfpipe.stage.train"] == "FINISHED"
    experiment = client.get_experiment(info["experiment_id"])
    assert experiment.name == "tfpipe"
    assert experiment.artifact_location == (project / "mlartifacts").resolve().as_uri()
    assert (project / "mlartifacts" / info["run_id"] / "artifacts" / "files" / "a.txt").is_file()
    assert {a.path for a in client.list_artifacts(info["run_id"])} >= {"files", "dir", "config"}

    import yaml
    from mlflow.artifacts import download_artifacts

    resolved = yaml.safe_load(
        Path(
            download_artifacts(
                run_id=info["run_id"], artifact_path="config/resolved.yaml", tracking_uri=_uri(project)
            )
        ).read_text()
    )
    assert resolved == cfg.to_dict()
    assert "MLFLOW_TRACKING_URI" not in os.environ  # the fluent API's URI was not leaked to later runs


def test_resume_run_reopens_the_train_run(cfg, project):
    from tfpipe import tracking

    with tracking.start_run(cfg, project, stage="train") as run:
        run.log_metrics({"train_loss": 1.0}, step=1)
    with tracking.resume_run(cfg, project, stage="evaluate") as again:
        assert again.run_id == run.run_id
        again.log_metrics({"test_accuracy": 0.5}, step=0)
    got = _client(project).get_run(run.run_id)
    assert got.info.status == "FINISHED"
    assert got.data.metrics == {"train_loss": 1.0, "test_accuracy": 0.5}
    assert got.data.tags["tfpipe.stage.evaluate"] == "FINISHED"
    assert len(_client(project).search_runs([got.info.experiment_id])) == 1


def test_resume_run_without_run_file_names_the_file(cfg, project):
    from tfpipe import tracking

    with pytest.raises(TrackingError, match=r"run\.json: run file not found"):
        tracking.resume_run(cfg, project, stage="evaluate")


def test_mlflow_run_id_from_env_is_attached_and_kept(cfg, project, monkeypatch):
    from tfpipe import tracking

    client = _client(project)
    experiment_id = client.create_experiment("created-by-mlflow-run")
    created = client.create_run(experiment_id)
    monkeypatch.setenv("MLFLOW_RUN_ID", created.info.run_id)
    with tracking.start_run(cfg, project, stage="train") as run:
        assert run.run_id == created.info.run_id
    assert os.environ["MLFLOW_RUN_ID"] == created.info.run_id  # restored for the next stage
    assert _run_id(project, cfg) == created.info.run_id
    with tracking.resume_run(cfg, project, stage="evaluate") as again:
        assert again.run_id == created.info.run_id
    got = client.get_run(created.info.run_id)
    assert got.info.run_name == f"cifar10-cnn-one_device-{default_policy()}-{created.info.run_id[:6]}"
    assert got.info.status == "FINISHED"
    assert client.get_experiment_by_name("tfpipe") is None  # nothing was created in the configured experiment


def test_exception_marks_run_failed_and_ctrl_c_killed(cfg, project):
    from tfpipe import tracking

    with pytest.raises(RuntimeError):
        with tracking.start_run(cfg, project, stage="train") as run:
            run.log_metrics({"train_loss": 2.0}, step=3)
            raise RuntimeError("boom")
    got = _client(project).get_run(run.run_id)
    assert got.info.status == "FAILED"
    assert got.data.metrics["train_loss"] == 2.0  # buffered metrics still flushed

    with pytest.raises(KeyboardInterrupt):
        with tracking.resume_run(cfg, project, stage="evaluate"):
            raise KeyboardInterrupt
    assert _client(project).get_run(run.run_id).info.status == "KILLED"


def test_non_chief_gets_a_no_op_handle(cfg, project):
    from tfpipe import tracking

    with tracking.start_run(cfg, project, stage="train", is_chief=False) as run:
        assert not run.active and run.run_id is None
        run.log_params(cfg.flat())
        run.log_metrics({"loss": 1.0}, step=1)
        run.set_tags({"a": "b"})
        run.log_model("nowhere", modality="image", class_names=["a"])
    assert not (project / "run.json").exists()
    assert _client(project).get_experiment_by_name("tfpipe") is None


# ----------------------------------------------------------------------------- params, metrics, tags


def test_params_are_flat_redacted_and_batched(cfg, project):
    from tfpipe import tracking

    flat = cfg.flat()
    extra = {f"extra.p{i:03d}": i for i in range(150)}  # > 100: several log_batch requests
    secrets = {"db.password": "hunter2", "hub.api_key": "abc", "aws.access_key_id": "AKIA", "hf_token": "t"}
    with tracking.start_run(cfg, project, stage="train") as run:
        run.log_params({**flat, **extra, **secrets, "long": "x" * 7000})
        run.log_params(flat)  # identical values again: a no-op, not an error
        with pytest.raises(TrackingError, match="train.epochs"):
            run.log_params({"train.epochs": 99})
    params = _client(project).get_run(run.run_id).data.params
    assert params["train.optimizer.learning_rate"] == str(cfg.train.optimizer.learning_rate)
    assert params["dataset.image_size"] == "[32, 32]"
    assert params["dataset.max_tokens"] == "None"  # 'tokens' is not a credential word
    assert params["train.max_checkpoints_to_keep"] == str(cfg.train.max_checkpoints_to_keep)
    assert all(params[k] == "***" for k in secrets)
    assert len(params["long"]) == 6000
    assert len(params) == len(flat) + len(extra) + len(secrets) + 1


@pytest.mark.parametrize(
    "key, secret",
    [
        ("password", True),
        ("db.password", True),
        ("api_key", True),
        ("apiKey", True),
        ("AWS_ACCESS_KEY_ID", True),
        ("hf_token", True),
        ("client_secret", True),
        ("credentials_file", True),
        ("dbpassword", True),
        ("dataset.max_tokens", False),
        ("train.max_checkpoints_to_keep", False),
        ("keep", False),
        ("monkey", False),
        ("keyboard_layout", False),
        ("model.dense_units", False),
    ],
)
def test_is_secret_key(key, secret):
    from tfpipe.tracking import is_secret_key, redact

    assert is_secret_key(key) is secret
    assert redact({key: "v"})[key] == ("***" if secret else "v")


def test_redact_hides_url_passwords():
    from tfpipe.tracking import redact

    assert redact({"tracking.uri": "https://me:pw@host/x"}) == {"tracking.uri": "https://me:***@host/x"}


def test_metrics_are_buffered_then_arrive_with_their_steps(cfg, project):
    from tfpipe import tracking

    client = _client(project)
    with tracking.start_run(cfg, project, stage="train", flush_every=7, flush_seconds=3600) as run:
        for step in range(3):  # 6 values < 7: still buffered
            run.log_metrics({"train_loss": 1.0 / (step + 1), "lr": np.float32(0.1)}, step=step)
        assert client.get_metric_history(run.run_id, "train_loss") == []
        run.log_metrics(
            {"train_loss": 0.25, "lr": 0.1}, step=3
        )  # 8 values: one batch sent (background thread)
        for _ in range(100):
            if len(client.get_metric_history(run.run_id, "train_loss")) == 4:
                break
            time.sleep(0.1)
        assert len(client.get_metric_history(run.run_id, "train_loss")) == 4
        for step in range(4, 20):
            run.log_metrics(
                {"train_loss": 1.0 / (step + 1), "lr": 0.1, "bad key!": 1.0, "note": "n/a"}, step=step
            )
    history = client.get_metric_history(run.run_id, "train_loss")
    assert sorted(m.step for m in history) == list(range(20))
    assert {m.step: m.value for m in history}[9] == pytest.approx(0.1)
    assert len(client.get_metric_history(run.run_id, "lr")) == 20
    assert "bad key_" in client.get_run(run.run_id).data.metrics  # sanitised, not rejected
    assert "note" not in client.get_run(run.run_id).data.metrics  # non-numbers are skipped


def test_run_tags_cover_config_strategy_data_git_dvc_and_versions(cfg, project):
    from tfpipe import tracking

    provenance = {
        "git": {"commit": "a" * 40, "branch": "main", "dirty": True, "diff": "..."},
        "dvc_lock": {"present": True, "content": "...", "stages": {"prepare": "1" * 64, "train": "2" * 64}},
        "environment": {
            "python": "3.11.7",
            "packages": {
                "tensorflow": "2.21.0",
                "keras": "3.15.1",
                "mlflow": "3.17.2",
                "dvc": "3.67.1",
                "tensorflow_datasets": "4.9.10",
            },
            "platform": "Linux",
            "cpu": "Some CPU",
            "cpu_flags": "avx2 avx512f",
            "num_cpus": 2,
            "gpus": [],
        },
    }
    strategy = {
        "name": "OneDeviceStrategy",
        "num_replicas_in_sync": 1,
        "devices": ["/cpu:0"],
        "worker_count": 1,
    }
    tags = tracking.run_tags(cfg, strategy, "d" * 64, provenance)
    expected = {
        "dataset": "cifar10",
        "model": "cnn",
        "strategy": "one_device",
        "precision": "auto",
        "precision.resolved": default_policy(),
        "replicas": "1",
        "device": "/cpu:0",
        "data.manifest_digest": "d" * 64,
        "git.commit": "a" * 40,
        "git.dirty": "true",
        "mlflow.source.git.commit": "a" * 40,
        "dvc.lock.prepare": "1" * 64,
        "dvc.lock.train": "2" * 64,
        "python_version": "3.11.7",
        "tf_version": "2.21.0",
        "keras_version": "3.15.1",
        "mlflow_version": "3.17.2",
        "dvc_version": "3.67.1",
        "cpu": "Some CPU",
        "cpu_flags": "avx2 avx512f",
        "strategy.name": "OneDeviceStrategy",
        "gpus": "none",
    }
    assert {k: tags.get(k) for k in expected} == expected
    assert tracking.dvc_lock_tags(provenance) == {"dvc.lock.prepare": "1" * 64, "dvc.lock.train": "2" * 64}
    assert "replicas" in tracking.run_tags(cfg, None, None, {})  # one_device: known before training

    with tracking.start_run(cfg, project, stage="train") as run:
        run.set_tags(tags)
        run.log_provenance(provenance)
    got = _client(project).get_run(run.run_id)
    assert got.data.tags["git.commit"] == "a" * 40 and got.data.tags["dvc.lock.train"] == "2" * 64
    artifacts = {a.path for a in _client(project).list_artifacts(run.run_id, "provenance")}
    assert artifacts == {"provenance/provenance.json", "provenance/git_diff.patch", "provenance/dvc.lock"}


# ----------------------------------------------------------------------------- dataset input


def test_log_dataset_records_digest_context_profile_and_schema(cfg, project, tmp_path):
    from tfpipe import tracking

    digest = "f" * 64
    manifest = {
        "format_version": 1,
        "dataset": "cifar10",
        "modality": "image",
        "feature_spec": {
            "image": {"dtype": "uint8", "shape": [32, 32, 3], "encoding": "raw"},
            "label": {"dtype": "int64", "shape": []},
        },
        "class_names": ["a", "b"],
        "num_classes": 2,
        "splits": {
            "train": {"num_examples": 90},
            "validation": {"num_examples": 10},
            "test": {"num_examples": 20},
        },
    }
    prepared = tmp_path / "data" / "prepared" / "cifar10"
    prepared.mkdir(parents=True)
    with tracking.start_run(cfg, project, stage="train") as run:
        run.log_dataset(manifest, digest, prepared, context="train")
    with tracking.resume_run(cfg, project, stage="evaluate") as run:
        run.log_dataset(manifest, digest, prepared, context="test")

    inputs = _client(project).get_run(run.run_id).inputs.dataset_inputs
    by_context = {next(t.value for t in i.tags if t.key == "mlflow.data.context"): i for i in inputs}
    assert set(by_context) == {"train", "test"}
    train = by_context["train"].dataset
    assert train.name == "cifar10-train"
    assert train.digest == digest[:36] and digest.startswith(train.digest)
    assert {t.key: t.value for t in by_context["train"].tags}["manifest_digest"] == digest
    assert json.loads(train.source)["uri"] == str(prepared.resolve())
    assert json.loads(train.profile)["num_examples"] == {"train": 90, "validation": 10}
    assert json.loads(by_context["test"].dataset.profile)["num_examples"] == {"test": 20}
    assert "image" in train.schema and "uint8" in train.schema


# ----------------------------------------------------------------------------- pyfunc model


IMAGE_CLASSES = ["red", "green", "blue"]


@pytest.fixture(scope="module")
def saved_models(tmp_path_factory):
    """Tiny raw-input SavedModels: image (uint8 [N,8,8,3]) and text (string [N], TextVectorization inside)."""
    import keras
    import tensorflow as tf

    root = tmp_path_factory.mktemp("saved_models")
    keras.utils.set_random_seed(0)

    inputs = keras.Input((8, 8, 3), dtype="uint8")
    x = keras.layers.Rescaling(1 / 255.0)(inputs)
    x = keras.layers.GlobalAveragePooling2D()(x)
    image_model = keras.Model(inputs, keras.layers.Dense(3, activation="softmax")(x))
    archive = keras.export.ExportArchive()
    archive.track(image_model)
    archive.add_endpoint(
        name="serving_default",
        fn=lambda image: {"probabilities": image_model(image, training=False)},
        input_signature=[tf.TensorSpec([None, 8, 8, 3], tf.uint8, name="image")],
    )
    archive.write_out(str(root / "image"), verbose=False)

    vectorizer = keras.layers.TextVectorization(max_tokens=20, output_sequence_length=6)
    vectorizer.adapt(["good great fine film", "bad awful poor film"])
    text_model = keras.Sequential(
        [
            keras.layers.Embedding(20, 4),
            keras.layers.GlobalAveragePooling1D(),
            keras.layers.Dense(2, activation="softmax"),
        ]
    )
    text_model(vectorizer(tf.constant(["x"])))
    archive = keras.export.ExportArchive()
    archive.track(vectorizer)
    archive.track(text_model)
    archive.add_endpoint(
        name="serving_default",
        fn=lambda text: {"probabilities": text_model(vectorizer(text))},
        input_signature=[tf.TensorSpec([None], tf.string, name="text")],
    )
    archive.write_out(str(root / "text"), verbose=False)
    from tfpipe import files

    for name in ("image", "text"):
        files.seal(root / name)  # as the export does: only sealed SavedModels are logged
    return {"image": root / "image", "text": root / "text"}


def _direct(saved_model_dir, **inputs):
    import tensorflow as tf

    fn = tf.saved_model.load(str(saved_model_dir)).signatures["serving_default"]
    return fn(**{k: tf.constant(v) for k, v in inputs.items()})["probabilities"].numpy()


def test_log_model_serves_raw_images(cfg, project, saved_models):
    import mlflow

    from tfpipe import tracking

    example = np.random.default_rng(0).integers(0, 256, size=(2, 8, 8, 3), dtype=np.uint8)
    with tracking.start_run(cfg, project, stage="train") as run:
        model_uri = run.log_model(
            saved_models["image"], modality="image", input_example=example, class_names=IMAGE_CLASSES
        )
    assert model_uri.startswith("models:/")
    assert _client(project).get_run(run.run_id).data.tags["model_uri"] == model_uri

    mlflow.set_tracking_uri(f"sqlite:///{project / 'mlflow.db'}")
    served = mlflow.pyfunc.load_model(f"runs:/{run.run_id}/model")
    assert served.metadata.metadata["class_names"] == IMAGE_CLASSES
    assert served.metadata.get_input_schema().inputs[0].shape == (-1, 8, 8, 3)
    images = np.random.default_rng(1).integers(0, 256, size=(5, 8, 8, 3), dtype=np.uint8)
    answer = served.predict(images)
    assert list(answer.columns) == [
        "class",
        *IMAGE_CLASSES,
    ]  # each example's class, then one column per class
    predictions = answer[IMAGE_CLASSES].to_numpy()
    assert predictions.dtype == np.float32 and predictions.shape == (5, 3)
    np.testing.assert_allclose(predictions.sum(axis=1), 1.0, atol=1e-5)
    expected = _direct(saved_models["image"], image=images)
    np.testing.assert_allclose(predictions, expected, atol=1e-6)
    assert list(answer["class"]) == [IMAGE_CLASSES[i] for i in expected.argmax(axis=1)]
    assert mlflow.pyfunc.load_model(model_uri).predict(images[:1]).shape == (1, 4)


def test_the_served_model_refuses_a_wrong_image_in_one_line(cfg, project, saved_models):
    """Issue 33: a wrong shape or non-uint8 values are refused in one short line that leads with what is expected
    (no array dumped); integers 0-255 in any integer dtype, and nested lists (as over HTTP), are served. Over HTTP:
    test_pipeline_e2e's champion test."""
    import mlflow
    from mlflow.exceptions import MlflowException

    from tfpipe import tracking

    example = np.zeros((1, 8, 8, 3), np.uint8)
    with tracking.start_run(cfg, project, stage="train") as run:
        model_uri = run.log_model(
            saved_models["image"], modality="image", input_example=example, class_names=IMAGE_CLASSES
        )
    mlflow.set_tracking_uri(f"sqlite:///{project / 'mlflow.db'}")
    served = mlflow.pyfunc.load_model(model_uri)
    assert served.metadata.get_input_schema().inputs[0].shape == (-1, 8, 8, 3)  # what the UI shows
    refusals = [
        (
            np.zeros((2, 16, 16, 3), np.uint8),
            "expected images of shape (-1, 8, 8, 3) uint8 (0-255); got shape (2, 16, 16, 3)",
        ),
        (np.full((2, 8, 8, 3), 0.5), "expected uint8 pixel values 0-255; got float64 values such as 0.5"),
        (np.full((1, 8, 8, 3), 300), "expected uint8 pixel values 0-255; got int64 values such as 300"),
    ]
    for bad, line in refusals:
        with pytest.raises(MlflowException) as refused:
            served.predict(bad)
        assert str(refused.value) == line, str(refused.value)[:300]
    images = np.random.default_rng(2).integers(0, 256, size=(3, 8, 8, 3), dtype=np.uint8)
    expected = served.predict(images)[IMAGE_CLASSES].to_numpy()
    for same in (images.astype(np.int64), images.tolist(), images[0]):
        answer = served.predict(same)[IMAGE_CLASSES].to_numpy()
        np.testing.assert_allclose(answer, expected[: len(answer)], atol=1e-6)


def test_log_model_serves_raw_texts(cfg, project, saved_models):
    import mlflow
    import pandas as pd

    from tfpipe import tracking

    with tracking.start_run(cfg, project, stage="train") as run:
        model_uri = run.log_model(
            saved_models["text"],
            modality="text",
            input_example=["good film", "awful film"],
            class_names=["neg", "pos"],
        )
    mlflow.set_tracking_uri(f"sqlite:///{project / 'mlflow.db'}")
    served = mlflow.pyfunc.load_model(model_uri)
    texts = ["a good great film", "bad and awful", "unknown words"]
    expected = _direct(saved_models["text"], text=texts)
    for raw in (texts, np.array(texts), pd.DataFrame({"text": texts})):
        answer = served.predict(raw)
        predictions = answer[["neg", "pos"]].to_numpy()
        assert predictions.shape == (3, 2) and predictions.dtype == np.float32
        np.testing.assert_allclose(predictions, expected, atol=1e-6)
        assert list(answer["class"]) == [["neg", "pos"][i] for i in expected.argmax(axis=1)]


def test_log_model_refuses_a_missing_saved_model(cfg, project, tmp_path):
    from tfpipe import tracking

    with tracking.start_run(cfg, project, stage="train") as run:
        with pytest.raises(TrackingError, match="saved_model.pb"):
            run.log_model(tmp_path / "nope", modality="image", class_names=["a"])


def test_the_newest_checkpoint_is_logged_alone(cfg, project, tmp_path):
    from tfpipe import tracking
    from tfpipe.workdir import WorkDir

    ckpt = tmp_path / "checkpoints"
    ckpt.mkdir()
    for step in (1, 2):
        (ckpt / f"ckpt-{step}.index").write_bytes(b"i")
        (ckpt / f"ckpt-{step}.data-00000-of-00001").write_bytes(b"d")
    (ckpt / "checkpoint").write_text(
        'model_checkpoint_path: "ckpt-2"\nall_model_checkpoint_paths: "ckpt-1"\n'
        'all_model_checkpoint_paths: "ckpt-2"\n'
    )
    (ckpt / "history.json").write_text("[]")
    files, prefix = WorkDir(tmp_path).latest_checkpoint()
    assert prefix == "ckpt-2"
    with tracking.start_run(cfg, project, stage="train") as run:
        run.log_checkpoint_files(files, prefix)
    logged = {a.path for a in _client(project).list_artifacts(run.run_id, "checkpoints")}
    assert logged == {
        "checkpoints/checkpoint",
        "checkpoints/ckpt-2.index",
        "checkpoints/ckpt-2.data-00000-of-00001",
        "checkpoints/history.json",
    }
    state = project / "mlartifacts" / run.run_id / "artifacts" / "checkpoints" / "checkpoint"
    assert 'model_checkpoint_path: "ckpt-2"' in state.read_text() and "ckpt-1" not in state.read_text()


# ----------------------------------------------------------------------------- team: DVC experiments, sweeps, new stores


def test_queued_dvc_experiment_logs_to_the_real_repositorys_store(
    cfg, project, tmp_path_factory, monkeypatch
):
    """`dvc exp run --queue` runs in a temporary copy; DVC points DVC_ROOT at the real repository."""
    from tfpipe import tracking
    from tfpipe.tracking import backend

    copy = tmp_path_factory.mktemp("exp-copy")
    monkeypatch.setenv("DVC_ROOT", str(project))
    assert (
        tracking.resolve_tracking_uri(cfg.tracking, copy) == f"sqlite:///{copy.resolve()}/mlflow.db"
    )  # plain repro
    monkeypatch.setenv("DVC_EXP_NAME", "quiet-fern")
    monkeypatch.setenv("DVC_EXP_BASELINE_REV", "b" * 40)
    assert tracking.resolve_tracking_uri(cfg.tracking, copy) == f"sqlite:///{project.resolve()}/mlflow.db"
    assert (
        backend.artifact_location_for(cfg.tracking, copy, "sqlite:///x.db")
        == (project / "mlartifacts").resolve().as_uri()
    )
    with tracking.start_run(cfg, copy, stage="train") as run:
        pass
    assert (copy / "run.json").is_file() and not (copy / "mlflow.db").exists()
    tags = _client(project).get_run(run.run_id).data.tags
    assert tags["dvc.exp_name"] == "quiet-fern" and tags["dvc.exp_baseline"] == "b" * 40


def test_sweep_parent_run_nests_the_runs_started_under_it(cfg, project):
    from tfpipe import tracking

    parent = tracking.ParentRun(
        cfg, project, "sweep-test", {"sweep.overrides": "precision=a,b", "db.password": "x"}
    )
    with tracking.start_run(cfg, project, stage="train") as child:
        pass
    parent.close("FINISHED")
    assert "TFPIPE_PARENT_RUN_ID" not in os.environ
    client = _client(project)
    assert client.get_run(child.run_id).data.tags["mlflow.parentRunId"] == parent.run_id
    got = client.get_run(parent.run_id)
    assert got.info.status == "FINISHED" and got.info.run_name == "sweep-test"
    assert got.data.tags["tfpipe.sweep"] == "parent" and got.data.tags["db.password"] == "***"
    with tracking.start_run(cfg, project, stage="train") as later:
        pass
    assert "mlflow.parentRunId" not in client.get_run(later.run_id).data.tags


@pytest.mark.slow
def test_two_processes_creating_one_new_sqlite_store_at_once(tmp_path):
    """Without the folder lock one of them fails with 'table ... already exists'."""
    import subprocess
    import sys

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    code = f"from tfpipe.tracking.sqlite import init_store; init_store({uri!r}); print('ok')"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1] / "src")}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        for _ in range(2)
    ]
    results = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [err[-2000:] for _, err in results]
    from mlflow import MlflowClient

    assert MlflowClient(tracking_uri=uri).get_experiment("0").name == "Default"


def test_redaction_survives_a_thread_changing_the_environment():
    """MLflow's telemetry thread removes variables while a stage reads the environment (a KeyError crashed
    the train stage at start, intermittently): reading must not depend on the environment standing still."""
    from conftest import churning_environment

    from tfpipe.tracking.redact import secret_env_values

    os.environ["TFPIPE_TEST_API_TOKEN"] = "s3cr3t-value-0123456789"
    try:
        churning_environment(lambda: secret_env_values().index("s3cr3t-value-0123456789"), 3000)
    finally:
        os.environ.pop("TFPIPE_TEST_API_TOKEN", None)


# ----------------------------------------------------------------------------- the seal at serving
# A logged model whose SavedModel is not whole (a file changed or missing in the artifact store, as a half-done
# upload leaves it) is refused by `mlflow.pyfunc.load_model` and by a real `mlflow models serve` process;
# log_model refuses an unsealed or changed export. Expected file names come from the test's own tampering.

SEAL_CLASSES = ["blue", "green", "red"]


def _logged(cfg, project, saved_model_dir) -> tuple[str, Path]:
    """Log the model; return its URI and its SavedModel folder inside the local artifact store."""
    from tfpipe import tracking

    with tracking.start_run(cfg, project, stage="train") as run:
        uri = run.log_model(saved_model_dir, modality="image", class_names=SEAL_CLASSES)
    (seal,) = [p for p in project.rglob("tfpipe_digest.json") if saved_model_dir not in p.parents]
    return uri, seal.parent


def _variables_file(folder: Path) -> Path:
    return sorted((folder / "variables").glob("variables.data-*"))[0]


def test_log_model_refuses_an_unsealed_or_changed_export(cfg, project, saved_models, tmp_path):
    copy = tmp_path / "image"
    shutil.copytree(saved_models["image"], copy)
    (copy / "tfpipe_digest.json").unlink()
    with pytest.raises(TrackingError, match=r"not logged: no valid tfpipe_digest.json"):
        _logged(cfg, project, copy)
    shutil.copytree(saved_models["image"], copy, dirs_exist_ok=True)
    _variables_file(copy).write_bytes(b"\0" * 16)
    with pytest.raises(TrackingError, match=r"1 file\(s\) missing or changed .*variables/variables.data-"):
        _logged(cfg, project, copy)


def test_a_changed_or_missing_file_in_the_logged_model_is_refused_at_load(cfg, project, saved_models):
    import mlflow

    uri, stored = _logged(cfg, project, saved_models["image"])
    mlflow.set_tracking_uri(f"sqlite:///{project / 'mlflow.db'}")
    images = np.zeros((1, 8, 8, 3), np.uint8)
    assert mlflow.pyfunc.load_model(uri).predict(images).shape == (1, 4)  # whole: it serves (class + 3)
    variables = _variables_file(stored)
    good = variables.read_bytes()
    variables.write_bytes(good[: len(good) // 2])  # truncated in the store
    with pytest.raises(
        ValueError, match=r"1 file\(s\) missing or changed since export \(variables/variables.data-"
    ):
        mlflow.pyfunc.load_model(uri)
    variables.unlink()  # never uploaded
    with pytest.raises(ValueError, match=r"missing or changed since export \(variables/variables.data-"):
        mlflow.pyfunc.load_model(uri)
    variables.write_bytes(good)
    (stored / "tfpipe_digest.json").unlink()  # the upload stopped before the seal
    with pytest.raises(
        ValueError, match=r"no valid tfpipe_digest.json: the SavedModel was not saved or logged"
    ):
        mlflow.pyfunc.load_model(uri)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _serve(uri: str, project: Path, port: int) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")}
    env["MLFLOW_TRACKING_URI"] = f"sqlite:///{project / 'mlflow.db'}"
    cmd = [sys.executable, "-m", "mlflow", "models", "serve", "-m", uri, "--env-manager", "local"]
    cmd += ["--host", "127.0.0.1", "--port", str(port)]
    return subprocess.Popen(
        cmd, cwd=project, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )


@pytest.mark.slow
def test_mlflow_models_serve_refuses_a_changed_model(cfg, project, saved_models):
    """A served model whose variables changed since export never starts answering (the whole model served
    and compared with the evaluate stage: test_pipeline_e2e's champion test)."""
    uri, stored = _logged(cfg, project, saved_models["image"])
    variables = _variables_file(stored)
    variables.write_bytes(variables.read_bytes()[:-1])
    proc = _serve(uri, project, _free_port())
    try:
        out, _ = proc.communicate(timeout=180)
    finally:
        proc.kill()
    assert proc.returncode != 0, out[-3000:]
    assert "missing or changed since export (variables/variables.data-" in out, out[-3000:]
