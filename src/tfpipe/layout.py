"""Where the stages read and write, relative to the project root (dvc.yaml names the same paths:
tests/test_dvc_yaml.py keeps the two in step), and the config with its data paths made absolute and
`data.source=auto` decided: the stages may run from anywhere, a DVC experiment in a temporary copy."""

from __future__ import annotations

from pathlib import Path

from tfpipe.config import Config
from tfpipe.config.rooting import rooted  # noqa: F401 - the stages' config: data paths absolute, source decided

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
