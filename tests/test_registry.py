"""The model registry against a real SQLite MLflow store: registration with the test metrics linked to the
logged model (evaluate, with tracking.register_model=true), promotion (never to a worse model without --force)
and the version it makes (a run is registered when it is promoted, not when it is evaluated: a refused
promotion registers nothing), the promote command line's bad input (one line, exit 2) and the audit's registry
line. The evaluate stage's default (no version) runs here and in tests/test_pipeline_e2e.py."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import test_tracking

from tfpipe.errors import TrackingError

ROOT = Path(__file__).resolve().parents[1]
# test_tracking's fixtures (a fresh copy of a migrated SQLite store, tiny sealed SavedModels), shared
cfg, clean_mlflow = test_tracking.cfg, test_tracking.clean_mlflow  # db_template: conftest
project, saved_models = test_tracking.project, test_tracking.saved_models
IMAGE_CLASSES, _client = test_tracking.IMAGE_CLASSES, test_tracking._client
NAME = "tfpipe-test"


def _evaluated(
    cfg, project, saved_models, prepared, metrics: dict, name: str | None = NAME
) -> tuple[str, str]:
    """A run with its params and a logged model (as the train stage makes it), its test metrics linked to the
    model and, unless `name` is None, the model registered as `name` (as the evaluate stage does with
    tracking.register_model=true). Returns (run id, model id)."""
    from tfpipe import data, tracking
    from tfpipe.tracking import registry

    manifest = data.load_manifest(prepared.prepared_dir)
    digest = data.manifest_digest(prepared.prepared_dir)
    with tracking.start_run(cfg, project, stage="train") as run:
        run.log_params(cfg.flat())
        run.log_model(saved_models["image"], modality="image", class_names=IMAGE_CLASSES)
        model_id = registry.log_test_metrics(
            run, metrics, manifest=manifest, digest=digest, prepared=prepared.prepared_dir
        )
        if name:
            registry.register(run, model_id, name)
    return run.run_id, model_id


def _uri(project: Path) -> str:
    return f"sqlite:///{project / 'mlflow.db'}"


def test_registration_links_the_test_metrics_to_the_logged_model(cfg, project, saved_models, prepared_image):
    from tfpipe.tracking import registry

    run_id, model_id = _evaluated(cfg, project, saved_models, prepared_image, {"test_accuracy": 0.75})
    client = _client(project)
    logged = client.get_logged_model(model_id)
    (metric,) = logged.metrics  # on the model's page, with the dataset it was measured on
    assert (metric.key, metric.value, metric.run_id) == ("test_accuracy", 0.75, run_id)
    assert metric.dataset_name == "cifar10-test" and metric.dataset_digest
    assert client.get_run(run_id).data.metrics["test_accuracy"] == 0.75  # still on the run too
    (version,) = client.search_model_versions(f"name='{NAME}'")
    assert (str(version.version), version.run_id, version.source) == ("1", run_id, f"models:/{model_id}")
    tags = client.get_run(run_id).data.tags
    assert (tags[registry.NAME_TAG], tags[registry.VERSION_TAG]) == (NAME, "1")
    assert registry.model_versions(_uri(project), run_id) == [{"name": NAME, "version": "1", "aliases": []}]


def test_evaluating_again_reuses_the_version(cfg, project, saved_models, prepared_image):
    from tfpipe import tracking
    from tfpipe.tracking import registry

    run_id, model_id = _evaluated(cfg, project, saved_models, prepared_image, {"test_accuracy": 0.5})
    with tracking.resume_run(cfg, project, stage="evaluate") as run:
        assert registry.register(run, model_id, NAME) == {"name": NAME, "version": "1"}
    assert len(_client(project).search_model_versions(f"name='{NAME}'")) == 1


def test_a_registry_that_refuses_is_one_line(
    cfg, project, saved_models, prepared_image, monkeypatch, tmp_path
):
    monkeypatch.setenv(
        "MLFLOW_REGISTRY_URI", (tmp_path / "file-store").as_uri()
    )  # MLflow 3 refuses file stores
    with pytest.raises(TrackingError) as info:
        _evaluated(cfg, project, saved_models, prepared_image, {"test_accuracy": 0.5})
    message = str(info.value)
    assert "\n" not in message and f"as {NAME!r} in the registry at file://" in message, message
    assert message.endswith("set tracking.register_model=false to skip registration"), message


def test_promotion_never_moves_the_alias_to_a_worse_model(cfg, project, saved_models, prepared_image):
    from tfpipe import audit
    from tfpipe.tracking import registry

    uri = _uri(project)
    runs = [
        _evaluated(cfg, project, saved_models, prepared_image, {"test_accuracy": acc, "test_loss": loss})[0]
        for acc, loss in ((0.6, 0.9), (0.4, 0.5), (0.6, 0.9))
    ]
    assert registry.promote(uri, runs[0], "champion")["previous"] is None  # no champion yet: moves
    with pytest.raises(registry.NotBetter) as info:
        registry.promote(uri, runs[1], "champion")
    assert "test_accuracy=0.4, worse than 0.6 of version 1" in str(info.value)
    client = _client(project)
    assert client.get_model_version_by_alias(NAME, "champion").version == 1
    assert registry.promote(uri, runs[1], "champion", metric="test_loss", mode="min")["previous"] == "1"
    with pytest.raises(registry.NotBetter, match=r"test_loss=0.9, worse than 0.5 of version 2"):
        registry.promote(uri, runs[0], "champion", metric="test_loss", mode="min")
    assert (
        registry.promote(uri, runs[0], "champion", metric="test_loss", mode="min", force=True)["version"]
        == "1"
    )
    evaluated = SimpleNamespace(tracking_uri=uri, run_id=runs[2])  # what the evaluate stage passes
    assert registry.auto_promote(evaluated, "champion", metric="test_accuracy", mode="max") is None
    assert client.get_model_version_by_alias(NAME, "champion").version == 1  # equal does not beat it
    assert registry.promote(uri, runs[2], "champion")["version"] == "3"  # by hand, equal is not worse
    line = audit.registry_line(runs[2], project, uri)
    assert line == f"registered model: {NAME} version 3 (aliases: champion)", line


def test_the_evaluate_stage_registers_under_the_default_name_and_auto_promotes(
    make_config, project, saved_models, prepared_image
):
    """stages._register, as run_evaluate calls it with tracking.register_model=true: every run registered as
    tfpipe-<dataset>, and with tracking.auto_promote_alias the alias moves only to a model that beats its
    current one."""
    from tfpipe import stages, tracking

    cfg = make_config(
        "experiment=smoke", "tracking.register_model=true", "tracking.auto_promote_alias=champion"
    )
    champions = []
    for acc in (0.5, 0.4, 0.7):
        run_id, model_id = _evaluated(
            cfg, project, saved_models, prepared_image, {"test_accuracy": acc}, None
        )
        with tracking.resume_run(cfg, project, stage="evaluate") as run:
            stages._register(run, cfg, model_id)
        champions.append(_client(project).get_model_version_by_alias("tfpipe-cifar10", "champion").version)
    assert champions == [1, 1, 3]


def _versions(project: Path) -> list:
    """Every registered version in the store: [(name, version, run id)], oldest first."""
    found = _client(project).search_model_versions("")
    return sorted((v.name, str(v.version), v.run_id) for v in found)


@pytest.mark.slow  # trains a model (one epoch of two steps) and evaluates it in-process
def test_the_default_evaluate_registers_nothing_and_promote_registers_the_run(
    prepared_image, tmp_path, monkeypatch
):
    """run_train + run_evaluate with conf/'s defaults (tracking.register_model=false): the run has its logged
    model and test metrics but no version; `promote` registers it under the name it was made with."""
    from conftest import seed_store, stages_in_process

    from tfpipe import config
    from tfpipe.tracking import registry

    seed_store(tmp_path)
    cfg = config.compose(
        [
            "data.source=directory",
            f"data.output_dir={prepared_image.prepared_dir}",
            "model.filters=[8,8]",
            "model.dense_units=16",
            "train.batch_size_per_replica=4",
            "train.epochs=1",
            "train.steps_per_epoch=2",
        ],
        config_dir=ROOT / "conf",
    )
    assert cfg.tracking.register_model is False and cfg.tracking.log_model is True
    run_id = stages_in_process(cfg, tmp_path, monkeypatch, "train", "evaluate")
    run = _client(tmp_path).get_run(run_id)
    assert "test_accuracy" in run.data.metrics and run.data.tags["model_uri"].startswith("models:/")
    assert _versions(tmp_path) == [] and registry.NAME_TAG not in run.data.tags
    result = registry.promote(_uri(tmp_path), run_id, "champion")
    assert result == {
        "name": "tfpipe-cifar10",
        "version": "1",
        "alias": "champion",
        "previous": None,
        "registered": True,
        "test": (),  # no champion yet: nothing compared
    }
    assert _versions(tmp_path) == [("tfpipe-cifar10", "1", run_id)]
    tags = _client(tmp_path).get_run(run_id).data.tags
    assert (tags[registry.NAME_TAG], tags[registry.VERSION_TAG]) == ("tfpipe-cifar10", "1")


def test_promote_registers_the_run_it_promotes_and_a_refusal_registers_nothing(
    make_config, project, saved_models, prepared_image
):
    """Runs evaluated with the default (no version): promoting one registers it as version 1 under its
    tracking.registered_model_name; a better one becomes version 2 and takes the alias; a worse one is refused
    and the store's versions stay as they were (no version, no registry tags on the refused run)."""
    from tfpipe.tracking import registry

    cfg = make_config("experiment=smoke", f"tracking.registered_model_name={NAME}")
    uri = _uri(project)
    first, better, worse = (
        _evaluated(cfg, project, saved_models, prepared_image, {"test_accuracy": acc}, None)[0]
        for acc in (0.5, 0.7, 0.4)
    )
    assert _versions(project) == []
    assert registry.promote(uri, first, "champion")["registered"] is True
    assert _versions(project) == [(NAME, "1", first)]
    result = registry.promote(uri, better, "champion")
    assert (result["version"], result["previous"], result["registered"]) == ("2", "1", True)
    assert _versions(project) == [(NAME, "1", first), (NAME, "2", better)]
    assert _client(project).get_model_version_by_alias(NAME, "champion").version == 2
    with pytest.raises(registry.NotBetter, match=r"test_accuracy=0.4, worse than 0.7 of version 2"):
        registry.promote(uri, worse, "champion")
    assert _versions(project) == [(NAME, "1", first), (NAME, "2", better)]
    assert registry.NAME_TAG not in _client(project).get_run(worse).data.tags
    again = registry.promote(uri, better, "champion")  # already there: nothing made, nothing moved
    assert (again["version"], again["previous"], again["registered"]) == ("2", "2", False)
    assert len(_versions(project)) == 2


