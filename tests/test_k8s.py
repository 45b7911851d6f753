"""Kubernetes manifests (tfpipe.launch.k8s): Indexed Jobs + headless Service (default) and a Kubeflow TFJob, each
with the NetworkPolicy; every document validated offline and strictly against the Kubernetes API schema."""

from __future__ import annotations

import json

import pytest
import yaml

from tfpipe.errors import ConfigError
from tfpipe.launch import k8s

OVERRIDES = ["train.epochs=5", "tracking.uri=http://mlflow:5000"]


def _docs(**kwargs) -> list:
    args = {"job_name": "demo", "image": "registry.example/tfpipe:1", "overrides": OVERRIDES, **kwargs}
    return list(yaml.safe_load_all(k8s.render_k8s(**args)))


def _validate(doc: dict) -> None:
    kubernetes_validate = pytest.importorskip("kubernetes_validate")
    from kubernetes_validate.utils import latest_version

    kubernetes_validate.validate(doc, latest_version(), strict=True)  # raises on any schema error


def _templates(docs: list) -> list:
    return [d["spec"]["template"] for d in docs if d["kind"] == "Job"]


def test_multi_worker_job_is_an_indexed_job_whose_pods_build_their_tf_config():
    docs = _docs(strategy="multi_worker_mirrored", num_workers=3)
    assert [d["kind"] for d in docs] == ["Service", "NetworkPolicy", "Job"]
    job = docs[2]
    assert job["metadata"]["name"] == "demo-worker" and job["spec"]["completionMode"] == "Indexed"
    assert job["spec"]["completions"] == job["spec"]["parallelism"] == 3  # all start together
    assert job["spec"]["backoffLimit"] >= 1 and job["spec"]["ttlSecondsAfterFinished"] > 0
    spec = job["spec"]["template"]["spec"]
    assert spec["restartPolicy"] == "OnFailure" and spec["subdomain"] == docs[0]["metadata"]["name"] == "demo"
    env = {e["name"]: e for e in spec["containers"][0]["env"]}
    assert "TF_CONFIG" not in env  # built in the pod from its completion index
    for index in range(
        3
    ):  # Kubernetes names pod i of Job demo-worker "demo-worker-i" (hostname) in subdomain demo
        environ = {name: e["value"] for name, e in env.items() if "value" in e} | {
            "JOB_COMPLETION_INDEX": str(index)
        }
        k8s.tf_config_from_indexed_job(environ)
        tf_config = json.loads(environ["TF_CONFIG"])
        assert tf_config["task"] == {"type": "worker", "index": index}
        assert tf_config["cluster"]["worker"][index] == f"demo-worker-{index}.demo.default.svc:2222"
    assert spec["containers"][0]["args"] == OVERRIDES


def test_mlflow_credentials_come_from_a_secret_never_the_manifest():
    for docs in (_docs(), _docs(controller="tfjob")):
        text = yaml.safe_dump_all(docs)
        assert "password" not in text.lower().replace("mlflow_tracking_password", "").replace(
            "key: password", ""
        )
        pods = _templates(docs) or [r["template"] for r in docs[-1]["spec"]["tfReplicaSpecs"].values()]
        for pod in pods:
            env = {e["name"]: e for e in pod["spec"]["containers"][0]["env"]}
            assert env["MLFLOW_TRACKING_PASSWORD"]["valueFrom"]["secretKeyRef"] == {
                "name": "demo-mlflow", "key": "password", "optional": True
            }  # fmt: skip


@pytest.mark.parametrize(
    "kwargs, kinds",
    [
        ({"strategy": "multi_worker_mirrored"}, ["Service", "NetworkPolicy", "Job"]),
        ({"strategy": "multi_worker_mirrored", "controller": "tfjob"}, ["NetworkPolicy", "TFJob"]),
        ({"strategy": "parameter_server", "controller": "tfjob"}, ["NetworkPolicy", "TFJob"]),
    ],
)
def test_every_rendered_manifest_is_valid_kubernetes(kwargs, kinds):
    docs = _docs(num_workers=2, num_ps=1, **kwargs)
    assert [d["kind"] for d in docs] == kinds
    for doc in docs:
        if doc["kind"] == "TFJob":  # a CRD the schema does not know: its pod templates are core/v1 pods
            assert (
                doc["apiVersion"] == "kubeflow.org/v1"
                and doc["spec"]["runPolicy"]["cleanPodPolicy"] == "Running"
            )
            for replica in doc["spec"]["tfReplicaSpecs"].values():
                assert replica["restartPolicy"] == "OnFailure" and replica["replicas"] >= 1
                _validate({"apiVersion": "v1", "kind": "Pod", **replica["template"]})
        else:
            _validate(doc)
    kubernetes_validate = pytest.importorskip("kubernetes_validate")
    pod = (_templates(docs) or [r["template"] for r in docs[-1]["spec"]["tfReplicaSpecs"].values()])[0]
    broken = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {},
        "spec": {**pod["spec"], "restartPolicyy": "Never"},
    }
    with pytest.raises(kubernetes_validate.ValidationError):  # the check itself can fail on a typo'd field
        _validate(broken)


