"""End to end: `dvc repro`, `dvc exp run -S` and `mlflow run .` in a temporary git repo.

Each test copies the project into tmp_path, points the directory source at tiny generated
class-per-folder data, runs the real tools in subprocesses and reads the real SQLite MLflow
store back with MlflowClient.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml
from conftest import default_policy  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
PROJECT_FILES = [
    "conf",
    "pipeline",
    "src",
    "dvc.yaml",
    "params.yaml",
    "MLproject",
    "python_env.yaml",
    "requirements.lock",
    "pyproject.toml",
    ".gitignore",
    ".dvcignore",
    ".dvc/config",
    ".dvc/plots.html",  # the offline plots page .dvc/config names (tfpipe.plots_page)
    "data/raw/.gitignore",
]
# Shrinks the default config to seconds: a few dozen examples, small model, one epoch.
TINY = [
    "experiment=smoke",
    "data.source=directory",
    "model.filters=[8,8]",
    "model.dense_units=16",
    "train.batch_size_per_replica=8",
    "train.log_every_steps=1",
]

pytestmark = pytest.mark.slow


def _run(cmd, cwd, env, timeout=600):
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, (
        f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
    )
    return proc.stdout + proc.stderr


def copy_project(project: Path) -> Path:
    """The files a working project needs (PROJECT_FILES) copied into `project` (also used by benchmarks)."""
    project.mkdir(parents=True)
    for name in PROJECT_FILES:
        src, dst = ROOT / name, project / name
        dst.parent.mkdir(parents=True, exist_ok=True)
        if src.is_dir():
            shutil.copytree(src, dst, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
        else:
            shutil.copy2(src, dst)
    return project


def _make_project(tmp: Path, image_dir: Path, text_dir: Path, *extra: str) -> tuple[Path, dict]:
    project = copy_project(tmp / "project")
    shutil.copytree(image_dir, project / "data" / "raw" / "cifar10")
    shutil.copytree(text_dir, project / "data" / "raw" / "imdb")
    (project / "data" / "raw" / ".gitkeep").touch()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "DVC_"))}
    env["PYTHONPATH"] = str(project / "src")
    env["TF_CPP_MIN_LOG_LEVEL"] = "2"
    env["DVC_NO_ANALYTICS"] = "1"
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t"]
    _run(["git", "init", "-q", "-b", "main"], project, env)
    _run([*git, "add", "-A"], project, env)
    _run([*git, "commit", "-qm", "init"], project, env)
    # The tiny config, composed by DVC itself and committed, as a user would after `dvc exp run -S`.
    from dvc.utils.hydra import compose_and_dump

    compose_and_dump(
        project / "params.yaml", str(project / "conf"), None, "config", str(project), [*TINY, *extra]
    )
    _run([*git, "commit", "-qam", "tiny params"], project, env)
    return project, env


@pytest.fixture(scope="module")
def repro_project(tmp_path_factory, image_dir, text_dir):
    """A project where `dvc repro` has run once on the tiny config."""
    project, env = _make_project(tmp_path_factory.mktemp("e2e"), image_dir, text_dir)
    out = _run([sys.executable, "-m", "dvc", "repro"], project, env)
    return project, env, out


def _client(project: Path):
    from mlflow import MlflowClient

    return MlflowClient(tracking_uri=f"sqlite:///{project / 'mlflow.db'}")


def test_dvc_repro_produces_a_complete_mlflow_run(repro_project):
    project, env, out = repro_project
    run_id = json.loads((project / "run.json").read_text())["run_id"]
    client = _client(project)
    run = client.get_run(run_id)
    assert run.info.status == "FINISHED"
    # Each stage's last line says where its results are and how to look at the run.
    look = f"mlflow ui --backend-store-uri sqlite:///mlflow.db, then http://127.0.0.1:5000/#/experiments/{run.info.experiment_id}/runs/{run_id}?workflowType=machine_learning"
    assert f"train INFO trained: metrics/train.json, plots/history.csv; the run: {look}" in out, out[-3000:]
    assert f"examples: metrics/eval.json; the run: {look}" in out, out[-3000:]
    assert "Downloading artifacts" not in out  # MLflow's bars while log_model validates the model: quiet
    assert run.info.run_name == f"cifar10-cnn-one_device-{default_policy()}-{run_id[:6]}"

    params = run.data.params
    assert params["dataset.name"] == "cifar10"
    assert params["train.optimizer.learning_rate"] == "0.001"
    assert params["model.filters"] in ("[8, 8]", "[8,8]")

    metrics = run.data.metrics
    for key in ("train_loss", "val_accuracy", "test_accuracy", "test_loss"):
        assert key in metrics, sorted(metrics)
    eval_json = json.loads((project / "metrics" / "eval.json").read_text())
    for key in ("accuracy", "loss", "macro_precision", "macro_recall", "macro_f1", "num_examples"):
        assert metrics[f"test_{key}"] == eval_json[key], key  # the same numbers, not merely close
    assert len(client.get_metric_history(run_id, "train_loss")) >= 2  # step metrics, not just a final value

    tags = run.data.tags
    assert tags["dataset"] == "cifar10" and tags["strategy"] == "one_device" and tags["precision"] == "auto"
    assert tags["precision.resolved"] == default_policy()
    assert tags["git.commit"] == _run(["git", "rev-parse", "HEAD"], project, env).strip()
    assert tags["data.manifest_digest"]
    assert any(k.startswith("dvc.lock.") for k in tags), sorted(tags)
    for key in ("tf_version", "keras_version", "python_version", "replicas"):
        assert key in tags, sorted(tags)

    artifacts = {a.path for a in client.list_artifacts(run_id)}
    assert {"config", "metrics", "plots", "checkpoints"} <= artifacts, artifacts
    assert "saved_model" not in artifacts  # uploaded once: inside the logged model (tag model_uri)
    plots = {a.path for a in client.list_artifacts(run_id, "plots")}
    assert {"plots/history.csv", "plots/confusion_matrix.csv", "plots/confusion_matrix.png"} <= plots

    inputs = {d.dataset.name: d.dataset.digest for d in run.inputs.dataset_inputs}
    assert set(inputs) == {"cifar10-train", "cifar10-test"}, inputs
    assert all(tags["data.manifest_digest"].startswith(digest) for digest in inputs.values()), inputs

    # evaluate linked the test metrics to the logged model with the dataset; it registered nothing (by default
    # `pipeline.promote` registers the run it promotes: test_promoted_champion_served_over_http_...)
    assert "registry.name" not in tags and "registry.version" not in tags, sorted(tags)
    assert client.search_model_versions("") == []
    linked = client.get_logged_model(tags["model_uri"].removeprefix("models:/")).metrics
    assert {m.key: m.value for m in linked}["test_accuracy"] == eval_json["accuracy"]
    assert {m.dataset_name for m in linked if m.key.startswith("test_")} == {"cifar10-test"}


DVC_LINES = (
    "Running stage ",
    "> python -m pipeline.",
    "Updating lock file ",
    "Generating lock file ",
    "Use `dvc push`",
)


def test_the_stages_print_their_own_lines_only(repro_project):
    """Quiet by default: what `dvc repro` shows is DVC's lines and each stage's own (prepare's bar, its result;
    train's run, one line per epoch, its result; evaluate's two), not TensorFlow's start-up lines (absl's
    pre-initialisation warning and oneDNN's note, twice per process, which TF_CPP_MIN_LOG_LEVEL no longer
    silences) nor MLflow's INFO lines (a new store's tables, log_model's input example check)."""
    import re

    _, _, out = repro_project
    own = re.compile(r"^\d\d:\d\d:\d\d (prepare|train|evaluate) INFO (.*)$")
    foreign = [
        line
        for line in out.splitlines()
        if line.strip() and not line.startswith((*DVC_LINES, "prepare cifar10: ")) and not own.match(line)
    ]
    assert not foreign, out
    said = {}
    for line in out.splitlines():
        if (match := own.match(line)) and not match.group(2).startswith("epoch "):
            said.setdefault(match.group(1), []).append(match.group(2))
    assert {stage: len(lines) for stage, lines in said.items()} == {
        "prepare": 1,
        "train": 2,
        "evaluate": 2,
    }, said


