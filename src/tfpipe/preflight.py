"""Checks of the host against a validated config, run by every stage entry point before any data is read.

`tfpipe.config` checks what a config says on its own (names, types, ranges, cross-field rules) without
looking at the machine. `check(cfg, stage, root)` then checks what the config asks of THIS host, each
failure one `UserError` line naming the key, the value and what is allowed:

- `TF_CONFIG` (train): when set, valid JSON with the jobs the strategy needs (multi_worker_mirrored:
  worker/chief, no ps; parameter_server: chief, worker and ps). Unset is fine: `python -m pipeline.train`
  starts the local launcher for multi-process strategies.
- devices (train): `strategy.device` / `strategy.devices` name devices that exist (CPU indices up to
  `strategy.num_logical_cpus`; GPUs as TensorFlow lists them, which imports TensorFlow only when a GPU is
  named). E.g. `/gpu:0` with `precision=mixed_float16` on a host without a GPU stops here.
- TPU (train): strategy=tpu without `strategy.tpu` needs a local TPU (a TPU VM's /dev/accel* or /dev/vfio
  devices, or TPU_NAME); otherwise it stops here instead of after the data checks.
- precision (train): `precision.policy=mixed_bfloat16` on a CPU-only host whose oneDNN is
  capped below AVX512_CORE by ONEDNN_MAX_CPU_ISA, where TensorFlow would fail in the first layer.
- tracking (train, evaluate, run_all; chief only): the MLflow backend answers within a few seconds
  (`tfpipe.tracking.backend.check_reachable`).
"""

from __future__ import annotations

import glob
import os
from pathlib import Path

from tfpipe import strategies
from tfpipe.config import DEVICE_RE, Config
from tfpipe.errors import ConfigError, UserError

TRAIN_STAGES = ("train", "run_all")
TRACKING_STAGES = ("train", "evaluate", "run_all")
TPU_ENV = ("TPU_NAME", "KUBE_GOOGLE_CLOUD_TPU_ENDPOINTS", "COLAB_TPU_ADDR")


def check(cfg: Config, stage: str, root, environ=None) -> None:
    """All host checks that apply to `stage` (see the module docstring); UserError on the first failure."""
    environ = os.environ if environ is None else environ
    from tfpipe import progress

    progress.wanted()  # a bad TFPIPE_PROGRESS is one line before any work
    if stage in TRAIN_STAGES:
        check_tf_config(cfg, environ)
        check_devices(cfg)
        check_tpu(cfg, environ)
        check_precision(cfg, environ)
    if stage in TRACKING_STAGES:
        from tfpipe import tfconfig

        if tfconfig.is_chief(environ):  # only the chief talks to MLflow
            check_tracking(cfg, root)


def check_tf_config(cfg: Config, environ) -> None:
    from tfpipe import tfconfig

    if not tfconfig.is_set(environ):
        return
    text = environ[tfconfig.TF_CONFIG].strip()
    try:
        spec = tfconfig.parse_tf_config(text)
    except UserError as exc:  # name the value too
        shown = text if len(text) <= 120 else text[:117] + "..."
        raise UserError(
            str(exc).replace(f"{tfconfig.TF_CONFIG}:", f"{tfconfig.TF_CONFIG}={shown!r}:", 1)
        ) from None
    jobs = sorted(spec["cluster"])
    strategy = strategies.spec(cfg.strategy.name)
    if strategy.coordinated:
        missing = [job for job in strategy.jobs if job not in jobs]
        if missing:
            raise UserError(
                f"TF_CONFIG: cluster jobs {', '.join(jobs)} lack {', '.join(missing)} for strategy.name={strategy.name}; "
                "allowed: chief (the coordinator), worker and ps jobs"
            )
    elif strategy.multi_process:
        if "ps" in jobs or not ({"worker", "chief"} & set(jobs)):
            raise UserError(
                f"TF_CONFIG: cluster jobs {', '.join(jobs)} do not fit strategy.name={strategy.name}; "
                "allowed: worker (and optionally chief), no ps"
            )


