"""Issue 50, item 3: a verdict nobody can forge with EDIT on the store. Every value `audit --rerun` compares
comes from what MLflow never lets change once logged: the weights of the SavedModel whose files match the
run's param `tfpipe.saved_model_sha256` (computed from its keras_weights.npz) and the final figures the stages
log as params `tfpipe.metric.<name>`; the run's `weights.sha256` tag and metrics are only cross-checked (one
that differs is reported as tampered). A run without them (an older tfpipe) is never REPRODUCED, and its
verdict says what it rests on. What the audit writes back is its own: the recorded run's metric names, counts
of the re-run's others, the environment it read itself, who ran it and from which sources.

Fast tests: runs in a real SQLite store, written by tfpipe's own Run, outcome and registry code, each with a
real exported SavedModel of another tiny Keras model (no training); run B forged the way the issue did, its tag
and metrics set to A's figures; run C recorded as an older tfpipe did; run D's model files changed. One end to end (slow): two real trainings by `dvc repro`, B forged
(its config artifact replaced by A's too, so its re-run trains A's model), `tfpipe audit B --rerun` once."""

from __future__ import annotations

import getpass
import json
import os
import platform
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import seed_store

from tfpipe.audit import verdict
from tfpipe.audit.common import DIFFERS_VERDICT, REPRODUCED, WITHIN_TOLERANCE

ROOT = Path(__file__).resolve().parents[1]
FIGURES = ("final_train_loss", "final_val_accuracy", "test_accuracy", "test_loss")


def _export(folder: Path, seed: int) -> Path:
    """A real sealed SavedModel (tfpipe's export) of a tiny image model with seed-dependent weights."""
    import keras

    from tfpipe import determinism
    from tfpipe.models.export import export_saved_model

    keras.utils.set_random_seed(seed)
    model = keras.Sequential(
        [
            keras.Input((4, 4, 3)),
            keras.layers.Rescaling(1 / 255),
            keras.layers.Flatten(),
            keras.layers.Dense(2),
        ]
    )
    out = folder / f"saved_model-{seed}"
    export_saved_model(
        model,
        out,
        modality="image",
        image_shape=[4, 4, 3],
        class_names=["a", "b"],
        weights_sha256=determinism.weights_sha256(model),
    )
    return out


def _record(uri: str, folder: Path, seed: int, with_params: bool = True) -> str:
    """A run as the train and evaluate stages leave it (tracking.log_model=false): the SavedModel as
    saved_model/ with its digest param, final figures as metrics (and as params unless `with_params` is False:
    an older tfpipe), the weights.sha256 tag. Written by tfpipe's Run and tracking.outcome."""
    from mlflow import MlflowClient

    from tfpipe import files, tracking
    from tfpipe.tracking import registry

    client = MlflowClient(uri)
    exp = client.get_experiment_by_name("runs") or client.get_experiment(
        client.create_experiment("runs", artifact_location=(folder / "artifacts").as_uri())
    )
    run_id = client.create_run(exp.experiment_id).info.run_id
    run = tracking.Run(
        run_id=run_id,
        experiment_id=exp.experiment_id,
        tracking_uri=uri,
        run_name=str(seed),
        stage="train",
        client=client,
    )
    saved = _export(folder, seed)
    run.set_tags({"weights.sha256": files.seal_facts(saved)["weights_sha256"], "git.commit": "0" * 40})
    final = {"final_train_loss": 1.0 + seed / 100, "final_val_accuracy": 0.5 + seed / 1000}
    test = {"test_accuracy": 0.75 - seed / 1000, "test_loss": 0.6 + seed / 100}
    if with_params:
        tracking.log_final_metrics(run, final, step=3)
        tracking.log_saved_model_files(run, saved)
        registry.log_test_metrics(run, test, manifest={}, digest="", prepared=None)
    else:  # what an older train stage logged: metrics and plain saved_model/ artifacts
        run.log_metrics({**final, **test}, step=3)
        run.log_artifacts(saved, "saved_model")
    run.close()
    return run_id


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """(uri, {name: run id}): a, b and d recorded as this tfpipe records them (seeds 1, 2, 4: other weights
    and figures), c as an older tfpipe did (no digest or metric params). Only one test changes b, only one
    d."""
    folder = tmp_path_factory.mktemp("verdicts")
    uri = f"sqlite:///{seed_store(folder)}"
    runs = {name: _record(uri, folder, seed) for name, seed in (("a", 1), ("b", 2), ("d", 4))}
    return uri, {**runs, "c": _record(uri, folder, 3, with_params=False)}


