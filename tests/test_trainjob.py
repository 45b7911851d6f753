"""Kubeflow Trainer v2 render (render_k8s(controller="trainjob"), tfpipe.launch.trainjob): the TrainingRuntime and
the TrainJob validated offline and strictly against the CRDs of kubeflow/trainer v2.3.0 (vendored under
tests/data/kubeflow-trainer/), the NetworkPolicy and the runtime's pod template against the Kubernetes schema; the
pods the two make run exactly as the TFJob's workers; bad input refused in one line, exit 2."""

from __future__ import annotations

import copy
import functools
import json
from pathlib import Path

import jsonschema
import pytest
import yaml
from test_k8s import OVERRIDES, _validate, assert_unprivileged

from tfpipe.errors import ConfigError
from tfpipe.launch import k8s, k8s_render, trainjob

CRDS = Path(__file__).resolve().parent / "data" / "kubeflow-trainer"
TFJOB_ONLY_ENV = set()  # the training operator sets TF_CONFIG itself
TRAINJOB_ONLY_ENV = {k8s.CLUSTER_ENV, k8s.TASK_TYPE_ENV}  # the pods build TF_CONFIG from these


def _docs(**kwargs) -> dict:
    args = {"job_name": "demo", "image": "registry.example/tfpipe:1", "overrides": OVERRIDES, **kwargs}
    docs = list(yaml.safe_load_all(k8s.render_k8s(**args)))
    assert len({d["kind"] for d in docs}) == len(docs)
    return {d["kind"]: d for d in docs}


def _strict(schema):
    """The schema refusing unknown fields, as the API server does under kubectl's default field validation
    (Strict): a CRD's structural schema alone would prune them silently."""
    if isinstance(schema, dict):
        schema = {k: _strict(v) for k, v in schema.items()}
        if "properties" in schema and "additionalProperties" not in schema:
            if not schema.get("x-kubernetes-preserve-unknown-fields"):
                schema["additionalProperties"] = False
    elif isinstance(schema, list):
        schema = [_strict(v) for v in schema]
    return schema


@functools.lru_cache(maxsize=None)
def _validator(kind: str) -> jsonschema.Draft4Validator:
    """The v1alpha1 OpenAPI schema of the vendored CRD of `kind` (its group and kind checked against the file)."""
    plural = {"TrainJob": "trainjobs", "TrainingRuntime": "trainingruntimes"}[kind]
    text = (CRDS / f"trainer.kubeflow.org_{plural}.yaml").read_text(encoding="utf-8")
    (crd,) = [d for d in yaml.load_all(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)) if d]
    assert crd["spec"]["group"] == trainjob.API_GROUP and crd["spec"]["names"]["kind"] == kind
    (version,) = [
        v for v in crd["spec"]["versions"] if f"{crd['spec']['group']}/{v['name']}" == trainjob.API_VERSION
    ]
    schema = _strict(version["schema"]["openAPIV3Schema"])
    jsonschema.Draft4Validator.check_schema(schema)
    return jsonschema.Draft4Validator(schema)


def _crd_errors(doc: dict) -> list:
    return [
        f"{'.'.join(map(str, e.absolute_path))}: {e.message}"
        for e in _validator(doc["kind"]).iter_errors(doc)
    ]


def _runtime_pod(docs: dict) -> dict:
    (node,) = docs["TrainingRuntime"]["spec"]["template"]["spec"]["replicatedJobs"]
    return node["template"]["spec"]["template"]


def _effective_pod(docs: dict) -> dict:
    """The pod template Trainer v2 makes of the two (its JobSet builder: the TrainJob's trainer image, command and
    args replace the `node` container's, its env is merged in by name)."""
    pod = copy.deepcopy(_runtime_pod(docs))
    (container,) = [c for c in pod["spec"]["containers"] if c["name"] == trainjob.NODE]
    trainer = docs["TrainJob"]["spec"]["trainer"]
    container.update({k: trainer[k] for k in ("image", "command", "args") if k in trainer})
    env = {e["name"]: e for e in container.get("env", [])} | {e["name"]: e for e in trainer.get("env", [])}
    container["env"] = list(env.values())
    return pod


