"""Batch prediction (`python -m pipeline.predict MODEL_URI INPUT_DIR --out predictions.csv`) with models logged to a
real SQLite MLflow store: by registry alias (images) and by run (texts), one CSV row per readable file, unreadable
files named and counted, other files counted; bad input is one line, exit 2, nothing written.

The models are built by hand so the right answer is known without the code under test: the image model's class is
the dominant colour channel (the fixtures' folder names), the text model's the sign of its sentiment words."""

from __future__ import annotations

import csv
import shutil
from pathlib import Path

import numpy as np
import pytest
from conftest import _NEG_WORDS, _POS_WORDS, IMAGE_CLASSES, TEXT_CLASSES

ROOT = Path(__file__).resolve().parents[1]


def _image_model(folder: Path) -> None:
    """uint8 [N, 8, 8, 3] -> softmax(10 * channel means): the dominant channel wins (blue, green, red = 0, 1, 2)."""
    import keras
    import tensorflow as tf

    inputs = keras.Input((8, 8, 3), dtype="uint8")
    x = keras.layers.GlobalAveragePooling2D()(keras.layers.Rescaling(1 / 255.0)(inputs))
    dense = keras.layers.Dense(3, activation="softmax")
    model = keras.Model(inputs, dense(x))
    dense.set_weights([np.eye(3, dtype=np.float32) * 10, np.zeros(3, np.float32)])
    archive = keras.export.ExportArchive()
    archive.track(model)
    archive.add_endpoint(
        name="serving_default",
        fn=lambda image: {"probabilities": model(image, training=False)},
        input_signature=[tf.TensorSpec([None, 8, 8, 3], tf.uint8, name="image")],
    )
    archive.write_out(str(folder), verbose=False)


def _text_model(folder: Path) -> None:
    """strings -> counts of the fixture's sentiment words -> softmax(neg - pos, pos - neg)."""
    import keras
    import tensorflow as tf

    vocabulary = [*_NEG_WORDS, *_POS_WORDS]
    vectorizer = keras.layers.TextVectorization(vocabulary=vocabulary, output_mode="count")
    vectorizer(tf.constant(["great"]))  # builds it
    weights = np.zeros((len(vocabulary) + 1, 2), np.float32)  # row 0: out-of-vocabulary
    weights[1 : 1 + len(_NEG_WORDS)] = [1, -1]
    weights[1 + len(_NEG_WORDS) :] = [-1, 1]
    dense = keras.layers.Dense(2, activation="softmax")
    dense.build((None, len(vocabulary) + 1))
    dense.set_weights([weights, np.zeros(2, np.float32)])
    archive = keras.export.ExportArchive()
    archive.track(vectorizer)
    archive.track(dense)
    archive.add_endpoint(
        name="serving_default",
        fn=lambda text: {"probabilities": dense(vectorizer(text))},
        input_signature=[tf.TensorSpec([None], tf.string, name="text")],
    )
    archive.write_out(str(folder), verbose=False)


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """A project whose SQLite store holds the image model (registered as `colours`, alias champion) and the text
    model (by run). (project, text run id)"""
    import mlflow
    from mlflow import MlflowClient

    from tfpipe import config, files, tracking

    project = tmp_path_factory.mktemp("predict")
    uri = f"sqlite:///{project / 'mlflow.db'}"
    cfg = config.compose(["experiment=smoke", f"tracking.uri={uri}"], config_dir=ROOT / "conf")
    _image_model(project / "image")
    _text_model(project / "text")
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(project)
        for name in ("image", "text"):
            files.seal(project / name)
        with tracking.start_run(cfg, project, stage="train") as run:
            example = np.zeros((1, 8, 8, 3), np.uint8)
            image_uri = run.log_model(
                project / "image", modality="image", input_example=example, class_names=list(IMAGE_CLASSES)
            )
        with tracking.start_run(cfg, project, stage="train") as run:
            run.log_model(
                project / "text", modality="text", input_example=["great"], class_names=list(TEXT_CLASSES)
            )
            text_run = run.run_id
        mp.setenv(
            "MLFLOW_TRACKING_URI", uri
        )  # register_model resolves the logged model through the global store
        mlflow.register_model(image_uri, "colours")
    MlflowClient(uri).set_registered_model_alias("colours", "champion", "1")
    return project, text_run


def _predict(project: Path, monkeypatch, *args) -> int:
    from tfpipe.commands import predict

    monkeypatch.chdir(project)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    return predict.main([*args, "--tracking-uri", f"sqlite:///{project / 'mlflow.db'}"])