def test_a_run_evaluate_registered_is_not_registered_again(cfg, project, saved_models, prepared_image):
    """With tracking.register_model=true evaluate made the version: promote moves the alias to it."""
    from tfpipe.tracking import registry

    run_id, _ = _evaluated(cfg, project, saved_models, prepared_image, {"test_accuracy": 0.6})
    assert _versions(project) == [(NAME, "1", run_id)]
    result = registry.promote(_uri(project), run_id, "champion")
    assert (result["name"], result["version"], result["registered"]) == (NAME, "1", False)
    assert _versions(project) == [(NAME, "1", run_id)]  # not tfpipe-cifar10, the name its params give


def test_auto_promote_registers_only_the_models_it_promotes(cfg, project, saved_models, prepared_image):
    """tracking.auto_promote_alias without tracking.register_model: what evaluate passes to auto_promote; a
    model that does not beat the alias's leaves no version behind."""
    from tfpipe.tracking import registry

    uri = _uri(project)
    moved = []
    for acc in (0.5, 0.4, 0.7):
        run_id, _ = _evaluated(cfg, project, saved_models, prepared_image, {"test_accuracy": acc}, None)
        evaluated = SimpleNamespace(tracking_uri=uri, run_id=run_id)
        result = registry.auto_promote(evaluated, "champion", metric="test_accuracy", mode="max")
        moved.append(result and (result["version"], result["registered"]))
    assert moved == [("1", True), None, ("2", True)]
    assert [v[:2] for v in _versions(project)] == [("tfpipe-cifar10", "1"), ("tfpipe-cifar10", "2")]


