"""Each kept checkpoint as an MLflow 3 logged model (issue 51, item 9): a real train stage (in-process, a real
SQLite store, no mocks) logs one model per kept checkpoint with its step's metrics linked, `search_logged_models`
finds the best by its validation loss, the run's tag names the checkpoint early stopping restored, the models'
files restore, and logging again (an attempt after a kill) makes nothing twice.

Expected values never come from the code under test: the checkpoint steps are counted by hand from the config
(21 train examples in batches of 4: 5 steps an epoch; a checkpoint every 4 steps and at each epoch's end, 5 kept),
the best epoch is early stopping's by construction (an impossible min_delta: epoch 0), and the metric values are
the run's own records, read back from the store."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
STEPS_PER_EPOCH = 5  # prepared_image: 21 train examples // batch 4
# epochs 0, 1, 2 run (patience 2 after the best, epoch 0); saved at 4, 5 (end of epoch 0), 8, 10 (end of 1), 12,
# 15 (end of 2); the newest 5 kept
KEPT_STEPS = [5, 8, 10, 12, 15]
EPOCH_ENDS = {5: 0, 10: 1, 15: 2}  # step -> the epoch that ended there


@pytest.fixture(scope="module")
def trained(prepared_image, tmp_path_factory):
    """A train stage with early stopping restoring epoch 0: (cfg, project root, run id, MlflowClient)."""
    from conftest import seed_store, stages_in_process
    from mlflow import MlflowClient

    from tfpipe import config

    root = tmp_path_factory.mktemp("checkpoint_models")
    seed_store(root)
    cfg = config.compose(
        [
            "data.source=directory",
            f"data.output_dir={prepared_image.prepared_dir}",
            "model.filters=[8,8]",
            "model.dense_units=16",
            "train.batch_size_per_replica=4",
            "train.epochs=5",
            "train.log_every_steps=1",
            "train.checkpoint_every_steps=4",
            "train.max_checkpoints_to_keep=5",
            "train.early_stopping.monitor=val_accuracy",
            "train.early_stopping.min_delta=1.0",  # nothing improves by 1: epoch 0 stays the best
            "train.early_stopping.patience=2",
            "train.tensorboard=false",
        ],
        config_dir=ROOT / "conf",
    )
    with pytest.MonkeyPatch.context() as monkeypatch:
        run_id = stages_in_process(cfg, root, monkeypatch, "train")
    return cfg, root, run_id, MlflowClient(tracking_uri=f"sqlite:///{root / 'mlflow.db'}")


def _checkpoint_models(client, run_id: str, **search) -> list:
    experiment = client.get_run(run_id).info.experiment_id
    query = f"source_run_id = '{run_id}' AND model_type = 'checkpoint'"
    return list(client.search_logged_models([experiment], filter_string=query, **search))


def _steps_in_state_file(root: Path) -> list:
    text = (root / "models" / "cifar10" / "checkpoints" / "checkpoint").read_text()
    return [int(n) for n in re.findall(r'all_model_checkpoint_paths: ".*?ckpt-(\d+)"', text)]


@pytest.mark.slow  # trains a model in-process
def test_one_ready_model_per_kept_checkpoint_beside_the_served_model(trained):
    _, root, run_id, client = trained
    assert _steps_in_state_file(root) == KEPT_STEPS  # the hand count holds: the checkpoints TensorFlow kept
    experiment = client.get_run(run_id).info.experiment_id
    models = client.search_logged_models([experiment], filter_string=f"source_run_id = '{run_id}'")
    names = sorted(m.name for m in models)
    assert names == sorted(["model", *(f"checkpoint-step-{s}" for s in KEPT_STEPS)])
    assert {str(m.status) for m in models} == {"READY"}
    for model in _checkpoint_models(client, run_id):
        step = int(model.name.rsplit("-", 1)[1])
        assert model.tags["tfpipe.checkpoint.step"] == str(step)
        assert model.tags["tfpipe.checkpoint.epoch_step"] == ("0" if step in EPOCH_ENDS else str(step % 5))


@pytest.mark.slow  # trains a model in-process
def test_search_logged_models_finds_the_best_checkpoint_by_its_validation_loss(trained):
    import mlflow

    _, root, run_id, client = trained
    val_loss = {m.step: m.value for m in client.get_metric_history(run_id, "val_loss")}  # the run's, by epoch
    best_epoch = min(val_loss, key=val_loss.get)
    mlflow.set_tracking_uri(f"sqlite:///{root / 'mlflow.db'}")
    search = dict(  # compare.md's search
        experiment_ids=[client.get_run(run_id).info.experiment_id],
        filter_string=f"model_type = 'checkpoint' AND source_run_id = '{run_id}' AND metrics.val_loss < 1e9",
        order_by=[{"field_name": "metrics.val_loss", "ascending": True}],
        output_format="list",
    )
    (first,) = mlflow.search_logged_models(**search, max_results=1)
    assert first.name == f"checkpoint-step-{STEPS_PER_EPOCH * (best_epoch + 1)}"
    found = mlflow.search_logged_models(**search)
    assert sorted(m.name for m in found) == sorted(
        f"checkpoint-step-{s}" for s in EPOCH_ENDS
    )  # no mid-epoch one
    for model in found:
        linked = {m.key: m for m in model.metrics}
        epoch = EPOCH_ENDS[int(model.name.rsplit("-", 1)[1])]
        assert linked["val_loss"].value == val_loss[epoch] and linked["val_loss"].step == epoch


@pytest.mark.slow  # trains a model in-process
def test_each_model_s_metrics_are_the_run_s_records_of_its_step_and_the_run_keeps_each_step_once(trained):
    _, _, run_id, client = trained
    history = {
        key: client.get_metric_history(run_id, key)
        for key in (
            "train_loss",
            "train_accuracy",
            "val_loss",
            "val_accuracy",
            "epoch_train_loss",
            "epoch_train_accuracy",
        )
    }
    for key, records in history.items():
        steps = [m.step for m in records]
        assert len(steps) == len(set(steps)), f"{key}: a step logged twice on the run: {sorted(steps)}"
    assert len(history["val_loss"]) == 3  # three epochs, nothing added by the models' links
    for model in _checkpoint_models(client, run_id):
        step = int(model.name.rsplit("-", 1)[1])
        run_records = {(m.key, m.step, m.value, m.timestamp) for records in history.values() for m in records}
        linked = {(m.key, m.step, m.value, m.timestamp) for m in model.metrics}
        assert linked <= run_records
        assert {(k, s) for k, s, _, _ in linked if k.startswith("train_")} == {
            ("train_loss", step),
            ("train_accuracy", step),
        }
        keys = {k for k, _, _, _ in linked}
        assert ("val_loss" in keys) == (step in EPOCH_ENDS)


@pytest.mark.slow  # trains a model in-process
def test_the_restored_best_epoch_tags_its_checkpoint_model_which_holds_the_served_weights(trained, tmp_path):
    """The run's tag names the model of the checkpoint saved as epoch 0 ended; downloaded, that checkpoint holds
    exactly the served model's weights (its export's keras_weights.npz), which the last epoch's does not."""
    import mlflow
    import numpy as np

    _, root, run_id, client = trained
    tags = client.get_run(run_id).data.tags
    best = client.get_logged_model(tags["tfpipe.best_checkpoint_model_id"])
    assert best.name == f"checkpoint-step-{STEPS_PER_EPOCH}"  # epoch 0 ended at step 5
    experiment = client.get_run(run_id).info.experiment_id
    tagged = client.search_logged_models(
        [experiment], filter_string="tags.tfpipe.checkpoint.restored_best = 'true'"
    )
    assert [m.model_id for m in tagged] == [best.model_id]

    served = np.load(root / "models" / "cifar10" / "saved_model" / "keras_weights.npz")
    served = [served[k] for k in served.files]
    mlflow.set_tracking_uri(f"sqlite:///{root / 'mlflow.db'}")
    (last,) = [m for m in _checkpoint_models(client, run_id) if m.name == "checkpoint-step-15"]
    held = {}
    for model in (best, last):
        folder = mlflow.artifacts.download_artifacts(
            f"models:/{model.model_id}", dst_path=str(tmp_path / model.name)
        )
        held[model.name] = _trained_weights(folder)
    assert (
        len(held[best.name]) == len(served) == 8
    )  # two conv layers and two dense ones: kernel and bias each
    assert all(np.array_equal(a, b) for a, b in zip(held[best.name], served))
    assert not all(np.array_equal(a, b) for a, b in zip(held[last.name], served))


