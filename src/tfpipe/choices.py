"""The names config accepts, in one TensorFlow-free module: the config schema checks against these and the
registries (`data.inputs.SHARD_POLICIES`, `textnorm.STANDARDIZERS`) are built from them; tests/test_config.py
asserts they agree. Strategy names are not listed here: the strategy registry (`tfpipe.strategies`) is theirs."""

from __future__ import annotations

DATASETS = (
    "cifar10",
    "imdb",
)  # built in (conf/dataset/<name>.yaml); own data: dataset=images|texts, any name
# dataset.name: names folders, runs and the registered model, so a safe identifier (no '/', spaces or '..')
DATASET_NAME_RE = r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}"
DATASET_NAME_RULE = (
    "letters, digits, '_', '-' and '.', starting with a letter or digit, at most 64 characters"
)
MODALITIES = ("image", "text")
# model names: each built-in model's schema registers its own (tfpipe.config.model_base.built_in)
PRETRAINED = ("imagenet",)  # model.pretrained of a backbone (null: random initialisation)
COMMUNICATIONS = ("auto", "ring", "nccl")
LR_SCALINGS = ("none", "linear")
PRECISIONS = ("float32", "mixed_bfloat16", "mixed_float16")
PRECISION_CHOICES = PRECISIONS + ("auto",)  # auto: resolved from the hardware at start (tfpipe.precision)
OPTIMIZERS = ("adam", "adamw", "sgd")
LR_SCHEDULES = ("constant", "cosine", "onecycle")
EARLY_STOPPING_MONITORS = ("val_loss", "val_accuracy")  # the validation metrics every epoch row holds
SOURCES = (
    "auto",
    "tfds",
    "directory",
)  # auto: directory where data.path is a folder, else tfds (tfpipe.layout)
ON_BAD_FILE = ("fail", "skip")
SHARD_POLICIES = ("auto", "file", "data")  # how input pipelines (workers) split the train split
STANDARDIZERS = (
    "strip_punctuation",
    "split_punctuation",
)  # text: how text is cut before whitespace splitting
# tracking.uri schemes MLflow's own stores understand (a plain folder path is allowed too)
TRACKING_SCHEMES = ("sqlite", "file", "http", "https", "databricks", "postgresql", "mysql", "mssql")
