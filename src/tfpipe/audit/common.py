"""What the audit modules share: item statuses and verdicts, the report table, the run's store, git, paths."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
from pathlib import Path
from typing import Optional

from tfpipe.errors import UserError  # noqa: F401 - re-exported for the audit modules

MATCH, DIFFERS, NA = "match", "differs", "n/a"
REPRODUCED, WITHIN_TOLERANCE, DIFFERS_VERDICT = "REPRODUCED", "WITHIN TOLERANCE", "DIFFERS"
# Wall-clock metrics differ on every run; they are never compared.
TIMING_MARKERS = ("seconds", "per_sec")
# environment: tag on the run -> key of provenance.package_versions()
ENV_TAGS = {
    "tf_version": "tensorflow",
    "keras_version": "keras",
    "mlflow_version": "mlflow",
    "dvc_version": "dvc",
    "tfds_version": "tensorflow_datasets",
    "hydra_version": "hydra",
}


@dataclasses.dataclass
class Item:
    name: str
    status: str
    recorded: str = ""
    present: str = ""
    detail: str = ""


def ok(items) -> bool:
    return all(item.status != DIFFERS for item in items)


def shorten(value, n: int = 40) -> str:
    text = "" if value is None else str(value)
    return text if len(text) <= n else text[: n - 3] + "..."


def format_table(items) -> str:
    rows = [("item", "status", "recorded", "present", "detail")]
    rows += [(i.name, i.status, shorten(i.recorded, 24), shorten(i.present, 24), i.detail) for i in items]
    widths = [max(len(r[c]) for r in rows) for c in range(4)]
    return (
        "\n".join(
            "  ".join(r[c].ljust(widths[c]) for c in range(4)) + ("  " + r[4] if r[4] else "") for r in rows
        ).rstrip()
        + "\n"
    )


# ----------------------------------------------------------------------------- helpers


def tracking_uri_for(root: Path, uri: Optional[str] = None) -> str:
    """--tracking-uri, else MLFLOW_TRACKING_URI, else the project's params.yaml tracking config."""
    from tfpipe import config
    from tfpipe.tracking import resolve_tracking_uri

    if uri:
        return uri
    params = root / "params.yaml"
    tracking_cfg = config.load_params(params).tracking if params.is_file() else config.TrackingConfig()
    return resolve_tracking_uri(tracking_cfg, root)


def git_in(root: Path, *args: str) -> subprocess.CompletedProcess:
    from tfpipe.provenance import run_git

    return run_git(root, *args, timeout=60)


def rooted_dict(cfg_dict: dict, root: Path) -> dict:
    out = json.loads(json.dumps(cfg_dict))
    for key in ("path", "output_dir"):
        value = (out.get("data") or {}).get(key)
        if value and not os.path.isabs(value):
            out["data"][key] = str(root / value)
    return out


def load_recorded(run_id: str, uri: str) -> dict:
    from tfpipe.tracking import reading

    return reading.load_run(uri, run_id)


def registry_line(run_id: str, root, uri: Optional[str] = None) -> str:
    """The run's registered model versions and their aliases, read live from the registry (one line)."""
    from tfpipe.tracking import registry

    try:
        versions = registry.model_versions(tracking_uri_for(Path(root), uri), run_id)
    except UserError as exc:
        return f"registered model: unknown ({exc})"
    shown = [
        f"{v['name']} version {v['version']} (aliases: {', '.join(v['aliases']) or 'none'})" for v in versions
    ]
    return "registered model: " + ("; ".join(shown) or "none")


def warm_start_line(run_id: str, root, uri: Optional[str] = None) -> str:
    """'warm start: ...' (the source, its run and registered version, which layers it filled) with a newline,
    or '' for a run trained from scratch."""
    tags = load_recorded(run_id, tracking_uri_for(Path(root), uri))["tags"]
    if "init.from" not in tags:
        return ""
    source = ", ".join(tags[k] for k in ("init.source_model", "init.source_run") if k in tags)
    return (
        f"warm start: {tags['init.from']}{f' ({source})' if source else ''}; layers loaded: "
        f"{tags.get('init.layers_loaded', '?')}; fresh: {tags.get('init.layers_fresh', '?')}; "
        f"weights sha256 {tags.get('init.sha256', '?')}\n"
    )
