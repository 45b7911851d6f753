"""Opening the MLflow run of one pipeline execution, shared by the train and evaluate stages.

train:    `start_run` attaches to env MLFLOW_RUN_ID (set by `mlflow run`) or creates a run, named
          `{dataset}-{model}-{strategy}-{precision}[-{what differs}]-{run id head}` (`naming`); either way it
          writes `tracking.run_file` (`runfile`: run_id, experiment_id, tracking_uri, run_name) for evaluate and
          DVC. A resumed training re-opens the interrupted training's run, which keeps its name.
evaluate: `resume_run` re-opens MLFLOW_RUN_ID or the run in `tracking.run_file`.
sweeps:   `ParentRun` is the parent the sweep's runs nest under.
Only the chief logs: `is_chief=False` returns a `NullRun` whose methods do nothing.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Optional

import mlflow
from mlflow import MlflowClient
from mlflow.exceptions import MlflowException

from tfpipe.errors import TrackingError, one_line
from tfpipe.tracking import backend, groups, kinds, naming, sqlite
from tfpipe.tracking.naming import PARENT_RUN_ENV, TUNE_TRIAL_ENV, context_tags  # noqa: F401 - re-exported
from tfpipe.tracking.redact import redact, redact_url
from tfpipe.tracking.run import NullRun, Run, reset_tracking_uri
from tfpipe.tracking.runfile import portable_uri, read_run_file, write_run_file
from tfpipe.tracking.sink import BATCH_METRICS
from tfpipe.tracking.tags import run_name as _base_name

log = logging.getLogger(__name__)

HTTP_RETRIES = (
    "2"  # MLflow's HTTP retries for this process unless the user set MLFLOW_HTTP_REQUEST_MAX_RETRIES
)


def _connect(cfg, project_root) -> tuple[str, MlflowClient, bool]:
    """Resolve + probe the backend and point MLflow's fluent API (needed by log_model) at it.

    `mlflow.set_tracking_uri` also exports MLFLOW_TRACKING_URI into os.environ, which would make
    every later run in this process (another project root, another test) resolve to this store.
    The returned flag says whether to undo that when the run closes (it was not set before)."""
    uri = backend.resolve_tracking_uri(cfg.tracking, project_root)
    backend.check_reachable(uri)
    try:
        sqlite.init_store(uri)
    except MlflowException as exc:
        raise TrackingError(f"MLflow store {redact_url(uri)}: {one_line(exc)}") from None
    reset_uri = not os.environ.get("MLFLOW_TRACKING_URI", "").strip()
    # MLflow retries a failed request 7 times over minutes by default; a run closing against a store that is
    # gone should end in seconds. A process-wide default, set once, never over the user's own setting.
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", HTTP_RETRIES)
    mlflow.set_tracking_uri(uri)
    return uri, MlflowClient(tracking_uri=uri), reset_uri


def _start(
    run_id: Optional[str],
    *,
    experiment_id: Optional[str] = None,
    run_name: Optional[str] = None,
    where: str,
    uri: str,
    system_metrics: bool = False,
):
    active = mlflow.active_run()
    if active is not None:
        if active.info.run_id == run_id:
            mlflow.end_run()  # re-entering the same run (a previous stage's handle was not closed)
        else:
            raise TrackingError(
                f"another MLflow run ({active.info.run_id}) is active in this process; end it first"
            )
    try:
        if run_id:
            return mlflow.start_run(run_id=run_id, run_name=run_name, log_system_metrics=system_metrics)
        return mlflow.start_run(
            experiment_id=experiment_id, run_name=run_name, log_system_metrics=system_metrics
        )
    except MlflowException as exc:
        target = f"run {run_id} ({where})" if run_id else f"a run in experiment {experiment_id}"
        if exc.error_code == "PERMISSION_DENIED":  # a team server's default READ, no grant on this experiment
            user = os.environ.get("MLFLOW_TRACKING_USERNAME", "?")
            raise TrackingError(
                f"MLflow on {redact_url(uri)} refused to open {target} for user '{user}' (HTTP 403: it may only "
                "read there); the server's admin grants EDIT on the experiment (docs/tutorials/team.md: Auditing a teammate's run)"
            ) from None
        raise TrackingError(f"MLflow could not open {target} on {redact_url(uri)}: {one_line(exc)}") from None


def _run_exists(client: MlflowClient, run_id: str) -> bool:
    try:
        return client.get_run(run_id).info.lifecycle_stage == "active"
    except MlflowException:
        return False


def _open_train_run(cfg, root: Path, client, uri: str, name: str, env_run_id, reopen_id):
    """The fluent MLflow run of the train stage: MLFLOW_RUN_ID, the interrupted run, or a new one (named `name`
    until `_record` names it)."""
    system = _system_metrics(cfg.tracking)
    try:
        if env_run_id:
            naming.warn_other_experiment(client, env_run_id, cfg.tracking.experiment_name)
            return _start(env_run_id, where="env MLFLOW_RUN_ID", uri=uri, system_metrics=system)
        if reopen_id:
            return _start(reopen_id, where="the interrupted training's run", uri=uri, system_metrics=system)
        location = backend.artifact_location_for(cfg.tracking, root, uri)
        experiment_id = backend.ensure_experiment(client, cfg.tracking.experiment_name, location)
        return _start(
            None, experiment_id=experiment_id, run_name=name, where="new", uri=uri, system_metrics=system
        )
    except MlflowException as exc:
        raise TrackingError(f"MLflow store {redact_url(uri)}: {one_line(exc)}") from None


def _system_metrics(tracking_cfg) -> bool:
    """Whether the run samples system metrics (MLflow's monitor thread, stopped by end_run), at which interval."""
    if tracking_cfg.system_metrics:
        mlflow.set_system_metrics_sampling_interval(tracking_cfg.system_metrics_interval)
    return bool(tracking_cfg.system_metrics)


def _mark_resume(run: Run, client, uri: str, resume_run_id: str, reopen: bool) -> None:
    """A re-opened run drops the steps it logged already and counts its resumes; a new one names its
    predecessor."""
    try:
        if reopen:
            run.skip_logged_steps()
            resumes = int(client.get_run(run.run_id).data.tags.get("tfpipe.resumes", "0")) + 1
            client.set_tag(run.run_id, "tfpipe.resumes", str(resumes))
        else:
            client.set_tag(run.run_id, "tfpipe.resumed_from", resume_run_id)
    except MlflowException as exc:
        run.close("FAILED", _raise=False)
        raise TrackingError(
            f"MLflow store {redact_url(uri)}: cannot resume run {resume_run_id}: {one_line(exc)}"
        ) from None


def _record(run: Run, root: Path, run_file: Path, uri: str, name: str, group: dict) -> None:
    """Context tags (sweep parent, DVC experiment), source tags, the group tag (`groups`), the run's name and the
    run file (the store relative to the project when inside it); the run ends FAILED if either fails."""
    tags = {**context_tags(), **naming.source_tags(root), **group}
    if name != run.run_name:
        tags["mlflow.runName"] = name  # MLflow renames the run
    try:
        run.set_tags(tags)
    except TrackingError:
        run.close("FAILED", _raise=False)
        raise
    run.run_name = name
    try:
        write_run_file(
            run_file,
            {
                "run_id": run.run_id,
                "experiment_id": run.experiment_id,
                "tracking_uri": redact_url(portable_uri(uri, root)),
                "run_name": name,
            },
        )
    except OSError as exc:
        run.close("FAILED", _raise=False)
        raise TrackingError(f"{run_file}: cannot write the run file ({exc.strerror or exc})") from None


def _handle(active, uri, client, stage, env_run_id, reset_uri, flush_every, flush_seconds, root) -> Run:
    """Our handle on the fluent run MLflow just opened; paths it records under `root` name the project."""
    info = active.info
    run = Run(
        run_id=info.run_id,
        experiment_id=info.experiment_id,
        tracking_uri=uri,
        run_name=info.run_name,
        stage=stage,
        client=client,
        env_run_id=env_run_id,
        flush_every=flush_every,
        flush_seconds=flush_seconds,
        reset_tracking_uri=reset_uri,
    )
    run.project_root = root
    return run


def start_run(
    cfg,
    project_root,
    *,
    stage: str = "train",
    is_chief: bool = True,
    flush_every: int = BATCH_METRICS,
    flush_seconds: float = 15.0,
    resume_run_id: Optional[str] = None,
) -> Run:
    """Open the run for the train stage (see module docstring) and write `tracking.run_file`.

    `resume_run_id`: the run of an interrupted training this one resumes. It is re-opened (metrics
    of the steps it already logged are not sent again) when it is in this store and no MLFLOW_RUN_ID
    is given; otherwise the new run is tagged `tfpipe.resumed_from` with it."""
    if not is_chief:
        return NullRun(stage)
    root, base = Path(project_root), _base_name(cfg)
    env_run_id = os.environ.get("MLFLOW_RUN_ID", "").strip() or None
    uri, client, reset_uri = _connect(cfg, root)
    reopen = bool(resume_run_id and not env_run_id and _run_exists(client, resume_run_id))
    try:
        active = _open_train_run(cfg, root, client, uri, base, env_run_id, resume_run_id if reopen else None)
    finally:
        if mlflow.active_run() is None:
            reset_tracking_uri(reset_uri)
    run = _handle(active, uri, client, stage, env_run_id, reset_uri, flush_every, flush_seconds, root)
    if resume_run_id:
        _mark_resume(run, client, uri, resume_run_id, reopen)
    if env_run_id:  # `mlflow run` made the experiment and the run
        kinds.declare_model_training(client, run.experiment_id)
        naming.repair_project_source(client, run.run_id, root)
    name = (
        run.run_name if reopen else naming.run_name(cfg, run.run_id, base, root)
    )  # a re-opened run keeps its name
    _record(run, root, root / cfg.tracking.run_file, uri, name, groups.group_tag(cfg, root))
    log.info(
        "MLflow run %s (%s) in experiment %s at %s", run.run_id, name, run.experiment_id, redact_url(uri)
    )
    return run


def resume_run(
    cfg,
    project_root,
    *,
    stage: str = "evaluate",
    is_chief: bool = True,
    flush_every: int = BATCH_METRICS,
    flush_seconds: float = 15.0,
) -> Run:
    """Re-open the train stage's run: env MLFLOW_RUN_ID, else `tracking.run_file`."""
    if not is_chief:
        return NullRun(stage)
    root = Path(project_root)
    env_run_id = os.environ.get("MLFLOW_RUN_ID", "").strip() or None
    if env_run_id:
        run_id, where = env_run_id, "env MLFLOW_RUN_ID"
    else:
        path = root / cfg.tracking.run_file
        info = read_run_file(path, root)
        run_id, where = info["run_id"], f"from {path}"
    uri, client, reset_uri = _connect(cfg, root)
    recorded = None if env_run_id else info.get("tracking_uri")
    if recorded and recorded != redact_url(backend.anchored(uri, root)):  # the run id is then unknown here
        log.warning(
            "run %s (%s) was recorded in %s; this stage uses %s", run_id, where, recorded, redact_url(uri)
        )
    try:
        active = _start(run_id, where=where, uri=uri, system_metrics=_system_metrics(cfg.tracking))
    except BaseException:
        reset_tracking_uri(reset_uri)
        raise
    run = _handle(active, uri, client, stage, env_run_id, reset_uri, flush_every, flush_seconds, root)
    log.info("MLflow run %s re-opened for %s", run_id, stage)
    return run


class ParentRun:
    """The parent of a sweep's runs: created once, exported as TFPIPE_PARENT_RUN_ID so every run the
    sweep starts in this process (or its children) is tagged `mlflow.parentRunId` and nests under it."""

    def __init__(self, cfg, project_root, name: str, tags: Optional[dict] = None):
        uri = backend.resolve_tracking_uri(cfg.tracking, project_root)
        self.client = backend.client(uri)
        try:
            sqlite.init_store(uri)
            location = backend.artifact_location_for(cfg.tracking, project_root, uri)
            experiment_id = backend.ensure_experiment(self.client, cfg.tracking.experiment_name, location)
            created = self.client.create_run(
                experiment_id, run_name=name, tags={"tfpipe.sweep": "parent", **redact(tags or {})}
            )
        except MlflowException as exc:
            raise TrackingError(
                f"MLflow store {redact_url(uri)}: could not create the sweep's parent run: {one_line(exc)}"
            ) from None
        self.run_id = created.info.run_id
        self._previous = os.environ.get(PARENT_RUN_ENV)
        os.environ[PARENT_RUN_ENV] = self.run_id
        log.info("sweep parent run %s (%s) at %s", self.run_id, name, redact_url(uri))

    def close(self, status: str = "FINISHED") -> None:
        if self._previous is None:
            os.environ.pop(PARENT_RUN_ENV, None)
        else:
            os.environ[PARENT_RUN_ENV] = self._previous
        try:
            self.client.set_terminated(self.run_id, status)
        except MlflowException as exc:
            log.warning("could not end sweep parent run %s as %s: %s", self.run_id, status, one_line(exc))
