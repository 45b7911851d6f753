"""MLflow model URIs a user types (`runs:/ID/model`, `models:/NAME@ALIAS`, `models:/NAME/VERSION`): checked to name
a run or registered version that exists, in one line naming what is missing (the warm start and batch prediction
share it), and downloaded from the tracking store."""

from __future__ import annotations

from pathlib import Path

from mlflow import MlflowClient
from mlflow.exceptions import MlflowException

from tfpipe.errors import TrackingError, one_line
from tfpipe.tracking import backend
from tfpipe.tracking.secrets import redact_url

SCHEMES = ("runs:/", "models:/")


def is_model_uri(spec: str) -> bool:
    return spec.startswith(SCHEMES)


def download(spec: str, uri: str, dest: Path, key: str) -> tuple[Path, dict]:
    """(local folder of the model, what `spec` names: source_run and, for the registry, source_model)."""
    backend.check_reachable(uri)
    described = describe(MlflowClient(tracking_uri=uri), spec, uri, key)
    from mlflow.artifacts import download_artifacts

    try:
        local = Path(download_artifacts(artifact_uri=spec, dst_path=str(dest), tracking_uri=uri))
    except (MlflowException, OSError) as exc:
        raise TrackingError(
            f"{key}={spec!r}: not downloadable from {redact_url(uri)} ({one_line(exc, 200)})"
        ) from None
    return local, described


def describe(client: MlflowClient, spec: str, uri: str, key: str) -> dict:
    """The run (and registered version) `spec` names, checked to exist."""
    if spec.startswith("runs:/"):
        run_id = spec[len("runs:/") :].split("/", 1)[0]
        try:
            client.get_run(run_id)
        except MlflowException:
            raise TrackingError(f"{key}={spec!r}: run {run_id!r} not found in {redact_url(uri)}") from None
        return {"source_run": run_id}
    name, _, ref = spec[len("models:/") :].partition("@")
    try:
        if ref:  # models:/NAME@ALIAS
            version = client.get_model_version_by_alias(name, ref)
        else:  # models:/NAME/VERSION
            name, _, number = name.partition("/")
            version = client.get_model_version(name, number)
    except MlflowException:
        raise TrackingError(f"{key}={spec!r}: {_missing(client, name, ref)} in {redact_url(uri)}") from None
    return {"source_run": version.run_id, "source_model": f"{version.name} version {version.version}"}


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
