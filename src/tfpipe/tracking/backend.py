"""Which MLflow backend, is it there, and which experiment.

Precedence for the tracking URI: env MLFLOW_TRACKING_URI > `tracking.uri` > the project's
embedded store `sqlite:///<project_root>/mlflow.db`. A relative sqlite/file path in
`tracking.uri` is taken relative to the project root (stages may run from anywhere); the env
variable is used verbatim, as MLflow itself would.

A queued or `--temp` DVC experiment runs in a temporary copy of the repository that is deleted
afterwards; DVC then sets DVC_EXP_NAME and points DVC_ROOT at the real repository, whose store
(and artifact folder) the run must land in, so that root is used for the store instead.

Credentials come only from the environment (MLFLOW_TRACKING_USERNAME / MLFLOW_TRACKING_PASSWORD,
or MLFLOW_TRACKING_TOKEN), as MLflow reads them; `check_reachable` tries them once so a wrong
password stops a stage at its start with one line.
"""

from __future__ import annotations

import base64
import contextlib
import os
import socket
import ssl
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

from tfpipe.errors import TrackingError
from tfpipe.tracking import kinds
from tfpipe.tracking.redact import redact_url

REACHABLE_TIMEOUT_S = 3.0
LOCAL_SCHEMES = ("sqlite", "file", "")


def store_root(project_root) -> Path:
    """The folder local stores are anchored in: DVC_ROOT inside a DVC experiment, else `project_root`."""
    dvc_root = os.environ.get("DVC_ROOT", "").strip()
    if os.environ.get("DVC_EXP_NAME", "").strip() and dvc_root and Path(dvc_root).is_dir():
        return Path(dvc_root).resolve()
    return Path(project_root).resolve()


def resolve_tracking_uri(tracking_cfg, project_root) -> str:
    env = os.environ.get("MLFLOW_TRACKING_URI", "").strip()
    if env:
        return env
    root = store_root(project_root)
    uri = (tracking_cfg.uri or "").strip()
    if not uri:
        return f"sqlite:///{root / 'mlflow.db'}"
    return _anchor(uri, root)


def anchored(uri: str, project_root) -> str:
    """A store URI from a file of the project (run.json): a relative local path anchored in `store_root`."""
    return _anchor(uri, store_root(project_root))


