"""The weights a warm-started run started from, for its re-run: fetched again (the registered version the
run resolved, not where its alias points today; a local path as recorded, else under the auditor's project)
and accepted only when their digest is the run's recorded `init.sha256`, since the store and the files are
untrusted input. The re-run then starts from a copy of them in its temporary folder."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Optional

from tfpipe.errors import UserError

INIT_FILE = "init_weights.npz"  # in the re-run's temporary folder: its train.init_from


def recorded_source(run_id: str, tags: dict, root: Path, uri: str, tmp: Path, log) -> Optional[Path]:
    """The verified weights file for the re-run's `train.init_from`, or None for a run trained from scratch;
    UserError in one line when the source is gone or no longer what the run started from."""
    spec = tags.get("init.from")
    if not spec:
        return None
    import numpy as np

    from tfpipe.models import warmstart  # TensorFlow: imported only when a warm-started run is re-run

    recorded = tags.get("init.sha256")
    if not recorded:
        raise UserError(
            f"run {run_id}: warm-started from {spec} without an init.sha256 tag; cannot re-create it"
        )
    fetched = Path(tempfile.mkdtemp(prefix="init-source-", dir=tmp))
    weights = warmstart.read_source(_local(spec, tags, root, uri, fetched), given=spec)
    found = warmstart.digest(weights)
    if found != recorded:
        raise UserError(
            f"run {run_id}: its warm-start source {spec} now holds other weights (sha256 {found[:12]}..., the "
            f"run started from {recorded[:12]}...); cannot re-create it"
        )
    path = tmp / INIT_FILE
    with open(path, "wb") as fh:
        np.savez(fh, **weights)
    log(
        f"warm start: {spec} checked against the recorded init.sha256 {recorded[:12]}...: the re-run starts from it"
    )
    return path


def _local(spec: str, tags: dict, root: Path, uri: str, dest: Path) -> Path:
    from tfpipe.tracking import model_uri
    from tfpipe.tracking import warmstart as sources

    if not model_uri.is_model_uri(spec):
        path = Path(spec)
        return path if path.is_absolute() else root / path
    name, version = tags.get("init.source_model", "").rpartition(" version ")[::2]
    if spec.startswith("models:/") and name and version:
        spec = f"models:/{name}/{version}"  # the version the run resolved: an alias may have moved since
    if spec.startswith("runs:/") and tags.get("init.source_run"):
        # the run the spec named then, by its whole id: a prefix typed then may be ambiguous by now
        spec = f"runs:/{tags['init.source_run']}/{spec[len('runs:/') :].partition('/')[2]}"
    return sources.fetch(spec, uri, dest)[0]