def test_logged_model_serves_raw_images(repro_project):
    """The logged MLflow model, fed the test split's raw uint8 images, predicts for each image the class the
    evaluate stage recorded for it (plots/confusion_matrix.csv: one row per test example, in order)."""
    import mlflow

    from tfpipe import data

    project, _, _ = repro_project
    run_id = json.loads((project / "run.json").read_text())["run_id"]
    prepared = project / "data" / "prepared" / "cifar10"
    class_names = data.load_manifest(prepared)["class_names"]
    batches = data.make_dataset(prepared, "test", batch_size=1000, training=False, seed=0, cache=False)
    images = np.concatenate([x.numpy() for x, _ in batches])
    assert images.dtype == np.uint8 and images.shape[1:] == (32, 32, 3)
    mlflow.set_tracking_uri(f"sqlite:///{project / 'mlflow.db'}")
    model = mlflow.pyfunc.load_model(f"runs:/{run_id}/model")
    answer = model.predict(images)
    probabilities = answer[class_names].to_numpy().astype(np.float64)
    assert list(answer["class"]) == [class_names[i] for i in probabilities.argmax(axis=1)]
    np.testing.assert_allclose(probabilities.sum(axis=1), 1.0, atol=1e-4)
    rows = (project / "plots" / "confusion_matrix.csv").read_text().splitlines()[1:]
    recorded = [row.split(",")[1] for row in rows]
    assert [class_names[i] for i in probabilities.argmax(axis=1)] == recorded


