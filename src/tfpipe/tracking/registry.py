"""The MLflow model registry: the evaluate stage links the test metrics to the run's logged model and registers
it; `promote` moves an alias (e.g. champion) to a run's registered version, never to a worse one unless forced;
`model_versions` lists a run's registered versions with their aliases (for the audit).

The registry is MLflow's: MLFLOW_REGISTRY_URI when set, else the tracking store. Every failure is one line.
"""

from __future__ import annotations

import logging
import math
from typing import Optional

import mlflow
from mlflow import MlflowClient
from mlflow.exceptions import MlflowException

from tfpipe.config import checks
from tfpipe.errors import TrackingError, one_line
from tfpipe.tracking import backend
from tfpipe.tracking.reading import get_run
from tfpipe.tracking.redact import redact_url

log = logging.getLogger(__name__)

NAME_TAG, VERSION_TAG = "registry.name", "registry.version"  # set on the run at registration
MODELS_SCHEME = "models:/"


class NotBetter(TrackingError):
    """Promotion refused: the run's metric is worse than that of the alias's current model."""


def logged_model_id(run) -> Optional[str]:
    """The id of the run's logged model (tag model_uri = models:/<id>, set by Run.log_model), or None."""
    uri = run.client.get_run(run.run_id).data.tags.get("model_uri", "")
    return uri[len(MODELS_SCHEME) :] if uri.startswith(MODELS_SCHEME) else None


def log_test_metrics(run, metrics: dict, *, manifest: dict, digest: str, prepared) -> Optional[str]:
    """The test metrics on the run; with a logged model, linked to it (model id + the test dataset) so the
    model's page shows them. Returns the model id (None: no logged model, the metrics go on the run alone)."""
    from tfpipe.tracking.datasets import manifest_dataset

    if not run.active:  # a NullRun (not the chief) logs nothing
        return None
    model_id = logged_model_id(run)
    if model_id is None:
        run.log_metrics(metrics, step=0)
        return None
    dataset = manifest_dataset(manifest, digest, prepared, "test")
    try:
        mlflow.log_metrics(
            metrics, step=0, run_id=run.run_id, model_id=model_id, dataset=dataset, synchronous=True
        )
    except MlflowException as exc:
        raise TrackingError(f"MLflow log_metrics failed for model {model_id}: {one_line(exc, 400)}") from None
    return model_id


def register(run, model_id: str, name: str) -> dict:
    """Register the logged model as a version of `name` (once: evaluating again reuses the version); the run is
    tagged registry.name / registry.version. Returns {"name", "version"}."""
    where = redact_url(mlflow.get_registry_uri())
    try:
        versions = run.client.search_model_versions(f"name='{name}' and run_id='{run.run_id}'")
        source = f"{MODELS_SCHEME}{model_id}"
        mine = [v for v in versions if v.source == source]  # (the version's model_id field stays empty)
        version = mine[0] if mine else mlflow.register_model(source, name)
    except MlflowException as exc:
        raise TrackingError(
            f"could not register the model of run {run.run_id} as {name!r} in the registry at {where}: "
            f"{one_line(exc, 300)}; set tracking.register_model=false to skip registration"
        ) from None
    run.set_tags({NAME_TAG: name, VERSION_TAG: version.version})
    log.info("registered model %s version %s (%s)", name, version.version, where)
    return {"name": name, "version": str(version.version)}


def auto_promote(run, alias: str, *, metric: str, mode: str) -> Optional[dict]:
    """After registration: move `alias` to this run's version when its metric beats the alias's model (or the
    alias is unset). A model that does not beat it leaves the alias where it is (logged, not an error)."""
    try:
        return promote(run.tracking_uri, run.run_id, alias, metric=metric, mode=mode, strict=True)
    except NotBetter as exc:
        log.info("%s", exc)
        return None


def _client(uri: str) -> MlflowClient:
    backend.check_reachable(uri)
    return MlflowClient(tracking_uri=uri)