def _rows(path: Path) -> list:
    with open(path, newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def test_images_by_alias_each_file_its_colour_unreadable_named_and_counted(
    store, image_dir, tmp_path, monkeypatch, capsys
):
    project, _ = store
    photos = tmp_path / "photos"
    shutil.copytree(image_dir / "test", photos)
    (photos / "red" / "broken.jpg").write_bytes(b"\xff\xd8 not a jpeg")
    (photos / "notes.md").write_text("not an image", encoding="utf-8")
    out = tmp_path / "predictions.csv"
    assert (
        _predict(
            project,
            monkeypatch,
            "models:/colours@champion",
            str(photos),
            "--out",
            str(out),
            "--batch-size",
            "4",
        )
        == 0
    )
    captured = capsys.readouterr()
    rows = _rows(out)
    assert len(rows) == 3 * 3 and all(row["file"].split("/")[0] == row["label"] for row in rows)
    assert [row["file"] for row in rows] == sorted(row["file"] for row in rows)
    assert list(rows[0]) == ["file", "label", "probability", "p_blue", "p_green", "p_red"]
    for row in rows:
        probs = [float(row[f"p_{name}"]) for name in IMAGE_CLASSES]
        assert abs(sum(probs) - 1) < 1e-4 and float(row["probability"]) == max(probs)
    assert f"predict: skipped {photos / 'red' / 'broken.jpg'}:" in captured.err
    assert (
        f"predict: 9 file(s) scored -> {out}; 1 unreadable skipped (named above); 1 other file(s) ignored"
        in captured.out
    )


def test_texts_by_run_each_file_its_sentiment(store, text_dir, tmp_path, monkeypatch, capsys):
    project, text_run = store
    out = tmp_path / "texts.csv"
    assert (
        _predict(project, monkeypatch, f"runs:/{text_run}/model", str(text_dir / "test"), "--out", str(out))
        == 0
    )
    rows = [
        row for row in _rows(out) if "/" in row["file"]
    ]  # urls_pos.txt beside the class folders is a text too
    assert len(rows) == 2 * 10 and all(row["file"].split("/")[0] == row["label"] for row in rows)
    assert "1 other file(s) ignored" in capsys.readouterr().out  # labeledBow.feat


def test_a_bar_on_request(store, image_dir, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("TFPIPE_PROGRESS", "bar")
    assert (
        _predict(
            store[0],
            monkeypatch,
            "models:/colours@champion",
            str(image_dir / "test"),
            "--out",
            str(tmp_path / "p.csv"),
        )
        == 0
    )
    assert "predict: 100%" in capsys.readouterr().err


@pytest.mark.parametrize(
    "model, folder, expected",
    [
        (
            "models:/colours@gold",
            "images",
            "MODEL_URI='models:/colours@gold': registered model 'colours' has no alias 'gold' (its aliases: champion)",
        ),
        ("models:/nosuch@champion", "images", "no registered model 'nosuch'"),
        (
            "runs:/0123456789abcdef0123456789abcdef/model",
            "images",
            "run '0123456789abcdef0123456789abcdef' not found",
        ),
        ("s3://bucket/model", "images", "not a runs:/ or models:/ URI, nor a folder holding an MLflow model"),
        (
            "models:/colours@champion",
            "texts",
            "no .jpg/.jpeg/.png files for this image model (found 2 file(s): .txt)",
        ),
        (
            "models:/colours@champion",
            "empty",
            "no .jpg/.jpeg/.png files for this image model (found 0 file(s))",
        ),
        ("models:/colours@champion", "broken", "none of its 1 file(s) could be read"),
        ("models:/colours@champion", "missing", "'missing': not a folder"),
        (
            "models:/colours@champion",
            "images --out nofolder/p.csv",
            "--out 'nofolder/p.csv': must be a file in an existing folder",
        ),
    ],
)
def test_bad_input_is_one_line_exit_2_nothing_written(
    store, image_dir, tmp_path, monkeypatch, capsys, model, folder, expected
):
    (tmp_path / "texts").mkdir()
    for name in ("a.txt", "b.txt"):
        (tmp_path / "texts" / name).write_text("great film", encoding="utf-8")
    (tmp_path / "empty").mkdir()
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "x.png").write_bytes(b"\x89PNG broken")
    shutil.copytree(image_dir / "test", tmp_path / "images")
    folder, *extra = folder.split()
    out = ["--out", str(tmp_path / "p.csv")] if not extra else extra
    monkeypatch.chdir(tmp_path)
    code = _predict(
        store[0], monkeypatch, model, str(tmp_path / folder) if folder != "missing" else "missing", *out
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and err[-1].startswith("predict: error: ") and expected in err[-1], err
    assert not (tmp_path / "p.csv").exists() and not list(tmp_path.glob("*.csv*"))


# ----------------------------------------------------------------------------- a model changed in the store


def _local_copy(project: Path, tmp_path: Path, monkeypatch) -> Path:
    """The champion as the store holds it, downloaded by MLflow into a folder (what predict loads)."""
    from tfpipe.tracking import model_uri

    monkeypatch.chdir(project)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    uri = f"sqlite:///{project / 'mlflow.db'}"
    local, _ = model_uri.download("models:/colours@champion", uri, tmp_path / "m", "MODEL_URI")
    return Path(local)


@pytest.mark.parametrize(
    "tamper, expected",
    [
        ("code", "its serving_model.py is not one tfpipe shipped"),
        ("loader", "its MLmodel loads code other than tfpipe's serving_model.py"),
        ("weights", "missing or changed since it was saved"),
    ],
)
def test_a_model_changed_in_the_store_is_refused_before_its_code_runs(
    store, image_dir, tmp_path, monkeypatch, capsys, tamper, expected
):
    """Anyone with EDIT on the store can replace a logged model's files: its serving_model.py (which loading
    runs), the MLmodel's loader, or the weights. predict checks them with the installed tfpipe before MLflow
    imports anything from the folder: one line, exit 2, and the planted code never ran."""
    project, _ = store
    model = _local_copy(project, tmp_path, monkeypatch)
    capsys.readouterr()  # the download's progress bars
    marker = tmp_path / "PLANTED_CODE_RAN"
    if tamper == "code":
        code = model / "serving_model.py"
        code.write_text(f"open({str(marker)!r}, 'w').close()\n" + code.read_text())
    elif tamper == "loader":
        mlmodel = model / "MLmodel"
        mlmodel.write_text(mlmodel.read_text().replace("mlflow.pyfunc.loaders.code_model", "os"))
    else:
        weights = next((model / "artifacts").rglob("*.data-*"))
        weights.write_bytes(weights.read_bytes()[::-1])
    code = _predict(
        project, monkeypatch, str(model), str(image_dir / "test"), "--out", str(tmp_path / "p.csv")
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and expected in err[0], err
    assert not marker.exists() and not (tmp_path / "p.csv").exists()


def log_image_model(project: Path, monkeypatch) -> tuple[str, Path]:
    """A SQLite store in `project` holding one logged image model (from project/image): (its run id, the SavedModel
    folder as the store holds it)."""
    from mlflow import MlflowClient

    from tfpipe import config, files, tracking

    uri = f"sqlite:///{project / 'mlflow.db'}"
    _image_model(project / "image")
    files.seal(project / "image")
    cfg = config.compose(["experiment=smoke", f"tracking.uri={uri}"], config_dir=ROOT / "conf")
    monkeypatch.chdir(project)
    with tracking.start_run(cfg, project, stage="train") as run:
        run.log_model(
            project / "image", modality="image", input_example=None, class_names=list(IMAGE_CLASSES)
        )
    client = MlflowClient(uri)
    model_id = client.get_run(run.run_id).data.tags["model_uri"].removeprefix("models:/")
    stored = Path(client.get_logged_model(model_id).artifact_location.removeprefix("file://"))
    (saved,) = [p.parent for p in stored.rglob(files.SEAL)]
    return run.run_id, saved


def test_a_saved_model_replaced_whole_in_the_store_is_refused_by_the_digest_its_run_recorded(
    image_dir, tmp_path, monkeypatch, capsys
):
    """A teammate with EDIT can replace a logged model's SavedModel and its seal together (a folder whole against its
    own seal): the digest the run logged as a param when it logged the model, which MLflow lets nobody change,
    refuses it, for predict and for a warm start alike."""
    import hashlib
    import json

    from mlflow import MlflowClient
    from mlflow.exceptions import MlflowException

    from tfpipe import files
    from tfpipe.tracking import model_uri

    project = tmp_path / "project"
    uri = f"sqlite:///{project / 'mlflow.db'}"
    run_id, saved = log_image_model(project, monkeypatch)
    seal = json.loads((project / "image" / files.SEAL).read_text())["files"]
    digest = hashlib.sha256(json.dumps(seal, sort_keys=True).encode()).hexdigest()  # the seal's list, by hand
    client = MlflowClient(uri)
    assert client.get_run(run_id).data.params[model_uri.DIGEST_PARAM] == digest
    with pytest.raises(MlflowException):  # what the check rests on: nobody can change it afterwards
        client.log_param(run_id, model_uri.DIGEST_PARAM, "0" * 64)

    weights = next(saved.rglob("*.data-*"))
    weights.write_bytes(weights.read_bytes()[::-1])
    files.seal(saved)  # the replacement is whole against its own seal
    capsys.readouterr()
    spec = f"runs:/{run_id}/model"
    out = tmp_path / "p.csv"
    assert _predict(project, monkeypatch, spec, str(image_dir / "test"), "--out", str(out)) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"is not the one run {run_id} logged" in err[0], err
    assert not out.exists()
    with pytest.raises(Exception, match="is not the one run"):  # a warm start from it
        model_uri.download(spec, uri, tmp_path / "init", "train.init_from")


def test_the_shipped_serving_code_is_listed():
    """A change to serving_model.py must add its digest to SHIPPED_SERVING_CODE, or predict refuses new models."""
    import hashlib

    from tfpipe.tracking import loading
    from tfpipe.tracking.models import SERVING_MODEL_FILE

    assert hashlib.sha256(SERVING_MODEL_FILE.read_bytes()).hexdigest()[:16] in loading.SHIPPED_SERVING_CODE


def test_the_audits_name_for_the_model_digest_is_the_tracking_one():
    from tfpipe.audit.compare import MODEL_DIGEST
    from tfpipe.tracking import model_uri

    assert MODEL_DIGEST == model_uri.DIGEST_PARAM
