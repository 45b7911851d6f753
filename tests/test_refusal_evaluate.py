"""A refused `evaluate` changes nothing (issue 49): each way the evaluate stage refuses (exit 2, one line) leaves the
project as a finished train + evaluate left it: models/cifar10/ (the sealed SavedModel), data/prepared/cifar10/,
run.json, metrics/eval.json, metrics/eval_per_class.json, plots/, every other file and folder, and the MLflow
store (its bytes and its rows: the train run is not re-opened, not ended FAILED, not tagged). Everything that can
refuse runs before the stage re-opens the run: the export, the data, the data report, the run in the store, the
model scored (it loads, has its signature, answers one probability per class of the data) and promotion's metric.
In-process: `python -m pipeline.evaluate`'s command line (`commands.entry.cli`) on a tiny exported model."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from conftest import IMAGE_CLASSES, ROOT, seed_store
from test_refusal_before_effect import _files, _rows

from pipeline import _cli

MLFLOW_ENV = ("MLFLOW_TRACKING_URI", "MLFLOW_RUN_ID", "MLFLOW_EXPERIMENT_ID", "MLFLOW_EXPERIMENT_NAME")
SAME = "tracking.system_metrics=false"  # an override that changes nothing (overrides compose conf/ here)


def _export(directory: Path, classes: int) -> None:
    """A sealed tfpipe export taking uint8 [N, 32, 32, 3] (the prepared images) to `classes` probabilities."""
    import keras

    from tfpipe.models import export_saved_model

    model = keras.Sequential(
        [keras.Input((32, 32, 3)), keras.layers.GlobalAveragePooling2D(), keras.layers.Dense(classes)]
    )
    names = [*IMAGE_CLASSES, "purple"][:classes]
    export_saved_model(model, directory, modality="image", image_shape=[32, 32, 3], class_names=names)


def _unsigned(directory: Path) -> None:
    """A sealed SavedModel with no serving_default signature."""
    import tensorflow as tf

    from tfpipe import files

    module = tf.Module()
    module.weight = tf.Variable(1.0)
    tf.saved_model.save(module, str(directory))
    files.seal(directory)


def _evaluate(capsys, project: Path, *overrides: str) -> tuple:
    """(exit code, stderr lines) of `python -m pipeline.evaluate`, in-process."""
    from tfpipe.stages import run_evaluate

    capsys.readouterr()
    code = _cli.cli("evaluate", run_evaluate, "test", [SAME, *overrides], project, configure_logging=False)
    return code, [line for line in capsys.readouterr().err.splitlines() if line.strip()]


@pytest.fixture(scope="module")
def finished(prepared_image, tmp_path_factory) -> tuple:
    """(a project where train and evaluate finished, models to swap in): conf/, the store with the train run
    (params, a logged model), run.json, the prepared data, the sealed export and the evaluate stage's reports."""
    import mlflow

    from tfpipe import config, tracking

    folder = tmp_path_factory.mktemp("evaluated")
    project = folder / "project"
    shutil.copytree(ROOT / "conf", project / "conf")
    seed_store(project)
    shutil.copytree(prepared_image.prepared_dir, project / "data" / "prepared" / "cifar10")
    saved_model = project / "models" / "cifar10" / "saved_model"
    _export(saved_model, 3)
    _export(folder / "four_classes", 4)
    _unsigned(folder / "unsigned")
    cfg = config.compose([], config_dir=project / "conf")
    with pytest.MonkeyPatch.context() as env:
        for name in MLFLOW_ENV:
            env.delenv(name, raising=False)
        try:
            with tracking.start_run(cfg, project, stage="train") as run:
                run.log_params(cfg.flat())
                run.log_model(saved_model, modality="image", class_names=list(IMAGE_CLASSES))
            from tfpipe.stages import run_evaluate

            code = _cli.cli("evaluate", run_evaluate, "test", [SAME], project, configure_logging=False)
        finally:
            mlflow.set_tracking_uri(None)
    assert code == 0 and (project / "metrics" / "eval.json").is_file() and (project / "plots").is_dir()
    return project, {"four classes": folder / "four_classes", "unsigned": folder / "unsigned"}


def _saved_model(project: Path) -> Path:
    return project / "models" / "cifar10" / "saved_model"


def _swap_model(kind: str):
    def swap(project: Path, models: dict) -> None:
        shutil.rmtree(_saved_model(project))
        shutil.copytree(models[kind], _saved_model(project))

    return swap


