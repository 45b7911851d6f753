"""What the evaluate stage reads of the store before it scores the model or re-opens the train run (issue 49: a
refused command changes nothing): `recorded_run`, the run it will re-open (env MLFLOW_RUN_ID, else the run file's)
is in the store and not deleted; `check_promotion`, with tracking.auto_promote_alias, the metric promotion compares
will be on the run. Read only: a local store that does not exist is refused, not created (opening one with MLflow
would make and migrate an empty store)."""

from __future__ import annotations

import os
from pathlib import Path

from mlflow.exceptions import MlflowException

from tfpipe.errors import TrackingError, one_line
from tfpipe.tracking import backend
from tfpipe.tracking.redact import redact_url
from tfpipe.tracking.runfile import read_run_file

MODELS_SCHEME = "models:/"  # a logged model's URI, the run's tag model_uri (Run.log_model)


def recorded_run(cfg, project_root):
    """The run the evaluate stage re-opens, read from the store (an mlflow Run); one-line TrackingError when the
    run file is missing or unreadable, the store is not there, or the run is not in it (or deleted)."""
    root = Path(project_root)
    env_run_id = os.environ.get("MLFLOW_RUN_ID", "").strip()
    if env_run_id:
        run_id, where = env_run_id, "env MLFLOW_RUN_ID"
    else:
        path = root / cfg.tracking.run_file
        run_id, where = read_run_file(path, root)["run_id"], f"from {path}"
    uri = backend.resolve_tracking_uri(cfg.tracking, root)
    missing = backend.missing_store(uri)
    if missing:
        raise TrackingError(
            f"run {run_id} ({where}): no MLflow store at {missing}; run the train stage first, or point "
            "tracking.uri / MLFLOW_TRACKING_URI at the store that holds the run"
        )
    try:
        run = backend.client(uri).get_run(run_id)
    except MlflowException as exc:
        raise TrackingError(
            f"run {run_id} ({where}) is not in the MLflow store {redact_url(uri)} ({one_line(exc, 200)}); "
            "run the train stage first"
        ) from None
    if run.info.lifecycle_stage != "active":
        raise TrackingError(
            f"run {run_id} ({where}) is deleted in the MLflow store {redact_url(uri)}; run the train stage again"
        )
    return run


def check_promotion(tracking_cfg, run, test_metrics: dict) -> None:
    """With tracking.auto_promote_alias, a run with a logged model (what evaluate then promotes) is compared by
    tracking.promote_metric: it must be one of this evaluation's test metrics, or recorded on the run already
    (its immutable `tfpipe.metric.<name>` param, what promotion compares)."""
    if not tracking_cfg.auto_promote_alias or not run.data.tags.get("model_uri", "").startswith(
        MODELS_SCHEME
    ):
        return
    from tfpipe.tracking.group_runs import recorded_value
    from tfpipe.tracking.outcome import METRIC_PARAM

    metric = tracking_cfg.promote_metric
    # what promotion reads: this evaluation's figure, else the run's immutable record (never its mutable metrics)
    value = test_metrics.get(metric, recorded_value(run.data.params, metric))
    if value is None or value != value:  # absent, or NaN (an empty test split)
        recorded = (k[len(METRIC_PARAM) :] for k in run.data.params if k.startswith(METRIC_PARAM))
        known = sorted({*test_metrics, *recorded})
        raise TrackingError(
            f"tracking.promote_metric={metric!r}: run {run.info.run_id} would have no value of it to promote "
            f"with tracking.auto_promote_alias={tracking_cfg.auto_promote_alias!r}; allowed: {', '.join(known)}"
        )