def _anchor(uri: str, root: Path) -> str:
    """Relative local store paths -> absolute under the project root."""
    if uri.startswith("sqlite:///"):
        path = uri[len("sqlite:///") :]
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
    location = tracking_cfg.artifact_location
    if not location or not is_local(uri):
        return None
    if "://" in location or location.startswith("file:"):
        return location
    path = Path(location)
    if not path.is_absolute():
        path = store_root(project_root) / path
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
            raise TrackingError(
                f"tracking URI {shown}: folder {db.parent} does not exist (create it or fix tracking.uri / MLFLOW_TRACKING_URI)"
            )
        if db.exists() and not db.is_file():
            raise TrackingError(f"tracking URI {shown}: {db} is not a file")
        if not os.access(db if db.exists() else db.parent, os.W_OK):
            raise TrackingError(f"tracking URI {shown}: {db if db.exists() else db.parent} is not writable")
        return
    if kind in ("file", ""):
        store = Path(urllib.parse.urlparse(uri).path if kind == "file" else uri)
        if not store.parent.is_dir():
            raise TrackingError(f"tracking URI {shown}: folder {store.parent} does not exist")
        return
    if kind in ("http", "https"):
        url = uri.rstrip("/") + "/health"
        try:
            with urllib.request.urlopen(
                urllib.request.Request(url, method="GET"), timeout=timeout, context=_tls_context()
            ) as resp:
                resp.read(64)
        except urllib.error.HTTPError as exc:
            if exc.code >= 500:
                raise TrackingError(
                    f"MLflow tracking server {shown} answered HTTP {exc.code}; is it running behind the proxy?"
                ) from None
        except (urllib.error.URLError, socket.timeout, TimeoutError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise TrackingError(
                f"MLflow tracking server {shown} is unreachable ({reason}); start it or point "
                "MLFLOW_TRACKING_URI / tracking.uri elsewhere"
            ) from None
        check_credentials(uri, timeout)


def _tls_context():
    """What MLflow's client would trust: MLFLOW_TRACKING_INSECURE_TLS / MLFLOW_TRACKING_SERVER_CERT_PATH."""
    if os.environ.get("MLFLOW_TRACKING_INSECURE_TLS", "").strip().lower() in ("1", "true"):
        return ssl._create_unverified_context()  # noqa: S323 - the user asked for it, as MLflow honours it
    cafile = os.environ.get("MLFLOW_TRACKING_SERVER_CERT_PATH", "").strip()
    return ssl.create_default_context(cafile=cafile) if cafile else None


def _origin(url: str) -> tuple:
    parts = urllib.parse.urlsplit(url)
    return (
        parts.scheme.lower(),
        parts.hostname,
        parts.port or {"http": 80, "https": 443}.get(parts.scheme.lower()),
    )


class _SameOriginAuthRedirects(urllib.request.HTTPRedirectHandler):
    """Follows redirects, dropping Authorization when one leads to another origin (scheme, host, port)."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        new = super().redirect_request(req, fp, code, msg, headers, newurl)
        # urllib copies every header onto the redirected request: without this, a redirect to another host
        # would hand it the user's password (requests strips it the same way)
        if new is not None and _origin(newurl) != _origin(req.full_url):
            new.remove_header("Authorization")
        return new


def _opener():
    """urlopen's opener with the TLS context of `_tls_context` and `_SameOriginAuthRedirects`."""
    context = _tls_context()
    https = [urllib.request.HTTPSHandler(context=context)] if context else []
    return urllib.request.build_opener(_SameOriginAuthRedirects, *https)


def check_credentials(uri: str, timeout: float = REACHABLE_TIMEOUT_S) -> None:
    """One authenticated read (search one experiment) with the environment's credentials.

    HTTP 401 -> a one-line TrackingError naming the variables to set or fix; anything else
    (200, 403, 404 from a proxy, a timeout) is left for MLflow to report on first use.
    """
    user = os.environ.get("MLFLOW_TRACKING_USERNAME", "")
    password = os.environ.get("MLFLOW_TRACKING_PASSWORD", "")
    token = os.environ.get("MLFLOW_TRACKING_TOKEN", "")
    request = urllib.request.Request(
        uri.rstrip("/") + "/api/2.0/mlflow/experiments/search?max_results=1", method="GET"
    )
    if user and password:
        request.add_header(
            "Authorization", "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()
        )
    elif token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with _opener().open(request, timeout=timeout) as resp:
            resp.read(64)
    except urllib.error.HTTPError as exc:
        if exc.code != 401:
            return
        shown = redact_url(uri)
        if user and password:
            raise TrackingError(
                f"MLflow tracking server {shown} refused the credentials of user {user!r} (HTTP 401); "
                "fix MLFLOW_TRACKING_USERNAME / MLFLOW_TRACKING_PASSWORD"
            ) from None
        if token:
            raise TrackingError(
                f"MLflow tracking server {shown} refused MLFLOW_TRACKING_TOKEN (HTTP 401)"
            ) from None
        raise TrackingError(
            f"MLflow tracking server {shown} requires authentication (HTTP 401); set "
            "MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD in the environment"
        ) from None
    except (urllib.error.URLError, socket.timeout, TimeoutError, OSError):
        return


@contextlib.contextmanager
def as_default_store(uri: str):
    """`uri` as MLflow's default store meanwhile: MLflow 3.17 looks a logged model (`models:/m-...`) up in its
    default store, not in the store of the client at hand, both when `runs:/<id>/model` is downloaded and when a
    new registry version is made (so a --tracking-uri other than the current folder's found no model, and made
    ./mlflow.db)."""
    import mlflow

    previous = mlflow.get_tracking_uri() if mlflow.is_tracking_uri_set() else None
    mlflow.set_tracking_uri(uri)
    try:
        yield
    finally:
        # None: unset again (also the exported MLFLOW_TRACKING_URI): mlflow annotates `uri: str | Path`, but its
        # body takes None as "unset" (MLFLOW_TRACKING_URI.unset()); no public call unsets it otherwise
        mlflow.set_tracking_uri(previous)  # type: ignore[arg-type]


def ensure_experiment(client, name: str, artifact_location: str | None) -> str:
    """The id of experiment `name`, created (with `artifact_location`) if missing; declared model training."""
    from mlflow.exceptions import MlflowException

    for attempt in range(2):  # a concurrent creator may win the race once
        experiment = client.get_experiment_by_name(name)
        if experiment is not None:
            if experiment.lifecycle_stage != "active":
                raise TrackingError(
                    f"MLflow experiment {name!r} is deleted; restore it (mlflow experiments restore) or set "
                    "tracking.experiment_name to another name"
                )
            kinds.declare_model_training(client, experiment.experiment_id, experiment.tags)
            return experiment.experiment_id
        try:
            tags = kinds.experiment_tags()
            return client.create_experiment(name, artifact_location=artifact_location, tags=tags)
        except MlflowException as exc:
            if attempt or "RESOURCE_ALREADY_EXISTS" not in str(exc.error_code):
                raise
    raise AssertionError("unreachable")


def missing_store(uri: str) -> str | None:
    """The path of a local store (SQLite file, file-store folder) that does not exist; None for one that does,
    and for a server (whether it answers is `check_reachable`'s). Opening a missing one with MLflow would make
    and migrate an empty store: readers refuse it instead."""
    kind = scheme(uri)
    if kind == "sqlite":
        path = (uri.split(":///", 1)[1] if ":///" in uri else "").split("?", 1)[0]
        return path if path and not path.startswith(":memory:") and not Path(path).is_file() else None
    if kind in ("file", ""):
        path = urllib.parse.urlparse(uri).path if kind == "file" else uri
        return None if Path(path).is_dir() else path
    return None


def client(uri: str, must_exist: bool = False):
    """The one maker of tfpipe's MlflowClients: the store at `uri` answers (`check_reachable`: one line for a server
    that does not, or a local store's missing folder) and, with `must_exist`, a local store that is not there is
    refused (`missing_store`: a reader never makes an empty store). The store's own maker (`sqlite`) is apart."""
    from mlflow import MlflowClient

    check_reachable(uri)
    missing = must_exist and missing_store(uri)
    if missing:
        raise TrackingError(f"no MLflow store at {redact_url(uri)}: {missing} does not exist")
    return MlflowClient(tracking_uri=uri)