def _run_id(project: Path, run_id: str) -> None:
    (project / "run.json").write_text(
        json.dumps({**json.loads((project / "run.json").read_text()), "run_id": run_id})
    )


def _delete_run(project: Path, models: dict) -> None:
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{project / 'mlflow.db'}")
    client.delete_run(json.loads((project / "run.json").read_text())["run_id"])


def _alter_variables(project: Path, models: dict) -> None:
    data = next((_saved_model(project) / "variables").glob("variables.data-*"))
    raw = bytearray(data.read_bytes())
    raw[len(raw) // 2] ^= 0x01
    data.write_bytes(bytes(raw))


def _alter_test_shard(project: Path, models: dict) -> None:
    prepared = project / "data" / "prepared" / "cifar10"
    shard = (
        prepared / json.loads((prepared / "manifest.json").read_text())["splits"]["test"]["shards"][0]["file"]
    )
    raw = bytearray(shard.read_bytes())
    raw[len(raw) // 2] ^= 0x01
    shard.write_bytes(bytes(raw))


def _nothing(project: Path, models: dict) -> None:
    return None


REFUSALS = [  # (id, change to the project, overrides, environment, what the one line says)
    ("an unknown key", _nothing, ["tracking.promote_metrik=x"], {}, "tracking.promote_metrik"),
    ("an unknown dataset", _nothing, ["dataset=cifar11"], {}, "cifar11"),
    ("a bad TFPIPE_PROGRESS", _nothing, [], {"TFPIPE_PROGRESS": "sometimes"}, "TFPIPE_PROGRESS='sometimes'"),
    (
        "an unreachable store",
        _nothing,
        ["tracking.uri=sqlite:////nonexistent/tfpipe/mlflow.db"],
        {},
        "does not exist",
    ),
    ("no export", lambda p, m: (_saved_model(p) / "saved_model.pb").unlink(), [], {}, "no SavedModel found"),
    ("an altered export", _alter_variables, [], {}, "incomplete SavedModel"),
    ("no prepared data", _nothing, ["data.output_dir=data/prepared/nowhere"], {}, "manifest"),
    ("an altered test shard", _alter_test_shard, [], {}, "sha256 does not match the manifest"),
    (
        "an unreadable data report",
        lambda p, m: (p / "data/prepared/cifar10/report.json").write_text("{"),
        [],
        {},
        "report.json: unreadable data report",
    ),
    ("no run file", lambda p, m: (p / "run.json").unlink(), [], {}, "run.json: run file not found"),
    ("a run not in the store", lambda p, m: _run_id(p, "0" * 32), [], {}, "is not in the MLflow store"),
    (
        "MLFLOW_RUN_ID not in the store",
        _nothing,
        [],
        {"MLFLOW_RUN_ID": "1" * 32},
        f"run {'1' * 32} (env MLFLOW_RUN_ID) is not in the MLflow store",
    ),
    ("a deleted run", _delete_run, [], {}, "is deleted in the MLflow store"),
    ("no store", lambda p, m: (p / "mlflow.db").unlink(), [], {}, "no MLflow store at"),
    ("a model of 4 classes", _swap_model("four classes"), [], {}, "expected (9, 3) for 3 classes"),
    ("a model without its signature", _swap_model("unsigned"), [], {}, "has no 'serving_default' signature"),
    (
        "promotion by a metric nobody logs",
        _nothing,
        ["tracking.auto_promote_alias=champion", "tracking.promote_metric=test_acc"],
        {},
        "tracking.promote_metric='test_acc'",
    ),
]


@pytest.mark.parametrize(
    "change, overrides, environ, expected", [r[1:] for r in REFUSALS], ids=[r[0] for r in REFUSALS]
)
def test_a_refused_evaluate_changes_nothing(
    capsys, monkeypatch, finished, tmp_path, change, overrides, environ, expected
):
    template, models = finished
    project = tmp_path / "project"
    shutil.copytree(template, project, symlinks=True)
    for name in MLFLOW_ENV:
        monkeypatch.delenv(name, raising=False)
    change(project, models)
    files, rows = _files(project), _rows(project) if (project / "mlflow.db").exists() else None
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    code, lines = _evaluate(capsys, project, *overrides)
    assert code == 2 and len(lines) == 1 and lines[0].startswith("evaluate: error: "), lines
    assert expected in lines[0], lines[0]
    assert (
        _files(project) == files
    )  # models/, data/, run.json, metrics/, plots/, the store's bytes; nothing made
    if rows is not None:
        assert _rows(project) == rows  # the run not re-opened: no tag, no status row, no metric
