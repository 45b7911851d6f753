"""Which MLflow backend, is it there, and which experiment.

Precedence for the tracking URI: env MLFLOW_TRACKING_URI > `tracking.uri` > the project's
embedded store `sqlite:///<project_root>/mlflow.db`. A relative sqlite/file path in
`tracking.uri` is taken relative to the project root (stages may run from anywhere); the env
variable is used verbatim, as MLflow itself would.
"""

from __future__ import annotations

import os
import socket
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

from tfpipe.errors import TrackingError
from tfpipe.tracking.redact import redact_url

REACHABLE_TIMEOUT_S = 3.0
LOCAL_SCHEMES = ("sqlite", "file", "")


def resolve_tracking_uri(tracking_cfg, project_root) -> str:
    env = os.environ.get("MLFLOW_TRACKING_URI", "").strip()
    if env:
        return env
    root = Path(project_root).resolve()
    uri = (getattr(tracking_cfg, "uri", None) or "").strip()
    if not uri:
        return f"sqlite:///{root / 'mlflow.db'}"
    return _anchor(uri, root)


def _anchor(uri: str, root: Path) -> str:
    """Relative local store paths -> absolute under the project root."""
    if uri.startswith("sqlite:///"):
        path = uri[len("sqlite:///"):]
        if path and not path.startswith("/") and not path.startswith(":memory:"):
            return f"sqlite:///{root / path}"
        return uri
    if "://" not in uri and not uri.startswith(("databricks", "file:")):
        return str(root / uri) if not os.path.isabs(uri) else uri
    return uri


def scheme(uri: str) -> str:
    """'sqlite', 'file', 'http', 'databricks', ... or '' for a plain path."""
    if uri.startswith("databricks"):
        return "databricks"
    if "://" in uri or uri.startswith("file:"):
        return urllib.parse.urlparse(uri).scheme.lower()
    return ""


def is_local(uri: str) -> bool:
    return scheme(uri) in LOCAL_SCHEMES


def artifact_location_for(tracking_cfg, project_root, uri: str) -> str | None:
    """`tracking.artifact_location` as a file URI under the project root, for local stores only.

    A remote tracking server decides where artifacts go (its artifact root / proxy); a local
    path from this machine would be wrong there, so None lets the server choose.
    """
    location = getattr(tracking_cfg, "artifact_location", None)
    if not location or not is_local(uri):
        return None
    if "://" in location or location.startswith("file:"):
        return location
    path = Path(location)
    if not path.is_absolute():
        path = Path(project_root).resolve() / path
    return path.resolve().as_uri()


def check_reachable(uri: str, timeout: float = REACHABLE_TIMEOUT_S) -> None:
    """Raise a one-line TrackingError unless the backend answers within `timeout` seconds.

    sqlite/file: the folder must exist (MLflow would otherwise fail deep inside SQLAlchemy).
    http(s): GET <uri>/health; refused, timed out, unresolvable or a 5xx answer fail. Any other
    HTTP answer (200, 401, 404 from a proxy) means something is listening; auth errors then
    come from MLflow itself. Other schemes (databricks, ...) are not probed.
    """
    kind = scheme(uri)
    shown = redact_url(uri)
    if kind == "sqlite":
        path = uri.split(":///", 1)[1] if ":///" in uri else ""
        path = path.split("?", 1)[0]
        if not path or path.startswith(":memory:"):
            return
        db = Path(path)
        if not db.parent.is_dir():
            raise TrackingError(f"tracking URI {shown}: folder {db.parent} does not exist (create it or fix tracking.uri / MLFLOW_TRACKING_URI)")
        if db.exists() and not db.is_file():
            raise TrackingError(f"tracking URI {shown}: {db} is not a file")
        if not os.access(db if db.exists() else db.parent, os.W_OK):
            raise TrackingError(f"tracking URI {shown}: {db if db.exists() else db.parent} is not writable")
        return
    if kind in ("file", ""):
        path = Path(urllib.parse.urlparse(uri).path if kind == "file" else uri)
        if not path.parent.is_dir():
            raise TrackingError(f"tracking URI {shown}: folder {path.parent} does not exist")
        return
    if kind in ("http", "https"):
        url = uri.rstrip("/") + "/health"
        try:
            with urllib.request.urlopen(urllib.request.Request(url, method="GET"), timeout=timeout) as resp:
                resp.read(64)
        except urllib.error.HTTPError as exc:
            if exc.code >= 500:
                raise TrackingError(f"MLflow tracking server {shown} answered HTTP {exc.code}; is it running behind the proxy?") from None
        except (urllib.error.URLError, socket.timeout, TimeoutError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise TrackingError(
                f"MLflow tracking server {shown} is unreachable ({reason}); start it or point "
                "MLFLOW_TRACKING_URI / tracking.uri elsewhere"
            ) from None


def ensure_experiment(client, name: str, artifact_location: str | None) -> str:
    """The id of experiment `name`, created (with `artifact_location`) if missing."""
    from mlflow.exceptions import MlflowException

    for attempt in range(2):  # a concurrent creator may win the race once
        experiment = client.get_experiment_by_name(name)
        if experiment is not None:
            if experiment.lifecycle_stage != "active":
                raise TrackingError(
                    f"MLflow experiment {name!r} is deleted; restore it (mlflow experiments restore) or set "
                    "tracking.experiment_name to another name"
                )
            return experiment.experiment_id
        try:
            return client.create_experiment(name, artifact_location=artifact_location)
        except MlflowException as exc:
            if attempt or "RESOURCE_ALREADY_EXISTS" not in str(exc.error_code):
                raise
    raise AssertionError("unreachable")
