"""train.early_stopping (issue 34, item 3): training ends once the monitored validation metric has not improved by
more than min_delta for `patience` epochs, the export holds the best epoch's weights, the run records which, and a
run killed in between resumes to the same stop on the same weights.

Expected values never come from the code under test: the decisions are counted by hand from fixed rows, and the
weights of the best epoch are those of a plain run (early stopping off) that trains exactly that many epochs; the
default constant learning rate and the per-epoch seeded data order make its first epochs the same."""

from __future__ import annotations

from pathlib import Path

import keras
import pytest

from tfpipe import config, training
from tfpipe.errors import ConfigError
from tfpipe.hooks import Hook

ROOT = Path(__file__).resolve().parents[1]
SMALL = ("model.filters=[8,8]", "model.dense_units=16", "train.batch_size_per_replica=4")
NEVER = (
    "train.early_stopping.monitor=val_accuracy",
    "train.early_stopping.min_delta=1.0",
)  # cannot improve by 1


def _cfg(*overrides: str):
    return config.compose([*SMALL, *overrides], config_dir=ROOT / "conf")


@pytest.mark.parametrize(
    "overrides, expected",
    [
        (["train.early_stopping.monitor=val_los"], "did you mean 'val_loss'"),
        (["train.early_stopping.monitor=val_loss", "train.early_stopping.patience=0"], "patience=0"),
        (
            ["train.early_stopping.monitor=val_loss", "train.early_stopping.mode=up"],
            "allowed: auto, min, max",
        ),
        (
            ["train.early_stopping.monitor=val_loss", "train.optimizer.lookahead_every=5"],
            "restore_best_weights=false (or lookahead_every=0)",
        ),
    ],
)
def test_bad_early_stopping_settings_are_one_line(overrides, expected):
    with pytest.raises(ConfigError, match=expected.replace("(", r"\(").replace(")", r"\)")) as info:
        _cfg(*overrides)
    assert "\n" not in str(info.value) and "train.early_stopping." in str(info.value)


def _stopper(*overrides: str):
    from tfpipe.training.early_stopping import EarlyStopping

    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    return model, EarlyStopping.from_config(model, _cfg(*overrides).train)


@pytest.mark.parametrize(
    "overrides, values, stops_after, best",
    [
        # val_loss (auto: lower is better), patience 2: epoch 1 is best, epochs 2 and 3 do not beat it
        (["monitor=val_loss", "patience=2"], [1.0, 0.9, 0.95, 0.91, 0.89], 3, 1),
        # min_delta 0.05: 0.9 -> 0.86 is no improvement
        (["monitor=val_loss", "patience=2", "min_delta=0.05"], [1.0, 0.9, 0.86, 0.87, 0.5], 3, 1),
        # val_accuracy (auto: higher is better), patience 1: an equal value is no improvement
        (["monitor=val_accuracy", "patience=1"], [0.5, 0.6, 0.6, 0.7], 2, 1),
        # mode=max on val_loss (explicit mode wins over auto); NaN never improves
        (["monitor=val_loss", "patience=1", "mode=max"], [0.1, 0.2, float("nan"), 0.3], 2, 1),
        # never stops within the epochs given
        (["monitor=val_loss", "patience=3"], [1.0, 0.9, 0.8, 0.7], None, 3),
    ],
)
def test_the_decision_counts_epochs_without_improvement(overrides, values, stops_after, best):
    metric = next(o for o in overrides if o.startswith("monitor=")).split("=")[1]
    _, stopper = _stopper(*(f"train.early_stopping.{o}" for o in overrides))
    stopped = None
    for epoch, value in enumerate(values):
        stopper.on_epoch_end(epoch, {"epoch": epoch, metric: value})
        if stopper.finished():
            stopped = epoch
            break
    assert stopped == stops_after
    summary = stopper.summary()
    assert summary["early_stopping_best_epoch"] == best
    assert summary["early_stopping_stopped"] == float(stops_after is not None)


def test_restore_best_weights_puts_back_the_best_epoch_s_values():
    model, stopper = _stopper("train.early_stopping.monitor=val_loss")
    kernel = model.layers[0].kernel
    kernel.assign([[1.0], [2.0]])
    stopper.on_epoch_end(0, {"epoch": 0, "val_loss": 0.5})  # best: these weights are kept
    kernel.assign([[7.0], [7.0]])
    stopper.on_epoch_end(1, {"epoch": 1, "val_loss": 0.6})
    assert stopper.restore_best() == 0
    assert kernel.numpy().ravel().tolist() == [1.0, 2.0]