def _sides(uri: str, recorded_run: str, rerun_run: str) -> tuple:
    """(recorded side of `recorded_run`, `rerun_run` read as its re-run): as `audit.rerun` reads them."""
    from tfpipe.tracking import reading

    rec = verdict.recorded(reading.load_run(uri, recorded_run), reading.sealed_weights(uri, recorded_run))
    again = reading.load_run(uri, rerun_run)
    return rec, verdict.rerun_side(again, reading.sealed_weights(uri, rerun_run), rec)


def _forge(uri: str, run_id: str, like: str) -> None:
    """Run `run_id`'s weights.sha256 tag and metrics set to run `like`'s, as anyone with EDIT can."""
    from mlflow import MlflowClient

    client = MlflowClient(uri)
    source = client.get_run(like).data
    client.set_tag(run_id, "weights.sha256", source.tags["weights.sha256"])
    for name in FIGURES:
        step = client.get_metric_history(run_id, name)[-1].step
        client.log_metric(run_id, name, source.metrics[name], step=step)


def test_each_run_records_its_figures_and_model_digest_as_params(store, tmp_path, caplog):
    """What the stages' code logs (outcome.log_final_metrics, log_saved_model_files,
    registry.log_test_metrics): each final figure also as a param holding its exact value, the SavedModel's
    digest as a param. Logged again with another value (a stage run again on the run), the first record stands
    and a warning says so."""
    from mlflow import MlflowClient

    from tfpipe import files, tracking
    from tfpipe.tracking import outcome

    uri, a = store[0], store[1]["a"]
    client = MlflowClient(uri)
    run = client.get_run(a).data
    assert outcome.METRIC_PARAM == verdict.METRIC_PARAM
    for name in FIGURES:
        assert float(run.params[f"tfpipe.metric.{name}"]) == run.metrics[name], name
    local = client.download_artifacts(a, "saved_model", str(tmp_path))
    assert run.params["tfpipe.saved_model_sha256"] == files.seal_digest(local)

    other = client.create_run(client.get_run(a).info.experiment_id).info.run_id
    again = tracking.Run(
        run_id=other, experiment_id="", tracking_uri=uri, run_name="x", stage="x", client=client
    )
    tracking.log_final_metrics(again, {"final_val_loss": 0.1}, step=1)
    tracking.log_final_metrics(again, {"final_val_loss": 0.2}, step=2)
    again.close()
    assert client.get_run(other).data.params["tfpipe.metric.final_val_loss"] == "0.1"
    assert f"run {other} already records tfpipe.metric.final_val_loss=0.1" in caplog.text


def test_a_run_and_its_own_figures_are_reproduced(store):
    uri, a = store[0], store[1]["a"]
    rec, again = _sides(uri, a, a)
    assert (rec.weights_source, rec.metrics_source, rec.tampered) == (verdict.SEAL, verdict.PARAM, [])
    assert verdict.judge(rec, again, 0.0) == (REPRODUCED, [], len(FIGURES))


