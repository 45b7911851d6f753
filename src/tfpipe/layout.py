"""Where the stages read and write, relative to the project root (dvc.yaml names the same paths:
tests/test_dvc_yaml.py keeps the two in step), and the config with its data paths made absolute and
`data.source=auto` decided: the stages may run from anywhere, a DVC experiment in a temporary copy."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

from tfpipe.config import Config
from tfpipe.errors import ConfigError

MODELS_DIR = "models"
TRAIN_METRICS = "metrics/train.json"
HISTORY_CSV = "plots/history.csv"
EVAL_METRICS = "metrics/eval.json"  # flat headline metrics: one `dvc exp show` column each
EVAL_PER_CLASS = "metrics/eval_per_class.json"  # precision/recall/f1/support per class (a DVC plot)
DATA_METRICS = "metrics/data.json"  # the data report's headline (prepare; dvc.yaml declares it)
CONFUSION_CSV = "plots/confusion_matrix.csv"
CONFUSION_PNG = "plots/confusion_matrix.png"


def model_dir(cfg: Config, root: Path) -> Path:
    return root / MODELS_DIR / cfg.dataset.name


def rooted(cfg: Config, root: Path) -> Config:
    """The config with project-relative data paths made absolute and data.source=auto decided: the directory
    source when data.path is a folder (data/raw/<dataset> by default), else TFDS."""

    def absolute(p):
        return p if p is None or os.path.isabs(p) else str(root / p)

    path = absolute(cfg.data.path)
    source = cfg.data.source
    if source == "auto":
        source = "directory" if path and Path(path).is_dir() else "tfds"
        if source == "tfds":
            _not_in_this_experiment_copy(cfg.data.path, root)
        if source == "tfds" and not cfg.dataset.tfds_name:
            raise ConfigError(
                f"data.source=auto: data.path={cfg.data.path} is not a folder and dataset "
                f"{cfg.dataset.name!r} has no TFDS builder (dataset.tfds_name); put its split folders there "
                "or set data.path"
            )
    data_cfg = dataclasses.replace(
        cfg.data, source=source, path=path, output_dir=absolute(cfg.data.output_dir)
    )
    return dataclasses.replace(cfg, data=data_cfg)


def _not_in_this_experiment_copy(data_path, root: Path) -> None:
    """A queued or `--temp` DVC experiment runs in a copy holding only what git and DVC track (DVC_ROOT names the
    project): a data folder the project has but the copy lacks was never `dvc add`ed. Refused, rather than TFDS
    downloading another copy of the data or failing offline with a path inside the copy."""
    project = os.environ.get("DVC_ROOT", "").strip()
    if not data_path or os.path.isabs(data_path) or not project or Path(project).resolve() == root.resolve():
        return
    if (Path(project) / data_path).is_dir():
        raise ConfigError(
            f"data.source=auto: {data_path} is a folder in the project ({project}) but not in this DVC experiment's "
            f"copy, which holds only what git and DVC track (queued and --temp experiments): dvc add {data_path}, "
            f"git add {data_path}.dvc, commit, then run the experiment again"
        )
