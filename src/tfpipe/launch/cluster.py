"""Clusters for multi-process strategies: roles and loopback ports for the local launcher, the cluster spec of a
Kubernetes or Ray render, the Slurm job rendered, and the TF_CONFIG of a Slurm task (`python -m
tfpipe.launch.cluster slurm-tf-config PORT`, which the rendered job runs on every node).

No TensorFlow here, so the launcher and the renders stay fast. Reading and checking this process's TF_CONFIG
(what strategies, preflight and the stages ask) is tfpipe.tfconfig's.

- `local_cluster(strategy, num_workers, num_ps)` -> a cluster spec on 127.0.0.1 with free ports.
  multi_worker_mirrored: `worker` x N (worker 0 is the chief, as the TF multi-worker guide does).
  parameter_server: `chief` x 1 (the coordinator), `worker` x N, `ps` x M.
- `roles(cluster)` -> [(task_type, index)], chief first.
- `render_slurm(...)`: the Slurm template of `tfpipe/deploy/` (package data) filled in (Kubernetes:
  tfpipe.launch.k8s).
"""

from __future__ import annotations

import ipaddress
import os
import socket
import string
from pathlib import Path
from typing import Dict, List, Tuple

from tfpipe import strategies
from tfpipe.errors import ConfigError, UserError
from tfpipe.exits import EXIT_BAD_INPUT, EXIT_OK
from tfpipe.tfconfig import (  # noqa: F401 - also read here by the launchers and tests
    TF_CONFIG,
    Cluster,
    is_chief,
    parse_tf_config,
    public_spec,
    read_tf_config,
    task,
    tf_config,
)

DEPLOY_DIR = Path(__file__).resolve().parents[1] / "deploy"  # package data: found in any install (pyproject)


