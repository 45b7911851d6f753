"""Kubernetes manifests of a training job (`render_k8s`), with controllers that restart failed tasks and clean up.

- `controller="job"` (default): a headless Service, a NetworkPolicy and one Indexed Job per task type
  (`<job>-worker`, and `<job>-chief` / `<job>-ps` under parameter_server). Kubernetes names the pods of an
  Indexed Job `<job>-<type>-<index>` and, with the Service as subdomain, gives each the stable DNS name
  `<job>-<type>-<index>.<job>.<namespace>.svc`; a pod builds its TF_CONFIG from its completion index
  (`tf_config_from_indexed_job`). Failed pods restart in place (`restartPolicy: OnFailure`, up to
  `backoffLimit`); finished Jobs are deleted after `ttlSecondsAfterFinished`.
- `controller="tfjob"`: one Kubeflow `TFJob` (kubeflow.org/v1; the training operator gang-creates the replicas,
  sets TF_CONFIG, restarts and cleans up) and the NetworkPolicy. The training operator v1 is legacy.
- `controller="trainjob"`: Kubeflow Trainer v2's `TrainJob` and the `TrainingRuntime` it runs on
  (trainer.kubeflow.org/v1alpha1: `tfpipe.launch.trainjob`; multi_worker_mirrored) and the NetworkPolicy.

MLflow settings reach the pods from the ConfigMap `<job>-mlflow` (tracking_uri) and the Secret `<job>-mlflow`
(username, password): never from the manifest. No pod calls the Kubernetes API (TF_CONFIG comes from the
environment and the completion index), so none mounts a service account token (`automountServiceAccountToken:
false`): a compromised training pod holds no credential for the API.
"""

from __future__ import annotations

import json
import os

import yaml

from tfpipe import strategies, tfconfig
from tfpipe.errors import ConfigError
from tfpipe.launch.cluster import DEPLOY_DIR, TF_CONFIG, k8s_cluster, render_template, roles, tf_config

CONTROLLERS = ("job", "tfjob", "trainjob")
CLUSTER_ENV, TASK_TYPE_ENV, INDEX_ENV = "TFPIPE_CLUSTER", "TFPIPE_TASK_TYPE", "JOB_COMPLETION_INDEX"
TFJOB_REPLICAS = {"chief": "Chief", "worker": "Worker", "ps": "PS"}
# The images' user (docker/Dockerfile*: useradd --uid 10001; numeric, so runAsNonRoot can be verified).
POD_SECURITY = {"runAsNonRoot": True, "runAsUser": 10001, "runAsGroup": 10001, "fsGroup": 10001,
                "seccompProfile": {"type": "RuntimeDefault"}}  # fmt: skip
# The root filesystem stays writable: the stage writes models/, metrics/, plots/ and mlflow.db into the image's
# project folder (mount volumes there to make it read-only and keep the results).
CONTAINER_SECURITY = {
    "allowPrivilegeEscalation": False,
    "privileged": False,
    "capabilities": {"drop": ["ALL"]},
}


def render_k8s(
    job_name: str,
    image: str,
    strategy: str = strategies.first(workers_only=True).name,
    num_workers: int = 2,
    num_ps: int = 1,
    port: int = 2222,
    namespace: str = "default",
    overrides=(),
    controller: str = "job",
    backoff_limit: int = 3,
    runtime: str = "tensorflow",
) -> str:
    """One multi-document manifest (see the module docstring); bad input raises one line (ConfigError)."""
    from tfpipe.launch.cluster import check_render_input, multi_process

    if controller not in CONTROLLERS:
        raise ConfigError(f"controller={controller!r}: allowed: {', '.join(CONTROLLERS)}")
    coordinated = multi_process(strategy).coordinated
    if controller != "tfjob" and coordinated:  # ps and workers serve until stopped
        raise ConfigError(
            f"strategy={strategy} with controller={controller!r}: its ps and worker tasks never exit, "
            "so their Jobs would never finish; use controller='tfjob' (the operator stops them when the "
            "chief succeeds)"
        )
    counts = {"num_workers": num_workers, "port": port} | ({"num_ps": num_ps} if coordinated else {})
    check_render_input(strategy, counts, overrides)
    cluster = k8s_cluster(job_name, strategy, num_workers, num_ps, port, namespace)
    names = {"job_name": job_name, "namespace": namespace, "port": port}
    policy = render_template(DEPLOY_DIR / "k8s" / "networkpolicy.yaml.tmpl", names)
    if controller == "tfjob":
        return "---\n".join(
            [policy, yaml.safe_dump(_tfjob(cluster, names, image, strategy, overrides), sort_keys=False)]
        )
    if controller == "trainjob":  # Kubeflow Trainer v2
        from tfpipe.launch import trainjob

        jobset = trainjob.jobset_cluster(job_name, namespace, num_workers, port)
        env = [{"name": CLUSTER_ENV, "value": json.dumps(jobset, sort_keys=True)},
               {"name": TASK_TYPE_ENV, "value": "worker"}]  # fmt: skip
        pod = _pod_template(names, "worker", image, strategy, overrides, env)
        docs = trainjob.trainjob_docs(names, pod, num_workers, runtime, backoff_limit)
        return "---\n".join([policy, *(yaml.safe_dump(d, sort_keys=False) for d in docs)])
    docs = [render_template(DEPLOY_DIR / "k8s" / "service.yaml.tmpl", names), policy]
    for task_type in dict.fromkeys(t for t, _ in roles(cluster)):
        job = _indexed_job(cluster, task_type, names, image, strategy, overrides, backoff_limit)
        docs.append(yaml.safe_dump(job, sort_keys=False))
    return "---\n".join(docs)


