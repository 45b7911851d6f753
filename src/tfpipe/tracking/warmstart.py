"""Where a warm start's weights come from: `train.init_from` as an MLflow model URI (`runs:/ID/model`,
`models:/NAME@ALIAS`, `models:/NAME/VERSION`) downloaded from the tracking store, or a local path as given.
Returns the local folder or file and what it was, for the run's `init.*` tags."""

from __future__ import annotations

from pathlib import Path

from tfpipe.tracking import backend, model_uri

KEY = "train.init_from"


def resolve(spec: str, tracking_cfg, project_root, dest: Path) -> tuple[Path, dict]:
    """(local path, tags) of `spec`; models are downloaded into `dest`. TrackingError in one line when the
    run, model, version or alias does not exist."""
    if not model_uri.is_model_uri(spec):
        return Path(spec), {"init.from": spec}
    uri = backend.resolve_tracking_uri(tracking_cfg, project_root)
    local, described = fetch(spec, uri, dest)
    return local, {"init.from": spec, **{f"init.{k}": v for k, v in described.items()}}


def fetch(spec: str, uri: str, dest: Path) -> tuple[Path, dict]:
    """The model URI `spec` downloaded from the store at `uri` into `dest`: (its SavedModel folder, what it
    named: source_run and, for the registry, source_model)."""
    local, described = model_uri.download(spec, uri, dest, KEY)
    saved = local / "artifacts" / "saved_model"  # tfpipe's logged model (tracking.models.log_pyfunc_model)
    return (saved if saved.is_dir() else local), described
