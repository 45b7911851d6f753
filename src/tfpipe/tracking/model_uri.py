"""MLflow model URIs a user types (`runs:/ID/model`, `models:/NAME@ALIAS`, `models:/NAME/VERSION`): checked to name
a run or registered version that exists, in one line naming what is missing (the warm start and batch prediction
share it), and downloaded from the tracking store."""

from __future__ import annotations

import logging
from pathlib import Path

from mlflow import MlflowClient
from mlflow.exceptions import MlflowException

from tfpipe import files
from tfpipe.errors import TrackingError, UserError, one_line
from tfpipe.tracking import backend
from tfpipe.tracking.runids import resolve_run_id
from tfpipe.tracking.secrets import redact_url

log = logging.getLogger(__name__)
SCHEMES = ("runs:/", "models:/")
# The SavedModel's digest (files.seal_digest), logged as a run param by the train stage that logged the model:
# MLflow refuses to change a param once logged, so a teammate who can replace the model's files cannot change it.
DIGEST_PARAM = "tfpipe.saved_model_sha256"


def is_model_uri(spec: str) -> bool:
    return spec.startswith(SCHEMES)


def download(spec: str, uri: str, dest: Path, key: str) -> tuple[Path, dict]:
    """(local folder of the model, what `spec` names: source_run and, for the registry, source_model). A
    `runs:/` URI may name its run by a unique prefix of its id (`runids`)."""
    client = backend.client(uri)
    spec = whole_run_id(client, spec, uri)
    described = describe(client, spec, uri, key)
    from mlflow.artifacts import download_artifacts

    try:
        with backend.as_default_store(uri):
            local = Path(download_artifacts(artifact_uri=spec, dst_path=str(dest), tracking_uri=uri))
    except (MlflowException, OSError) as exc:
        raise TrackingError(
            f"{key}={spec!r}: not downloadable from {redact_url(uri)} ({one_line(exc, 200)})"
        ) from None
    check_recorded_digest(client, described["source_run"], local, spec, key)
    return local, described


def whole_run_id(client: MlflowClient, spec: str, uri: str) -> str:
    """`runs:/<prefix>/path` as `runs:/<the run's whole id>/path` (`runids.resolve_run_id`)."""
    if not spec.startswith("runs:/"):
        return spec
    given, sep, rest = spec[len("runs:/") :].partition("/")
    return f"runs:/{resolve_run_id(uri, given, client)}{sep}{rest}"


def check_recorded_digest(client: MlflowClient, run_id: str, local: Path, spec: str, key: str) -> None:
    """The downloaded SavedModel is the one run `run_id` logged: whole against its seal, and the seal's digest the
    run's DIGEST_PARAM. A model logged before tfpipe recorded the digest is checked against its seal only."""
    why = check_sealed(local)  # None: saved_model_folder(local) is a folder, whole against its seal
    recorded = client.get_run(run_id).data.params.get(DIGEST_PARAM)
    saved = saved_model_folder(local)
    if why is None and recorded is None:
        log.warning(
            "%s=%r: run %s records no %s (logged by an older tfpipe)", key, spec, run_id, DIGEST_PARAM
        )
    elif why is None and saved is not None and recorded is not None and files.seal_digest(saved) != recorded:
        why = f"its SavedModel is not the one run {run_id} logged ({DIGEST_PARAM} {recorded[:12]}...)"
    if why:
        raise UserError(f"{key}={spec!r}: {why}; refused: changed in the store since it was logged")


def check_sealed(local: Path) -> str | None:
    """None when the model folder's SavedModel is inside it and whole against its seal, else why not."""
    saved = saved_model_folder(local)
    return files.check_seal(saved) if saved else "its MLmodel names no SavedModel inside the model folder"


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


def mlmodel(local: Path) -> dict:
    """The MLmodel file of the model folder `local` as a mapping ({} for none, or one that is no YAML mapping):
    the one reader of it (a downloaded model is untrusted: safe_load, nothing instantiated)."""
    import yaml

    try:
        found = yaml.safe_load((local / "MLmodel").read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError):
        return {}
    return found if isinstance(found, dict) else {}


def pyfunc_flavor(described: dict) -> dict:
    """The python_function flavor of an `mlmodel` mapping ({} when it has none)."""
    flavors = described.get("flavors")
    flavor = flavors.get("python_function") if isinstance(flavors, dict) else None
    return flavor if isinstance(flavor, dict) else {}


def saved_model_folder(local: Path) -> Path | None:
    """The SavedModel a downloaded tfpipe model loads: the folder its MLmodel names as the `saved_model` artifact
    (what MLflow hands serving_model.py), when it is inside the model folder."""
    try:
        path = str(pyfunc_flavor(mlmodel(local))["artifacts"]["saved_model"]["path"])
    except (KeyError, TypeError):
        return None
    return (local / path).resolve() if path and files.within(local / path, local, resolve=True) else None
