"""Determinism: seeds, TF op determinism, deterministic tf.data, and a hash of trained weights.

    settings = determinism.setup(cfg.train.seed, cfg.train.deterministic)   # at the start of training
    digest = determinism.weights_sha256(model)                                # after training

`setup` seeds Python's `random`, NumPy and TF (`keras.utils.set_random_seed`) always; with
`deterministic=True` it also calls `tf.config.experimental.enable_op_determinism()` (ops with no
deterministic kernel then raise instead of silently differing). The input pipeline is already
order-deterministic (seeded shuffle, `deterministic=True` interleave/map in `tfpipe.data`). The returned dict
is what is recorded on the run (tags `determinism.*`).

Op determinism is process-wide and cannot be switched off again once enabled (TF has no public
disable); a later `setup(..., deterministic=False)` in the same process reports
`op_determinism: true` because that is what is in force.

What is reproducible: the same config, data, code and package versions on the same machine
(CPU model, thread counts, strategy and replica count) give bit-identical weights. Across CPU
models, thread counts (reduction order), strategies/replica counts or TF versions results are
only close, not identical: use `audit --rerun --tolerance`.
"""

from __future__ import annotations

import hashlib
import os
import random

WEIGHTS_FILE = "weights.sha256"


def _op_determinism_enabled() -> bool:
    try:
        from tensorflow.python.framework import config as tf_config

        return bool(tf_config.is_op_determinism_enabled())
    except Exception:  # private API moved: report what we asked for
        return False


def setup(seed: int, deterministic: bool = True) -> dict:
    """Seed everything and (when `deterministic`) enable TF op determinism; returns what was set."""
    import keras
    import numpy as np
    import tensorflow as tf

    seed = int(seed)
    random.seed(seed)
    np.random.seed(seed % (2**32))
    keras.utils.set_random_seed(seed)  # Python, NumPy and TF global seeds
    if deterministic:
        tf.config.experimental.enable_op_determinism()
    return {
        "deterministic": bool(deterministic),
        "seed": seed,
        "op_determinism": _op_determinism_enabled() or bool(deterministic),
        "tf_data_deterministic": True,
        "shuffle_seed": seed,
        "python_hash_seed": os.environ.get("PYTHONHASHSEED", "unset"),
        "inter_op_threads": tf.config.threading.get_inter_op_parallelism_threads(),
        "intra_op_threads": tf.config.threading.get_intra_op_parallelism_threads(),
    }


def weights_sha256(model_or_variables) -> str:
    """sha256 over every variable (name, dtype, shape, raw bytes) in the model's weight order.

    Equal hashes mean bit-identical weights. Accepts a Keras model or a list of variables."""
    import numpy as np

    variables = getattr(model_or_variables, "weights", model_or_variables)
    named = (
        (getattr(v, "path", None) or getattr(v, "name", ""), v.numpy() if hasattr(v, "numpy") else v)
        for v in variables
    )
    return _named_sha256((name, np.asarray(value)) for name, value in named)


def saved_weights_sha256(npz_path) -> str:
    """`weights_sha256` of the model an export saved as `keras_weights.npz` (each weight under its Keras path,
    in the model's weight order: `models.warmstart.save_weights_by_path`), read from the file alone: what a
    sealed SavedModel's weights are, whatever its seal's facts say."""
    import numpy as np

    with np.load(npz_path, allow_pickle=False) as archive:
        return _named_sha256((name, archive[name]) for name in archive.files)


def _named_sha256(named) -> str:
    import numpy as np

    digest = hashlib.sha256()
    for name, value in named:
        value = np.ascontiguousarray(value)
        digest.update(f"{name}|{value.dtype.str}|{value.shape}\n".encode("utf-8"))
        digest.update(value.tobytes())
    return digest.hexdigest()


def as_tags(settings: dict) -> dict:
    """{'determinism.<key>': value} for the run."""
    return {f"determinism.{k}": v for k, v in (settings or {}).items()}
