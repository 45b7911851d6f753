"""strategy.launcher=ray: the train stage for multi_worker_mirrored through Ray Train's TensorflowTrainer.

Fast: the refusals (one line, exit 2, before Ray or TensorFlow start) and the KubeRay RayJob manifest,
validated offline. Slow: on a Ray of `ray start --head`, the 2 workers of
`python -m pipeline.train ... strategy.launcher=ray` train tiny data; a worker's process is SIGKILLed
mid-training, Ray starts the worker group again (FailureConfig(max_failures=1)) and the chief resumes from its
checkpoint in the same run, every step's metrics logged exactly once, the SavedModel exported. With
max_restarts=0, the driver's own local Ray (its own temp dir, 2 CPUs; stopped with the driver) gives up.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import yaml

from tests.test_multiworker import _runs, make_project, project_env
from tfpipe.launch import ray as ray_launcher

ROOT = Path(__file__).resolve().parents[1]
RAY = ("strategy=multi_worker_mirrored", "strategy.launcher=ray", "strategy.num_workers=2")
TINY = (
    "model.filters=[4]",
    "model.dense_units=8",
    "train.batch_size_per_replica=2",
    "train.optimizer.learning_rate=0.01",
    "train.log_every_steps=1",
    "train.checkpoint_every_steps=3",
    "tracking.log_model=false",
    "train.tensorboard=false",
)


def _train(project: Path, *overrides: str, env=None, timeout: float = 600) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "pipeline.train", *overrides]
    return subprocess.run(
        cmd, cwd=project, env=env or project_env(), capture_output=True, text=True, timeout=timeout
    )


def _one_line_exit_2(proc, expected: str) -> None:
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert proc.stderr.strip() == f"train: error: {expected}"


# ----------------------------------------------------------------------------- fast: refusals


def test_ray_with_parameter_server_is_refused_in_one_line(tmp_path):
    project = make_project(tmp_path)
    proc = _train(project, "strategy=parameter_server", "+strategy.launcher=ray")
    _one_line_exit_2(
        proc,
        "strategy.launcher=ray: Ray Train runs only multi_worker_mirrored, not strategy.name='parameter_server'; "
        "use strategy=multi_worker_mirrored, or strategy.launcher=local",
    )


def test_an_unknown_launcher_is_refused_with_a_did_you_mean(tmp_path):
    proc = _train(make_project(tmp_path), "strategy=multi_worker_mirrored", "strategy.launcher=rya")
    _one_line_exit_2(proc, "strategy.launcher='rya': not allowed (did you mean 'ray'?); allowed: local, ray")


@pytest.mark.slow
def test_ray_not_installed_stops_in_one_line_before_any_data_is_read(tmp_path):
    """A `ray` without its Train part on the path (what `pip install ray` without [train] gives): the fix
    is named; the data folder does not exist, so reaching the data would fail differently."""
    shadow = tmp_path / "shadow" / "ray"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("")
    env = project_env()
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path / "shadow"), env["PYTHONPATH"]])
    project = make_project(tmp_path / "project")
    proc = _train(project, *RAY, f"data.output_dir={tmp_path / 'missing'}", env=env)
    _one_line_exit_2(proc, "strategy.launcher=ray: Ray Train is not installed; pip install -e .[ray]")
    assert not (project / "models").exists()


def test_the_local_launcher_stays_the_default():
    from tfpipe import config

    cfg = config.compose(["strategy=multi_worker_mirrored"], config_dir=ROOT / "conf")
    assert cfg.strategy.launcher == "local" and cfg.strategy.ray_address is None


@pytest.mark.slow
def test_workers_keep_the_drivers_keras(monkeypatch):
    """Ray's TF backend sets TF_USE_LEGACY_KERAS=1 in every worker; tf_keras is not installed, so tf.keras
    would fail there. The worker restores the driver's value (unset -> unset)."""
    monkeypatch.setenv(ray_launcher.LEGACY_KERAS_ENV, "1")  # as Ray's _setup_tensorflow_environment does
    ray_launcher.restore_keras_env(None)
    assert ray_launcher.LEGACY_KERAS_ENV not in os.environ
    ray_launcher.restore_keras_env("0")
    assert os.environ[ray_launcher.LEGACY_KERAS_ENV] == "0"
    code = "import tensorflow as tf; tf.keras.layers.Dense(1)"
    env = {**project_env(), ray_launcher.LEGACY_KERAS_ENV: "1"}
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert "Keras cannot be imported" in proc.stderr  # what the worker would hit without the restore


