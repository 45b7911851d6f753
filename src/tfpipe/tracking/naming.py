"""What a run is called and where it says it comes from.

Name: what differs first, then who it is: `{what differs} {dataset}-{model}-{first 6 hex of the run id}`, e.g.
`learning_rate=0.01,epochs=3 cifar10-cnn-3fa9c1`; a run where nothing differs, `{dataset}-{model}-{strategy}-
{precision}-{id}`, e.g. `cifar10-cnn-one_device-float32-3fa9c1`. What differs, the first that says anything: the
tuner's trial (`trial3`); the overrides of the Hydra sweep job running in this process (the swept ones); the
config's values that differ from params.yaml at the baseline commit (`tfpipe.config.baseline`: a DVC
experiment's `-S` values, a stage command's or `mlflow run -P` overrides, an edited params.yaml); the entry
point's overrides where there is no git; the DVC experiment's name (env DVC_EXP_NAME). The MLflow UI cuts a
name at about 40 characters: what tells runs apart comes first. The run id's head keeps two runs of one
configuration apart and names one run the same every time. `tracking.run_name`, when the config has that key
and sets it, is used as is.

A queued or `--temp` DVC experiment runs in a temporary copy of the repository that DVC deletes: paths the run
records (`mlflow.source.name`, `tfpipe.project`, the dataset source, absolute paths in params and in the
resolved config) name the same place in the project (env DVC_ROOT, see `backend.store_root`) instead.

Where: a run `mlflow run` made in another experiment than the project's (no --experiment-name) is kept and named
in one warning line (`warn_other_experiment`). `mlflow run file:///path` records its run's `mlflow.source.name`
as the current directory joined to the URI (`<cwd>/file:/path`); `repair_project_source` names the project.
"""

from __future__ import annotations

import json
import logging
import os
import sys
from pathlib import Path

from tfpipe.errors import one_line
from tfpipe.tracking import backend, kinds
from tfpipe.tracking.redact import is_secret_key, redact_text, redact_url
from tfpipe.tracking.runfile import portable_uri
from tfpipe.tracking.tags import run_name as base_name

log = logging.getLogger(__name__)

PARENT_RUN_ENV = "TFPIPE_PARENT_RUN_ID"  # set by `pipeline.sweep`: the sweep's parent run
TUNE_TRIAL_ENV = "TFPIPE_TUNE_TRIAL_NUMBER"  # set by `pipeline.tune`: the trial this run is (tag tune.trial)
ID_CHARS = 6  # of the run id: 16.7 million values, so two runs of one configuration practically never collide
MAX_DIFFERS = 40  # characters of the part that says what differs (the MLflow UI's name column is narrow)
NAMED_KEYS = frozenset(
    {"dataset", "model", "dataset.name", "model.name"}
)  # a name after what differs shows them
QUOTES = "'\""  # around an override's value on a command line
SOURCE_TAG = "mlflow.source.name"


def context_tags() -> dict:
    """Where this run sits: its sweep's parent run (MLflow nests it under the parent in the UI), the tuning
    trial it is, inside `dvc exp run` the DVC experiment name and baseline commit; how its config was made."""
    tags = {}
    for tag, env in (
        ("mlflow.parentRunId", PARENT_RUN_ENV),
        ("tune.trial", TUNE_TRIAL_ENV),
        ("dvc.exp_name", "DVC_EXP_NAME"),
        ("dvc.exp_baseline", "DVC_EXP_BASELINE_REV"),
    ):
        value = os.environ.get(env, "").strip()
        if value:
            tags[tag] = value
    return {**tags, **config_origin_tags()}


def config_origin_tags() -> dict:
    """How the entry point made the config (`tfpipe.config.origin`), as tag `tfpipe.config.origin` (JSON; the
    values of secret-looking keys among the overrides as '***'); {} when none said."""
    from tfpipe.config import origin

    made = origin.declared()
    if made is None:
        return {}
    shown = []
    for override in made["overrides"]:
        key, sep, _ = override.partition("=")
        shown.append(f"{key}=***" if sep and is_secret_key(key.lstrip("+~").strip()) else override)
    return {origin.TAG: json.dumps({**made, "overrides": shown})}