def test_tfjob_has_one_replica_spec_per_task_type():
    (_, tfjob) = _docs(strategy="parameter_server", num_workers=2, num_ps=1, controller="tfjob")
    replicas = tfjob["spec"]["tfReplicaSpecs"]
    assert {k: v["replicas"] for k, v in replicas.items()} == {"Chief": 1, "Worker": 2, "PS": 1}
    assert all(r["template"]["spec"]["containers"][0]["name"] == "tensorflow" for r in replicas.values())


def _selects(selector: dict, labels: dict) -> bool:
    assert set(selector) == {"matchLabels"}, selector
    return all(labels.get(k) == v for k, v in selector["matchLabels"].items())


@pytest.mark.parametrize("controller", ["job", "tfjob"])
def test_network_policy_admits_the_grpc_port_only_from_the_jobs_own_pods(controller):
    docs = _docs(strategy="multi_worker_mirrored", num_workers=2, port=2345, controller=controller)
    (policy,) = [d for d in docs if d["kind"] == "NetworkPolicy"]
    pods = _templates(docs) or [
        r["template"] for d in docs if d["kind"] == "TFJob" for r in d["spec"]["tfReplicaSpecs"].values()
    ]
    spec = policy["spec"]
    assert spec["policyTypes"] == ["Ingress"] and all(
        _selects(spec["podSelector"], p["metadata"]["labels"]) for p in pods
    )
    (rule,) = spec["ingress"]
    assert rule["ports"] == [{"protocol": "TCP", "port": 2345}]
    assert {c["containerPort"] for p in pods for c in p["spec"]["containers"][0]["ports"]} == {2345}
    (peer,) = rule["from"]
    assert set(peer) == {"podSelector"} and all(
        _selects(peer["podSelector"], p["metadata"]["labels"]) for p in pods
    )
    other = {**pods[0]["metadata"]["labels"], "app.kubernetes.io/name": "other-job"}
    assert not _selects(peer["podSelector"], other)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"strategy": "mirrored"}, "strategy='mirrored': not a multi-process strategy"),
        ({"num_workers": 0}, "num_workers=0: must be a whole number >= 1"),
        ({"controller": "pods"}, "controller='pods': allowed: job, tfjob"),
        ({"strategy": "parameter_server"}, "use controller='tfjob'"),
        ({"overrides": ["train.optimizer.lr=0.1"]}, "train.optimizer.lr"),
        ({"overrides": ["strategy=mirrored"]}, "the rendered job sets strategy itself"),
    ],
)
def test_a_bad_render_is_refused_in_one_line(kwargs, message):
    with pytest.raises(ConfigError) as err:
        _docs(**kwargs)
    assert message in str(err.value) and "\n" not in str(err.value)


def _image_uid() -> int:
    """The user the images run as, read from the Dockerfiles (each must agree)."""
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    uids = {
        int(re.search(r"^USER (\d+)$", p.read_text(), re.M).group(1)) for p in root.glob("docker/Dockerfile*")
    }
    assert len(uids) == 1, uids
    return uids.pop()


def assert_unprivileged(template: dict) -> None:
    """A pod template: the images' numeric non-root user, the runtime's seccomp profile; every container without
    privileges, escalation or capabilities."""
    pod = template["spec"]["securityContext"]
    assert pod["runAsNonRoot"] is True and pod["runAsUser"] == _image_uid() != 0
    assert pod["seccompProfile"] == {"type": "RuntimeDefault"}
    for container in template["spec"]["containers"]:
        sc = container["securityContext"]
        assert sc["allowPrivilegeEscalation"] is False and sc.get("privileged", False) is False
        assert sc["capabilities"] == {"drop": ["ALL"]}


@pytest.mark.parametrize("controller", ["job", "tfjob"])
def test_every_pod_runs_unprivileged_as_the_images_user(controller):
    if controller == "job":  # one Job per task type
        docs = _docs(strategy="multi_worker_mirrored", num_workers=3, controller=controller)
        templates = _templates(docs)
        assert len(templates) == 1
    else:  # one replica spec per task type
        docs = _docs(strategy="parameter_server", num_workers=2, num_ps=1, controller=controller)
        (tfjob,) = [d for d in docs if d["kind"] == "TFJob"]
        templates = [r["template"] for r in tfjob["spec"]["tfReplicaSpecs"].values()]
        assert len(templates) == 3  # chief, worker, ps
    for template in templates:
        assert_unprivileged(template)
    for doc in docs:
        if doc["kind"] in ("Job", "Service", "NetworkPolicy"):
            _validate(doc)