def test_a_run_forged_to_another_runs_figures_is_not_reproduced(store):
    """The issue's case: run B (other weights) gets A's weights.sha256 tag and metric values; compared with
    A's figures (what a re-run of A, or of B with A's config, gives) it DIFFERS, and the forged tag and every
    forged metric are named as tampered. B's sealed model and its params decide, not what the store shows
    now."""
    uri, a, b = store[0], store[1]["a"], store[1]["b"]
    _forge(uri, b, like=a)
    rec, again = _sides(uri, b, a)
    assert rec.weights != again.weights and rec.weights_source == verdict.SEAL
    word, diffs, n = verdict.judge(rec, again, 0.0)
    assert word == DIFFERS_VERDICT and n == len(FIGURES)
    assert sorted(d[0] for d in diffs) == sorted(FIGURES)  # B's own figures, not the forged ones
    assert (
        rec.tampered[0].startswith("tag weights.sha256 ")
        and "is not the sealed model's weights" in rec.tampered[0]
    )
    assert sorted(t.split()[1] for t in rec.tampered[1:]) == sorted(FIGURES)
    assert verdict.judge(rec, again, 10.0)[0] == DIFFERS_VERDICT  # no tolerance excuses a tampered record


def test_a_forged_seal_fact_or_replaced_model_files_are_caught(store, tmp_path):
    """The seal's weights_sha256 fact is outside the digest the param records: changed, it is reported as
    tampered (the weights come from the files). Files replaced: the model is not the sealed one any more, the
    weights rest on the tag, and the verdict cannot be REPRODUCED."""
    from mlflow import MlflowClient

    from tfpipe import files
    from tfpipe.tracking import reading

    uri, a = store[0], store[1]["d"]
    client = MlflowClient(uri)
    local = Path(client.download_artifacts(a, "saved_model", str(tmp_path)))
    seal = json.loads((local / files.SEAL).read_text())
    (tmp_path / "forged").mkdir()
    (tmp_path / "forged" / files.SEAL).write_text(json.dumps({**seal, "weights_sha256": "f" * 64}))
    client.log_artifact(a, str(tmp_path / "forged" / files.SEAL), "saved_model")
    rec, again = _sides(uri, a, a)
    assert rec.tampered == [
        f"the model's seal states weights {'f' * 13}..., its files hold {rec.weights[:13]}..."
    ]
    assert verdict.judge(rec, again, 0.0)[0] == DIFFERS_VERDICT

    (tmp_path / "npz").mkdir()
    (tmp_path / "npz" / "keras_weights.npz").write_bytes(b"not the weights")
    client.log_artifact(a, str(tmp_path / "npz" / "keras_weights.npz"), "saved_model")
    sealed = reading.sealed_weights(uri, a)
    assert sealed["weights_sha256"] is None and "saved_model/: 1 file(s) missing or changed" in sealed["why"]
    rec = verdict.recorded(reading.load_run(uri, a), sealed)
    assert rec.weights_source == verdict.TAG
    assert verdict.judge(rec, again, 0.0)[0] == WITHIN_TOLERANCE
    assert any("not REPRODUCED" in line for line in verdict.notes(rec, again, WITHIN_TOLERANCE))


def test_an_older_run_without_these_params_is_never_reproduced_and_says_why(store):
    """Run C (metrics and tag only, no digest param): equal figures are WITHIN TOLERANCE at most, and the
    verdict's lines say it rests on the tag and the metrics."""
    uri, c = store[0], store[1]["c"]
    rec, again = _sides(uri, c, c)
    assert (rec.weights_source, rec.metrics_source) == (verdict.TAG, verdict.METRIC)
    word, diffs, _ = verdict.judge(rec, again, 0.0)
    assert (word, diffs) == (WITHIN_TOLERANCE, [])
    lines = verdict.notes(rec, again, word)
    assert (
        "rests on mutable values: weights: tag weights.sha256 (anyone with EDIT can set it); no sealed model"
        in (lines[1].split(" (the run records no")[0])
    )
    assert lines[2] == (
        "rests on mutable values: metrics: the run's metrics (anyone with EDIT can log new values); the run "
        "records no tfpipe.metric.* params"
    )


def _side(weights, source=verdict.SEAL, **metrics) -> verdict.Side:
    return verdict.Side(weights, source if weights else None, metrics, verdict.PARAM)


