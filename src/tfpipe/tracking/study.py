"""The MLflow side of a tuning study (`tfpipe.tuning`): its parent run, re-opened by a restarted tuner, the
trial runs' tags and the parent's record of the space and the best trial."""

from __future__ import annotations

import os
from pathlib import Path

from mlflow.entities import RunTag
from mlflow.exceptions import MlflowException

from tfpipe.errors import TrackingError, one_line
from tfpipe.tracking import backend
from tfpipe.tracking.opening import PARENT_RUN_ENV, ParentRun
from tfpipe.tracking.redact import redact, redact_text, redact_url


def store_dir(cfg, project_root) -> Path:
    """The folder of a local SQLite tracking store (where optuna.db goes), else the store root."""
    uri = backend.resolve_tracking_uri(cfg.tracking, project_root)
    if uri.startswith("sqlite:///"):
        return Path(uri[len("sqlite:///") :]).parent
    return backend.store_root(project_root)


def open_parent(cfg, project_root, name: str, run_id: str | None, tags: dict) -> ParentRun:
    """The study's parent run: `run_id` re-opened (status RUNNING again), else a new one."""
    if not run_id:
        return ParentRun(cfg, project_root, name, tags)
    parent = ParentRun.__new__(ParentRun)
    uri = backend.resolve_tracking_uri(cfg.tracking, project_root)
    parent.client = backend.client(uri)
    try:
        parent.client.update_run(run_id, status="RUNNING")
    except MlflowException as exc:
        raise TrackingError(
            f"MLflow store {redact_url(uri)}: study parent run {run_id}: {one_line(exc)}"
        ) from None
    parent.run_id, parent._previous = run_id, os.environ.get(PARENT_RUN_ENV)
    os.environ[PARENT_RUN_ENV] = run_id
    return parent


def record_space(parent: ParentRun, params: dict, spec_yaml: str) -> None:
    """The study's space: its params and tune/space.yaml, redacted as every other record."""
    for key, value in redact(params).items():
        try:
            parent.client.log_param(parent.run_id, key, value)
        except MlflowException:
            pass  # a restarted tuner: params are immutable and already there
    parent.client.log_text(parent.run_id, redact_text(spec_yaml), "tune/space.yaml")


def tag_run(parent: ParentRun, run_id: str, tags: dict) -> None:
    """One batch: tuners sharing a study tag the parent at once, and MLflow's SQL store retries a batch's insert
    that races another process's (its set_tag does not: UNIQUE constraint failed: tags.key, tags.run_uuid)."""
    redacted = redact({k: str(v) for k, v in tags.items()})
    parent.client.log_batch(run_id, tags=[RunTag(key, value) for key, value in redacted.items()])


def record_best(parent: ParentRun, metrics: dict, tags: dict, overrides: list, params_yaml: str) -> None:
    for key, value in metrics.items():
        parent.client.log_metric(parent.run_id, key, float(value))
    tag_run(parent, parent.run_id, tags)
    parent.client.log_text(parent.run_id, redact_text("\n".join(overrides) + "\n"), "best/overrides.txt")
    parent.client.log_text(parent.run_id, redact_text(params_yaml), "best/params.yaml")


def end_if_running(parent: ParentRun, run_id: str, status: str) -> None:
    if parent.client.get_run(run_id).info.status == "RUNNING":
        parent.client.set_terminated(run_id, status)


def running_trial_runs(parent: ParentRun, numbers: set) -> list:
    """Ids of the parent's child runs still RUNNING that are the tuning trials `numbers` (tag tune.trial,
    set when the run opens: found even when the trial died before it named its run to the study)."""
    experiment = parent.client.get_run(parent.run_id).info.experiment_id
    runs = parent.client.search_runs(
        [experiment],
        filter_string=f"tags.mlflow.parentRunId = '{parent.run_id}' and attributes.status = 'RUNNING'",
    )
    return [r.info.run_id for r in runs if r.data.tags.get("tune.trial") in {str(n) for n in numbers}]
