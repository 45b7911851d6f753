"""The MLflow model registry: a version is made for a model that may be served, not for every run.
`promote` moves an alias (e.g. champion) to a run's version only when the run's group of seeds beats the group of
the alias's current model past a threshold (`group_runs` reads each run's immutable record of the metric,
`group_compare` decides and says how), unless forced, and registers the run's logged model first when the run has
no version yet (only once the promotion is allowed: a refused promotion registers nothing). The evaluate stage links the test metrics to the run's logged model; it
registers the model itself only with tracking.register_model=true (`register`), or when
tracking.auto_promote_alias moves the alias to it (`auto_promote`). `model_versions` lists a run's registered
versions with their aliases.

The registry is MLflow's: MLFLOW_REGISTRY_URI when set, else the tracking store. Every failure is one line.
"""

from __future__ import annotations

import logging
import os
from typing import Optional

import mlflow
from mlflow import MlflowClient
from mlflow.exceptions import MlflowException

from tfpipe.config import checks
from tfpipe.errors import TrackingError, one_line
from tfpipe.tracking import backend, group_compare, group_runs
from tfpipe.tracking.group_compare import Threshold
from tfpipe.tracking.reading import get_run
from tfpipe.tracking.redact import redact_url

log = logging.getLogger(__name__)

NAME_TAG, VERSION_TAG = "registry.name", "registry.version"  # set on the run at registration
MODELS_SCHEME = "models:/"


class NotBetter(TrackingError):
    """Promotion refused: the run's group does not beat the alias's current model's past the threshold; `lines`:
    what was compared and how (`group_compare.Decision.lines`)."""

    def __init__(self, message: str, lines: tuple = ()):
        super().__init__(message)
        self.lines = tuple(lines)


def logged_model_id(run) -> Optional[str]:
    """The id of the run's logged model (tag model_uri = models:/<id>, set by Run.log_model), or None."""
    uri = run.client.get_run(run.run_id).data.tags.get("model_uri", "")
    return uri[len(MODELS_SCHEME) :] if uri.startswith(MODELS_SCHEME) else None


def log_test_metrics(run, metrics: dict, *, manifest: dict, digest: str, prepared) -> Optional[str]:
    """The test metrics on the run; with a logged model, linked to it (model id + the test dataset) so the
    model's page shows them, and as params nobody can change (`outcome`: what `audit --rerun` compares). Returns the
    model id (None: no logged model, the metrics go on the run alone)."""
    from tfpipe.tracking.datasets import manifest_dataset
    from tfpipe.tracking.outcome import record_metric_params

    if not run.active:  # a NullRun (not the chief) logs nothing
        return None
    record_metric_params(run, metrics)
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
    """Register the logged model as a version of `name` (once: evaluating again reuses the version); the run
    is tagged registry.name / registry.version. Returns {"name", "version"}. The evaluate stage calls it with
    tracking.register_model=true; by default `promote` registers the run it promotes."""
    where = redact_url(mlflow.get_registry_uri())
    version = _register_version(
        run.client,
        run.run_id,
        model_id,
        name,
        where,
        hint="set tracking.register_model=false to skip registration",
    )
    log.info("registered model %s version %s (%s)", name, version.version, where)
    return {"name": name, "version": str(version.version)}


def _register_version(client: MlflowClient, run_id: str, model_id: str, name: str, where: str, *, hint: str):
    """The run's version of `name` for the logged model `model_id`: the existing one, else a new one; the
    run is tagged registry.name / registry.version. A refusing registry: one line naming it, then `hint`."""
    source = f"{MODELS_SCHEME}{model_id}"
    try:
        versions = client.search_model_versions(f"name='{name}' and run_id='{run_id}'")
        mine = [v for v in versions if v.source == source]  # (the version's model_id field stays empty)
        if mine:
            version = mine[0]
        else:
            try:
                client.create_registered_model(name)
            except MlflowException as exc:
                if exc.error_code not in ("RESOURCE_ALREADY_EXISTS", "ALREADY_EXISTS"):
                    raise
            with backend.as_default_store(client.tracking_uri):
                version = client.create_model_version(name, source, run_id=run_id, model_id=model_id)
        client.set_tag(run_id, NAME_TAG, name)
        client.set_tag(run_id, VERSION_TAG, str(version.version))
    except MlflowException as exc:
        raise TrackingError(
            f"could not register the model of run {run_id} as {name!r} in the registry at {where}: "
            f"{one_line(exc, 300)}; {hint}"
        ) from None
    return version


def registered_name(params: dict) -> Optional[str]:
    """The registry name a run was made with, read from its params: tracking.registered_model_name when set,
    else tfpipe-<dataset.name> (TrackingConfig.model_name's rule). None when the run recorded neither."""
    from tfpipe.config import TrackingConfig

    def value(key: str) -> Optional[str]:
        found = params.get(key)
        return None if found in (None, "", "None") else found  # a param records None as 'None'

    explicit, dataset = value("tracking.registered_model_name"), value("dataset.name")
    if dataset is None:
        return explicit  # the name set, else None: the run recorded neither
    return TrackingConfig(registered_model_name=explicit).model_name(dataset)


def auto_promote(
    run, alias: str, *, metric: str, mode: str, min_delta: float = 0.0, min_relative: float = 0.0
) -> Optional[dict]:
    """After evaluation: move `alias` to this run's version when its group beats the alias's model's (or the
    alias is unset) past tracking.promote_min_delta / promote_min_relative, registering the run's logged model
    first when it has no version yet. A model that does not beat it leaves the alias where it is and the
    registry as it was (logged, not an error)."""
    names = ("tracking.promote_min_delta", "tracking.promote_min_relative")
    threshold = Threshold.checked(min_delta, min_relative, names)
    try:
        return promote(
            run.tracking_uri, run.run_id, alias, metric=metric, mode=mode, strict=True, threshold=threshold
        )
    except NotBetter as exc:
        log.info("%s", exc)
        return None


