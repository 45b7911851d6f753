"""Kubeflow Trainer v2 (trainer.kubeflow.org/v1alpha1) documents of a multi-worker training job: the
`TrainJob` and the namespaced `TrainingRuntime` it references. `tfpipe.launch.k8s.render_k8s(...,
controller="trainjob")` renders them after the job's NetworkPolicy, from the same pod template as its Indexed
Jobs and its TFJob.

Trainer v2 ships runtimes for torch, MPI, JAX, XGBoost and others, none for TensorFlow
(kubeflow/trainer#2443): no runtime sets TF_CONFIG. So the render brings its own: a JobSet of one replicated
job `node` (the job and container Trainer feeds `TrainJob.spec.trainer` into) whose Indexed Job runs numNodes
pods, under an ML policy with no framework (Trainer's PlainML: it sets the pod count from numNodes and merges
the TrainJob's env, nothing else). JobSet names pod i `<job>-node-0-<i>` in the subdomain `<job>` (the
headless Service it creates), so every pod builds its TF_CONFIG from the cluster in TFPIPE_CLUSTER and its
completion index, as a pod of render_k8s's own Indexed Jobs does (`k8s.tf_config_from_indexed_job`).

The runtime holds how a pod runs (the labels the NetworkPolicy selects, security contexts, no service account
token, restart policy, port); the TrainJob what runs (image, command, overrides, env, numNodes).
TFPIPE_CLUSTER lists every pod: change the worker count by rendering again, not by editing numNodes.

What it does not know: parameter_server (its ps and chief would need replicated jobs of their own and a
success policy on the chief: render_k8s refuses it here), gang scheduling (podGroupPolicy), Kueue; the pod
template and its security settings (k8s.py's).
"""

from __future__ import annotations

from tfpipe.errors import ConfigError

API_GROUP = "trainer.kubeflow.org"
API_VERSION = f"{API_GROUP}/v1alpha1"
# The runtimes rendered here, each named <job>-<runtime>. Trainer's own (torch-distributed, jax-distributed,
# ...) start torchrun, mpirun or JAX's coordinator and set no TF_CONFIG: a TrainJob on one would not train.
RUNTIMES = ("tensorflow",)
NODE = "node"  # Trainer's name for the trainer's replicated job and its container
# marks the replicated job TrainJob.spec.trainer applies to
ANCESTOR = {f"{API_GROUP}/trainjob-ancestor-step": "trainer"}
FRAMEWORK = {f"{API_GROUP}/framework": "tensorflow"}  # how Kubeflow's SDK and UI group runtimes
WHAT_RUNS = ("image", "command", "args", "env")  # the container's fields the TrainJob carries


def check_runtime(runtime: str) -> None:
    """A runtime this module renders, or one line (ConfigError) naming those it does."""
    if runtime not in RUNTIMES:
        raise ConfigError(
            f"runtime={runtime!r}: allowed: {', '.join(RUNTIMES)} (Kubeflow Trainer v2 ships no TensorFlow "
            "runtime; its torch, MPI and JAX runtimes set no TF_CONFIG, so the render brings its own)"
        )


def jobset_cluster(job_name: str, namespace: str, num_workers: int, port: int) -> dict:
    """The TF cluster of the JobSet Trainer creates: pod i of the one Job of replicated job `node` is
    `<job>-node-0-<i>`, in the subdomain `<job>`."""
    pods = (f"{job_name}-{NODE}-0-{i}.{job_name}.{namespace}" for i in range(num_workers))
    return {"worker": [f"{pod}.svc:{port}" for pod in pods]}


def trainjob_docs(names: dict, pod: dict, num_workers: int, runtime: str, backoff_limit: int) -> list:
    """[TrainingRuntime, TrainJob] of a job whose every worker runs `pod` (a pod template, one container)."""
    check_runtime(runtime)
    (container,) = pod["spec"]["containers"]
    shape = {k: v for k, v in container.items() if k not in WHAT_RUNS[1:]} | {"name": NODE}
    node_job = {
        "name": NODE,
        "replicas": 1,  # Trainer runs one Job of numNodes pods
        "template": {
            "metadata": {"labels": ANCESTOR},
            "spec": {
                "completionMode": "Indexed",  # JOB_COMPLETION_INDEX: the pod's worker index
                "backoffLimit": backoff_limit,
                "template": {"metadata": pod["metadata"], "spec": pod["spec"] | {"containers": [shape]}},
            },
        },
    }
    name, namespace = f"{names['job_name']}-{runtime}", names["namespace"]
    training_runtime = {
        "apiVersion": API_VERSION,
        "kind": "TrainingRuntime",
        "metadata": {"name": name, "namespace": namespace, "labels": FRAMEWORK},
        "spec": {
            "mlPolicy": {"numNodes": num_workers},  # no framework policy: Trainer's PlainML
            "template": {"spec": {"network": {"enableDNSHostnames": True}, "replicatedJobs": [node_job]}},
        },
    }
    train_job = {
        "apiVersion": API_VERSION,
        "kind": "TrainJob",
        "metadata": {"name": names["job_name"], "namespace": namespace},
        "spec": {
            "runtimeRef": {"apiGroup": API_GROUP, "kind": "TrainingRuntime", "name": name},
            "trainer": {"numNodes": num_workers, **{k: container[k] for k in WHAT_RUNS}},
        },
    }
    return [training_runtime, train_job]