def run_name(cfg, run_id: str, base: str | None = None, root=None) -> str:
    """The name of run `run_id` (see the module docstring); `base`: `tags.run_name(cfg)` when known; `root`:
    the project, whose git holds the baseline params.yaml."""
    given = getattr(cfg.tracking, "run_name", None)
    if given:
        return str(given)
    differs = what_differs(cfg, root)
    if not differs:
        return redact_text(f"{base or base_name(cfg)}-{run_id[:ID_CHARS]}")
    return redact_text(f"{differs} {cfg.dataset.name}-{cfg.model.name}-{run_id[:ID_CHARS]}")


def what_differs(cfg=None, root=None) -> str:
    """The tuning trial, the sweep job's overrides, the config's differences from the baseline commit, the
    entry point's overrides or the DVC experiment (see the module docstring); '' for a run like the committed."""
    trial = os.environ.get(TUNE_TRIAL_ENV, "").strip()
    if trial:
        return f"trial{trial}"
    for overrides in (sweep_overrides, lambda: _baseline(cfg, root), _declared_overrides):
        shown = _joined([shown for shown in map(_shown, overrides()) if shown])
        if shown:
            return shown
    return os.environ.get("DVC_EXP_NAME", "").strip()[:MAX_DIFFERS]


def _joined(items: list) -> str:
    """The items, comma-separated, as many whole ones as fit in MAX_DIFFERS characters (a first longer one cut)."""
    out = items[0][:MAX_DIFFERS] if items else ""
    for item in items[1:]:
        if len(out) + 1 + len(item) > MAX_DIFFERS:
            break
        out += "," + item
    return out


def _baseline(cfg, root) -> list:
    if cfg is None or root is None:
        return []
    from tfpipe.config import baseline

    return baseline.differences(cfg, root)


def _declared_overrides() -> list:
    from tfpipe.config import origin

    made = origin.declared()
    return list(made["overrides"]) if made else []


def sweep_overrides() -> list:
    """The overrides of the Hydra job this process runs (Hydra holds a job's config while it runs and restores
    the previous one after); of a sweep's job only the swept ones when known. [] outside a job."""
    from hydra.core.hydra_config import HydraConfig

    if not HydraConfig.initialized():
        return []
    hydra = HydraConfig.get()
    job = [str(o) for o in hydra.overrides.task or ()]
    swept = {*_swept_keys(sys.argv[1:]), *(hydra.sweeper.get("params") or {})}
    return [o for o in job if o.lstrip("+~").partition("=")[0].strip() in swept] if swept else job