def _pod_template(names: dict, task_type: str, image: str, strategy: str, overrides, env: list) -> dict:
    job_name = names["job_name"]
    mlflow = f"{job_name}-mlflow"
    env = env + [
        _from("MLFLOW_TRACKING_URI", "configMapKeyRef", mlflow, "tracking_uri"),
        _from("MLFLOW_TRACKING_USERNAME", "secretKeyRef", mlflow, "username"),
        _from("MLFLOW_TRACKING_PASSWORD", "secretKeyRef", mlflow, "password"),
    ]
    container = {
        "name": "train",
        "image": image,
        "command": ["python", "-m", "tfpipe", "train", f"strategy={strategy}"],
        "args": list(overrides),
        "env": env,
        "ports": [{"containerPort": names["port"], "name": "grpc"}],
        "securityContext": CONTAINER_SECURITY,
    }
    labels = {"app.kubernetes.io/name": job_name, "tfpipe/task-type": task_type}
    spec = {
        "restartPolicy": "OnFailure",
        "automountServiceAccountToken": False,  # no pod calls the Kubernetes API
        "securityContext": POD_SECURITY,
        "containers": [container],
    }
    return {"metadata": {"labels": labels}, "spec": spec}


def _from(name: str, kind: str, source: str, key: str) -> dict:
    return {"name": name, "valueFrom": {kind: {"name": source, "key": key, "optional": True}}}


def _indexed_job(cluster, task_type, names, image, strategy, overrides, backoff_limit: int) -> dict:
    n = len(cluster[task_type])
    env = [
        {"name": CLUSTER_ENV, "value": json.dumps(cluster, sort_keys=True)},
        {"name": TASK_TYPE_ENV, "value": task_type},
    ]
    template = _pod_template(names, task_type, image, strategy, overrides, env)
    template["spec"]["subdomain"] = names["job_name"]  # DNS <pod>.<service>.<namespace>.svc
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": f"{names['job_name']}-{task_type}", "namespace": names["namespace"],
                     "labels": {"app.kubernetes.io/name": names["job_name"]}},
        "spec": {"completionMode": "Indexed", "completions": n, "parallelism": n, "backoffLimit": backoff_limit,
                 "ttlSecondsAfterFinished": 86400, "template": template},
    }  # fmt: skip


def _tfjob(cluster, names, image, strategy, overrides) -> dict:
    replicas = {}
    for task_type in dict.fromkeys(t for t, _ in roles(cluster)):
        template = _pod_template(names, task_type, image, strategy, overrides, [])
        template["spec"]["containers"][0]["name"] = "tensorflow"  # the container the operator gives TF_CONFIG
        replicas[TFJOB_REPLICAS[task_type]] = {
            "replicas": len(cluster[task_type]),
            "restartPolicy": "OnFailure",
            "template": {
                "metadata": template["metadata"],
                "spec": {
                    "automountServiceAccountToken": False,
                    "securityContext": POD_SECURITY,
                    "containers": template["spec"]["containers"],
                },
            },
        }
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "TFJob",
        "metadata": {"name": names["job_name"], "namespace": names["namespace"]},
        "spec": {"runPolicy": {"cleanPodPolicy": "Running", "ttlSecondsAfterFinished": 86400},
                 "tfReplicaSpecs": replicas},
    }  # fmt: skip


def tf_config_from_indexed_job(environ=None) -> None:
    """In a pod of an Indexed Job rendered here: set TF_CONFIG from the job's cluster, task type and the completion
    index Kubernetes gives each pod. A no-op anywhere else (or where TF_CONFIG is already set)."""
    environ = os.environ if environ is None else environ
    if tfconfig.is_set(environ) or not all(k in environ for k in (CLUSTER_ENV, TASK_TYPE_ENV, INDEX_ENV)):
        return
    environ[TF_CONFIG] = tf_config(
        json.loads(environ[CLUSTER_ENV]), environ[TASK_TYPE_ENV], int(environ[INDEX_ENV])
    )