# ----------------------------------------------------------------------------- fast: the RayJob manifest

# Fields of KubeRay's ray.io/v1 API (https://ray-project.github.io/kuberay/reference/api/): RayJobSpec,
# RayClusterSpec, HeadGroupSpec, WorkerGroupSpec. A typo'd field is what the cluster would refuse at apply.
RAYJOB_SPEC = {
    "activeDeadlineSeconds", "backoffLimit", "clusterSelector", "deletionStrategy", "entrypoint",
    "entrypointNumCpus", "entrypointNumGpus", "entrypointResources", "jobId", "managedBy", "metadata",
    "rayClusterSpec", "runtimeEnvYAML", "shutdownAfterJobFinishes", "submissionMode", "submitterConfig",
    "submitterPodTemplate", "suspend", "ttlSecondsAfterFinished",
}  # fmt: skip
CLUSTER_SPEC = {
    "autoscalerOptions", "enableInTreeAutoscaling", "gcsFaultToleranceOptions", "headGroupSpec",
    "headServiceAnnotations", "managedBy", "rayVersion", "suspend", "workerGroupSpecs", "authOptions",
}  # fmt: skip
HEAD_SPEC = {"enableIngress", "headService", "rayStartParams", "serviceType", "template"}
WORKER_SPEC = {
    "groupName", "idleTimeoutSeconds", "maxReplicas", "minReplicas", "numOfHosts", "rayStartParams",
    "replicas", "scaleStrategy", "suspend", "template",
}  # fmt: skip


def _check_rayjob(doc: dict) -> None:
    kubernetes_validate = pytest.importorskip("kubernetes_validate")
    from kubernetes_validate.utils import latest_version

    assert doc["apiVersion"] == "ray.io/v1" and doc["kind"] == "RayJob"
    spec, cluster = doc["spec"], doc["spec"]["rayClusterSpec"]
    assert set(spec) <= RAYJOB_SPEC and set(cluster) <= CLUSTER_SPEC
    assert set(cluster["headGroupSpec"]) <= HEAD_SPEC
    groups = cluster["workerGroupSpecs"]
    assert all(set(g) <= WORKER_SPEC for g in groups)
    params = [cluster["headGroupSpec"]["rayStartParams"], *[g["rayStartParams"] for g in groups]]
    assert all(isinstance(v, str) for p in params for v in p.values())  # KubeRay: map[string]string
    for template in templates_of(doc):  # the pods (head, workers, submitter), as core/v1 PodTemplate, strict
        pod_template = {
            "apiVersion": "v1",
            "kind": "PodTemplate",
            "metadata": {"name": "t"},
            "template": template,
        }
        kubernetes_validate.validate(pod_template, latest_version(), strict=True)


def templates_of(doc: dict) -> list:
    """Every pod template of the RayJob, wherever it is: the head's, each worker group's, the submitter's."""
    from test_k8s import pod_templates

    templates = pod_templates(doc)
    cluster = doc["spec"]["rayClusterSpec"]
    assert len(templates) == 2 + len(cluster["workerGroupSpecs"])  # the walk found them all
    return templates


def _check_fence(policy: dict, templates: list) -> None:
    """The NetworkPolicy selects every pod of the job; Ray's ports only from those pods, the job API (8265)
    only from the job's submitter and the KubeRay operator
    (`test_the_job_api_admits_only_the_submitter_and_the_operator`); every pod runs as the images' non-root
    user, every container without privileges."""
    from test_k8s import _validate, assert_unprivileged

    _validate(policy)
    assert policy["kind"] == "NetworkPolicy" and policy["spec"]["policyTypes"] == ["Ingress"]
    selector = policy["spec"]["podSelector"]["matchLabels"]
    cluster_pods = [t for t in templates if t["metadata"]["labels"].items() >= selector.items()]
    assert len(cluster_pods) == len(templates) - 1  # all but the submitter, which serves nothing
    peers, api = policy["spec"]["ingress"]
    assert peers == {"from": [{"podSelector": {"matchLabels": selector}}]}  # all ports, the job's pods only
    assert api["ports"] == [{"protocol": "TCP", "port": 8265}]
    for template in templates:
        assert_unprivileged(template)