def _refused(port: int, payload: dict) -> str:
    """POST `payload` to the running server's /invocations; the message of its 400 reply."""
    import urllib.error
    import urllib.request

    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/invocations",
        data=json.dumps(payload).encode(),
        headers={"Content-Type": "application/json"},
    )
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=60)
    body = refused.value.read().decode()
    assert refused.value.code == 400 and len(body) < 300, body[:300]
    return json.loads(body)["message"]


def test_promoted_champion_served_over_http_predicts_as_evaluate(repro_project):
    """`pipeline.promote` registers the run's logged model (tfpipe-<dataset>, version 1: evaluate registered
    nothing) and makes that version the champion; a real `mlflow models serve -m
    models:/tfpipe-cifar10@champion` process, fed the raw uint8 test images over HTTP, predicts for each the
    class the evaluate stage recorded (plots/confusion_matrix.csv, one row per test example, in order); a wrong
    image shape or float pixels get a 400 whose message is one short line (issue 33)."""
    from test_registry import post_when_up
    from test_tracking import _free_port, _serve

    from tfpipe import data

    project, env, _ = repro_project
    run_id = json.loads((project / "run.json").read_text())["run_id"]
    out = _run([sys.executable, "-m", "pipeline.promote", run_id, "--alias", "champion"], project, env)
    assert "registered the run's model as tfpipe-cifar10 version 1" in out, out
    assert "tfpipe-cifar10 version 1 is 'champion' (was unset)" in out, out
    tags = _client(project).get_run(run_id).data.tags
    assert (tags["registry.name"], tags["registry.version"]) == ("tfpipe-cifar10", "1")
    (version,) = _client(project).search_model_versions("name='tfpipe-cifar10'")
    assert version.run_id == run_id and version.source == tags["model_uri"]
    prepared = project / "data" / "prepared" / "cifar10"
    class_names = data.load_manifest(prepared)["class_names"]
    batches = data.make_dataset(prepared, "test", batch_size=1000, training=False, seed=0, cache=False)
    images = np.concatenate([x.numpy() for x, _ in batches])
    port = _free_port()
    proc = _serve("models:/tfpipe-cifar10@champion", project, port)
    try:
        records = post_when_up(proc, port, {"inputs": images.tolist()})
        # issue 33: a wrong image is refused in one short line leading with what is expected, no array dumped
        wrong_shape = _refused(port, {"inputs": images[:2, :16, :16].tolist()})
        floats = _refused(port, {"inputs": np.full((2, 32, 32, 3), 0.5).tolist()})
    finally:
        proc.terminate()
        proc.wait(60)
    expected = "expected images of shape (-1, 32, 32, 3) uint8 (0-255); got shape (2, 16, 16, 3)"
    assert wrong_shape == expected, wrong_shape[:300]
    assert floats == "expected uint8 pixel values 0-255; got float64 values such as 0.5", floats[:300]
    predictions = np.asarray([[record[name] for name in class_names] for record in records])
    assert predictions.shape == (len(images), len(class_names))
    rows = (project / "plots" / "confusion_matrix.csv").read_text().splitlines()[1:]
    assert [record["class"] for record in records] == [row.split(",")[1] for row in rows]
    assert [class_names[i] for i in predictions.argmax(axis=1)] == [row.split(",")[1] for row in rows]


