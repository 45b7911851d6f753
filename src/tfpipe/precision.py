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
from typing import Optional

import keras
import tensorflow as tf

log = logging.getLogger(__name__)

POLICIES = ("float32", "mixed_bfloat16", "mixed_float16")
AUTO = "auto"  # resolved at start from the hardware (resolve_policy)
# CPU flags that make bfloat16 matmuls/convolutions fast in oneDNN (AMX tiles, AVX512-BF16).
BF16_CPU_FLAGS = ("amx_bf16", "avx512_bf16")


def cpu_has_fast_bf16(cpuinfo_path: str = "/proc/cpuinfo") -> bool:
    """True when the CPU advertises AMX-BF16 or AVX512-BF16 (Linux /proc/cpuinfo; False elsewhere)."""
    try:
        with open(cpuinfo_path, encoding="utf-8", errors="replace") as fh:
            for line in fh:
                if line.startswith("flags"):
                    flags = set(line.split(":", 1)[1].split())
                    return any(flag in flags for flag in BF16_CPU_FLAGS)
    except OSError:
        return False
    return False


def gpus_have_bf16() -> Optional[bool]:
    """None without GPUs; else whether every GPU has compute capability >= 8.0 (Ampere+: bf16 tensor cores)."""
    gpus = tf.config.list_physical_devices("GPU")
    if not gpus:
        return None
    for gpu in gpus:
        cc = (tf.config.experimental.get_device_details(gpu) or {}).get("compute_capability")
        if not cc or tuple(cc) < (8, 0):
            return False
    return True


def resolve_policy(name: str) -> str:
    """`auto` -> mixed_bfloat16 on GPUs with bf16 (compute capability >= 8.0) or, without GPUs, on CPUs
    with AMX/AVX512-BF16 (1.6x faster here, docs/benchmarks.md); float32 otherwise. Other names as given."""
    if name != AUTO:
        return name
    gpu = gpus_have_bf16()
    fast = gpu if gpu is not None else cpu_has_fast_bf16()
    return "mixed_bfloat16" if fast else "float32"


def apply_policy(precision_cfg) -> str:
    """Set keras' global dtype policy from cfg.precision; returns the policy name."""
    name = resolve_policy(getattr(precision_cfg, "policy", precision_cfg))
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