def _parse_device(value: str):
    match = DEVICE_RE.match(str(value).strip())
    if match is None:  # config validation refuses these already
        raise ConfigError(f"{value!r}: not a device name; allowed: /cpu:N, /gpu:N, /tpu:N")
    job = "/job:" in value and "/job:localhost" not in value
    return match["type"].lower(), int(match["index"] or 0), job


def _named_devices(cfg: Config) -> list:
    """The devices the strategy's keys name (auto picks what exists; multi-process and TPU strategies take
    theirs from the cluster)."""
    st, named = cfg.strategy, []
    keys = strategies.spec(st.name).device_keys
    if "device" in keys:
        named.append(("strategy.device", st.device or "/cpu:0"))
    if "devices" in keys:
        named += [(f"strategy.devices[{i}]", d) for i, d in enumerate(st.devices or [])]
    return named


def physical_gpus() -> int:
    """GPUs TensorFlow can use; 0 at once (without importing TensorFlow) on a host with no GPU device files."""
    from tfpipe.hardware import has_gpu_device_files

    if not has_gpu_device_files():
        return 0
    import tensorflow as tf

    return len(tf.config.list_physical_devices("GPU"))


def check_devices(cfg: Config) -> None:
    st = cfg.strategy
    named = _named_devices(cfg)
    splits_cpu = strategies.spec(st.name).splits_cpu
    logical_cpus = max(int(st.num_logical_cpus or 0), 1) if splits_cpu else 1
    gpus = None
    for key, value in named:
        kind, index, remote = _parse_device(value)
        if remote:
            continue  # a device of another task: only the cluster knows
        if kind == "cpu" and index >= logical_cpus:
            raise ConfigError(
                f"{key}={value!r}: no such device; {st.name} has {logical_cpus} CPU device(s) here "
                f"(strategy.num_logical_cpus={st.num_logical_cpus}); allowed: "
                + ", ".join(f"/cpu:{i}" for i in range(logical_cpus))
            )
        if kind == "gpu":
            gpus = physical_gpus() if gpus is None else gpus
            if index >= gpus:
                why = ""
                if cfg.precision.policy == "mixed_float16":
                    why = " (precision.policy=mixed_float16 is meant for GPUs; on CPUs use mixed_bfloat16 or float32)"
                allowed = ", ".join(["/cpu:0", *(f"/gpu:{i}" for i in range(gpus))])
                raise ConfigError(
                    f"{key}={value!r}: no such device; this host has {gpus} GPU(s){why}; allowed: {allowed}"
                )
        if kind == "tpu":
            raise ConfigError(
                f"{key}={value!r}: TPUs are used through strategy={strategies.first(needs_tpu=True).name}; "
                "allowed here: /cpu:N, /gpu:N"
            )


def local_tpu_present(environ=None) -> bool:
    environ = os.environ if environ is None else environ
    if any(environ.get(name, "").strip() for name in TPU_ENV):
        return True
    return bool(glob.glob("/dev/accel*") or glob.glob("/dev/vfio/[0-9]*"))


def check_tpu(cfg: Config, environ) -> None:
    if not strategies.spec(cfg.strategy.name).needs_tpu or (cfg.strategy.tpu or "").strip():
        return
    if not local_tpu_present(environ):
        raise ConfigError(
            f"strategy.name={cfg.strategy.name!r} with strategy.tpu=null: no local TPU on this host (no /dev/accel*, "
            "/dev/vfio device or TPU_NAME); allowed: strategy.tpu=<TPU name or grpc://address>, or another strategy "
            f"({strategies.local_examples()}, ...)"
        )


def check_precision(cfg: Config, environ) -> None:
    from tfpipe import hardware

    policy = hardware.resolve_policy(cfg.precision.policy, environ=environ)
    refusal = hardware.bf16_refusal(policy, environ)
    if refusal:
        raise ConfigError(refusal)


def check_tracking(cfg: Config, root) -> None:
    from tfpipe.tracking.backend import check_reachable, resolve_tracking_uri

    check_reachable(resolve_tracking_uri(cfg.tracking, Path(root)))
