"""The run file (`tracking.run_file`, run.json): the train stage's MLflow run id handed to evaluate and DVC."""

from __future__ import annotations

import json
from pathlib import Path

from tfpipe import files
from tfpipe.errors import TrackingError, one_line


def write_run_file(path, info: dict) -> None:
    files.write_json(path, info, sort_keys=True)


def read_run_file(path) -> dict:
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
    return info
