"""The config item of `check`: the config the run recorded (config/resolved.yaml) against the one the project
makes now, made the way the run's was and compared like with like, so an untouched project matches whichever
entry point made the run (`dvc repro`, `dvc exp run`, a stage command, `mlflow run`, a sweep's job, a tuning
trial):

- made the same way (`tfpipe.config.origin`): the params file the run read (params.yaml, or --params FILE)
  with the run's overrides on top, or conf/ composed with them (a sweep's job); a run that recorded neither
  (an older one) against params.yaml;
- `auto` resolved on both sides, or on neither: data.source (the recorded config holds what `auto` decided;
  here `tfpipe.config.rooting.rooted` decides it as the stages do), precision.policy (the run's tag
  precision.resolved; here `hardware.resolve_policy` on this host); never a raw `auto` against a resolved
  value;
- paths in one form: absolute ones inside the project project-relative, on each side against its own project
  (the recorded config holds the data paths absolute, in the project of tag tfpipe.project, also when the run
  ran in a DVC temporary copy or the project has moved since);
- secrets in one form: both sides redacted as the run's config was when it was logged.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Optional

from tfpipe.audit.common import DIFFERS, MATCH, NA, Item, UserError

SHOWN = 4  # differing keys named in the item's detail
PRECISION, SOURCE = "precision.policy", "data.source"


def present_config(run: dict, root: Path) -> tuple:
    """(Config or None, what it is made of, why there is none): the config the project at `root` makes now,
    the way the run's was made (`tfpipe.config.origin`; a run that did not record it: params.yaml)."""
    from tfpipe.config import origin
    from tfpipe.errors import one_line

    made = origin.recorded(run.get("tags") or {}) or origin.from_params(None)
    if "unreadable" in made:
        return None, "?", f"how the run's config was made: {made['unreadable']}"
    label = origin.describe(made)
    params = None if made["from"] == "conf" else _in_project(made.get("params") or "params.yaml", run, root)
    if params is not None and not params.is_file() and (made.get("params") or not made["overrides"]):
        return None, label, f"{params} missing"
    try:
        return origin.make(made, root, params), label, ""
    except UserError as exc:
        overrides = f" with the run's overrides {' '.join(made['overrides'])}" if made["overrides"] else ""
        return None, label, f"{label}{overrides}: {one_line(exc)}"


def check_config(run: dict, root: Path, present: tuple) -> Item:
    """The `config` item: every value equal once both sides are in one form (the module docstring)."""
    recorded = run.get("config")
    cfg, label, why = present
    if recorded is None:
        return Item("config", NA, "", "", "no config/resolved.yaml on the run")
    if cfg is None:
        return Item("config", DIFFERS, "resolved.yaml", label, why)
    now_tree, note = _rooted(cfg, root)
    a = comparable(recorded, _run_project(run, root))
    b = comparable(now_tree, root)
    shown_a, shown_b = dict(a), dict(b)
    _resolve_autos(a, b, shown_a, shown_b, run, cfg)
    changed = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))
    if not changed:
        made = f" (overrides: {' '.join(overrides)})" if (overrides := _overrides(run)) else ""
        return Item("config", MATCH, "resolved.yaml", label, f"{len(a)} values equal{made}")
    detail = "; ".join(f"{k}: {shown_a.get(k)!r} -> {shown_b.get(k)!r}" for k in changed[:SHOWN])
    more = f" (+{len(changed) - SHOWN} more)" if len(changed) > SHOWN else ""
    return Item("config", DIFFERS, "resolved.yaml", label, detail + more + (f" ({note})" if note else ""))


def _overrides(run: dict) -> list:
    from tfpipe.config import origin

    made = origin.recorded(run.get("tags") or {}) or {}
    return list(made.get("overrides") or [])


def comparable(tree: dict, project: Path) -> dict:
    """The flat config as compared: secrets redacted as a run's config is when logged, absolute paths inside
    `project` made project-relative."""
    from tfpipe.config import flatten
    from tfpipe.tracking.redact import redact_tree  # the redaction the logged config went through

    return {k: _project_relative(v, project) for k, v in flatten(redact_tree(tree)).items()}


def _rooted(cfg, root: Path) -> tuple:
    """The present config as the stages run it (data paths absolute, data.source=auto decided), and a note
    when `auto` cannot be decided here (the reason)."""
    from tfpipe.config.rooting import rooted
    from tfpipe.errors import one_line

    try:
        return rooted(cfg, root).to_dict(), ""
    except UserError as exc:  # a data.source=auto the stages could not decide either
        return cfg.to_dict(), f"data.source=auto not decidable here: {one_line(exc, 200)}"


def _resolve_autos(a: dict, b: dict, shown_a: dict, shown_b: dict, run: dict, cfg) -> None:
    """Each `auto` value as what it resolved to, on both sides (a: recorded, b: present), or on neither."""
    from tfpipe.hardware import AUTO, resolve_policy

    # data.source: the recorded config holds the decided value; a run from before that holds `auto`
    if a.get(SOURCE) == AUTO:
        b[SOURCE] = shown_b[SOURCE] = cfg.data.source
    # precision.policy: the recorded config holds it as given, the tag precision.resolved what it ran as
    ran_as = (
        (run.get("tags") or {}).get("precision.resolved") if a.get(PRECISION) == AUTO else a.get(PRECISION)
    )
    if ran_as and PRECISION in b:
        here = resolve_policy(b[PRECISION])
        if a[PRECISION] == AUTO:
            shown_a[PRECISION] = f"auto, ran as {ran_as}"
        if b[PRECISION] == AUTO:
            shown_b[PRECISION] = f"auto, here {here}"
        a[PRECISION], b[PRECISION] = ran_as, here


def _run_project(run: dict, root: Path) -> Path:
    """The project the run's recorded paths name (tag tfpipe.project), else `root`."""
    project = (run.get("tags") or {}).get("tfpipe.project")
    return Path(project) if project and os.path.isabs(project) else root


def _in_project(path: str, run: dict, root: Path) -> Path:
    """A path the run recorded (relative to its project, or absolute inside it) in the project at `root`."""
    relative = _project_relative(path, _run_project(run, root))
    return Path(relative) if os.path.isabs(relative) else root / relative


def _project_relative(value, project: Path):
    """An absolute path inside `project` as a project-relative one; anything else as it is."""
    if not isinstance(value, str) or not os.path.isabs(value):
        return value
    for base in {str(project), os.path.realpath(project)}:
        for path in {value, os.path.realpath(value)}:
            relative = _relative_to(path, base)
            if relative is not None:
                return relative
    return value


def _relative_to(path: str, base: str) -> Optional[str]:
    try:
        return Path(path).relative_to(base).as_posix()
    except ValueError:
        return None