def test_a_run_that_cannot_be_registered_is_one_line_and_changes_nothing(
    cfg, project, saved_models, prepared_image
):
    """No logged model, or a logged model never evaluated (no metric, unless --force): one line saying what to
    do, no version made."""
    from tfpipe import tracking
    from tfpipe.tracking import registry

    uri = _uri(project)
    with tracking.start_run(cfg, project, stage="train") as bare:
        bare.log_params(cfg.flat())
    with pytest.raises(TrackingError, match="has no logged model to register") as info:
        registry.promote(uri, bare.run_id, "champion")
    assert "\n" not in str(info.value) and "tracking.log_model=true" in str(info.value)
    with tracking.start_run(cfg, project, stage="train") as trained:
        trained.log_params(cfg.flat())
        trained.log_model(saved_models["image"], modality="image", class_names=IMAGE_CLASSES)
    with pytest.raises(TrackingError, match="has no metric 'test_accuracy' yet; evaluate it first"):
        registry.promote(uri, trained.run_id, "champion")
    assert _versions(project) == []
    assert registry.promote(uri, trained.run_id, "champion", force=True)["version"] == "1"


def _promote(project: Path, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(ROOT / "src"), env.get("PYTHONPATH", "")])
    cmd = [sys.executable, "-m", "pipeline.promote", *args, "--tracking-uri", _uri(project)]
    return subprocess.run(cmd, cwd=project, env=env, capture_output=True, text=True, timeout=300)


