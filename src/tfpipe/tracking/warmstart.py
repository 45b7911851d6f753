"""Where a warm start's weights come from: `train.init_from` as an MLflow model URI (`runs:/ID/model`,
`models:/NAME@ALIAS`, `models:/NAME/VERSION`) downloaded from the tracking store, or a local path as given.
Returns the local folder or file and what it was, for the run's `init.*` tags."""

from __future__ import annotations

from pathlib import Path

from mlflow import MlflowClient
from mlflow.exceptions import MlflowException

from tfpipe.errors import TrackingError, one_line
from tfpipe.tracking import backend
from tfpipe.tracking.secrets import redact_url

KEY = "train.init_from"


def resolve(spec: str, tracking_cfg, project_root, dest: Path) -> tuple[Path, dict]:
    """(local path, tags) of `spec`; models are downloaded into `dest`. TrackingError in one line when the
    run, model, version or alias does not exist."""
    if not spec.startswith(("runs:/", "models:/")):
        return Path(spec), {"init.from": spec}
    uri = backend.resolve_tracking_uri(tracking_cfg, project_root)
    backend.check_reachable(uri)
    client = MlflowClient(tracking_uri=uri)
    tags = {"init.from": spec, **_describe(client, spec, uri)}
    from mlflow.artifacts import download_artifacts

    try:
        local = Path(download_artifacts(artifact_uri=spec, dst_path=str(dest), tracking_uri=uri))
    except (MlflowException, OSError) as exc:
        raise TrackingError(
            f"{KEY}={spec!r}: not downloadable from {redact_url(uri)} ({one_line(exc, 200)})"
        ) from None
    saved = local / "artifacts" / "saved_model"  # tfpipe's logged model (tracking.models.log_pyfunc_model)
    return (saved if saved.is_dir() else local), tags


def _describe(client: MlflowClient, spec: str, uri: str) -> dict:
    """The run (and registered version) `spec` names, checked to exist."""
    if spec.startswith("runs:/"):
        run_id = spec[len("runs:/") :].split("/", 1)[0]
        try:
            client.get_run(run_id)
        except MlflowException:
            raise TrackingError(f"{KEY}={spec!r}: run {run_id!r} not found in {redact_url(uri)}") from None
        return {"init.source_run": run_id}
    name, _, ref = spec[len("models:/") :].partition("@")
    try:
        if ref:  # models:/NAME@ALIAS
            version = client.get_model_version_by_alias(name, ref)
        else:  # models:/NAME/VERSION
            name, _, number = name.partition("/")
            version = client.get_model_version(name, number)
    except MlflowException:
        raise TrackingError(f"{KEY}={spec!r}: {_missing(client, name, ref)} in {redact_url(uri)}") from None
    return {
        "init.source_run": version.run_id,
        "init.source_model": f"{version.name} version {version.version}",
    }


def _missing(client: MlflowClient, name: str, alias: str) -> str:
    try:
        aliases = sorted(client.get_registered_model(name).aliases)
    except MlflowException:
        return f"no registered model {name!r}"
    if alias:
        return (
            f"registered model {name!r} has no alias {alias!r} (its aliases: {', '.join(aliases) or 'none'})"
        )
    return f"no such version of registered model {name!r}"