def _swept_keys(args) -> set:
    """Keys a sweep's command line (sys.argv, as `tfpipe.launch.sweeps` reads it) sweeps over: `k=a,b`,
    `k=range(..)`, `k=choice(..)`; none when it is not Hydra's command line."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    try:
        parsed = OverridesParser.create().parse_overrides([a for a in args if not a.startswith("-")])
    except Exception:  # HydraException: another program's arguments (pytest's, an embedding tool's)
        return set()
    return {o.key_or_group for o in parsed if o.is_sweep_override()}


def _shown(override: str) -> str:
    """`train.optimizer.learning_rate=0.01` -> `learning_rate=0.01`, `train.optimizer.name=sgd` ->
    `optimizer=sgd`, `precision.policy=float32` -> `precision=float32`; '' for the dataset and model (the name
    shows them), deletions and secret-looking keys."""
    key, sep, value = override.lstrip("+~").partition("=")
    key = key.strip()
    if not sep or key in NAMED_KEYS or key.startswith("hydra.") or is_secret_key(key):
        return ""
    parts = key.split(".")
    label = parts[-2] if parts[-1] in ("name", "policy") and len(parts) > 1 else parts[-1]
    return f"{label}={value.strip().strip(QUOTES)}"


def recorded_path(path, project_root) -> str:
    """`path` as a run records it: inside a DVC temporary copy (`project_root`), the same path in the project."""
    if project_root is None:
        return str(path)
    working, project = Path(project_root).resolve(), backend.store_root(project_root)
    try:
        inside = Path(path).resolve().relative_to(working)
    except ValueError:  # not in the working copy: as it is
        return str(path)
    return str(project / inside) if project != working else str(path)


def recorded_values(tree, project_root):
    """A mapping (nested or flat: params, the resolved config) with its absolute paths as `recorded_path` shows
    them; as it is outside a DVC temporary copy."""
    if project_root is None or backend.store_root(project_root) == Path(project_root).resolve():
        return tree
    if isinstance(tree, dict):
        return {k: recorded_values(v, project_root) for k, v in tree.items()}
    if isinstance(tree, list):
        return [recorded_values(v, project_root) for v in tree]
    return recorded_path(tree, project_root) if isinstance(tree, str) and os.path.isabs(tree) else tree


def source_tags(project_root) -> dict:
    """`tfpipe.project` (the project's folder) and, when the entry script MLflow records as `mlflow.source.name`
    (sys.argv[0]) lies in a DVC temporary copy, that script in the project."""
    tags = {"tfpipe.project": str(backend.store_root(project_root))}
    main = sys.argv[0] if sys.argv and sys.argv[0] else ""
    if main and recorded_path(main, project_root) != main:
        tags["mlflow.source.name"] = recorded_path(main, project_root)
    return tags


def joined_file_uri(source: str) -> bool:
    """Whether `source` is MLflow 3's `mlflow.source.name` of `mlflow run file:///path`: `os.path.abspath` of the
    URI, which takes it for a relative path (`/here/file:/path`; `mlflow run /path` records `file:///path`)."""
    head, sep, _ = source.partition("/file:/")
    return bool(sep) and head.startswith("/")


def repair_project_source(client, run_id: str, project_root) -> None:
    """Run `run_id`'s `mlflow.source.name` as `file://<project>` (the folder `mlflow run` ran the project in, as
    `mlflow run <path>` records it) when it is MLflow's joined form (`joined_file_uri`). Not fatal."""
    from mlflow.exceptions import MlflowException

    try:
        if joined_file_uri(client.get_run(run_id).data.tags.get(SOURCE_TAG, "")):
            client.set_tag(run_id, SOURCE_TAG, f"file://{backend.store_root(project_root).as_posix()}")
    except MlflowException as exc:
        log.warning("could not set run %s's %s to this project: %s", run_id, SOURCE_TAG, one_line(exc))


def where(run, project_root) -> str:
    """Where to look at `run` in the MLflow UI, for a stage's last line: the run's page on a tracking server,
    or the `mlflow ui` command for a local store (run from the project) and the page it will serve; either
    opens with the UI's Model-training sidebar (`kinds.run_page`), not its GenAI default."""
    if not getattr(run, "run_id", None):
        return "not tracked"
    page = kinds.run_page(run.experiment_id, run.run_id)
    uri = str(run.tracking_uri)
    if uri.startswith(("http://", "https://")):
        return f"{redact_url(uri).rstrip('/')}/{page}"
    store = portable_uri(uri, project_root)  # as run.json holds it: relative to the project when inside
    return f"mlflow ui --backend-store-uri {store}, then http://127.0.0.1:5000/{page}"


def warn_other_experiment(client, run_id: str, experiment_name: str) -> None:
    """`mlflow run .` without --experiment-name makes its run in experiment 'Default': the run is kept (it is
    the one `mlflow run` reports), and one line says how to land in the project's experiment."""
    from mlflow.exceptions import MlflowException

    try:
        found = client.get_experiment(client.get_run(run_id).info.experiment_id).name
    except MlflowException:
        return  # _start names the missing run
    if found != experiment_name:
        log.warning(
            "MLFLOW_RUN_ID %s is in MLflow experiment %r, not this project's %r (tracking.experiment_name): "
            "mlflow run . --experiment-name %s (or env MLFLOW_EXPERIMENT_NAME) logs there",
            run_id,
            found,
            experiment_name,
            experiment_name,
        )