# A NetworkPolicy read as Kubernetes reads it: a rule admits a peer on a port when the port is among its ports
# (or it names none) and one of its `from` entries matches; an entry's podSelector alone means the policy's
# namespace, with a namespaceSelector both must match; an empty selector matches everything.
def _matches(selector, labels: dict) -> bool:
    return selector is not None and all(
        labels.get(k) == v for k, v in selector.get("matchLabels", {}).items()
    )


def _admits(policy: dict, labels: dict, namespace: str, port: int) -> bool:
    own = policy["metadata"]["namespace"]
    for rule in policy["spec"]["ingress"]:
        if "ports" in rule and port not in [p["port"] for p in rule["ports"]]:
            continue
        for peer in rule.get("from", [{}]):
            if "namespaceSelector" in peer:
                in_namespace = _matches(peer["namespaceSelector"], {"kubernetes.io/metadata.name": namespace})
            else:
                in_namespace = namespace == own
            if in_namespace and _matches(peer.get("podSelector", {}), labels):
                return True
    return False


def test_the_job_api_admits_only_the_submitter_and_the_operator():
    """Port 8265 is Ray's job server: whoever reaches it runs code on the cluster (no authentication). It
    admits the RayJob's own submitter pod (by the label its template carries) and the KubeRay operator (which
    polls the job's status there), not every pod of the namespace; Ray's other ports stay among the job's
    pods."""
    text = ray_launcher.render_rayjob("demo", "img:1", namespace="team-a", operator_namespace="ray-system")
    doc, policy = yaml.safe_load_all(text)
    submitter = doc["spec"]["submitterPodTemplate"]
    assert doc["spec"]["submissionMode"] == "K8sJobMode"  # the submitter is that template's pod
    head = doc["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["metadata"]["labels"]
    operator = {
        "app.kubernetes.io/component": "kuberay-operator",
        "app.kubernetes.io/name": "kuberay-operator",
    }
    sub = submitter["metadata"]["labels"]
    assert _admits(policy, sub, "team-a", 8265) and not _admits(policy, sub, "team-a", 6379)
    assert _admits(policy, operator, "ray-system", 8265) and not _admits(policy, operator, "ray-system", 6379)
    assert _admits(policy, head, "team-a", 8265) and _admits(
        policy, head, "team-a", 6379
    )  # the job's own pods
    for labels, namespace in [
        ({}, "team-a"),  # any pod of the namespace: refused (it used to be admitted)
        ({"app.kubernetes.io/name": "other-job"}, "team-a"),
        ({"tfpipe/ray-submitter": "other-job"}, "team-a"),  # another job's submitter
        (sub, "team-b"),  # the submitter's labels in another namespace
        (operator, "team-a"),  # the operator's labels outside the operator's namespace
    ]:
        assert not _admits(policy, labels, namespace, 8265), (labels, namespace)
    assert all(
        peer.get("podSelector", {}).get("matchLabels")
        for rule in policy["spec"]["ingress"]
        for peer in rule["from"]
    )  # no rule admits a whole namespace


def test_no_rayjob_pod_gets_a_kubernetes_api_token():
    """Head, workers and submitter: none needs the Kubernetes API (no in-tree autoscaler is rendered; the
    submitter only posts to the job server), so none mounts the service account's token. Every pod template of
    every rendered document is checked, the walk finding them wherever they are."""
    from test_k8s import pod_templates

    docs = list(yaml.safe_load_all(ray_launcher.render_rayjob("demo", "img:1", num_workers=2)))
    templates = [t for d in docs for t in pod_templates(d)]
    assert len(templates) == 3  # head, the worker group, the submitter
    for template in templates:
        assert template["spec"]["automountServiceAccountToken"] is False, template
    assert (
        "enableInTreeAutoscaling" not in docs[0]["spec"]["rayClusterSpec"]
    )  # would need the API (and a token)


def test_rayjob_manifest_is_a_valid_kuberay_rayjob():
    text = ray_launcher.render_rayjob(
        "demo", "registry.example/tfpipe:1", num_workers=3, overrides=["train.epochs=5", "dataset=imdb"]
    )
    doc, policy = yaml.safe_load_all(text)
    _check_rayjob(doc)
    _check_fence(policy, templates_of(doc))
    workers = doc["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]
    assert workers["replicas"] == workers["minReplicas"] == workers["maxReplicas"] == 3
    assert doc["spec"]["entrypoint"] == (
        "python -m tfpipe train strategy=multi_worker_mirrored strategy.launcher=ray "
        "strategy.num_workers=3 train.epochs=5 dataset=imdb"
    )
    assert doc["spec"]["rayClusterSpec"]["rayVersion"] == "2.60.0"


def test_rayjob_checks_can_fail():
    kubernetes_validate = pytest.importorskip("kubernetes_validate")
    doc = next(yaml.safe_load_all(ray_launcher.render_rayjob("demo", "img:1")))
    typo = json.loads(json.dumps(doc))
    typo["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["template"]["spec"]["containers"][0]["imagee"] = "x"
    with pytest.raises(kubernetes_validate.ValidationError):
        _check_rayjob(typo)
    typo = json.loads(json.dumps(doc))
    typo["spec"]["entrypoints"] = "x"
    with pytest.raises(AssertionError):
        _check_rayjob(typo)


# ----------------------------------------------------------------------------- slow: a real local Ray


@pytest.fixture
def ray_env():
    """The driver's environment: a Ray of its own (started by the driver, stopped with it) in a fresh temp
    dir (short: Ray's socket paths), removed afterwards; token authentication with a token of this test
    (not the shared ~/.ray/auth_token)."""
    env = project_env()
    env.pop("RAY_ADDRESS", None)
    env.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=secrets.token_hex(16))
    env["RAY_TMPDIR"] = tempfile.mkdtemp(prefix="tfr", dir="/tmp")
    yield env
    shutil.rmtree(env["RAY_TMPDIR"], ignore_errors=True)


def _latest_step(project: Path) -> int:
    index = project / "models" / "cifar10" / "checkpoints" / "checkpoint"
    if not index.is_file():
        return 0
    first = index.read_text().splitlines()[0]  # model_checkpoint_path: "ckpt-N"
    return int(first.rsplit("-", 1)[1].rstrip('"'))


def _steps_once(project: Path, db: Path, epochs: int):
    from mlflow import MlflowClient

    runs = _runs(db)
    assert len(runs) == 1 and runs[0].info.status == "FINISHED"
    run = runs[0]
    client = MlflowClient(tracking_uri=f"sqlite:///{db}")
    total = json.loads((project / "metrics" / "train.json").read_text())["steps"]
    steps = [m.step for m in client.get_metric_history(run.info.run_id, "train_loss")]
    assert sorted(steps) == list(range(1, total + 1)), "every step logged exactly once"
    epochs_logged = [m.step for m in client.get_metric_history(run.info.run_id, "val_loss")]
    assert sorted(epochs_logged) == list(range(epochs)), "every epoch's val_loss exactly once"
    return run


def _kill_worker_after(proc, project: Path, pid_file: Path, step: int, timeout: float = 300) -> int:
    deadline = time.monotonic() + timeout
    while _latest_step(project) < step or not pid_file.is_file():
        assert proc.poll() is None, f"the job ended before step {step}:\n{proc.stdout.read()[-3000:]}"
        assert time.monotonic() < deadline, "no checkpoint in time"
        time.sleep(0.05)
    pid = int(pid_file.read_text())
    os.kill(pid, signal.SIGKILL)
    return pid


HEAD_PORTS = (
    "--port", "--node-manager-port", "--object-manager-port", "--ray-client-server-port", "--metrics-export-port",
    "--dashboard-agent-listen-port", "--dashboard-agent-grpc-port", "--runtime-env-agent-port",
)  # fmt: skip


def _start_head(env: dict):
    """`ray start --head --block` on loopback with free ports (not Ray's fixed defaults: other Rays may run
    here), in its own session: the test stops exactly this process group."""
    from tfpipe.launch.cluster import free_ports

    ports = free_ports(len(HEAD_PORTS))
    cmd = ["ray", "start", "--head", "--block", "--disable-usage-stats", "--num-cpus=2"]
    cmd += [f"--temp-dir={env['RAY_TMPDIR']}", "--include-dashboard=false"]
    cmd += [f"{flag}={port}" for flag, port in zip(HEAD_PORTS, ports)]
    log = open(Path(env["RAY_TMPDIR"]) / "head.log", "w")
    head = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + 120
    while "Ray runtime started" not in (Path(env["RAY_TMPDIR"]) / "head.log").read_text():
        assert head.poll() is None and time.monotonic() < deadline, "ray start --head failed"
        time.sleep(0.5)
    return head, f"127.0.0.1:{ports[0]}"


def _stop_head(head) -> None:
    """SIGTERM to the head's group, SIGKILL to what is left once the head exited (or 10 s passed): waits on
    the exit, not a fixed pause."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(head.pid, sig)
        except ProcessLookupError:
            pass
        try:
            head.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
    head.wait(timeout=30)


@pytest.mark.slow
def test_a_killed_worker_is_restarted_by_ray_and_the_run_resumes(prepared_image, tmp_path, ray_env):
    """On a Ray started by `ray start --head` (attached through strategy.ray_address): SIGKILL worker 1 after
    the first checkpoints; Ray starts the worker group again (strategy.max_restarts=1 -> max_failures=1), the
    chief resumes in the same run, every step and epoch logged once; the cluster outlives the job."""
    project = make_project(tmp_path / "project")
    db = project / "mlflow.db"
    pids = tmp_path / "pids"
    ray_env[ray_launcher.PID_DIR_ENV] = str(pids)  # each worker writes worker-<rank>.pid there
    head, address = _start_head(ray_env)
    try:
        out, killed = _train_and_kill(project, db, pids, prepared_image.prepared_dir, address, ray_env)
        assert head.poll() is None, "the driver left the cluster it attached to running"
    finally:
        _stop_head(head)
    assert "[ray] done: 2 workers finished" in out, out[-4000:]
    assert int((pids / "worker-1.pid").read_text()) != killed, "Ray started worker 1 again"
    run = _steps_once(project, db, epochs=12)
    tags = run.data.tags
    assert tags["strategy"] == "multi_worker_mirrored" and tags["strategy.worker_count"] == "2"
    assert tags["tfpipe.resumes"] == "1"
    assert (project / "models" / "cifar10" / "saved_model" / "saved_model.pb").is_file()
    total = json.loads((project / "metrics" / "train.json").read_text())["steps"]
    assert 6 <= int(run.data.tags["tfpipe.resumed_at_step"]) < total


def _train_and_kill(project, db, pids, prepared, address, env) -> tuple:
    cmd = [sys.executable, "-m", "pipeline.train", *RAY, "strategy.max_restarts=1", *TINY, "train.epochs=12"]
    cmd += [f"data.output_dir={prepared}", f"tracking.uri=sqlite:///{db}", f"strategy.ray_address={address}"]
    proc = subprocess.Popen(
        cmd, cwd=project, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    try:
        killed = _kill_worker_after(proc, project, pids / "worker-1.pid", step=6)
        out, _ = proc.communicate(timeout=600)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, out[-4000:]
    return out, killed


@pytest.mark.slow
def test_without_restarts_a_killed_worker_ends_the_job_with_exit_1(prepared_image, tmp_path, ray_env):
    """strategy.max_restarts=0 -> FailureConfig(max_failures=0): Ray gives up at the first dead worker."""
    project = make_project(tmp_path / "project")
    pids = tmp_path / "pids"
    ray_env[ray_launcher.PID_DIR_ENV] = str(pids)  # the driver's local Ray hands its env to the workers
    cmd = [sys.executable, "-m", "pipeline.train", *RAY, "strategy.max_restarts=0", *TINY, "train.epochs=12"]
    cmd += [f"data.output_dir={prepared_image.prepared_dir}", f"tracking.uri=sqlite:///{project / 'm.db'}"]
    proc = subprocess.Popen(
        cmd, cwd=project, env=ray_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    try:
        _kill_worker_after(proc, project, pids / "worker-1.pid", step=3)
        out, _ = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 1, out[-4000:]
    assert "[ray] training failed (strategy.max_restarts=0)" in out


@pytest.mark.slow
def test_missing_prepared_data_stops_in_one_line_before_ray_starts(tmp_path, ray_env):
    """The workers would find no prepared data: the driver checks it first (Ray would only start the failing
    workers again), one line, exit 2, and no Ray was started (its temp dir stays empty)."""
    project = make_project(tmp_path / "project")
    missing = tmp_path / "missing"
    proc = _train(project, *RAY, "strategy.max_restarts=2", f"data.output_dir={missing}", env=ray_env)
    assert proc.returncode == 2, (proc.stdout + proc.stderr)[-3000:]
    assert len(proc.stderr.strip().splitlines()) == 1 and proc.stderr.startswith("train: error: ")
    assert str(missing) in proc.stderr
    assert not os.listdir(ray_env["RAY_TMPDIR"])