@pytest.mark.parametrize(
    "recorded, rerun, tolerance, expected",
    [
        (_side("a", test_accuracy=0.5), _side("a", test_accuracy=0.5), 0.0, REPRODUCED),
        (_side("a", test_accuracy=0.5), _side("b", test_accuracy=0.5004), 0.001, WITHIN_TOLERANCE),
        (_side("a", test_accuracy=0.5), _side("b", test_accuracy=0.5004), 0.0, DIFFERS_VERDICT),
        (
            _side("a", test_accuracy=0.5),
            _side("b", test_accuracy=0.5),
            0.0,
            WITHIN_TOLERANCE,
        ),  # not identical
        (_side("a", test_accuracy=0.5), _side("a"), 1.0, DIFFERS_VERDICT),  # a recorded figure missing
        (_side("a", test_accuracy=0.5), _side(None, test_accuracy=0.5), 1.0, DIFFERS_VERDICT),  # no weights
        (_side(None, test_accuracy=0.5), _side(None, test_accuracy=0.5), 0.0, WITHIN_TOLERANCE),  # no hash
        (_side("a", verdict.TAG, x=1.0), _side("a", x=1.0), 0.0, WITHIN_TOLERANCE),  # a tag proves nothing
        (_side("a", x=float("nan")), _side("a", x=float("nan")), 0.0, REPRODUCED),
    ],
)
def test_the_verdict_for_each_kind_of_outcome(recorded, rerun, tolerance, expected):
    """The verdict of `audit --rerun` for each outcome (the CLI exits 1 on DIFFERS)."""
    assert verdict.judge(recorded, rerun, tolerance)[0] == expected


def test_timing_metrics_and_the_reruns_own_names_are_not_compared_but_counted():
    """The re-run's side holds only the recorded names; a comparable metric only the re-run has is counted and
    makes the outcome differ; a timing metric is neither."""
    rec = verdict.recorded(
        {
            "tags": {},
            "params": {"tfpipe.metric.acc": "0.5", "tfpipe.metric.epoch_seconds": "3.0"},
            "metrics": {},
        },
        {"weights_sha256": "w"},
    )
    again = verdict.rerun_side(
        {"tags": {}, "params": {}, "metrics": {"acc": 0.5, "epoch_seconds": 9.0, "x.rerun_only": 1.0}},
        {"weights_sha256": "w"},
        rec,
    )
    assert (rec.metrics, again.metrics, again.extra) == ({"acc": 0.5}, {"acc": 0.5}, 1)
    assert verdict.judge(rec, again, 0.0)[0] == DIFFERS_VERDICT


def test_the_report_holds_only_what_the_audit_computed(monkeypatch):
    """What goes back to the shared store: the recorded run's metric names, a count of the re-run's others,
    the environment the audit reads itself (never the re-run's tags), who ran it, and the sources compared."""
    monkeypatch.setenv("MLFLOW_TRACKING_USERNAME", "carol")
    rec = verdict.Side("w", verdict.SEAL, {"acc": 0.5}, verdict.PARAM)
    again = verdict.rerun_side(
        {
            "tags": {"python_version": "PLANTED", "weights.sha256": "w"},
            "params": {},
            "metrics": {"acc": 0.25, "PLANTED_NAME": 1.0},
        },
        {},
        rec,
    )
    word, diffs, n = verdict.judge(rec, again, 0.0)
    report = verdict.report(
        "RUN",
        {"tags": {"git.commit": "c" * 40}},
        "restored from the DVC cache",
        word,
        (diffs, n),
        (rec, again),
        0.0,
    )
    assert "PLANTED" not in json.dumps(report)
    assert report["differences"] == [{"metric": "acc", "recorded": 0.5, "rerun": 0.25, "abs_diff": 0.25}]
    assert report["rerun_only_metrics"] == 1
    assert report["auditor"] == {"user": getpass.getuser(), "mlflow_user": "carol"}
    assert report["weights_sha256"] == {
        "recorded": "w",
        "recorded_source": "seal",
        "rerun": "w",
        "rerun_source": "tag",
    }
    assert report["metrics_source"] == {"recorded": "param", "rerun": "metric"}
    assert report["rerun_environment"]["python_version"] == platform.python_version()