@pytest.mark.parametrize("num_workers", [1, 4])
def test_the_runtime_and_the_trainjob_validate_against_the_vendored_crds(num_workers):
    docs = _docs(controller="trainjob", num_workers=num_workers)
    assert list(docs) == ["NetworkPolicy", "TrainingRuntime", "TrainJob"]
    for kind in ("TrainingRuntime", "TrainJob"):
        assert docs[kind]["apiVersion"] == "trainer.kubeflow.org/v1alpha1"
        assert _crd_errors(docs[kind]) == []
    _validate(docs["NetworkPolicy"])
    _validate({"apiVersion": "v1", "kind": "Pod", **_effective_pod(docs)})  # a core/v1 pod, strictly


@pytest.mark.parametrize(
    "kind, path, typo",
    [
        ("TrainJob", ["spec", "trainer"], "numNode"),
        ("TrainJob", ["spec", "runtimeRef"], "kindd"),
        ("TrainingRuntime", ["spec", "template", "spec"], "replicatedJob"),
        ("TrainingRuntime", ["spec", "mlPolicy"], "tensorflow"),  # no such policy in Trainer v2
    ],
)
def test_the_schema_check_refuses_a_misspelt_field(kind, path, typo):
    doc = _docs(controller="trainjob")[kind]
    node = doc
    for key in path:
        node = node[key]
    node[typo] = 1
    assert any(typo in e for e in _crd_errors(doc)), _crd_errors(doc)


def test_the_trainjob_runs_on_the_runtime_rendered_beside_it():
    docs = _docs(controller="trainjob", num_workers=3, namespace="team-a")
    job, runtime = docs["TrainJob"], docs["TrainingRuntime"]
    assert job["spec"]["runtimeRef"] == {
        "apiGroup": "trainer.kubeflow.org", "kind": "TrainingRuntime", "name": runtime["metadata"]["name"]
    }  # fmt: skip
    assert (
        runtime["metadata"]["namespace"] == job["metadata"]["namespace"] == "team-a"
    )  # a namespaced runtime
    assert job["spec"]["trainer"]["numNodes"] == runtime["spec"]["mlPolicy"]["numNodes"] == 3
    assert set(runtime["spec"]["mlPolicy"]) == {
        "numNodes"
    }  # Trainer's PlainML: no torch/mpi/jax env, no launcher
    (node,) = runtime["spec"]["template"]["spec"]["replicatedJobs"]
    assert node["name"] == "node" and node["template"]["metadata"]["labels"] == {
        "trainer.kubeflow.org/trainjob-ancestor-step": "trainer"
    }  # what TrainJob.spec.trainer is applied to
    assert (
        node["template"]["spec"]["completionMode"] == "Indexed"
        and node["template"]["spec"]["backoffLimit"] >= 1
    )


def test_each_pod_builds_its_tf_config_from_the_name_jobset_gives_it():
    docs = _docs(controller="trainjob", num_workers=3, port=2345)
    name = docs["TrainJob"]["metadata"]["name"]
    (node,) = docs["TrainingRuntime"]["spec"]["template"]["spec"]["replicatedJobs"]
    (container,) = _effective_pod(docs)["spec"]["containers"]
    env = {e["name"]: e["value"] for e in container["env"] if "value" in e}
    for index in range(
        3
    ):  # JobSet: pod <jobset>-<replicated job>-<job index>-<pod index> in subdomain <jobset>
        environ = env | {"JOB_COMPLETION_INDEX": str(index)}
        k8s.tf_config_from_indexed_job(environ)
        tf_config = json.loads(environ["TF_CONFIG"])
        assert tf_config["task"] == {"type": "worker", "index": index}
        assert (
            tf_config["cluster"]["worker"][index]
            == f"{name}-{node['name']}-0-{index}.{name}.default.svc:2345"
        )
    assert len(tf_config["cluster"]["worker"]) == docs["TrainJob"]["spec"]["trainer"]["numNodes"]
    assert container["command"][-1] == "strategy=multi_worker_mirrored" and container["args"] == OVERRIDES