def test_stage_outputs_exist_and_agree(repro_project):
    project, env, _ = repro_project
    eval_metrics = json.loads((project / "metrics" / "eval.json").read_text())
    train_metrics = json.loads((project / "metrics" / "train.json").read_text())
    assert 0.0 <= eval_metrics["accuracy"] <= 1.0
    assert train_metrics["steps"] > 0
    # eval.json is flat (one `dvc exp show` column per headline metric); the per-class rows are a plot
    assert all(isinstance(v, (int, float)) for v in eval_metrics.values()), eval_metrics
    per_class = json.loads((project / "metrics" / "eval_per_class.json").read_text())
    assert [row["class"] for row in per_class] == ["blue", "green", "red"]
    shown = json.loads(_run([sys.executable, "-m", "dvc", "metrics", "show", "--json"], project, env))
    columns = {k for result in shown.values() for f in result["data"].values() for k in f["data"]}
    assert {"accuracy", "macro_f1"} <= columns and "per_class" not in columns, columns
    manifest = json.loads((project / "data" / "prepared" / "cifar10" / "manifest.json").read_text())
    assert manifest["source"]["type"] == "directory"
    assert (project / "models" / "cifar10" / "saved_model" / "saved_model.pb").is_file()
    header = (project / "plots" / "history.csv").read_text().splitlines()[0].split(",")
    assert header[0] == "epoch" and "val_accuracy" in header
    lock = yaml.safe_load((project / "dvc.lock").read_text())
    assert set(lock["stages"]) == {"prepare", "train", "evaluate"}


def test_second_repro_is_a_no_op(repro_project):
    project, env, _ = repro_project
    before = (project / "run.json").read_text()
    out = _run([sys.executable, "-m", "dvc", "repro"], project, env)
    assert "didn't change, skipping" in out or "up to date" in out, out
    for stage in ("prepare", "train", "evaluate"):
        assert f"Running stage '{stage}'" not in out, out
    assert (project / "run.json").read_text() == before
    assert (
        len(_client(project).search_runs([_client(project).get_experiment_by_name("tfpipe").experiment_id]))
        == 1
    )


def test_registry_keys_rerun_only_evaluate(repro_project):
    """The registry and promotion keys are read by evaluate alone: changing one never retrains."""
    project, env, _ = repro_project
    params = project / "params.yaml"
    original = params.read_text()
    assert "auto_promote_alias: null" in original
    try:
        params.write_text(original.replace("auto_promote_alias: null", "auto_promote_alias: champion"))
        cmd = [sys.executable, "-m", "dvc", "status", "--json"]
        proc = subprocess.run(cmd, cwd=project, env=env, capture_output=True, text=True, check=True)
        status = json.loads(proc.stdout)
    finally:
        params.write_text(original)
    assert set(status) == {"evaluate"}, status


def _clone_with_raw_data(project: Path, name: str, env: dict) -> Path:
    clone = project.parent / name
    _run(["git", "clone", "-q", str(project), str(clone)], project.parent, env)
    shutil.copytree(project / "data" / "raw", clone / "data" / "raw", dirs_exist_ok=True)  # the shared source
    return clone


def test_dvc_push_then_pull_into_a_clone_makes_repro_a_no_op(repro_project):
    project, env, _ = repro_project
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t"]
    _run([*git, "add", "-A"], project, env)
    _run([*git, "commit", "-qm", "repro results"], project, env)
    remote = project.parent / "tfpipe-dvc-remote"  # the default remote of .dvc/config: next to the project
    assert str(remote) in _run([sys.executable, "-m", "dvc", "remote", "list"], project, env)
    _run([sys.executable, "-m", "dvc", "push"], project, env)

    clone = _clone_with_raw_data(project, "clone", env)
    assert not (clone / "models").exists()
    _run([sys.executable, "-m", "dvc", "pull"], clone, env)
    assert (clone / "models" / "cifar10" / "saved_model" / "saved_model.pb").is_file()
    assert (clone / "run.json").read_text() == (project / "run.json").read_text()
    out = _run([sys.executable, "-m", "dvc", "repro"], clone, env)
    for stage in ("prepare", "train", "evaluate"):
        assert f"Running stage '{stage}'" not in out, out


