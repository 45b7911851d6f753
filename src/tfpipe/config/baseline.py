"""What a run's config changes against the committed one, for the run's name.

What it knows: the config a stage runs (params.yaml with any overrides, a DVC experiment's `-S` values already
in it) and git's copy of params.yaml at the baseline commit (a DVC experiment's baseline, DVC_EXP_BASELINE_REV,
else HEAD). What it does: both through the same loader (defaults filled alike), the keys whose values differ,
as the overrides that would make them; a group switched (dataset=imdb, model=resnet) is that one override,
not the keys that came with it. What it does not: read anything but git's own params.yaml (no git, no commit,
no params.yaml there, or one that does not load: no differences), or judge which difference matters.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Optional

import yaml

from tfpipe.errors import USER_ERRORS

GROUP_KEYS = {"dataset": "dataset.name", "model": "model.name", "strategy": "strategy.name"}
GROUP_KEYS["precision"] = "precision.policy"
FOLLOWS = {"dataset": ("dataset.", "data.")}  # a group's keys, and those that follow from it
SKIPPED = ("tracking.",)  # where the run is recorded: no difference in what it trains
FIRST = ("train.", "model.")  # listed first (a run's name shows as many as fit): the training's own settings


def committed(root: Path, rev: str) -> Optional[dict]:
    """params.yaml at `rev` in the git repository at `root`; None where there is none (or `root` is not the
    repository's top: git would look upwards, into whatever repository holds the folder)."""
    if not (root / ".git").exists():
        return None
    try:
        shown = subprocess.run(
            ["git", "show", f"{rev}:params.yaml"], cwd=root, capture_output=True, text=True, timeout=30
        )
        raw = yaml.safe_load(shown.stdout) if shown.returncode == 0 else None
    except (OSError, subprocess.SubprocessError, yaml.YAMLError):
        return None
    return raw if isinstance(raw, dict) else None


def differences(cfg, root, environ=None) -> list:
    """`key=value` for each config value that differs from the committed params.yaml; [] when unknown."""
    from tfpipe.config.load import from_dict

    environ = os.environ if environ is None else environ
    raw = committed(Path(root), environ.get("DVC_EXP_BASELINE_REV", "").strip() or "HEAD")
    if raw is None:
        return []
    try:
        before = from_dict(raw, origin="params.yaml at the baseline commit").flat()
    except USER_ERRORS:
        return []
    now = cfg.flat()
    switched = [g for g, key in GROUP_KEYS.items() if now.get(key) != before.get(key)]
    hidden = tuple(p for g in switched for p in FOLLOWS.get(g, (f"{g}.",)))
    changed = [
        f"{key}={_text(value)}"
        for key, value in now.items()
        if not key.startswith((*SKIPPED, *hidden)) and not _same(before.get(key, object()), value, Path(root))
    ]
    first = [c for c in changed if c.startswith(FIRST)]  # what people change most, where a name shows it
    return (
        [f"{g}={now.get(GROUP_KEYS[g])}" for g in switched] + first + [c for c in changed if c not in first]
    )


def _same(before, now, root: Path) -> bool:
    """Equal, or one path: a stage runs its config rooted in the project (`data/raw/x` as `<root>/data/raw/x`)."""
    if before == now:
        return True
    if isinstance(before, str) and isinstance(now, str) and before and os.path.isabs(now):
        return not os.path.isabs(before) and os.path.normpath(root / before) == os.path.normpath(now)
    return False


def _text(value) -> str:
    """A value as an override writes it: lists compact (`[8,8]`), numbers and strings as they are."""
    if isinstance(value, (list, tuple, dict)):
        return json.dumps(value, separators=(",", ":"))
    return str(value)