def _promote_here(project: Path, capsys, *args: str) -> subprocess.CompletedProcess:
    """`main` of `python -m pipeline.promote` in this process (the subprocess path is run once, above)."""
    from tfpipe.commands import promote

    capsys.readouterr()
    cwd = os.getcwd()
    os.chdir(project)
    try:
        code = promote.main([*args, "--tracking-uri", _uri(project)])
    except SystemExit as exc:
        code = exc.code
    finally:
        os.chdir(cwd)
    out = capsys.readouterr()
    return subprocess.CompletedProcess(args, code, out.out, out.err)


def _one_error_line(proc) -> str:
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("promote: error: "), proc.stderr
    return lines[0]


@pytest.mark.slow
def test_promote_command_line(cfg, project, saved_models, prepared_image, capsys):
    from tfpipe import tracking

    good, _ = _evaluated(cfg, project, saved_models, prepared_image, {"test_accuracy": 0.6})
    worse, _ = _evaluated(cfg, project, saved_models, prepared_image, {"test_accuracy": 0.3})
    with tracking.start_run(cfg, project, stage="train") as bare:
        pass
    proc = _promote(project, good, "--alias", "champion")
    assert proc.returncode == 0 and f"{NAME} version 1 is 'champion' (was unset)" in proc.stdout, proc.stderr
    line = _one_error_line(_promote_here(project, capsys, worse, "--alias", "champion"))
    assert "test_accuracy=0.3, worse than 0.6 of version 1" in line and "--force" in line, line
    assert "not found" in _one_error_line(_promote_here(project, capsys, "0123456789abcdef0123456789abcdef"))
    line = _one_error_line(_promote_here(project, capsys, bare.run_id))
    assert "has no logged model to register" in line and "tracking.log_model=true" in line, line
    assert "not a valid registry alias" in _one_error_line(
        _promote_here(project, capsys, good, "--alias", "my champ")
    )
    proc = _promote_here(project, capsys, worse, "--alias", "champion", "--force")
    assert proc.returncode == 0 and "version 2 is 'champion' (was 1)" in proc.stdout, proc.stderr
    unregistered, _ = _evaluated(cfg, project, saved_models, prepared_image, {"test_accuracy": 0.9}, None)
    proc = _promote_here(project, capsys, unregistered)  # its params name it: tfpipe-cifar10
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [
        "registered the run's model as tfpipe-cifar10 version 1",
        "tfpipe-cifar10 version 1 is 'champion' (was unset)",
    ], proc.stdout


def post_when_up(proc, port: int, payload: dict, timeout: float = 240) -> list:
    """POST `payload` as JSON to the server's /invocations once it answers (it loads TensorFlow first)."""
    import json
    import time
    import urllib.request

    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/invocations",
        data=json.dumps(payload).encode(),
        headers={"Content-Type": "application/json"},
    )
    deadline = time.monotonic() + timeout
    while True:
        assert proc.poll() is None, proc.stdout.read()[-3000:]
        try:
            with urllib.request.urlopen(request, timeout=60) as response:
                return json.loads(response.read())["predictions"]
        except OSError:
            assert time.monotonic() < deadline, "the server never answered"
            time.sleep(1)


@pytest.mark.slow
def test_a_served_champion_takes_raw_strings_in_both_documented_formats(cfg, project, saved_models):
    """The README's request formats for texts, against a real `mlflow models serve -m models:/NAME@champion`."""
    import numpy as np

    from tfpipe import tracking
    from tfpipe.tracking import registry

    with tracking.start_run(cfg, project, stage="train") as run:
        model_uri = run.log_model(saved_models["text"], modality="text", class_names=["neg", "pos"])
        registry.register(run, model_uri.removeprefix("models:/"), "tfpipe-texts")
    registry.promote(_uri(project), run.run_id, "champion")
    texts = ["a good great film", "bad and awful", "unknown words"]
    expected = test_tracking._direct(saved_models["text"], text=texts)
    port = test_tracking._free_port()
    proc = test_tracking._serve("models:/tfpipe-texts@champion", project, port)
    try:
        by_inputs = post_when_up(proc, port, {"inputs": texts})
        split = {"columns": ["text"], "data": [[t] for t in texts]}
        by_frame = post_when_up(proc, port, {"dataframe_split": split})
    finally:
        proc.terminate()
        proc.wait(60)
    for answer in (by_inputs, by_frame):  # one record per example: its class, then a probability per class
        assert [sorted(r) for r in answer] == [["class", "neg", "pos"]] * 3, answer
        np.testing.assert_allclose([[r["neg"], r["pos"]] for r in answer], expected, atol=1e-6)
        assert [r["class"] for r in answer] == [["neg", "pos"][i] for i in expected.argmax(axis=1)]