def test_the_pods_run_exactly_as_the_tfjobs_workers():
    """Same labels, security contexts, no API token, restart policy, port, image, command, overrides, MLflow env
    and (no) resources: only the container's name and how TF_CONFIG arrives differ."""
    new = _effective_pod(_docs(controller="trainjob"))
    old = _docs(controller="tfjob")["TFJob"]["spec"]["tfReplicaSpecs"]["Worker"]["template"]
    assert new["metadata"] == old["metadata"]
    assert {k: v for k, v in new["spec"].items() if k != "containers"} == {
        "restartPolicy": "OnFailure", **{k: v for k, v in old["spec"].items() if k != "containers"}
    }  # fmt: skip
    ((a,), (b,)) = new["spec"]["containers"], old["spec"]["containers"]
    assert (a.pop("name"), b.pop("name")) == ("node", "tensorflow")
    a_env, b_env = a.pop("env"), b.pop("env")
    assert [e for e in a_env if e["name"] not in TRAINJOB_ONLY_ENV] == [
        e for e in b_env if e["name"] not in TFJOB_ONLY_ENV
    ]
    assert a == b and "resources" not in a
    assert_unprivileged(new)
    assert new["spec"]["automountServiceAccountToken"] is False


def test_the_network_policy_is_the_tfjobs_and_selects_every_pod():
    docs = _docs(controller="trainjob", port=2345)
    assert docs["NetworkPolicy"] == _docs(controller="tfjob", port=2345)["NetworkPolicy"]
    selector = docs["NetworkPolicy"]["spec"]["podSelector"]["matchLabels"]
    labels = _effective_pod(docs)["metadata"]["labels"]
    assert selector.items() <= labels.items()
    (container,) = _effective_pod(docs)["spec"]["containers"]
    assert [p["containerPort"] for p in container["ports"]] == [2345]


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"runtime": "torch-distributed"}, "runtime='torch-distributed': allowed: tensorflow"),
        ({"strategy": "parameter_server"}, "strategy=parameter_server with controller='trainjob'"),
        ({"num_workers": 0}, "num_workers=0: must be a whole number >= 1"),
        ({"overrides": ["strategy.num_workers=3"]}, "the rendered job sets strategy.num_workers itself"),
    ],
)
def test_a_bad_trainjob_render_is_refused_in_one_line(kwargs, message):
    with pytest.raises(ConfigError) as err:
        _docs(controller="trainjob", **kwargs)
    assert message in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize(
    "argv, message",
    [
        (
            ["--controller", "trainjob", "--runtime", "torch-distributed"],
            "runtime='torch-distributed': allowed:",
        ),
        (["--controller", "trainjobs"], "controller='trainjobs': allowed: job, tfjob, trainjob"),
        (["--controller", "trainjob", "--num-workers", "two"], "argument --num-workers: invalid int value"),
    ],
)
def test_the_command_refuses_bad_input_in_one_line_exit_2_printing_nothing(capsys, argv, message):
    try:
        code = k8s_render.main(["demo", "registry.example/tfpipe:1", *argv])
    except SystemExit as stop:  # argparse's own refusals
        code = stop.code
    out, err = capsys.readouterr()
    assert code == 2 and out == "" and err.count("\n") == 1
    assert err.startswith("python -m tfpipe.launch.k8s_render: error: ") and message in err


def test_the_command_prints_the_render(capsys):
    argv = ["demo", "registry.example/tfpipe:1", "--controller", "trainjob", "--num-workers", "3", *OVERRIDES]
    assert k8s_render.main(argv) == 0
    out = capsys.readouterr().out
    assert out == k8s.render_k8s("demo", "registry.example/tfpipe:1", num_workers=3, overrides=OVERRIDES,
                                 controller="trainjob")  # fmt: skip
