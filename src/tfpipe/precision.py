"""The Keras mixed-precision policy.

`precision.policy=auto` is resolved from the hardware at start (`resolve_policy`); the train stage
tags the run with the resolved policy (`precision.resolved`).

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

from tfpipe.errors import ConfigError
from tfpipe.hardware import (  # noqa: F401 - re-exported: precision.resolve_policy etc.
    AUTO,
    BF16_CPU_FLAGS,
    POLICIES,
    bf16_refusal,
    cpu_has_fast_bf16,
    gpus_have_bf16,
    resolve_policy,
)

log = logging.getLogger(__name__)


def apply_policy(precision_cfg) -> str:
    """Set keras' global dtype policy from cfg.precision; returns the policy name."""
    name = resolve_policy(getattr(precision_cfg, "policy", precision_cfg))
    if name not in POLICIES:
        raise ValueError(f"precision.policy={name!r}: unknown policy; valid names: {', '.join(POLICIES)}")
    refusal = bf16_refusal(name)
    if refusal:
        raise ConfigError(refusal)
    no_gpu = not tf.config.list_physical_devices("GPU")
    if name == "mixed_float16" and no_gpu:
        warnings.warn(
            "precision.policy=mixed_float16 on a host without a GPU: float16 compute is slow on CPU "
            "(use mixed_bfloat16 on CPUs with AMX/AVX512-BF16, or float32)",
            RuntimeWarning,
            stacklevel=2,
        )
    if name == "mixed_bfloat16" and no_gpu and not cpu_has_fast_bf16():
        warnings.warn(  # cnn 0.52-0.57x float32 with oneDNN capped at AVX512_CORE: docs/benchmarks.md
            "precision.policy=mixed_bfloat16 on a CPU without AMX-BF16/AVX512-BF16 (or with oneDNN capped "
            "below them): bfloat16 compute is emulated and slower than float32 (use float32, or auto)",
            RuntimeWarning,
            stacklevel=2,
        )
    keras.mixed_precision.set_global_policy(name)
    log.debug("mixed-precision policy: %s", name)  # a tag (precision.resolved); -v shows it
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
