"""The prepared dataset (manifest.json) as an `mlflow.data` dataset for `log_inputs`."""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import numpy as np
from mlflow.data.dataset_source_registry import resolve_dataset_source
from mlflow.data.meta_dataset import MetaDataset
from mlflow.types import ColSpec, DataType, Schema, TensorSpec

from tfpipe.tracking.redact import redact_strings

MAX_DIGEST = 36  # mlflow.utils.validation.MAX_DATASET_DIGEST_SIZE
CONTEXT_SPLITS = {
    "train": ("train", "validation"),
    "training": ("train", "validation"),
    "test": ("test",),
    "validation": ("validation",),
}


class ManifestDataset(MetaDataset):
    """A MetaDataset (metadata only, no rows) that also carries a profile."""

    def __init__(self, source, name: str, digest: str, schema: Schema | None, profile: dict):
        self._profile = profile
        super().__init__(source=source, name=name, digest=digest, schema=schema)

    @property
    def profile(self) -> Any:
        return self._profile

    def to_dict(self) -> dict:
        config = super().to_dict()
        config["profile"] = json.dumps(self._profile, sort_keys=True)
        return config


def feature_schema(manifest: dict) -> Schema | None:
    spec = manifest.get("feature_spec") or {}
    if "image" in spec:
        shape = tuple(int(d) for d in spec["image"].get("shape") or ())
        return Schema(
            [
                TensorSpec(np.dtype(spec["image"].get("dtype", "uint8")), (-1, *shape), "image"),
                TensorSpec(np.dtype(spec.get("label", {}).get("dtype", "int64")), (-1,), "label"),
            ]
        )
    if "text" in spec:
        return Schema([ColSpec(DataType.string, "text"), ColSpec(DataType.long, "label")])
    return None


def manifest_dataset(
    manifest: dict, manifest_digest: str, prepared_dir, context: str, project_root=None
) -> ManifestDataset:
    """The dataset of `context`'s splits; its source is the prepared folder as `naming.recorded_path` shows it."""
    from tfpipe.tracking.naming import recorded_path

    splits = manifest.get("splits") or {}
    wanted = CONTEXT_SPLITS.get(context, tuple(splits))
    counts = {
        s: int(splits[s]["num_examples"]) for s in wanted if s in splits and "num_examples" in splits[s]
    }
    profile = {
        "num_examples": counts,
        "num_classes": manifest.get("num_classes"),
        "class_names": manifest.get("class_names"),
        "modality": manifest.get("modality"),
        "manifest_digest": manifest_digest,
        "source": manifest.get("source"),
        "vocab_size": manifest.get("vocab_size"),
        "data_report": _report_headline(prepared_dir),
    }
    with warnings.catch_warnings():  # "can be interpreted in multiple ways": both are the local source
        warnings.simplefilter("ignore")
        source = resolve_dataset_source(recorded_path(Path(prepared_dir).resolve(), project_root))
    name = f"{manifest.get('dataset') or Path(prepared_dir).name}-{context}"
    return ManifestDataset(
        source,
        name=name,
        digest=str(manifest_digest)[:MAX_DIGEST],
        schema=feature_schema(manifest),
        profile=redact_strings(profile),
    )


def _report_headline(prepared_dir) -> dict | None:
    """The data report's headline figures (tfpipe.data.report), None when prepare wrote no report."""
    from tfpipe.data.report import headline, load_report

    report = load_report(prepared_dir)
    return headline(report) if report else None
