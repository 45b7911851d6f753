"""The standard tags every run carries (what, where, from which code/data/environment)."""

from __future__ import annotations

import dataclasses
import platform
from typing import Any, Optional

from tfpipe import strategies


def resolved_precision(cfg) -> str:
    """The policy training uses: `auto` resolved from this host's hardware, other names as given."""
    from tfpipe.hardware import resolve_policy

    return resolve_policy(cfg.precision.policy)


def run_name(cfg) -> str:
    """The base of a run's name; `tfpipe.tracking.naming.run_name` adds what differs and the run id's head."""
    return f"{cfg.dataset.name}-{cfg.model.name}-{cfg.strategy.name}-{resolved_precision(cfg)}"


def _as_dict(info: Any) -> dict:
    if info is None:
        return {}
    if isinstance(info, dict):
        return dict(info)
    if dataclasses.is_dataclass(info) and not isinstance(info, type):
        return dataclasses.asdict(info)
    if hasattr(info, "_asdict"):
        return dict(info._asdict())
    if hasattr(info, "__dict__"):
        return {k: v for k, v in vars(info).items() if not k.startswith("_")}
    return {"name": str(info)}


def _first(d: dict, *keys: str) -> Any:
    for key in keys:
        if d.get(key) not in (None, "", []):
            return d[key]
    return None


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return ",".join(str(v) for v in value)
    return str(value)


def dvc_lock_tags(provenance: Optional[dict]) -> dict:
    """{'dvc.lock.<stage>': sha256 of that stage's dvc.lock entry} ({} without a dvc.lock)."""
    stages = ((provenance or {}).get("dvc_lock") or {}).get("stages") or {}
    return {f"dvc.lock.{stage}": digest for stage, digest in sorted(stages.items())}


def run_tags(cfg, strategy_info: Any, manifest_digest: Optional[str], provenance: Optional[dict]) -> dict:
    """Tags for the run. `strategy_info` is what training reports about the strategy it built
    (a dict, dataclass or object with e.g. name/num_replicas/devices) or None before training;
    its fields are also tagged as `strategy.<field>`. Keys whose value is unknown are left out.
    """
    strategy = _as_dict(strategy_info)
    prov = provenance or {}
    git = prov.get("git") or {}
    env = prov.get("environment") or {}

    tags: dict[str, Any] = {
        "dataset": cfg.dataset.name,
        "modality": cfg.dataset.modality,
        "model": cfg.model.name,
        "strategy": cfg.strategy.name,
        "precision": cfg.precision.policy,
        "precision.resolved": resolved_precision(cfg),
    }
    tags.update(_strategy_tags(cfg, strategy))

    if manifest_digest:
        tags["data.manifest_digest"] = manifest_digest
    if git.get("commit"):
        tags["git.commit"] = git["commit"]
        tags["mlflow.source.git.commit"] = git["commit"]
        if git.get("branch"):
            tags["git.branch"] = git["branch"]
            tags["mlflow.source.git.branch"] = git["branch"]
        if git.get("dirty") is not None:
            tags["git.dirty"] = git["dirty"]
        if git.get("diff_excluded"):  # credential files left out of git_diff.patch: the diff is partial
            tags["git.diff_excluded"] = ",".join(git["diff_excluded"])
    tags.update(dvc_lock_tags(prov))

    tags.update(_environment_tags(env))
    return {key: _text(value) for key, value in tags.items()}


def strategy_tags(cfg, strategy_info: Any) -> dict:
    """The tags of `run_tags` that training's report of its strategy decides (replicas, device, strategy.<field>):
    what is known only once training has built the strategy."""
    return {key: _text(value) for key, value in _strategy_tags(cfg, _as_dict(strategy_info)).items()}


def _strategy_tags(cfg, strategy: dict) -> dict:
    """replicas, device and strategy.<field> from what training reports (known before training for a strategy
    with one replica on strategy.device)."""
    tags: dict[str, Any] = {}
    one_replica = strategies.spec(cfg.strategy.name).replicas == "device"
    replicas = _first(strategy, "num_replicas_in_sync", "num_replicas", "replicas")
    if replicas is None and one_replica:
        replicas = 1
    if replicas is not None:
        tags["replicas"] = replicas
    device = _first(strategy, "device", "devices", "worker_devices")
    if device is None and one_replica:
        device = cfg.strategy.device
    if device is not None:
        tags["device"] = device
    for key, value in strategy.items():
        if value is not None and not isinstance(value, dict):
            tags[f"strategy.{key}"] = value
    return tags


def _environment_tags(env: dict) -> dict:
    """Python, library versions, platform, CPU and GPUs of the host."""
    packages = env.get("packages") or {}
    tags: dict[str, Any] = {}
    tags["python_version"] = env.get("python") or platform.python_version()
    for tag, package in (
        ("tf_version", "tensorflow"),
        ("keras_version", "keras"),
        ("mlflow_version", "mlflow"),
        ("dvc_version", "dvc"),
        ("tfds_version", "tensorflow_datasets"),
        ("hydra_version", "hydra"),
    ):
        if packages.get(package):
            tags[tag] = packages[package]
    for tag, key in (
        ("platform", "platform"),
        ("cpu", "cpu"),
        ("cpu_flags", "cpu_flags"),
        ("num_cpus", "num_cpus"),
    ):
        if env.get(key) not in (None, ""):
            tags[tag] = env[key]
    if env.get("gpus") is not None:
        tags["gpus"] = env["gpus"] or "none"
    return tags
