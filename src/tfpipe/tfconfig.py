"""TF_CONFIG of this process, read and checked, and written for one task (no TensorFlow): what strategies,
preflight and the stages ask of it. Clusters and launchers: tfpipe.launch."""

from __future__ import annotations

import json
import os
from typing import Dict, List, Optional, Tuple

from tfpipe.errors import UserError

TF_CONFIG = "TF_CONFIG"
TASK_TYPES = ("chief", "worker", "ps", "evaluator")

Cluster = Dict[str, List[str]]


def tf_config(cluster: Cluster, task_type: str, index: int) -> str:
    return json.dumps({"cluster": cluster, "task": {"type": task_type, "index": int(index)}}, sort_keys=True)


def parse_tf_config(text: str, where: str = TF_CONFIG) -> dict:
    """TF_CONFIG JSON -> {'cluster': {...}, 'task': {'type', 'index'}}; UserError naming what is wrong."""
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise UserError(f"{where}: not valid JSON ({exc})") from None
    if not isinstance(value, dict) or not isinstance(value.get("cluster"), dict) or not value["cluster"]:
        raise UserError(f'{where}: expected {{"cluster": {{job: [host:port, ...]}}, "task": {{...}}}}')
    for job, addresses in value["cluster"].items():
        if job not in TASK_TYPES:
            raise UserError(f"{where}: cluster job {job!r} not allowed; allowed: {', '.join(TASK_TYPES)}")
        if not isinstance(addresses, list) or not all(isinstance(a, str) and ":" in a for a in addresses):
            raise UserError(
                f"{where}: cluster.{job} must be a list of 'host:port' strings, got {addresses!r}"
            )
    task = value.get("task") or {}
    ttype, index = task.get("type"), task.get("index", 0)
    if ttype not in value["cluster"]:
        raise UserError(
            f"{where}: task.type={ttype!r} is not a job of the cluster; allowed: {', '.join(value['cluster'])}"
        )
    if not isinstance(index, int) or not 0 <= index < len(value["cluster"][ttype]):
        raise UserError(
            f"{where}: task.index={index!r} out of range for job {ttype!r} ({len(value['cluster'][ttype])} tasks)"
        )
    return {"cluster": value["cluster"], "task": {"type": ttype, "index": index}}


def read_tf_config(environ=None) -> dict:
    environ = os.environ if environ is None else environ
    text = environ.get(TF_CONFIG, "").strip()
    if not text:
        raise UserError(
            f"{TF_CONFIG}: not set; multi-process strategies need it (run through python -m pipeline.launch or tfpipe launch, "
            f"or let the cluster manager set it)"
        )
    return parse_tf_config(text)


def is_set(environ=None) -> bool:
    """TF_CONFIG holds something (blank counts as unset): this process is a task of a cluster."""
    environ = os.environ if environ is None else environ
    return bool(environ.get(TF_CONFIG, "").strip())


def task(environ=None) -> Tuple[Optional[str], int]:
    """(task type, index) of this process; (None, 0) without TF_CONFIG."""
    environ = os.environ if environ is None else environ
    if not is_set(environ):
        return None, 0
    t = read_tf_config(environ)["task"]
    return t["type"], t["index"]


def is_chief(environ=None) -> bool:
    """The chief task, or worker 0 of a cluster without a chief; True without TF_CONFIG."""
    environ = os.environ if environ is None else environ
    if not is_set(environ):
        return True
    cfg = read_tf_config(environ)
    ttype, index = cfg["task"]["type"], cfg["task"]["index"]
    if ttype == "chief":
        return True
    return ttype == "worker" and index == 0 and "chief" not in cfg["cluster"]


def public_spec(environ=None) -> dict:
    """The cluster spec to record in the run: jobs -> addresses only (no other TF_CONFIG fields)."""
    environ = os.environ if environ is None else environ
    if not is_set(environ):
        return {}
    return read_tf_config(environ)["cluster"]
