"""How a stage's config was made, recorded on its run so that `tfpipe audit RUN` makes it again the same way
from the project as it is now. Without it, a run made with overrides would be audited against params.yaml
alone.

Two ways, as the entry points make it:
- a stage's command line (`dvc repro`, `dvc exp run`, `python -m pipeline.<stage>`, `tfpipe <stage>`, `mlflow
  run`, a tuning trial's `tfpipe run-all`): the params file (params.yaml, or --params FILE) with the
  overrides, if any, on top (`entry.load_config`; `tfpipe.config.overlay`): {"from": "params", "params":
  FILE|None, "overrides": [..]}
- a sweep's job (`tfpipe sweep`, `python -m pipeline.sweep`): conf/ composed by Hydra with the job's
  overrides: {"from": "conf", "overrides": [...]}

The entry point says which in env TFPIPE_CONFIG_ORIGIN (`declare`, JSON); the train stage's run records it as
the tag `tfpipe.config.origin` (`tfpipe.tracking.naming.context_tags`: the same JSON, the values of
secret-looking keys as '***'); `recorded` reads it back and `make` makes the config again. A run recorded
before the tag existed has none: its config is audited against params.yaml, as it always was.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Optional, Sequence

ENV = "TFPIPE_CONFIG_ORIGIN"
TAG = "tfpipe.config.origin"


def from_params(params: Optional[str], overrides: Sequence[str] = ()) -> dict:
    """A stage's command line: the params file (None: params.yaml, not named) with `overrides` on top."""
    return {"from": "params", "params": params, "overrides": [str(o) for o in overrides]}


def from_conf(overrides: Sequence[str]) -> dict:
    """A Hydra job's: conf/ composed with its task overrides, without Hydra's own (`hydra.*`: where it
    writes)."""
    return {
        "from": "conf",
        "overrides": [str(o) for o in overrides if not str(o).lstrip("+~").startswith("hydra.")],
    }


def declare(made: dict) -> Optional[str]:
    """Say in this process's environment (and its children's) how the config is made; returns the variable's
    previous value, for `restore`."""
    previous = os.environ.get(ENV)
    os.environ[ENV] = json.dumps(made)
    return previous


def restore(previous: Optional[str]) -> None:
    if previous is None:
        os.environ.pop(ENV, None)
    else:
        os.environ[ENV] = previous


def declared(environ=None) -> Optional[dict]:
    """What the entry point declared, checked; None when none did."""
    return _checked((os.environ if environ is None else environ).get(ENV, ""))


def recorded(run_tags: dict) -> Optional[dict]:
    """What the run recorded (tag `tfpipe.config.origin`), checked; None when it recorded nothing, and
    {"unreadable": why} when the tag does not read back (cut by the store's limit on a tag's length?)."""
    if TAG not in run_tags:
        return None
    unsafe = [o for o in _listed(run_tags[TAG]) if _unsafe(o)]
    if unsafe:
        return {
            "unreadable": f"its tag {TAG} holds {unsafe[0]!r}: Hydra's keys, flags, interpolations: not composed"
        }
    return _checked(run_tags[TAG]) or {"unreadable": f"its tag {TAG} does not read back (cut?)"}


def _listed(text: str) -> list:
    try:
        made = json.loads(text)
    except (json.JSONDecodeError, TypeError):
        return []
    overrides = made.get("overrides") if isinstance(made, dict) else None
    return [str(o) for o in overrides] if isinstance(overrides, list) else []


def _checked(text: str) -> Optional[dict]:
    try:
        made = json.loads(text) if str(text).strip() else None
    except json.JSONDecodeError:
        return None
    if not isinstance(made, dict) or not isinstance(made.get("overrides"), list):
        return None
    overrides = [str(o) for o in made["overrides"]]
    if any(_unsafe(o) for o in overrides):
        return None  # a tag is anyone's to edit: Hydra's own keys (a search path imports packages), flags and
        # interpolations (resolvers, the environment) never reach compose from it
    if made.get("from") == "conf":
        return from_conf(overrides)
    if made.get("from") == "params" and isinstance(made.get("params"), (str, type(None))):
        return from_params(made["params"], overrides)
    return None


def _unsafe(override: str) -> bool:
    key = override.split("=", 1)[0].lstrip("+~")
    return (
        key.startswith(("hydra", "-"))
        or "${" in override
        or "=" not in override
        and not override.startswith("~")
    )


def describe(made: dict) -> str:
    """A few words for the audit's table: what the config is made of (`params.yaml + overrides`,
    `conf/`...)."""
    base = "conf/" if made["from"] == "conf" else Path(made.get("params") or "params.yaml").name
    return f"{base} + overrides" if made["overrides"] else base


def make(made: dict, root: Path, params: Optional[Path] = None):
    """The checked Config made the way `made` says from the project at `root` now, as the entry point made it
    (`tfpipe.commands.entry.load_config`, the sweep's Hydra job). `params`: where the params file is now
    (default: as recorded, under `root`). ConfigError in one line when it cannot be made."""
    from tfpipe.config import overlay
    from tfpipe.config.compose import CONF_DIR, PARAMS_FILE, compose, load_params

    conf = root / CONF_DIR
    if made["from"] == "conf":
        return compose(made["overrides"], config_dir=conf)
    path = params or root / (made.get("params") or PARAMS_FILE)
    if not made["overrides"]:
        return load_params(path)
    return overlay.load(made["overrides"], path, conf, named=bool(made.get("params")))[0]