def test_dvc_pull_refuses_a_file_the_remote_altered(repro_project):
    """.dvc/config sets `verify = true` on the team remote: a pulled file is re-hashed against its name."""
    project, env, _ = repro_project
    remote = project.parent / "tfpipe-dvc-remote"
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t"]
    if _run(["git", "status", "--porcelain"], project, env).strip():  # the clone needs the run's dvc.lock
        _run([*git, "add", "-A"], project, env)
        _run([*git, "commit", "-qm", "repro results"], project, env)
    _run([sys.executable, "-m", "dvc", "push"], project, env)  # as the test above; a no-op when it ran
    lock = yaml.safe_load((project / "dvc.lock").read_text())
    md5 = next(o["md5"] for o in lock["stages"]["train"]["outs"] if o["path"] == "run.json")
    stored = remote / "files" / "md5" / md5[:2] / md5[2:]
    assert stored.is_file(), f"`dvc push` did not store {stored}"
    stored.write_text('{"run_id": "forged"}\n')  # an altered remote: same name, other content

    clone = _clone_with_raw_data(project, "clone-altered", env)
    proc = subprocess.run(
        [sys.executable, "-m", "dvc", "pull"], cwd=clone, env=env, capture_output=True, text=True
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "Checkout failed" in out and "run.json" in out, out
    assert "forged" not in ((clone / "run.json").read_text() if (clone / "run.json").exists() else "")


def _audit(project: Path, env: dict, run_id: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "pipeline.audit", run_id], cwd=project, env=env, capture_output=True, text=True
    )


def _line(out: str, item: str) -> str:
    return next(line for line in out.splitlines() if line.startswith(item + " "))


def test_a_shard_rewritten_with_its_manifest_is_caught_by_the_recorded_digest(repro_project):
    """Tampering that keeps the prepared folder self-consistent (a shard and its sha256 in the manifest
    rewritten together) still differs from the manifest digest the run recorded."""
    import hashlib

    project, env, _ = repro_project
    run_id = json.loads((project / "run.json").read_text())["run_id"]
    prepared = project / "data" / "prepared" / "cifar10"
    manifest_path = prepared / "manifest.json"
    shard = sorted(prepared.glob("train-*.tfrecord"))[0]
    saved = {p: p.read_bytes() for p in (manifest_path, shard)}
    try:
        tampered = bytearray(saved[shard])
        tampered[-1] ^= 1
        shard.write_bytes(bytes(tampered))
        manifest_text = saved[manifest_path].decode()
        old, new = hashlib.sha256(saved[shard]).hexdigest(), hashlib.sha256(bytes(tampered)).hexdigest()
        assert old in manifest_text
        manifest_path.write_text(manifest_text.replace(old, new))
        proc = _audit(project, env, run_id)
        assert proc.returncode == 1, proc.stdout + proc.stderr
        assert " differs " in _line(proc.stdout, "data.manifest"), proc.stdout
    finally:
        for path, data in saved.items():
            path.write_bytes(data)
    restored = _audit(project, env, run_id).stdout
    assert " match " in _line(restored, "data.manifest")  # restored
    # the registry, read live: the serving test before registered this version and made it the champion
    assert "registered model: tfpipe-cifar10 version 1 (aliases: champion)" in restored, restored


def test_a_changed_dvc_lock_prepare_entry_is_an_audit_difference(repro_project):
    project, env, _ = repro_project
    run_id = json.loads((project / "run.json").read_text())["run_id"]
    lock_path = project / "dvc.lock"
    original = lock_path.read_text()
    lock = yaml.safe_load(original)
    out = lock["stages"]["prepare"]["outs"][0]
    out["md5"] = ("0" if out["md5"][0] != "0" else "1") + out["md5"][1:]
    try:
        lock_path.write_text(yaml.safe_dump(lock, sort_keys=False))
        proc = _audit(project, env, run_id)
        assert proc.returncode == 1, proc.stdout + proc.stderr
        assert " differs " in _line(proc.stdout, "dvc.lock.prepare"), proc.stdout
    finally:
        lock_path.write_text(original)


