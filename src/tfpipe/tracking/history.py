"""Runs read back whole for a report (`tfpipe report`): params, tags, every metric's history, named artifacts.

    client = history.open_store(uri)                      # one line (TrackingError) when the store is not there
    runs = history.read_runs(client, uri, ids, artifacts=("plots/confusion_matrix.csv",))
    history.log_folder(uri, run_id, folder, "report")     # a finished report into a run's artifacts

What it gives: plain frozen dataclasses (`RunHistory`), no mlflow object. A metric's history is its (step, value)
points in the order of their steps, a step logged twice (a resumed run) kept at its latest value. An artifact is
its text, or absent from `artifacts` when the run has none by that path. What it does not do: resolve short ids
(`runids`), decide anything, or write to the store but in `log_folder`. An unknown run, or a local store (SQLite
file, file store folder) that is not there, is a TrackingError of one line: reading never creates a store.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, Iterable, Tuple

from mlflow import MlflowClient
from mlflow.exceptions import MlflowException

from tfpipe.errors import TrackingError, one_line
from tfpipe.tracking import backend
from tfpipe.tracking.redact import redact_url

Points = Tuple[Tuple[int, float], ...]


@dataclass(frozen=True)
class RunHistory:
    run_id: str
    name: str
    params: Dict[str, str]
    tags: Dict[str, str]
    metrics: Dict[str, Points]  # name -> ((step, value), ...) by step
    artifacts: Dict[str, str] = field(default_factory=dict)  # path -> text, of those asked for that it has

    def last(self, metric: str):
        """The metric's value at its last step, or None when the run has not logged it."""
        points = self.metrics.get(metric)
        return points[-1][1] if points else None


def open_store(uri: str) -> MlflowClient:
    """A client of the store at `uri`, which must exist: a SQLite file or a file store's folder that is not there
    is refused here (MLflow would create an empty one), a server that does not answer by `check_reachable`."""
    return backend.client(uri, must_exist=True)


def read_runs(
    client: MlflowClient, uri: str, run_ids: Iterable[str], artifacts: Tuple[str, ...] = ()
) -> list:
    """A RunHistory per run id, in order; TrackingError naming the first unknown one."""
    return [_read(client, uri, run_id, artifacts) for run_id in run_ids]


def _read(client: MlflowClient, uri: str, run_id: str, artifacts: Tuple[str, ...]) -> RunHistory:
    try:
        run = client.get_run(run_id)
        metrics = {name: _history(client, run_id, name) for name in sorted(run.data.metrics)}
    except MlflowException as exc:
        raise TrackingError(
            f"run {run_id!r}: not found in {redact_url(uri)} ({one_line(exc, 200)})"
        ) from None
    texts = {path: text for path in artifacts if (text := _artifact_text(client, run_id, path)) is not None}
    return RunHistory(
        run_id=run.info.run_id,
        name=run.info.run_name or "",
        params=dict(run.data.params),
        tags=dict(run.data.tags),
        metrics=metrics,
        artifacts=texts,
    )


def _history(client: MlflowClient, run_id: str, name: str) -> Points:
    """(step, value) by step; of a step logged more than once, the value logged last."""
    latest: dict = {}
    for m in sorted(client.get_metric_history(run_id, name), key=lambda m: (m.step, m.timestamp)):
        latest[int(m.step)] = float(m.value)
    return tuple(sorted(latest.items()))


def _artifact_text(client: MlflowClient, run_id: str, path: str):
    """The artifact's text, or None when the run has no file at `path` (or it is not text)."""
    folder, _, name = path.rpartition("/")
    try:
        if name not in {Path(a.path).name for a in client.list_artifacts(run_id, folder or None)}:
            return None
        with tempfile.TemporaryDirectory(prefix="tfpipe-report-") as tmp:
            return Path(client.download_artifacts(run_id, path, tmp)).read_text(encoding="utf-8")
    except (MlflowException, OSError, UnicodeDecodeError):
        return None


def log_folder(uri: str, run_id: str, folder: Path, artifact_path: str) -> None:
    """Every file of `folder` into run `run_id`'s artifacts under `artifact_path`."""
    try:
        backend.client(uri).log_artifacts(run_id, str(folder), artifact_path)
    except (MlflowException, OSError) as exc:
        raise TrackingError(
            f"could not log {folder} into run {run_id}'s artifacts ({artifact_path}/) in {redact_url(uri)}: "
            f"{one_line(exc, 200)}"
        ) from None