def _trained_weights(folder) -> list:
    """The model's trainable weights the folder's checkpoint holds, in the model's order (a Keras 3 model's variables
    are in a tf.train checkpoint through the optimizer that tracks them)."""
    import tensorflow as tf

    reader = tf.train.load_checkpoint(tf.train.latest_checkpoint(str(folder)))
    keys = [k for k in reader.get_variable_to_shape_map() if k.startswith("optimizer/_trainable_variables/")]
    return [reader.get_tensor(k) for k in sorted(keys, key=lambda k: int(k.split("/")[2]))]


@pytest.mark.slow  # trains a model in-process
def test_a_checkpoint_model_downloads_as_a_checkpoint_that_restores(trained, tmp_path):
    import mlflow
    import tensorflow as tf

    _, root, run_id, client = trained
    mlflow.set_tracking_uri(f"sqlite:///{root / 'mlflow.db'}")
    (model,) = [m for m in _checkpoint_models(client, run_id) if m.name == "checkpoint-step-10"]
    local = Path(mlflow.artifacts.download_artifacts(f"models:/{model.model_id}", dst_path=str(tmp_path)))
    work = root / "models" / "cifar10" / "checkpoints"
    for name in ("ckpt-10.index", "ckpt-10.data-00000-of-00001"):
        assert (local / name).read_bytes() == (work / name).read_bytes()
    prefix = tf.train.latest_checkpoint(str(local))
    assert Path(prefix).name == "ckpt-10"
    reader = tf.train.load_checkpoint(prefix)
    assert int(reader.get_tensor("step/.ATTRIBUTES/VARIABLE_VALUE")) == 10
    assert int(reader.get_tensor("epoch/.ATTRIBUTES/VARIABLE_VALUE")) == 2  # saved as epoch 1 ended


