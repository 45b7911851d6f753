"""The run file (`tracking.run_file`, run.json): the train stage's MLflow run id handed to evaluate and DVC.

{"run_id", "experiment_id", "run_name", "tracking_uri"}: the store is written relative to the project when it is
a local store inside it (`sqlite:///mlflow.db`, `mlruns`), so the file is the same in every copy of the project
(a DVC temporary copy, a clone, another host); other stores as given, credentials hidden. Reading with the
project root anchors a relative store there again; an absolute one (run files of older versions) is kept.
"""

from __future__ import annotations

import json
import urllib.parse
from pathlib import Path

from tfpipe import files
from tfpipe.errors import TrackingError, one_line
from tfpipe.tracking import backend


def write_run_file(path, info: dict) -> None:
    files.write_json(path, info, sort_keys=True)


def portable_uri(uri: str, project_root) -> str:
    """`uri` as the run file records it: relative to the project (`backend.store_root`) when it is a local store
    inside the project, else unchanged."""
    kind = backend.scheme(uri)
    if kind == "sqlite":
        rest = uri.split(":///", 1)[1] if ":///" in uri else ""
        path, sep, query = rest.partition("?")
    elif kind in ("file", ""):
        path, sep, query = (urllib.parse.urlparse(uri).path if kind == "file" else uri), "", ""
    else:
        return uri
    if not path or path.startswith(":memory:"):
        return uri
    try:  # a relative path is MLflow's: relative to the working directory
        inside = Path(path).resolve().relative_to(backend.store_root(project_root)).as_posix()
    except ValueError:  # outside the project: a shared store, kept absolute
        return uri
    return f"sqlite:///{inside}{sep}{query}" if kind == "sqlite" else inside


def read_run_file(path, project_root=None) -> dict:
    """The run file's content; with `project_root`, its `tracking_uri` anchored there (an absolute URI)."""
    path = Path(path)
    if not path.is_file():
        raise TrackingError(
            f"{path}: run file not found; run the train stage first (it records the MLflow run id there)"
        )
    try:
        info = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise TrackingError(
            f"{path}: not a readable run file ({one_line(exc)}); re-run the train stage"
        ) from None
    if not isinstance(info, dict) or not info.get("run_id"):
        raise TrackingError(f"{path}: has no run_id; re-run the train stage")
    uri = info.get("tracking_uri")
    if project_root is not None and isinstance(uri, str) and uri.strip():
        info["tracking_uri"] = backend.anchored(uri.strip(), project_root)
    return info
