"""A run's outcome recorded where nobody can rewrite it afterwards, for `audit --rerun` to compare a re-run
with.

Anyone with EDIT on a store can set a tag to any value and log a newer value of any metric; a param MLflow
never lets change once logged (another value for the same key is refused). So beside its metrics a run
records:
- each final figure (`final_*`, early stopping's, the test metrics) also as param `tfpipe.metric.<name>` (the
  value's `repr`: the float exactly), logged when the metric is: `log_final_metrics`, `record_metric_params`;
- the exported SavedModel's digest (`files.seal_digest`) as param `tfpipe.saved_model_sha256`, whether the
  model is logged as an MLflow model (`models.log_pyfunc_model`) or as plain `saved_model/` artifacts
  (`log_saved_model_files`): the SavedModel's files, its `keras_weights.npz` among them, are then the run's.

A key logged already keeps its first value: a stage run again on the same run (a resumed training, evaluate
again) that computes another figure leaves a warning, and the audit reports the metric as differing from its
record. What this cannot guard: a run that lacks one of these params (older than this, or a stage that never
ran) can have it added by anyone with EDIT; the audit trusts what the run recorded, not when."""

from __future__ import annotations

import logging
from pathlib import Path

from mlflow.entities import Param
from mlflow.exceptions import MlflowException

from tfpipe import files
from tfpipe.errors import TrackingError, one_line
from tfpipe.tracking.calls import ride
from tfpipe.tracking.model_uri import DIGEST_PARAM

log = logging.getLogger(__name__)
METRIC_PARAM = "tfpipe.metric."
_BATCH = 100  # MLflow's per-request limit for params


def metric_param_value(value) -> str:
    """How a metric's value is written as a param: the float's repr, read back exactly by float()."""
    return repr(float(value))


def _log_once(run, params: dict) -> dict:
    """Log the params the run does not have yet (ridden through an outage: `calls.ride`); {key: (recorded,
    refused)} for those it has with another value."""

    def call() -> dict:
        existing = run.client.get_run(run.run_id).data.params
        todo = [Param(k, v) for k, v in params.items() if k not in existing]
        for i in range(0, len(todo), _BATCH):
            run.client.log_batch(run.run_id, params=todo[i : i + _BATCH])
        return {k: (existing[k], v) for k, v in params.items() if k in existing and existing[k] != v}

    try:
        return ride(call, "log_params", run.run_id)
    except MlflowException as exc:
        raise TrackingError(f"MLflow log_params failed for run {run.run_id}: {one_line(exc, 500)}") from None


def record_metric_params(run, metrics: dict) -> None:
    """Each numeric metric also as the immutable param `tfpipe.metric.<name>` (nothing for a NullRun)."""
    if not run.active:
        return
    params = {
        f"{METRIC_PARAM}{k}": metric_param_value(v)
        for k, v in metrics.items()
        if isinstance(v, (int, float)) and not isinstance(v, bool)
    }
    for key, (recorded, refused) in _log_once(run, params).items():
        log.warning(
            "run %s already records %s=%s; this stage's %s is a metric only (the first record stands)",
            run.run_id,
            key,
            recorded,
            refused,
        )


def log_final_metrics(run, metrics: dict, step: int) -> None:
    """The final figures as metrics at `step` and as immutable params (`record_metric_params`)."""
    run.log_metrics(metrics, step=step)
    record_metric_params(run, metrics)


def log_saved_model_files(run, saved_model_dir) -> None:
    """The sealed SavedModel as the run's `saved_model/` artifacts, its digest as param DIGEST_PARAM first
    (the same value again is fine: a resumed stage; another is refused: the run already records another
    model)."""
    saved_model_dir = Path(saved_model_dir)
    why = files.check_seal(saved_model_dir)
    if why:
        raise TrackingError(f"{saved_model_dir}: not logged: {why}; export it again (the train stage)")
    if run.active:
        refused = _log_once(run, {DIGEST_PARAM: files.seal_digest(saved_model_dir)})
        if refused:
            raise TrackingError(
                f"run {run.run_id} already records {DIGEST_PARAM}={refused[DIGEST_PARAM][0]}; a SavedModel that "
                "does not match it is not logged"
            )
    run.log_artifacts(saved_model_dir, "saved_model")
