"""Each kept checkpoint of a finished training as an MLflow 3 logged model of its run, its step's metrics
linked, so the best one is found with `mlflow.search_logged_models` (issue 51, item 9).

A checkpoint model is named `checkpoint-step-<N>` (N: the global step), model type `checkpoint`, tagged with
the step and the counters it was saved with; it holds the checkpoint's files and a `checkpoint` state file
naming just it, so `models:/<id>` (or `runs:/<run id>/checkpoint-step-<N>`) downloads a folder
`tf.train.latest_checkpoint` restores from. Files, not a pointer at the run's `checkpoints/` artifacts: those
hold the newest checkpoint only, the older kept ones are nowhere else in the store. The price: the newest
checkpoint is stored twice.

Linked metrics are the run's own records of the checkpoint's step: `train_loss`, `train_accuracy` at its
global step (when a log window ended there) and, for a checkpoint saved as an epoch ended, that epoch's
`epoch_train_*`, `val_loss`, `val_accuracy` (step = epoch, as on the run). Each is sent with the run's very
key, value, step and timestamp: MLflow writes a model's metric to the run too and skips a record the run
holds, so the run's histories stay as they were. A mid-epoch checkpoint has no validation metrics (sorted by
them, it comes last). When early stopping restored the best epoch's weights, the run's tag
`tfpipe.best_checkpoint_model_id` (and the model's tag `tfpipe.checkpoint.restored_best`) names the checkpoint
saved as that epoch ended, while it is kept.

Once per run and step whatever a kill interrupted: an earlier attempt's READY model of the step is kept; one
left PENDING or FAILED is deleted and made again; a model turns READY last, after its files and metrics. It
does not know TensorFlow (the work directory lists the checkpoints and reads their counters), which
checkpoints are kept, or the served model (`models`). Nothing read from the store is instantiated: tags are
parsed as integers."""

from __future__ import annotations

import logging
import tempfile
from pathlib import Path
from typing import Optional, Sequence

from mlflow.entities import LoggedModelStatus, Metric

from tfpipe.tracking.calls import store_call

log = logging.getLogger(__name__)

MODEL_TYPE = "checkpoint"
NAME = "checkpoint-step-{step}"
STEP_TAG = "tfpipe.checkpoint.step"
RESTORED_TAG = "tfpipe.checkpoint.restored_best"
BEST_TAG = "tfpipe.best_checkpoint_model_id"  # on the run
STEP_KEYS = ("train_loss", "train_accuracy")  # logged at the global step (tfpipe.hooks.STEP_METRICS)
EPOCH_KEYS = ("epoch_train_loss", "epoch_train_accuracy", "val_loss", "val_accuracy")  # at step = epoch


def log_checkpoint_models(
    run, checkpoints: Sequence[dict], early_stopping: Optional[dict] = None
) -> dict[int, str]:
    """One READY logged model per checkpoint of `checkpoints` (`WorkDir.kept_checkpoints`: prefix, files,
    step, epoch, epoch_step), its step's metrics linked; `early_stopping`: EarlyStopping.summary(), whose
    restored best epoch tags the run. Returns {step: model id}; a second call finds them all, makes none."""
    if not run.active or not checkpoints:
        return {}
    run.flush()  # the metrics logged so far are in the store: they are what gets linked
    made = _earlier_attempts(run)
    records = _metric_records(run)
    best = _best_step(checkpoints, early_stopping or {})
    models = {}
    for checkpoint in checkpoints:
        step = checkpoint["step"]
        models[step] = made.get(step) or _log_one(run, checkpoint, _linked(records, checkpoint), step == best)
    if best is not None:
        run.set_tags({BEST_TAG: models[best]})
    log.debug("logged %d checkpoint models (steps %s)", len(models), ", ".join(map(str, models)))
    return models


def _best_step(checkpoints: Sequence[dict], summary: dict) -> Optional[int]:
    """The step of the checkpoint saved as early stopping's best epoch ended, if its weights were restored."""
    if not summary.get("early_stopping_restored"):
        return None
    ended = int(summary["early_stopping_best_epoch"]) + 1  # the epoch counter saved as that epoch ended
    step = next((c["step"] for c in checkpoints if c["epoch"] == ended and c["epoch_step"] == 0), None)
    if step is None:
        log.info("the best epoch's checkpoint is no longer kept (train.max_checkpoints_to_keep)")
    return step


@store_call
def _earlier_attempts(run) -> dict[int, str]:
    """{step: id} of the run's READY checkpoint models; any an attempt left PENDING or FAILED is deleted."""
    query = f"source_run_id = '{run.run_id}' AND model_type = '{MODEL_TYPE}'"
    found: list = []
    token = None
    while True:  # every page first: deleting while paging would shift the pages after
        page = run.client.search_logged_models([run.experiment_id], filter_string=query, page_token=token)
        found, token = found + list(page), page.token
        if not token:
            break
    made: dict[int, str] = {}
    for model in found:
        step = model.tags.get(STEP_TAG, "")
        if model.status != LoggedModelStatus.READY:
            run.client.delete_logged_model(model.model_id)
        elif step.isdigit():
            made.setdefault(int(step), model.model_id)
    return made


@store_call
def _metric_records(run) -> dict[str, dict[int, Metric]]:
    """{key: {step: the run's record}} of the metrics checkpoint models link (a step's newest record)."""
    records: dict[str, dict[int, Metric]] = {}
    for key in (*STEP_KEYS, *EPOCH_KEYS):
        for metric in sorted(run.client.get_metric_history(run.run_id, key), key=lambda m: m.timestamp):
            records.setdefault(key, {})[metric.step] = metric
    return records


def _linked(records: dict, checkpoint: dict) -> list:
    """The run's records of the checkpoint's step: its global step's, its epoch's if saved as one ended."""
    wanted = [(key, checkpoint["step"]) for key in STEP_KEYS]
    if checkpoint["epoch_step"] == 0 and checkpoint["epoch"] > 0:
        wanted += [(key, checkpoint["epoch"] - 1) for key in EPOCH_KEYS]
    return [records[key][step] for key, step in wanted if step in records.get(key, {})]


@store_call
def _log_one(run, checkpoint: dict, metrics: list, restored_best: bool) -> str:
    """A PENDING model, its files and state file, its metrics, then READY; returns its id."""
    step, prefix = checkpoint["step"], checkpoint["prefix"]
    tags = {
        STEP_TAG: str(step),
        "tfpipe.checkpoint.epoch": str(checkpoint["epoch"]),
        "tfpipe.checkpoint.epoch_step": str(checkpoint["epoch_step"]),
        "tfpipe.checkpoint.prefix": prefix,
        **({RESTORED_TAG: "true"} if restored_best else {}),
    }
    model = run.client.create_logged_model(
        run.experiment_id,
        name=NAME.format(step=step),
        source_run_id=run.run_id,
        tags=tags,
        model_type=MODEL_TYPE,
    )
    for path in checkpoint["files"]:
        run.client.log_model_artifact(model.model_id, str(path))
    with tempfile.TemporaryDirectory(prefix="tfpipe-checkpoint-") as tmp:
        state = Path(tmp) / "checkpoint"
        state.write_text(f'model_checkpoint_path: "{prefix}"\nall_model_checkpoint_paths: "{prefix}"\n')
        run.client.log_model_artifact(model.model_id, str(state))
    if metrics:
        linked = [Metric(m.key, m.value, m.timestamp, m.step, model_id=model.model_id) for m in metrics]
        run.client.log_batch(run.run_id, metrics=linked)
    run.client.finalize_logged_model(model.model_id, LoggedModelStatus.READY)
    return model.model_id