@pytest.mark.slow  # trains a model in-process
def test_the_best_epoch_s_checkpoint_no_longer_kept_tags_nothing(trained):
    """A run whose kept checkpoints no longer include the best epoch's: models for the others, no best tag."""
    from tfpipe import tracking
    from tfpipe.layout import model_dir
    from tfpipe.workdir import WorkDir

    cfg, root, run_id, client = trained
    summary = {"early_stopping_best_epoch": 0.0, "early_stopping_restored": 1.0}
    kept = WorkDir(model_dir(cfg, root)).kept_checkpoints()[1:]  # without ckpt-5
    with tracking.start_run(cfg, root, stage="train") as run:  # another run of the same store
        made = tracking.log_checkpoint_models(run, kept, summary)
    assert sorted(made) == KEPT_STEPS[1:]
    assert "tfpipe.best_checkpoint_model_id" not in client.get_run(run.run_id).data.tags
    assert all(
        "tfpipe.checkpoint.restored_best" not in m.tags for m in _checkpoint_models(client, run.run_id)
    )


@pytest.mark.slow  # trains a model in-process
def test_logging_again_after_a_kill_makes_nothing_twice(trained):
    """A second call on the run (the same command after a kill) finds every model and makes none; an attempt killed
    mid-upload (its model of step 10 left PENDING, made here by hand) is replaced by one READY model."""
    from tfpipe import tracking
    from tfpipe.layout import model_dir
    from tfpipe.workdir import WorkDir

    cfg, root, run_id, client = trained
    before = {m.name: m.model_id for m in _checkpoint_models(client, run_id)}
    history = {k: len(client.get_metric_history(run_id, k)) for k in ("train_loss", "val_loss")}
    kept = WorkDir(model_dir(cfg, root)).kept_checkpoints()
    summary = {"early_stopping_best_epoch": 0.0, "early_stopping_restored": 1.0}
    with tracking.start_run(cfg, root, stage="train", resume_run_id=run_id) as run:
        again = tracking.log_checkpoint_models(run, kept, summary)
    assert {f"checkpoint-step-{s}": i for s, i in again.items()} == before
    assert {m.name: m.model_id for m in _checkpoint_models(client, run_id)} == before
    assert {k: len(client.get_metric_history(run_id, k)) for k in history} == history

    experiment = client.get_run(run_id).info.experiment_id
    client.delete_logged_model(before["checkpoint-step-10"])  # as if the kill came before it was READY:
    killed = client.create_logged_model(  # the model it was uploading, PENDING
        experiment, name="checkpoint-step-10", source_run_id=run_id, model_type="checkpoint"
    )
    client.set_logged_model_tags(killed.model_id, {"tfpipe.checkpoint.step": "10"})
    with tracking.start_run(cfg, root, stage="train", resume_run_id=run_id) as run:
        tracking.log_checkpoint_models(run, kept, summary)
    after = _checkpoint_models(client, run_id)
    assert sorted(m.name for m in after) == sorted(before)
    assert {str(m.status) for m in after} == {"READY"} and killed.model_id not in {m.model_id for m in after}
    assert {k: len(client.get_metric_history(run_id, k)) for k in history} == history


