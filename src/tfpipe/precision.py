"""The Keras mixed-precision policy.

`apply_policy(cfg.precision)` sets the global policy that every layer built afterwards uses.
Models keep their output layers in float32 (they pass `dtype="float32"`), so probabilities
and losses are float32 under every policy. `mixed_float16` needs loss scaling
(`keras.optimizers.LossScaleOptimizer`, done by `tfpipe.training`) and is only fast on GPUs.
"""

from __future__ import annotations

import contextlib
import logging
import warnings

import keras
import tensorflow as tf

log = logging.getLogger(__name__)

POLICIES = ("float32", "mixed_bfloat16", "mixed_float16")


def apply_policy(precision_cfg) -> str:
    """Set keras' global dtype policy from cfg.precision; returns the policy name."""
    name = getattr(precision_cfg, "policy", precision_cfg)
    if name not in POLICIES:
        raise ValueError(f"precision.policy={name!r}: unknown policy; valid names: {', '.join(POLICIES)}")
    if name == "mixed_float16" and not tf.config.list_physical_devices("GPU"):
        warnings.warn(
            "precision.policy=mixed_float16 on a host without a GPU: float16 compute is slow on CPU "
            "(use mixed_bfloat16 on CPUs with AMX/AVX512-BF16, or float32)",
            RuntimeWarning,
            stacklevel=2,
        )
    keras.mixed_precision.set_global_policy(name)
    log.info("mixed-precision policy: %s", name)
    return name


def needs_loss_scaling(policy_name: str) -> bool:
    return policy_name == "mixed_float16"


def current_policy() -> str:
    return keras.mixed_precision.global_policy().name


@contextlib.contextmanager
def policy_scope(precision_cfg):
    """Apply a policy for the duration of a block, then restore the previous global policy."""
    previous = current_policy()
    try:
        yield apply_policy(precision_cfg)
    finally:
        keras.mixed_precision.set_global_policy(previous)