def pod_templates(tree) -> list:
    """Every pod template anywhere in a rendered document (a Job's, each TFJob replica's, a RayJob's head,
    worker groups and submitter): any mapping whose `spec` holds `containers`, found by walking the whole
    tree."""
    found = []
    if isinstance(tree, dict):
        if isinstance(tree.get("spec"), dict) and "containers" in tree["spec"]:
            found.append(tree)
        for value in tree.values():
            found += pod_templates(value)
    elif isinstance(tree, list):
        for value in tree:
            found += pod_templates(value)
    return found


def test_the_pod_template_walk_finds_nested_templates():
    pod = {"metadata": {}, "spec": {"containers": [{"name": "c"}]}}
    doc = {
        "kind": "X",
        "spec": {"a": [{"template": pod}, {"b": {"template": pod, "other": 1}}], "template": pod},
    }
    assert len(pod_templates(doc)) == 3 and pod_templates({"spec": {"template": {"spec": {}}}}) == []


@pytest.mark.parametrize(
    "kwargs, count",
    [
        ({"strategy": "multi_worker_mirrored", "num_workers": 3}, 1),  # one Indexed Job
        ({"strategy": "multi_worker_mirrored", "controller": "tfjob"}, 1),  # Worker
        ({"strategy": "parameter_server", "num_ps": 2, "controller": "tfjob"}, 3),  # Chief, Worker, PS
    ],
)
def test_no_pod_gets_a_kubernetes_api_token(kwargs, count):
    """No training pod talks to the Kubernetes API (TF_CONFIG comes from the environment and the completion
    index, MLflow from the ConfigMap/Secret as variables): none mounts the service account's token, which a
    compromised pod could otherwise use against the API. Every pod template of every document is checked."""
    docs = _docs(**kwargs)
    templates = [t for doc in docs for t in pod_templates(doc)]
    assert len(templates) == count
    for template in templates:
        assert template["spec"]["automountServiceAccountToken"] is False, template
    for doc in docs:
        if doc["kind"] != "TFJob":
            _validate(doc)


TEAM_OVERRIDES = [  # a team's own model (issue 34, item 5), with values a shell or YAML would mangle
    "model=team",
    "model.params.units=8",
    "+model.params.note='two words: and a colon'",
    "train.hooks=[{_target_: team_hooks.Log}]",
]


@pytest.fixture
def team_project(tmp_path, monkeypatch):
    """A project folder holding this repository's conf/ plus a team's conf/model/team.yaml: the renders check
    overrides against the conf/ of the folder they run in, as every stage does."""
    import shutil
    from pathlib import Path

    shutil.copytree(Path(__file__).resolve().parents[1] / "conf", tmp_path / "conf")
    (tmp_path / "conf" / "model" / "team.yaml").write_text(
        "name: team\nbuilder: team_models:build\nparams:\n  units: 4\n"
    )
    monkeypatch.chdir(tmp_path)


@pytest.mark.parametrize("controller", ["job", "tfjob"])
def test_a_team_models_overrides_reach_every_pod_as_given(team_project, controller):
    docs = _docs(
        strategy="multi_worker_mirrored", num_workers=2, controller=controller, overrides=TEAM_OVERRIDES
    )
    pods = [d for d in docs if d["kind"] in ("Job", "TFJob")]
    containers = [
        c
        for d in pods
        for t in (
            [d["spec"]["template"]]
            if d["kind"] == "Job"
            else [r["template"] for r in d["spec"]["tfReplicaSpecs"].values()]
        )
        for c in t["spec"]["containers"]
    ]
    assert containers and all(c["args"] == TEAM_OVERRIDES for c in containers)
    for doc in docs:
        if doc["kind"] != "TFJob":  # not in kubernetes-validate's schemas (a CRD)
            _validate(doc)


def test_a_team_models_overrides_reach_the_ray_jobs_entrypoint_as_given(team_project):
    import shlex

    from tfpipe.launch.ray import render_rayjob

    (job,) = [
        d
        for d in yaml.safe_load_all(render_rayjob("demo", "IMAGE", overrides=TEAM_OVERRIDES))
        if d["kind"] == "RayJob"
    ]
    words = shlex.split(job["spec"]["entrypoint"])
    assert (
        words[:4] == ["python", "-m", "tfpipe", "train"] and words[-len(TEAM_OVERRIDES) :] == TEAM_OVERRIDES
    )
