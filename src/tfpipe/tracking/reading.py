"""Reading recorded runs back (for `tfpipe.audit`), and recording an audit verdict on a run.

`load_run(uri, run_id)` returns a plain dict (no mlflow objects leave this package):
    {"run_id", "run_name", "status", "tracking_uri", "params": {..}, "tags": {..}, "metrics": {..},
     "config": dict|None (config/resolved.yaml), "provenance": dict|None (provenance/provenance.json),
     "dvc_lock": str|None (provenance/dvc.lock)}
Its "config" is the artifact only as far as the run's immutable params vouch for it (`checked_config`): anyone
with EDIT may replace the artifact, nobody a logged param, and the train stage logs the config both ways. Every
leaf must equal its param as the run logged it (`str`, None as 'None'), and every param of the config must be a
leaf; a changed value, an added or a missing key, a leaf longer than a param keeps is one line (TrackingError,
exit 2) naming the key. What it cannot tell: a leaf's type where the text is the same (`1` and `'1'`), which the
stages' schema checks.
`load_data_report(uri, run_id)`: the run's data/report.json as a dict, or None (only `compare` and
`audit --against` need it). `git_diff` is the artifact's bytes exactly (undecodable bytes as surrogate
escapes, a carriage return kept): what `audit --rerun` shows, digests and applies. `sealed_weights(uri,
run_id)`: the weights digest of the SavedModel whose files match the run's immutable digest param (`outcome`).
An unknown run id or an unreachable store raises TrackingError (one line).
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Optional

from mlflow import MlflowClient
from mlflow.exceptions import MlflowException

from tfpipe.errors import TrackingError
from tfpipe.errors import one_line as _one_line
from tfpipe.tracking import backend
from tfpipe.tracking.groups import MAX_PARAM_VALUE
from tfpipe.tracking.redact import redact, redact_strings, redact_url
from tfpipe.tracking.run import CONFIG_ARTIFACT
from tfpipe.tracking.sink import MAX_KEY

PROVENANCE_ARTIFACT = "provenance/provenance.json"
DVC_LOCK_ARTIFACT = "provenance/dvc.lock"
DATA_REPORT_ARTIFACT = "data/report.json"  # the prepared data's report, logged by train (tfpipe.stages)
AUDIT_REPORT_DIR = "audit"
OUTCOME_PARAMS = "tfpipe."  # params the run logs beside its config: the model's digest, the final figures


def _artifact_text(client: MlflowClient, run_id: str, path: str, exact: bool = False) -> Optional[str]:
    """The artifact's text, or None; `exact`: every byte kept (no newline translation, undecodable bytes as
    surrogate escapes: `text.encode("utf-8", "surrogateescape")` gives the bytes back)."""
    with tempfile.TemporaryDirectory(prefix="tfpipe-audit-") as tmp:
        try:
            local = client.download_artifacts(run_id, path, tmp)
        except (MlflowException, OSError):
            return None
        p = Path(local)
        if not p.is_file():
            return None
        return p.read_bytes().decode("utf-8", "surrogateescape") if exact else p.read_text(encoding="utf-8")


def get_run(client: MlflowClient, uri: str, run_id: str):
    """The run, or a TrackingError naming it and the store (credentials redacted)."""
    try:
        return client.get_run(run_id)
    except MlflowException as exc:
        raise TrackingError(
            f"run {run_id!r}: not found in {redact_url(uri)} ({_one_line(exc, 200)})"
        ) from None


def load_data_report(uri: str, run_id: str) -> Optional[dict]:
    """The data report the run logged (data/report.json), or None when it has none or it is unreadable."""
    client = backend.client(uri)
    get_run(client, uri, run_id)  # an unknown run is an error, not a run without a report
    text = _artifact_text(client, run_id, DATA_REPORT_ARTIFACT)
    try:
        return json.loads(text) if text else None
    except json.JSONDecodeError:
        return None  # an unreadable report: compared as absent


def load_run(uri: str, run_id: str) -> dict:
    import yaml

    client = backend.client(uri)
    run = get_run(client, uri, run_id)
    config_text = _artifact_text(client, run_id, CONFIG_ARTIFACT)
    prov_text = _artifact_text(client, run_id, PROVENANCE_ARTIFACT)
    return {
        "run_id": run.info.run_id,
        "run_name": run.info.run_name,
        "status": run.info.status,
        "tracking_uri": redact_url(uri),
        "params": dict(run.data.params),
        "tags": dict(run.data.tags),
        "metrics": dict(run.data.metrics),
        "config": checked_config(
            yaml.safe_load(config_text) if config_text else None, run.data.params, run_id
        ),
        "provenance": json.loads(prov_text) if prov_text else None,
        "dvc_lock": _artifact_text(client, run_id, DVC_LOCK_ARTIFACT),
        "git_diff": _artifact_text(client, run_id, "provenance/git_diff.patch", exact=True),
        "pip_freeze": _artifact_text(client, run_id, "provenance/pip_freeze.txt"),
    }


def config_params(tree: dict, prefix: str = "", where: str = CONFIG_ARTIFACT, out=None) -> dict:
    """dotted key -> the text the run's param of that key holds (what vouches for a recorded config), as
    `Config.flat` and `groups.param_strings` make them: mappings walked, anything else one leaf, None as 'None';
    a key reached twice (`a.b` and `a: {b}`) is refused."""
    out = {} if out is None else out
    for key, value in tree.items():
        dotted = f"{prefix}{key}"
        if isinstance(value, dict):
            config_params(value, dotted + ".", where, out)
            continue
        if dotted in out:
            raise TrackingError(
                _one_line(f"{where}: {dotted} is there twice; a recorded config holds each key once")
            )
        out[dotted] = "None" if value is None else str(value)
    return out


def checked_config(config, params: dict, run_id: str):
    """`config` (the artifact, parsed) when each of its values is the run's immutable param of that key and it
    holds every param of the config (all but the outcome's, OUTCOME_PARAMS); TrackingError in one line naming the
    first key that differs, is added, is missing or is too long for a param to vouch for it."""
    if config is None:
        return None
    where = f"run {run_id}: {CONFIG_ARTIFACT}"
    if not isinstance(config, dict):
        raise TrackingError(f"{where} is a {type(config).__name__}, not a mapping of config sections")
    logged = {k: v for k, v in params.items() if not k.startswith(OUTCOME_PARAMS)}
    leaves = config_params(config, where=where)
    for key, text in leaves.items():
        if len(key) > MAX_KEY or len(text) > MAX_PARAM_VALUE:
            raise TrackingError(
                _one_line(
                    f"{where}: {key[:80]} is longer than a logged param keeps ({MAX_KEY} characters a key, "
                    f"{MAX_PARAM_VALUE} a value): it cannot be checked against the run's params; refused"
                )
            )
        if key not in logged:
            raise TrackingError(
                _one_line(
                    f"{where}: {key} is not among the params the run logged (added after the run); refused"
                )
            )
        if text != logged[key]:
            raise TrackingError(
                _one_line(
                    f"{where}: {key}={text[:80]!r} differs from the run's immutable param {key}="
                    f"{logged[key][:80]!r} (the artifact was replaced); refused"
                )
            )
    missing = sorted(set(logged) - set(leaves))
    if missing:
        raise TrackingError(
            _one_line(
                f"{where}: {missing[0]} (a param the run logged) is missing from it"
                f"{f' with {len(missing) - 1} more' if len(missing) > 1 else ''}; refused"
            )
        )
    return config


def record_audit(uri: str, run_id: str, tags: dict, report: dict, report_name: str) -> str | None:
    """Tag the run and log `audit/<report_name>` (JSON), both redacted (`redact`: secret-looking keys and every
    string through `redact_text`), without touching its metrics or status. An auditor who
    may only read the run's experiment (a team server's default READ) gets the line that says so, not an
    error."""
    client = backend.client(uri)
    try:  # what goes to the store passes the redactor, as every record does (a diff, a log line may hold a key)
        for key, value in redact({k: str(v) for k, v in tags.items()}).items():
            client.set_tag(run_id, key, value)
        client.log_dict(run_id, redact_strings(report), f"{AUDIT_REPORT_DIR}/{report_name}")
    except MlflowException as exc:
        if exc.error_code == "PERMISSION_DENIED":
            return (
                f"audit: not recorded on run {run_id}: this user may only read its experiment (MLflow "
                "permission READ); the verdict printed here is the audit's only record"
            )
        raise TrackingError(f"could not record the audit on run {run_id}: {_one_line(exc)}") from None
    return None


SAVED_MODEL_ARTIFACTS = "saved_model"  # a run that logs no MLflow model (tracking.log_model=false): stages.py
WEIGHTS_NPZ = "keras_weights.npz"  # tfpipe.models.warmstart.WEIGHTS_FILE (no Keras import here)


def sealed_weights(uri: str, run_id: str) -> dict:
    """The weights digest of the SavedModel run `run_id` recorded, from where nobody can change it afterwards:
    its `saved_model/` artifacts or its logged model `model`, whichever is whole against its seal with the
    seal's digest the run's immutable param DIGEST_PARAM; the digest is computed from that SavedModel's
    keras_weights.npz (`determinism.saved_weights_sha256`, covered by the seal), never read from a tag or the
    seal's facts. {"weights_sha256": digest or None, "seal_fact": the seal's own weights_sha256 fact,
    "source": which copy, "why": None, or why there is no digest}."""
    from tfpipe import determinism, files
    from tfpipe.tracking.model_uri import DIGEST_PARAM

    client = backend.client(uri)
    recorded = get_run(client, uri, run_id).data.params.get(DIGEST_PARAM)
    found = {"weights_sha256": None, "seal_fact": None, "source": None}
    if not recorded:
        return {**found, "why": f"the run records no {DIGEST_PARAM} (no sealed model, or an older tfpipe)"}
    whys: list[str] = []
    with tempfile.TemporaryDirectory(prefix="tfpipe-audit-") as tmp:
        for source in (f"{SAVED_MODEL_ARTIFACTS}/", f"runs:/{run_id}/model"):
            try:
                saved = _saved_model_copy(client, uri, run_id, source, Path(tmp) / str(len(whys)))
            except (MlflowException, OSError) as exc:
                whys.append(f"{source}: {_one_line(exc, 160)}")
                continue
            if saved is False:  # no such copy
                continue
            why = files.check_seal(saved) if saved else "its MLmodel names no SavedModel inside it"
            if why is None and files.seal_digest(saved) != recorded:
                why = f"not the SavedModel the run recorded ({DIGEST_PARAM} {recorded[:12]}...)"
            if why is None and not (saved / WEIGHTS_NPZ).is_file():
                why = f"no {WEIGHTS_NPZ} in it (exported by an older tfpipe)"
            if why:
                whys.append(f"{source}: {why}")
                continue
            weights = determinism.saved_weights_sha256(saved / WEIGHTS_NPZ)
            fact = files.seal_facts(saved).get("weights_sha256")
            return {"weights_sha256": weights, "seal_fact": fact, "source": source, "why": None}
    return {**found, "why": "; ".join(whys) or "the run logged no SavedModel"}


def _saved_model_copy(client: MlflowClient, uri: str, run_id: str, source: str, dest: Path):
    """The local SavedModel folder of `source` (None: a logged model naming none inside it; False: the run has
    no `saved_model/` artifacts)."""
    from tfpipe.tracking.model_uri import saved_model_folder

    if not source.startswith("runs:/"):
        if not client.list_artifacts(run_id, SAVED_MODEL_ARTIFACTS):
            return False
        return Path(client.download_artifacts(run_id, SAVED_MODEL_ARTIFACTS, str(dest)))
    from mlflow.artifacts import download_artifacts

    with backend.as_default_store(uri):
        local = download_artifacts(artifact_uri=source, dst_path=str(dest), tracking_uri=uri)
    return saved_model_folder(Path(local))
