"""Warm start: a new model takes an earlier model's weights layer by layer, where names and shapes match.

Every export writes `keras_weights.npz` beside the SavedModel's files: each weight under its Keras path
(`conv0/kernel`). Keras' own `.weights.h5` keys weights by class-derived names (`layers/dense/vars/0`) and so
only fits the very same architecture; by-path weights let a model with another head (class count) or depth
take what matches, and say which layers those were.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from tfpipe.errors import UserError

WEIGHTS_FILE = "keras_weights.npz"
SOURCES = "a tfpipe SavedModel folder, its keras_weights.npz, or a Keras .keras archive"


def save_weights_by_path(model, path: Path) -> None:
    """Every weight of `model` under its Keras path, as .npy entries of one .npz (no pickles)."""
    with open(path, "wb") as fh:
        arrays: dict[str, Any] = {w.path: np.asarray(w.numpy()) for w in model.weights}
        np.savez(fh, **arrays)


def read_source(path, key: str = "train.init_from", given: str | None = None) -> dict:
    """{weight path: array} of a local warm-start source; UserError naming it (as `given`, else its path) when
    it is none of SOURCES."""
    path = Path(path)
    shown = repr(given if given is not None else str(path))
    if path.is_dir():
        if not (path / WEIGHTS_FILE).is_file():
            raise UserError(f"{key}={shown}: no {WEIGHTS_FILE} in the folder; allowed: {SOURCES}")
        path = path / WEIGHTS_FILE
    elif not path.exists():
        raise UserError(f"{key}={shown}: not found; allowed: {SOURCES}")
    if path.suffix == ".keras":
        from tfpipe.models.loading import load_keras_model

        return {w.path: np.asarray(w.numpy()) for w in load_keras_model(path).weights}
    if path.suffix != ".npz":
        raise UserError(f"{key}={shown}: unknown kind of file; allowed: {SOURCES}")
    try:
        with np.load(path, allow_pickle=False) as archive:
            return {name: archive[name] for name in archive.files}
    except (OSError, ValueError) as exc:
        raise UserError(f"{key}={shown}: unreadable weights ({exc})") from None


def digest(weights: dict) -> str:
    """sha256 over the weights' paths, dtypes, shapes and bytes, in path order (the `init.sha256` tag)."""
    import hashlib

    h = hashlib.sha256()
    for name in sorted(weights):
        array = np.ascontiguousarray(weights[name])
        h.update(f"{name}|{array.dtype.str}|{array.shape}|".encode())
        h.update(array.tobytes())
    return h.hexdigest()


def apply(model, weights: dict, key: str = "train.init_from") -> dict:
    """Assign to each layer of `model` all its weights from `weights` when every one is there with the same
    shape; other layers keep their fresh initialisation (a head for another class count). Returns
    {"loaded": [layer names], "fresh": [layer names]}; UserError when no layer matches."""
    loaded, fresh = [], []
    for layer in model.layers:
        if not layer.weights:
            continue
        pairs = [(w, weights.get(w.path)) for w in layer.weights]
        matched = [(w, v) for w, v in pairs if v is not None and tuple(v.shape) == tuple(w.shape)]
        if len(matched) == len(pairs):
            for w, v in matched:
                w.assign(v.astype(w.dtype))
            loaded.append(layer.name)
        else:
            fresh.append(layer.name)
    if not loaded:
        raise UserError(
            f"{key}: no layer of model {model.name!r} matches the source by name and shape "
            f"(its layers: {', '.join(fresh)}; the source's weights: {', '.join(sorted(weights)[:6])}...)"
        )
    return {"loaded": loaded, "fresh": fresh}