@pytest.mark.slow  # trains a model in-process
def test_without_log_model_the_run_holds_no_logged_model(prepared_image, tmp_path, monkeypatch):
    """tracking.log_model=false: neither the served model nor a checkpoint model (the checkpoints are kept)."""
    from conftest import seed_store, stages_in_process
    from mlflow import MlflowClient

    from tfpipe import config

    seed_store(tmp_path)
    cfg = config.compose(
        [
            "data.source=directory",
            f"data.output_dir={prepared_image.prepared_dir}",
            "model.filters=[8,8]",
            "model.dense_units=16",
            "train.batch_size_per_replica=4",
            "train.epochs=1",
            "train.tensorboard=false",
            "tracking.log_model=false",
        ],
        config_dir=ROOT / "conf",
    )
    run_id = stages_in_process(cfg, tmp_path, monkeypatch, "train")
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")
    assert _steps_in_state_file(tmp_path) == [STEPS_PER_EPOCH]
    experiment = client.get_run(run_id).info.experiment_id
    assert list(client.search_logged_models([experiment])) == []


def test_a_damaged_kept_checkpoint_is_left_out_in_one_line(tmp_path, caplog):
    """A kept checkpoint that no longer reads back (its index truncated, as a crash mid-copy leaves it) is left out
    with a warning; the others are listed with their counters, so the run still finishes."""
    import tensorflow as tf

    from tfpipe.workdir import WorkDir

    work = WorkDir(tmp_path)
    counters = {k: tf.Variable(0, dtype=tf.int64) for k in ("step", "epoch", "epoch_step")}
    manager = tf.train.CheckpointManager(
        tf.train.Checkpoint(**counters), str(work.checkpoint_dir), max_to_keep=3
    )
    for step, epoch, epoch_step in ((3, 0, 3), (5, 1, 0), (8, 1, 3)):
        for name, value in zip(counters, (step, epoch, epoch_step)):
            counters[name].assign(value)
        manager.save(checkpoint_number=step)
    index = work.checkpoint_dir / "ckpt-5.index"
    index.write_bytes(index.read_bytes()[:10])
    kept = work.kept_checkpoints()
    assert [(c["prefix"], c["step"], c["epoch"], c["epoch_step"]) for c in kept] == [
        ("ckpt-3", 3, 0, 3),
        ("ckpt-8", 8, 1, 3),
    ]
    assert [p.name for p in kept[1]["files"]] == ["ckpt-8.data-00000-of-00001", "ckpt-8.index"]
    assert "left out the damaged checkpoint ckpt-5" in caplog.text


def test_an_earlier_attempt_s_models_are_found_over_every_page(tmp_path):
    """More checkpoint models than a page of MLflow's search (100): every READY one is found and each one left PENDING
    deleted, also when the deletions fall on the first page (deleting while paging would skip READY ones after)."""
    from conftest import seed_store
    from mlflow.entities import LoggedModelStatus

    from tfpipe import config, tracking
    from tfpipe.tracking import checkpoint_models

    seed_store(tmp_path)
    cfg = config.compose(["tracking.system_metrics=false"], config_dir=ROOT / "conf")
    with tracking.start_run(cfg, tmp_path, stage="train") as run:
        for step in range(104):  # the oldest: the search (newest first) puts them last
            model = run.client.create_logged_model(
                run.experiment_id,
                source_run_id=run.run_id,
                model_type="checkpoint",
                tags={"tfpipe.checkpoint.step": str(step)},
            )
            run.client.finalize_logged_model(model.model_id, LoggedModelStatus.READY)
        for step in (104, 105):  # the newest, left PENDING: on the first page
            run.client.create_logged_model(
                run.experiment_id,
                source_run_id=run.run_id,
                model_type="checkpoint",
                tags={"tfpipe.checkpoint.step": str(step)},
            )
        made = checkpoint_models._earlier_attempts(run)
        left = list(run.client.search_logged_models([run.experiment_id], max_results=1000))
    assert sorted(made) == list(range(104))
    assert len(left) == 104 and {str(m.status) for m in left} == {"READY"}
