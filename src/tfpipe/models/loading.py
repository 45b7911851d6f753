"""The one sanctioned way to load a Keras model file: `load_keras_model(path)`.

The pipeline itself serves and evaluates the exported SavedModel (`tf.saved_model.load`: variables and
graphs, no Python objects) and restores training state from `tf.train.Checkpoint` (variables only).
Anything that loads a `.keras` archive must come through here: `safe_mode=True` always (a Lambda layer's
pickled Python code is refused instead of run), and only the Keras v3 `.keras` format, because Keras
ignores `safe_mode` for legacy HDF5 files (CVE-2025-9905). Keras is pinned past the known safe_mode
bypasses (see requirements.in). tests/test_security.py fails if any other `load_model` call appears.
"""

from __future__ import annotations

from pathlib import Path

from tfpipe.errors import UserError

ALLOWED_SUFFIXES = (".keras",)


def load_keras_model(path, *, compile: bool = False):
    """A `.keras` archive loaded with `safe_mode=True`; UserError naming the file if it is refused."""
    import keras

    path = Path(path)
    if path.suffix.lower() not in ALLOWED_SUFFIXES:
        raise UserError(
            f"{path}: only Keras v3 '.keras' archives are loaded (safe_mode does not apply to '{path.suffix}' files); "
            "allowed: .keras"
        )
    if not path.is_file():
        raise UserError(f"{path}: model file not found")
    try:
        return keras.saving.load_model(path, compile=compile, safe_mode=True)
    except ValueError as exc:
        if "unsafe" in str(exc).lower() or "safe_mode" in str(exc):
            first = " ".join(str(exc).split())[:200]
            raise UserError(f"{path}: refused by Keras safe_mode (it holds code to run: {first})") from None
        raise