@pytest.mark.slow  # trains a model for epochs
def test_training_stops_early_and_exports_the_best_epoch(prepared_image, tmp_path):
    """patience 1 and an impossible min_delta: epoch 0 is the best, epoch 1 does not improve, training stops after
    it (2 of 5 epochs); the export is epoch 0's weights: those of a plain 1-epoch run."""
    stopped = training.train(
        _cfg("train.epochs=5", *NEVER, "train.early_stopping.patience=1"),
        prepared_dir=prepared_image.prepared_dir,
        output_dir=tmp_path / "stopped",
    )
    plain = training.train(
        _cfg("train.epochs=1"), prepared_dir=prepared_image.prepared_dir, output_dir=tmp_path / "plain"
    )
    assert [row["epoch"] for row in stopped.history] == [0, 1] and stopped.epochs_run == 2
    assert stopped.early_stopping == {
        "early_stopping_best_epoch": 0.0,
        "early_stopping_best_val_accuracy": stopped.history[0]["val_accuracy"],
        "early_stopping_stopped": 1.0,
        "early_stopping_restored": 1.0,
    }
    assert (
        stopped.final_metrics["val_loss"] == stopped.history[0]["val_loss"]
    )  # the best epoch's, not the last
    assert stopped.weights_sha256 == plain.weights_sha256


class _KillAfter(Hook):
    """Raises right after the checkpoint at the start of epoch `epoch` is saved (a kill between two epochs)."""

    def __init__(self, epoch: int):
        self.epoch = epoch

    def on_checkpoint(self, step: int, epoch: int, epoch_step: int) -> None:
        if epoch == self.epoch and epoch_step == 0:
            raise KeyboardInterrupt(f"killed before epoch {epoch}")


@pytest.mark.slow  # starts processes
def test_a_run_killed_while_waiting_resumes_to_the_same_stop_and_weights(prepared_image, tmp_path):
    """patience 2: epoch 0 best, epochs 1 and 2 wait, stop after 2. Killed after epoch 1 (one epoch waited), the
    resumed run must still count that epoch: it stops after epoch 2 on epoch 0's weights, as the whole run did."""
    cfg = _cfg("train.epochs=6", *NEVER, "train.early_stopping.patience=2")
    whole = training.train(cfg, prepared_dir=prepared_image.prepared_dir, output_dir=tmp_path / "whole")
    killed = tmp_path / "killed"
    with pytest.raises(KeyboardInterrupt):
        training.train(
            cfg, prepared_dir=prepared_image.prepared_dir, output_dir=killed, hooks=[_KillAfter(2)]
        )
    resumed = training.train(cfg, prepared_dir=prepared_image.prepared_dir, output_dir=killed)
    assert resumed.resumed and resumed.initial_epoch == 2 and resumed.epochs_run == 1
    assert [row["epoch"] for row in whole.history] == [0, 1, 2]
    assert [row["epoch"] for row in resumed.history] == [0, 1, 2]
    assert resumed.early_stopping == whole.early_stopping
    assert resumed.weights_sha256 == whole.weights_sha256


@pytest.mark.slow  # trains a model for epochs
def test_the_train_stage_records_the_stop_in_mlflow_and_train_json(prepared_image, tmp_path, monkeypatch):
    """The MLflow run and metrics/train.json say which epoch's weights were exported and that training stopped."""
    import json

    from conftest import stages_in_process
    from mlflow import MlflowClient

    cfg = _cfg(
        "data.source=directory",
        f"data.output_dir={prepared_image.prepared_dir}",
        "train.epochs=4",
        *NEVER,
        "train.early_stopping.patience=1",
        "tracking.log_model=false",
        "train.tensorboard=false",
    )
    run_id = stages_in_process(cfg, tmp_path, monkeypatch, "train")
    metrics = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}").get_run(run_id).data.metrics
    assert metrics["early_stopping_best_epoch"] == 0 and metrics["early_stopping_stopped"] == 1
    assert metrics["early_stopping_restored"] == 1 and len(metrics) > 4
    summary = json.loads((tmp_path / "metrics" / "train.json").read_text())
    assert (
        summary["early_stopping_best_epoch"] == 0 and summary["val_accuracy"] == metrics["final_val_accuracy"]
    )