@pytest.mark.slow
def test_a_forged_run_rerun_end_to_end_differs(tmp_path, image_dir, text_dir):
    """Two real trainings (seed 42, then 7: other weights) by `dvc repro` with the default log_model; run B
    then forged: its weights.sha256 tag and metrics set to A's figures (its config artifact cannot be: the
    params vouch for it, tests/test_audit_recorded_config.py). `tfpipe audit B --rerun` re-runs it once: DIFFERS
    (exit 1), the forged tag and metrics named as tampered, and that verdict, by this user, from the seal and
    params, recorded on B."""
    import yaml
    from mlflow import MlflowClient
    from test_pipeline_e2e import _make_project, _run

    project, env = _make_project(tmp_path, image_dir, text_dir)
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t"]
    runs = []
    for seed in (42, 7):
        params = yaml.safe_load((project / "params.yaml").read_text())
        params["train"]["seed"] = seed
        (project / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
        _run([*git, "commit", "-qam", f"seed {seed}", "--allow-empty"], project, env)  # a clean run
        _run([sys.executable, "-m", "dvc", "repro"], project, env)
        runs.append(json.loads((project / "run.json").read_text())["run_id"])
        _run([*git, "add", "-A"], project, env)
        _run([*git, "commit", "-qm", f"seed {seed}: results"], project, env)
    a, b = runs
    uri = f"sqlite:///{project / 'mlflow.db'}"
    client = MlflowClient(uri)
    assert client.get_run(a).data.tags["weights.sha256"] != client.get_run(b).data.tags["weights.sha256"]
    names = sorted(k for k in client.get_run(b).data.params if k.startswith("tfpipe.metric."))
    assert "tfpipe.metric.test_accuracy" in names and "tfpipe.metric.final_val_loss" in names, names
    own = client.get_run(b).data.tags["weights.sha256"]  # what B's re-run trains again
    source = client.get_run(a).data
    client.set_tag(b, "weights.sha256", source.tags["weights.sha256"])
    for name, value in source.metrics.items():
        client.log_metric(b, name, value, step=client.get_metric_history(b, name)[-1].step)

    audit_env = {**env, "PYTHONPATH": os.pathsep.join([str(ROOT), str(project / "src")])}
    cmd = [sys.executable, "-m", "tfpipe", "audit", b, "--rerun", "--tracking-uri", uri, "--sandbox", "off"]
    proc = subprocess.run(cmd, cwd=project, env=audit_env, capture_output=True, text=True, timeout=900)
    out = proc.stdout.splitlines()
    assert proc.returncode == 1 and out[-1] == DIFFERS_VERDICT, proc.stdout + proc.stderr[-3000:]
    weights = source.tags["weights.sha256"]
    assert out[0].endswith(f"rerun {own[:13]}...") and f"recorded {weights[:13]}" not in out[0], out
    assert f"tampered: tag weights.sha256 {weights[:13]}... is not the sealed model's weights" in proc.stdout
    assert "tampered: metric test_accuracy shows " in proc.stdout
    tags = client.get_run(b).data.tags
    assert tags["audit.verdict"] == DIFFERS_VERDICT and tags["audit.by"]
    (artifact,) = [f.path for f in client.list_artifacts(b, "audit")]
    report = json.loads(Path(client.download_artifacts(b, artifact, str(tmp_path))).read_text())
    assert (
        report["weights_sha256"]["recorded_source"] == "seal"
        and report["metrics_source"]["recorded"] == "param"
    )
    assert report["auditor"]["user"] and report["tampered"]


def test_compare_shows_the_figures_as_metrics_not_their_param_copies_as_config(store):
    """`tfpipe compare` of two such runs: each differing figure once, in the metrics rows; the params that copy
    them are no config."""
    from tfpipe import audit

    uri, runs = store
    rows = audit.compare(runs["a"], runs["c"], uri)
    assert not [row for row in rows if row[1].startswith("tfpipe.metric.")], rows
    assert sorted(key for section, key, _, _ in rows if section == "metrics") == sorted(FIGURES)