def test_a_damaged_test_shard_stops_the_evaluate_stage_in_one_line(repro_project):
    project, env, _ = repro_project
    shard = sorted((project / "data" / "prepared" / "cifar10").glob("test-*.tfrecord"))[0]
    original = shard.read_bytes()
    eval_before = (project / "metrics" / "eval.json").read_text()
    try:
        shard.write_bytes(original[: len(original) // 2])  # truncated
        proc = subprocess.run(
            [sys.executable, "-m", "pipeline.evaluate"], cwd=project, env=env, capture_output=True, text=True
        )
    finally:
        shard.write_bytes(original)
    assert proc.returncode == 2, proc.stderr[-3000:]
    errors = [line for line in proc.stderr.splitlines() if line.startswith("evaluate: error:")]
    assert len(errors) == 1 and str(shard) in errors[0] and "prepare stage again" in errors[0], proc.stderr
    assert "Traceback" not in proc.stderr
    assert (project / "metrics" / "eval.json").read_text() == eval_before  # nothing rewritten


def test_dvc_exp_run_composes_conf_for_imdb(repro_project):
    """`dvc exp run -S dataset=imdb` recomposes params.yaml from conf/ and runs the text pipeline."""
    project, env, _ = repro_project
    _run(
        [
            sys.executable,
            "-m",
            "dvc",
            "exp",
            "run",
            # TINY minus model.filters: each model has its own schema, and the text model has no conv filters
            *[arg for o in [*TINY, "dataset=imdb"] if not o.startswith("model.filters") for arg in ("-S", o)],
        ],
        project,
        env,
    )
    params = yaml.safe_load((project / "params.yaml").read_text())
    assert params["dataset"]["name"] == "imdb" and params["model"]["name"] == "embedding_gap"
    run_id = json.loads((project / "run.json").read_text())["run_id"]
    run = _client(project).get_run(run_id)
    assert run.data.tags["dvc.exp_name"]  # `dvc exp run` names the experiment; the run says which
    # what -S changed leads (the dataset and model show after it); imdb's own precision is float32
    assert run.info.run_name.endswith(f" imdb-embedding_gap-{run_id[:6]}"), run.info.run_name
    assert run.info.run_name.startswith("precision=float32"), run.info.run_name
    assert "test_accuracy" in run.data.metrics
    assert "test_roc_auc" in run.data.metrics

    import mlflow

    mlflow.set_tracking_uri(f"sqlite:///{project / 'mlflow.db'}")
    model = mlflow.pyfunc.load_model(f"runs:/{run_id}/model")
    predictions = np.asarray(model.predict(["a wonderful, great film", "awful and boring"]))
    assert predictions.shape[0] == 2


def test_mlflow_run_logs_into_the_run_it_created(repro_project):
    project, env, _ = repro_project
    overrides = " ".join(TINY)
    out = _run(
        [
            sys.executable,
            "-m",
            "mlflow",
            "run",
            ".",
            "--env-manager",
            "local",
            "--experiment-name",
            "tfpipe",
            "-P",
            f"overrides={overrides}",
            "-P",
            "epochs=1",  # MLproject's short name for train.epochs, undeclared: mlflow run hands over --epochs 1
        ],
        project,
        env,
    )
    client = _client(project)
    experiment = client.get_experiment_by_name("tfpipe")
    runs = client.search_runs([experiment.experiment_id], order_by=["attributes.start_time DESC"])
    newest = runs[0]
    assert newest.info.run_id in out
    assert newest.info.status == "FINISHED"
    assert "test_accuracy" in newest.data.metrics and "train_loss" in newest.data.metrics
    assert newest.data.params["data.source"] == "directory"
    assert newest.data.params["train.epochs"] == "1" and newest.data.params["epochs"] == "1"
    assert newest.data.tags.get("mlflow.project.entryPoint") == "main"


def _ignored(clone: Path, env: dict) -> set:
    """What `git status` shows as ignored in `clone`, bytecode caches left out."""
    out = _run(["git", "status", "--porcelain", "--ignored"], clone, env)
    return {line[3:] for line in out.splitlines() if line.startswith("!! ") and "__pycache__" not in line}


def test_mlflow_run_on_a_real_cifar10_subset(tmp_path, image_dir, text_dir):
    """The whole pipeline (`mlflow run file:///<project>` from another folder, all stages) on a few hundred real
    CIFAR-10 images. MLflow 3 runs a local project where it is (a file URI's checkout is the folder itself, no
    copy): the run's source names the project (MLflow records `<cwd>/file:/<project>`; issue 33 item 5), its
    tracked files are untouched and only its ignored stage outputs appear; the calling folder gets nothing."""
    from test_data_real import CASES, SHARED, _extract_subset

    archive_name, pattern, _, _ = CASES["cifar10"]
    if not (SHARED / archive_name).is_file():
        pytest.skip(f"{SHARED / archive_name} not found (real data lives in ../shared/datasets)")
    raw = _extract_subset(SHARED / archive_name, pattern, {"train": 40, "test": 10}, tmp_path / "raw")
    project, env = _make_project(tmp_path, image_dir, text_dir)
    ignored_before = _ignored(project, env)
    here = tmp_path / "elsewhere"
    here.mkdir()
    # on top of the project's params.yaml (the tiny config): every example of the subset, not the smoke preset's 256
    overrides = (
        f"data.source=directory data.path={raw} data.max_examples_per_split=null train.epochs=2 "
        "train.batch_size_per_replica=32"
    )
    command = [sys.executable, "-m", "mlflow", "run", f"file://{project}", "--env-manager", "local"]
    out = _run(
        [*command, "--experiment-name", "tfpipe", "-P", f"overrides={overrides}"],
        here,
        {**env, "MLFLOW_TRACKING_URI": f"sqlite:///{project / 'mlflow.db'}"},
    )
    client = _client(project)
    run = client.search_runs([client.get_experiment_by_name("tfpipe").experiment_id])[0]
    assert run.info.run_id in out and run.info.status == "FINISHED"
    source = run.data.tags["mlflow.source.name"]
    assert source == f"file://{project.resolve()}", source  # before: f"{here}/file:{project}"
    assert run.data.tags["tfpipe.project"] == str(project.resolve())
    assert (
        _run(["git", "status", "--porcelain"], project, env).strip() == ""
    )  # no tracked change, no new file
    written = _ignored(project, env) - ignored_before
    assert (
        {"data/prepared/", "models/", "run.json"}
        <= written
        <= {
            "data/prepared/",
            "models/",
            "metrics/",
            "plots/",
            "run.json",
            "mlflow.db",
            "mlartifacts/",
        }
    ), written
    # the experiment is MLflow's (`--experiment-name`, made by `mlflow run`): its artifacts go to MLflow's default
    # artifact root, the caller's ./mlruns; nothing else lands where the command was typed
    assert set(os.listdir(here)) <= {"mlruns"}, os.listdir(here)
    assert run.data.metrics["test_num_examples"] == 100
    assert len(client.get_metric_history(run.info.run_id, "val_accuracy")) == 2
    manifest = json.loads((project / "data" / "prepared" / "cifar10" / "manifest.json").read_text())
    assert manifest["class_names"][:3] == ["airplane", "automobile", "bird"]
    assert (
        manifest["splits"]["train"]["num_examples"] + manifest["splits"]["validation"]["num_examples"] == 400
    )

    import mlflow
    from PIL import Image

    mlflow.set_tracking_uri(f"sqlite:///{project / 'mlflow.db'}")
    model = mlflow.pyfunc.load_model(f"runs:/{run.info.run_id}/model")
    real = sorted((raw / "test" / "cat").glob("*.jpg"))[:2]
    images = np.stack([np.asarray(Image.open(p).convert("RGB"), dtype=np.uint8) for p in real])
    probabilities = model.predict(images)[manifest["class_names"]].to_numpy()
    assert probabilities.shape == (2, 10)
    np.testing.assert_allclose(probabilities.sum(axis=1), 1.0, atol=1e-4)
