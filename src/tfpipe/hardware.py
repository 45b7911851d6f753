"""What this host's hardware offers the precision policy: bf16-fast CPU flags, GPUs with bf16, and the one place
`precision.policy=auto` is resolved. TensorFlow-free unless GPU device files exist (then it asks TF for their
compute capability), so tracking and config code can resolve `auto` without starting TensorFlow."""

from __future__ import annotations

import glob
from typing import Optional

GPU_DEVICE_FILES = ("/dev/nvidia[0-9]*", "/dev/kfd", "/dev/dxg")  # NVIDIA, ROCm, WSL


def has_gpu_device_files() -> bool:
    return any(glob.glob(pattern) for pattern in GPU_DEVICE_FILES)


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


def gpu_details() -> list[dict]:
    """TensorFlow's device description of every GPU (empty, without starting TensorFlow, when there is none)."""
    if not has_gpu_device_files():
        return []
    import tensorflow as tf

    return [
        tf.config.experimental.get_device_details(g) or {} for g in tf.config.list_physical_devices("GPU")
    ]


def gpus_have_bf16(details: Optional[list] = None) -> Optional[bool]:
    """None without GPUs; else whether every GPU has compute capability >= 8.0 (Ampere+: bf16 tensor cores).
    `details`: the GPUs' device descriptions (default: this host's)."""
    details = gpu_details() if details is None else details
    if not details:
        return None
    return all(tuple(d.get("compute_capability") or (0, 0)) >= (8, 0) for d in details)


def resolve_policy(name: str, *, details: Optional[list] = None, cpuinfo_path: str = "/proc/cpuinfo") -> str:
    """`auto` -> mixed_bfloat16 on GPUs with bf16 (compute capability >= 8.0) or, without GPUs, on CPUs with
    AMX/AVX512-BF16 (1.37x on cnn, 1.51x on resnet on the AMX machine; 1.42x on cnn on an AMD EPYC with
    AVX512-BF16 and no AMX: docs/benchmarks.md); float32 otherwise.
    Other names as given. `details` / `cpuinfo_path`: another host's GPUs / CPU flags (default: this host's)."""
    if name != AUTO:
        return name
    gpu = gpus_have_bf16(details)
    fast = gpu if gpu is not None else cpu_has_fast_bf16(cpuinfo_path)
    return "mixed_bfloat16" if fast else "float32"
