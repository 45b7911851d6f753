"""What this host's hardware offers the precision policy: bf16-fast CPU flags, GPUs with bf16, and the one place
`precision.policy=auto` is resolved. TensorFlow-free unless GPU device files exist (then it asks TF for their
compute capability), so tracking and config code can resolve `auto` without starting TensorFlow."""

from __future__ import annotations

import glob
import os
from typing import Optional

GPU_DEVICE_FILES = ("/dev/nvidia[0-9]*", "/dev/kfd", "/dev/dxg")  # NVIDIA, ROCm, WSL


def has_gpu_device_files() -> bool:
    return any(glob.glob(pattern) for pattern in GPU_DEVICE_FILES)


POLICIES = ("float32", "mixed_bfloat16", "mixed_float16")
AUTO = "auto"  # resolved at start from the hardware (resolve_policy)
# CPU flags that make bfloat16 matmuls/convolutions fast in oneDNN (AMX tiles, AVX512-BF16).
BF16_CPU_FLAGS = ("amx_bf16", "avx512_bf16")


# oneDNN's ISA masks (dnnl_cpu_isa_t); each includes the ones below it. A cap by ONEDNN_MAX_CPU_ISA below
# AVX512_CORE_BF16 leaves bfloat16 to slow kernels whatever the CPU advertises. oneDNN has no query for it in
# TensorFlow's Python API, so the variable is read here. Names not listed (newer ISAs) are above the cap.
ONEDNN_ISA_MASKS = {
    "SSE41": 0x1,
    "AVX": 0x3,
    "AVX2": 0x7,
    "AVX2_VNNI": 0xF,
    "AVX2_VNNI_2": 0x1F,
    "AVX512_CORE": 0x27,
    "AVX512_CORE_VNNI": 0x67,
    "AVX512_CORE_BF16": 0xE7,
}


def onednn_isa_cap(environ=None) -> Optional[str]:
    """The ISA oneDNN is capped at by ONEDNN_MAX_CPU_ISA (or its old name DNNL_MAX_CPU_ISA), None if not."""
    environ = os.environ if environ is None else environ
    value = (environ.get("ONEDNN_MAX_CPU_ISA") or environ.get("DNNL_MAX_CPU_ISA") or "").strip().upper()
    return value if value not in ("", "ALL", "DEFAULT") else None


def onednn_capped_below(isa: str, environ=None) -> bool:
    """True when ONEDNN_MAX_CPU_ISA caps oneDNN at an ISA that lacks `isa` (a key of ONEDNN_ISA_MASKS)."""
    mask = ONEDNN_ISA_MASKS.get(onednn_isa_cap(environ) or "")
    return mask is not None and mask & ONEDNN_ISA_MASKS[isa] != ONEDNN_ISA_MASKS[isa]


def bf16_refusal(policy: str, environ=None) -> Optional[str]:
    """The one-line refusal of mixed_bfloat16 on a host without GPUs whose ONEDNN_MAX_CPU_ISA is below
    AVX512_CORE, else None. oneDNN has no bfloat16 kernels there, but TensorFlow still hands it bfloat16 layers
    on a CPU with AVX-512 (it asks the CPU, not the cap): the first convolution or dense layer fails ("could
    not create a primitive descriptor", seen with TF 2.21 at AVX2 on an AVX512-BF16 EPYC; float32 and
    mixed_float16 run)."""
    if (
        policy != "mixed_bfloat16"
        or not onednn_capped_below("AVX512_CORE", environ)
        or has_gpu_device_files()
    ):
        return None
    return (
        f"precision.policy=mixed_bfloat16: ONEDNN_MAX_CPU_ISA={onednn_isa_cap(environ)} leaves oneDNN without bfloat16 kernels "
        "(TensorFlow would fail in the first layer); allowed: precision.policy=float32, or unset "
        "ONEDNN_MAX_CPU_ISA or set it to AVX512_CORE or above"
    )


# The CPU flags that pick oneDNN's kernels on the machines this project meets, and so the speed and the last
# bits of a result: AVX2-only, AVX-512, AVX512-BF16, AMX.
SPEED_FLAGS = ("avx2", "avx512f", "avx512_bf16", "amx_bf16")


def cpu_flags(cpuinfo_path: str = "/proc/cpuinfo") -> set:
    """The CPU's flags from Linux /proc/cpuinfo (empty elsewhere)."""
    try:
        with open(cpuinfo_path, encoding="utf-8", errors="replace") as fh:
            for line in fh:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def cpu_kernels(cpuinfo_path: str = "/proc/cpuinfo", environ=None) -> str:
    """Which kernels this CPU runs, for run records and benchmark headers: its SPEED_FLAGS, and oneDNN's cap if
    set, e.g. "avx2 avx512f avx512_bf16" or "avx2 avx512f avx512_bf16; ONEDNN_MAX_CPU_ISA=AVX2"."""
    flags = cpu_flags(cpuinfo_path)
    text = " ".join(f for f in SPEED_FLAGS if f in flags) or "none of " + ", ".join(SPEED_FLAGS)
    cap = onednn_isa_cap(environ)
    return f"{text}; ONEDNN_MAX_CPU_ISA={cap}" if cap else text


def cpu_has_fast_bf16(cpuinfo_path: str = "/proc/cpuinfo", environ=None) -> bool:
    """True when the CPU advertises AMX-BF16 or AVX512-BF16 (Linux /proc/cpuinfo; False elsewhere) and oneDNN
    is not capped below AVX512_CORE_BF16. `environ`: another process's environment (default: this one's)."""
    if onednn_capped_below("AVX512_CORE_BF16", environ):
        return False
    return any(flag in cpu_flags(cpuinfo_path) for flag in BF16_CPU_FLAGS)


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


def resolve_policy(
    name: str, *, details: Optional[list] = None, cpuinfo_path: str = "/proc/cpuinfo", environ=None
) -> str:
    """`auto` -> mixed_bfloat16 on GPUs with bf16 (compute capability >= 8.0) or, without GPUs, on CPUs with
    AMX/AVX512-BF16 that ONEDNN_MAX_CPU_ISA does not cap below them (1.37x on cnn, 1.51x on resnet on the AMX
    machine; 1.42x on cnn on an AMD EPYC with AVX512-BF16 and no AMX: docs/benchmarks.md); float32 otherwise.
    Other names as given. `details` / `cpuinfo_path` / `environ`: another host's GPUs / CPU flags / environment
    (default: this host's)."""
    if name != AUTO:
        return name
    gpu = gpus_have_bf16(details)
    fast = gpu if gpu is not None else cpu_has_fast_bf16(cpuinfo_path, environ)
    return "mixed_bfloat16" if fast else "float32"