def _run_version(client: MlflowClient, run):
    """The run's registered version: the one its tags name, else its newest; None when it has none."""
    tags = run.data.tags
    versions = client.search_model_versions(f"run_id='{run.info.run_id}'")
    named = [v for v in versions if (v.name, str(v.version)) == (tags.get(NAME_TAG), tags.get(VERSION_TAG))]
    ordered = named or sorted(versions, key=lambda v: int(v.version))
    return ordered[-1] if ordered else None


def _to_register(run, metric: str, force: bool) -> tuple:
    """(registry name, logged model id) of a run that has no registered version yet: its logged model,
    under the name it was made with. A run without one, or (unless forced) not evaluated yet: one line."""
    run_id = run.info.run_id
    uri = run.data.tags.get("model_uri", "")
    if not uri.startswith(MODELS_SCHEME):
        raise TrackingError(
            f"run {run_id} has no logged model to register (it trained with tracking.log_model=false); "
            "train again with tracking.log_model=true, evaluate, then promote that run"
        )
    name = registered_name(run.data.params)
    if name is None:
        raise TrackingError(
            f"run {run_id} records neither tracking.registered_model_name nor dataset.name, so its registry "
            f"name is unknown; register its model by hand (mlflow.register_model('{uri}', NAME)), "
            "then promote"
        )
    if not force:
        group_runs.value_of(run, metric)
    return name, uri[len(MODELS_SCHEME) :]


def _alias_version(client: MlflowClient, name: str, alias: str):
    try:
        return client.get_model_version_by_alias(name, alias)
    except MlflowException as exc:
        if exc.error_code in ("RESOURCE_DOES_NOT_EXIST", "INVALID_PARAMETER_VALUE"):
            return None
        raise


def _check_beats(client, uri: str, run, current, alias: str, **how) -> tuple:
    """The lines of the comparison (`group_compare.decide`, `how`: its metric, mode, threshold, strict) of the
    run's group with the group of the alias's current version; NotBetter (those lines on it) when the run's
    does not beat it. A current version without a run: nothing to compare with."""
    group_runs.value_of(run, how["metric"])
    if not current.run_id:
        return ()
    candidate = group_runs.read(client, uri, run, how["metric"])
    champion = group_runs.read(client, uri, client.get_run(current.run_id), how["metric"])
    decision = group_compare.decide(candidate, champion, f"version {current.version}", **how)
    if not decision.allowed:
        raise NotBetter(
            f"{alias!r} stays on {current.name} version {current.version}: {decision.why}; --force moves it "
            "anyway",
            decision.lines,
        )
    return decision.lines


def promote(
    uri: str,
    run_id: str,
    alias: str,
    *,
    metric: str = "test_accuracy",
    mode: str = "max",
    force: bool = False,
    strict: bool = False,
    threshold: Threshold = Threshold(),
) -> dict:
    """Point `alias` of the run's registered model at the run's version. A run with no registered version
    gets one first: its logged model under the name it was made with (`registered_name`), registered only once
    the promotion is allowed. Refused (NotBetter) unless the run's group of seeds beats the group of the alias's
    current version past `threshold` (`group_compare`: the recorded values of `metric`, `mode`; strict: a tie
    loses), or `force`. Returns {"name", "version", "alias", "previous", "registered", "test"} (previous: the
    version it pointed at, or None; registered: whether this call made it; test: the comparison's lines, none
    when there was nothing to compare with)."""
    checks.registry_alias("--alias", alias)
    checks.choice("--mode", mode, ("max", "min"))
    client = backend.client(uri)
    run = get_run(client, uri, run_id)
    try:
        version = _run_version(client, run)
        if version is None:
            name, model_id = _to_register(run, metric, force)
        else:
            name = version.name
        current = _alias_version(client, name, alias)
        previous = str(current.version) if current else None
        if version is not None and previous == str(version.version):
            return _outcome(name, previous, alias, previous, False, ())
        test = ()
        if current and not force:
            how = {"metric": metric, "mode": mode, "threshold": threshold, "strict": strict}
            test = _check_beats(client, uri, run, current, alias, **how)
        registered = version is None
        if registered:  # allowed: only now is a version made
            version = _register_promoted(client, uri, run.info.run_id, model_id, name)
        client.set_registered_model_alias(name, alias, version.version)
    except MlflowException as exc:
        raise TrackingError(f"could not promote run {run_id} to {alias!r}: {one_line(exc, 300)}") from None
    log.info("%s version %s is now %r (was %s)", name, version.version, alias, previous or "unset")
    return _outcome(name, version.version, alias, previous, registered, test)


def _outcome(name: str, version, alias: str, previous, registered: bool, test: tuple) -> dict:
    keys = ("name", "version", "alias", "previous", "registered", "test")
    return dict(zip(keys, (name, str(version), alias, previous, registered, tuple(test))))


def _register_promoted(client: MlflowClient, uri: str, run_id: str, model_id: str, name: str):
    """The version `promote` makes of a run it is allowed to promote."""
    where = redact_url(os.environ.get("MLFLOW_REGISTRY_URI") or uri)
    version = _register_version(
        client,
        run_id,
        model_id,
        name,
        where,
        hint="unset MLFLOW_REGISTRY_URI to register in the tracking store",
    )
    log.info("registered model %s version %s (%s)", name, version.version, where)
    return version


def model_versions(uri: str, run_id: str) -> list:
    """The run's registered versions: [{"name", "version", "aliases"}], oldest first."""
    client = backend.client(uri)
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