def _run_version(client: MlflowClient, run):
    """The run's registered version: the one its tags name, else its newest."""
    tags = run.data.tags
    versions = client.search_model_versions(f"run_id='{run.info.run_id}'")
    named = [v for v in versions if (v.name, str(v.version)) == (tags.get(NAME_TAG), tags.get(VERSION_TAG))]
    if named or versions:
        return (named or sorted(versions, key=lambda v: int(v.version)))[-1]
    raise TrackingError(
        f"run {run.info.run_id} has no registered model; the evaluate stage registers it "
        "(tracking.log_model=true, tracking.register_model=true)"
    )


def _alias_version(client: MlflowClient, name: str, alias: str):
    try:
        return client.get_model_version_by_alias(name, alias)
    except MlflowException as exc:
        if exc.error_code in ("RESOURCE_DOES_NOT_EXIST", "INVALID_PARAMETER_VALUE"):
            return None
        raise


def _check_not_worse(client, run, current, alias: str, *, metric: str, mode: str, strict: bool) -> None:
    """Raise NotBetter (one line: the metric, both values) unless the run's metric is at least as good as
    (strict: better than) that of the alias's current model. A current model without the metric loses."""
    new = run.data.metrics.get(metric)
    if new is None or math.isnan(new):
        raise TrackingError(
            f"run {run.info.run_id} has no metric {metric!r} to compare with {alias!r}; evaluate it first, "
            "pick another with --metric, or --force"
        )
    old = client.get_run(current.run_id).data.metrics.get(metric) if current.run_id else None
    if old is None or math.isnan(old):
        return
    better = new > old if mode == "max" else new < old
    if better or (not strict and new == old):
        return
    raise NotBetter(
        f"{alias!r} stays on {current.name} version {current.version}: run {run.info.run_id} has "
        f"{metric}={new:.6g}, {'not better than' if new == old else 'worse than'} {old:.6g} of version "
        f"{current.version} (run {current.run_id}; promote_mode={mode}); --force moves it anyway"
    )


def promote(
    uri: str,
    run_id: str,
    alias: str,
    *,
    metric: str = "test_accuracy",
    mode: str = "max",
    force: bool = False,
    strict: bool = False,
) -> dict:
    """Point `alias` of the run's registered model at the run's version. Refused (NotBetter) when the run's
    `metric` is worse (strict: not better) than that of the alias's current version, unless `force`.
    Returns {"name", "version", "alias", "previous"} (previous: the version it pointed at, or None)."""
    checks.registry_alias("--alias", alias)
    checks.choice("--mode", mode, ("max", "min"))
    client = _client(uri)
    run = get_run(client, uri, run_id)
    try:
        version = _run_version(client, run)
        current = _alias_version(client, version.name, alias)
        previous = str(current.version) if current else None
        if current and str(current.version) == str(version.version):
            return {
                "name": version.name,
                "version": str(version.version),
                "alias": alias,
                "previous": previous,
            }
        if current and not force:
            _check_not_worse(client, run, current, alias, metric=metric, mode=mode, strict=strict)
        client.set_registered_model_alias(version.name, alias, version.version)
    except MlflowException as exc:
        raise TrackingError(f"could not promote run {run_id} to {alias!r}: {one_line(exc, 300)}") from None
    log.info("%s version %s is now %r (was %s)", version.name, version.version, alias, previous or "unset")
    return {"name": version.name, "version": str(version.version), "alias": alias, "previous": previous}


def model_versions(uri: str, run_id: str) -> list:
    """The run's registered versions: [{"name", "version", "aliases"}], oldest first."""
    client = _client(uri)
    get_run(client, uri, run_id)
    try:  # search results carry no aliases: each version is read whole
        found = client.search_model_versions(f"run_id='{run_id}'")
        versions = [client.get_model_version(v.name, str(v.version)) for v in found]
    except MlflowException as exc:
        raise TrackingError(f"could not read the registry for run {run_id}: {one_line(exc, 300)}") from None
    return [
        {"name": v.name, "version": str(v.version), "aliases": sorted(v.aliases or [])}
        for v in sorted(versions, key=lambda v: (v.name, int(v.version)))
    ]