def free_ports(n: int, host: str = "127.0.0.1") -> List[int]:
    """n distinct free TCP ports (held open together while picking, so they differ)."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind((host, 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:  # a name
        return host == "localhost"


def multi_process(strategy: str, key: str = "strategy") -> strategies.StrategySpec:
    """The descriptor of a multi-process strategy; for any other name, ConfigError naming `key`, the value and
    the multi-process names."""
    found = strategies.REGISTRY.get(strategy)
    if found is None or not found.multi_process:
        allowed = ", ".join(strategies.names(multi_process=True))
        raise ConfigError(f"{key}={strategy!r}: not a multi-process strategy; allowed: {allowed}")
    return found


def local_cluster(strategy: str, num_workers: int, num_ps: int = 0, host: str = "127.0.0.1") -> Cluster:
    """The launcher's cluster: every task on one loopback host (TensorFlow's gRPC server itself still listens
    on every interface: docs/tutorials/cluster.md)."""
    if not _is_loopback(host):
        raise UserError(f"local cluster host {host!r}: the local launcher uses loopback addresses only")
    counts = multi_process(strategy, "strategy.name").task_counts(num_workers, num_ps)
    ports = iter(free_ports(sum(counts.values()), host))
    return {job: [f"{host}:{next(ports)}" for _ in range(n)] for job, n in counts.items() if n > 0}


def roles(cluster: Cluster) -> List[Tuple[str, int]]:
    """Every task, chief first, then workers, then ps."""
    order = [j for j in ("chief", "worker", "ps", "evaluator") if j in cluster]
    return [(job, i) for job in order for i in range(len(cluster[job]))]


# ----------------------------------------------------------------------------- deploy templates


def render_template(template: Path, values: dict) -> str:
    return string.Template(template.read_text(encoding="utf-8")).substitute(values)


def k8s_cluster(
    job_name: str,
    strategy: str,
    num_workers: int,
    num_ps: int = 0,
    port: int = 2222,
    namespace: str = "default",
) -> Cluster:
    """Stable pod DNS names of the headless Service: <job>-<type>-<i>.<job>.<namespace>.svc:<port>."""
    counts = strategies.spec(strategy).task_counts(num_workers, num_ps)
    return {
        t: [f"{job_name}-{t}-{i}.{job_name}.{namespace}.svc:{port}" for i in range(n)]
        for t, n in counts.items()
        if n
    }


RENDER_OWNED_KEYS = (
    "strategy",
    "strategy.name",
    "strategy.num_workers",
    "strategy.num_ps",
    "strategy.launcher",
)


def check_render_input(strategy: str, counts: Dict[str, int], overrides) -> None:
    """What a rendered job would fail on at start, refused now with one line (ConfigError): an unknown strategy,
    a count below 1, an override of what the render itself sets (the strategy, its process counts and launcher:
    the job's command line puts overrides last, so one would silently win over the allocation), an override the
    config schema refuses (composed as the tasks will compose it)."""
    from tfpipe import config

    multi_process(strategy)
    for name, value in counts.items():
        if not isinstance(value, int) or value < 1:
            raise ConfigError(f"{name}={value!r}: must be a whole number >= 1")
    for override in overrides:
        key = str(override).split("=", 1)[0].lstrip("+~")
        if key in RENDER_OWNED_KEYS:
            raise ConfigError(
                f"override {override!r}: the rendered job sets {key} itself (from its strategy and counts); "
                "render another strategy or change the counts instead"
            )
    from tfpipe.config import overlay

    overlay.load(
        [*overrides, f"strategy={strategy}"], config.PARAMS_FILE, config.CONF_DIR
    )  # params.yaml + them


def slurm_tf_config(port: int = 2222) -> str:
    """TF_CONFIG of this Slurm task (inside `srun`), from TensorFlow's SlurmClusterResolver: it reads SLURM_PROCID,
    SLURM_STEP_NODELIST and SLURM_STEP_TASKS_PER_NODE, gives the tasks of one node consecutive ports from
    `port`, and worker 0 (the chief) is the first task of the first node."""
    import shutil

    import tensorflow as tf

    gpus = {}
    if not (shutil.which("nvidia-smi") or os.environ.get("CUDA_VISIBLE_DEVICES")):
        # The resolver hands out one port per GPU slot and asks nvidia-smi for the GPU count: on CPU-only
        # nodes give it one slot per task (an upper bound) and keep it from setting CUDA_VISIBLE_DEVICES.
        slots = int(os.environ.get("SLURM_STEP_NUM_TASKS") or os.environ.get("SLURM_NTASKS") or 1)
        gpus = {"gpus_per_node": slots, "gpus_per_task": 1, "auto_set_gpu": False}
    resolver = tf.distribute.cluster_resolver.SlurmClusterResolver(port_base=port, **gpus)
    spec = resolver.cluster_spec().as_dict()
    return tf_config(spec, resolver.task_type, resolver.task_id)


def render_slurm(
    nodes: int = 2,
    cpus_per_task: int = 8,
    time: str = "02:00:00",
    overrides=(),
    tasks_per_node: int = 1,
    port: int = 2222,
) -> str:
    """deploy/slurm/train.sbatch.tmpl filled in; bad counts or overrides the config refuses raise one line."""
    import shlex

    strategy = strategies.first(workers_only=True).name  # Slurm's resolver describes workers alone
    check_render_input(strategy, {"nodes": nodes, "tasks_per_node": tasks_per_node,
                                  "cpus_per_task": cpus_per_task}, overrides)  # fmt: skip
    return render_template(
        DEPLOY_DIR / "slurm" / "train.sbatch.tmpl",
        {
            "nodes": nodes,
            "tasks_per_node": tasks_per_node,
            "port": port,
            "cpus_per_task": cpus_per_task,
            "time": time,
            "strategy": strategy,
            "overrides": " ".join(shlex.quote(o) for o in overrides),
        },
    )


def _main(argv=None) -> int:
    """`python -m tfpipe.launch.cluster slurm-tf-config [PORT]`: print TF_CONFIG from SLURM_* (inside srun)."""
    import sys

    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] != "slurm-tf-config":
        print("usage: python -m tfpipe.launch.cluster slurm-tf-config [PORT]", file=sys.stderr)
        return EXIT_BAD_INPUT
    port = int(argv[1]) if len(argv) > 1 else 2222
    print(slurm_tf_config(port))
    return EXIT_OK


if __name__ == "__main__":
    raise SystemExit(_main())
