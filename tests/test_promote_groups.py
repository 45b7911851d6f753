"""`tfpipe promote` decides on groups of seeds (issue 51 item 8): the candidate run's group (tag tfpipe.group) against
the group of the run behind the alias's current version, past a threshold, each run's value read from its
immutable param `tfpipe.metric.<name>`; a refusal changes nothing and exits 2.

A real SQLite MLflow store (a copy of the migrated template) holds runs made with MlflowClient, as tests/test_report.py
makes them: params (dataset.name names the registry name, tfpipe-cifar10), the group tag, the final figures as
metrics and as params, and a logged model (an MLflow LoggedModel the run's tag model_uri names: what promote
registers). The figures are chosen so each printed one is computed here on paper:

    H (the champion's, lr 0.001) test_accuracy 0.80 0.81 0.82 -> 0.8100 ± 0.0100;  G (lr 0.003) 0.84 0.85 0.86 ->
    0.8500 ± 0.0100. Welch, G - H (tests/test_report.py's docstring): +0.0400, 95% CI [+0.0173, +0.0627],
    t = 4.90, df = 4.0, p = 0.0080: the worst end of the interval is 0.0173 better (0.04 - 2.776445 · 0.0081650 = 0.017330).
    C (lr 0.002) 0.80 0.83 0.86 -> 0.8300 ± 0.0300: + 0.02, se = sqrt(0.03²/3 + 0.01²/3) = 0.018257, df = 2.44,
    t(0.975, 2.44) > 3: the interval runs from below -0.03 to above +0.07: within the noise.
    test_loss (min is better): H 0.50 0.52 0.54 -> 0.5200 ± 0.0200; G 0.40 0.41 0.42 -> 0.4100 ± 0.0100; the
    gain is 0.11, se = sqrt(0.02²/3 + 0.01²/3) = 0.012910, df = 2.94, t(0.975, 2.94) < 3.3: its interval's worst
    end is above 0.11 - 3.3 · 0.01291 = 0.067. --min-relative 0.1: threshold 0.1 x 0.52 = 0.052 (passed);
    0.25: 0.13, above even the gain itself.
    S (lr 0.01) and T (lr 0.02): one run each, 0.83 and 0.79.

Nothing here is computed with the code under test; no TensorFlow is imported.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml
from conftest import committed_text, seed_store

NAME = "tfpipe-cifar10"
GROUPS = {  # label -> (learning rate, {seed: (test_accuracy, test_loss)}, experiment)
    "H": (0.001, {1: (0.80, 0.50), 2: (0.81, 0.52), 3: (0.82, 0.54)}, "tfpipe"),
    "G": (0.003, {1: (0.84, 0.40), 2: (0.85, 0.41), 3: (0.86, 0.42)}, "tfpipe"),
    "C": (0.002, {1: (0.80, 0.50), 2: (0.83, 0.50), 3: (0.86, 0.50)}, "tfpipe"),
    "S": (0.01, {7: (0.83, 0.45)}, "tfpipe"),
    "T": (0.02, {7: (0.79, 0.45)}, "tfpipe"),
}
OTHER_EXPERIMENT = ("G", 3)  # this seed is logged in another experiment of the store: still G's


def _params(lr: float, seed: int) -> dict:
    return {
        "dataset.name": "cifar10",
        "model.name": "cnn",
        "train.optimizer.learning_rate": str(lr),
        "train.seed": str(seed),
        "tracking.run_name": f"lr{lr}-seed{seed}",
    }


def _log_run(client, experiment: str, params: dict, figures: dict, *, records=True, finished=True) -> str:
    """A run as train + evaluate leave it: params, the group tag, the figures as metrics and (`records`) as the
    immutable params tfpipe.metric.*, a logged model named by the tag model_uri."""
    from mlflow.entities import Metric, Param

    from tfpipe.tracking.groups import GROUP_TAG, group_id

    run_id = client.create_run(experiment, tags={GROUP_TAG: group_id(params)}).info.run_id
    if records:
        params = {**params, **{f"tfpipe.metric.{k}": repr(v) for k, v in figures.items()}}
    metrics = [Metric(k, v, 1_700_000_000_000, 0) for k, v in figures.items()]
    client.log_batch(run_id, params=[Param(k, v) for k, v in params.items()], metrics=metrics)
    model = client.create_logged_model(experiment, source_run_id=run_id, name="model")
    client.set_tag(run_id, "model_uri", f"models:/{model.model_id}")
    if finished:
        client.set_terminated(run_id)
    return run_id


@pytest.fixture
def store(tmp_path, monkeypatch):
    """(uri, {label: [run ids by seed]}, client), cwd a folder without params.yaml (conf's defaults: no threshold)."""
    from mlflow import MlflowClient

    for name in ("MLFLOW_TRACKING_URI", "MLFLOW_REGISTRY_URI", "MLFLOW_RUN_ID", "MLFLOW_EXPERIMENT_NAME"):
        monkeypatch.delenv(name, raising=False)
    seed_store(tmp_path)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = MlflowClient(tracking_uri=uri)
    experiments = {
        name: client.create_experiment(name, artifact_location=(tmp_path / "mlartifacts" / name).as_uri())
        for name in ("tfpipe", "other")
    }
    ids = {}
    for label, (lr, seeds, experiment) in GROUPS.items():
        ids[label] = [
            _log_run(
                client,
                experiments["other" if (label, seed) == OTHER_EXPERIMENT else experiment],
                _params(lr, seed),
                {"test_accuracy": acc, "test_loss": loss},
            )
            for seed, (acc, loss) in seeds.items()
        ]
    monkeypatch.chdir(tmp_path)
    return SimpleNamespace(uri=uri, ids=ids, client=client, experiments=experiments)


def _promote(store, capsys, *argv) -> tuple:
    """(exit code, stdout lines, stderr lines) of `tfpipe promote ARGV --tracking-uri <store>`, in-process."""
    from tfpipe.commands import promote

    capsys.readouterr()
    code = promote.main([*argv, "--tracking-uri", store.uri])
    out = capsys.readouterr()
    return code, out.out.splitlines(), [line for line in out.err.splitlines() if line.strip()]


def _registry(store) -> list:
    """[(version, run id, aliases)] of NAME, and the registry tags of every run: what a refusal must not change."""
    versions = store.client.search_model_versions(f"name='{NAME}'")
    rows = [
        (int(v.version), v.run_id, tuple(store.client.get_model_version(NAME, v.version).aliases))
        for v in versions
    ]
    tagged = sorted(
        (run_id, tags.get("registry.version"))
        for run_ids in store.ids.values()
        for run_id in run_ids
        if "registry.name" in (tags := store.client.get_run(run_id).data.tags)
    )
    return sorted(rows) + tagged


def _champion(store, capsys, run_id: str, *flags) -> None:
    code, out, err = _promote(store, capsys, run_id, *flags)
    assert code == 0 and out[-1] == f"{NAME} version 1 is 'champion' (was unset)", (out, err)


def _line(out: list, start: str) -> str:
    found = [line for line in out if line.startswith(start)]
    assert len(found) == 1, (start, out)
    return found[0]


def test_a_group_clearly_better_is_promoted_and_the_output_names_the_test(store, capsys):
    h, g = store.ids["H"], store.ids["G"]
    _champion(store, capsys, h[0])
    code, out, err = _promote(store, capsys, g[0])
    assert code == 0 and not err, (out, err)
    assert (
        out[0]
        == "test_accuracy (max is better): each run's param tfpipe.metric.test_accuracy, never its metric or tags"
    )
    assert (
        _line(out, "candidate:")
        == f"candidate: group {_group(store, g[0])} of run {g[0][:8]}: n=3, mean 0.8500 ± 0.0100 (sd)"
    )
    assert (
        _line(out, "champion:")
        == f"champion: group {_group(store, h[0])} of version 1: n=3, mean 0.8100 ± 0.0100 (sd)"
    )
    assert _line(out, "difference") == (
        "difference +0.0400 (candidate - champion), 95% CI [+0.0173, +0.0627], Welch's t-test t=4.90, df=4.0, "
        "p=0.0080"
    )
    assert _line(out, "threshold") == (
        "threshold off (tracking.promote_min_delta 0, tracking.promote_min_relative 0); better by +0.0173 at the interval's worst end: promoted"
    )
    assert out[-2:] == [
        f"registered the run's model as {NAME} version 2",
        f"{NAME} version 2 is 'champion' (was 1)",
    ]


def _group(store, run_id: str) -> str:
    return store.client.get_run(run_id).data.tags["tfpipe.group"]


def test_a_group_within_the_threshold_or_the_noise_is_refused_and_nothing_changes(store, capsys):
    from tfpipe.tracking import registry

    h, g, c = store.ids["H"], store.ids["G"], store.ids["C"]
    _champion(store, capsys, h[0])
    before = _registry(store)
    # G's mean is 0.04 better, past 0.02; the worst end of its interval, 0.0173, is not
    code, out, err = _promote(store, capsys, g[0], "--min-delta", "0.02")
    assert code == 2 and len(err) == 1, (out, err)
    assert err[0].startswith(f"promote: error: 'champion' stays on {NAME} version 1: group "), err
    assert (
        "not beat group" in err[0]
        and "past the threshold 0.02: better by +0.01733 at the 95%" in err[0]
        and err[0].endswith("--force moves it anyway")
    ), err
    assert _line(out, "threshold") == (
        "threshold 0.02 = the larger of --min-delta 0.02 and tracking.promote_min_relative 0 x |0.81|; better by +0.0173 at the "
        "interval's worst end: refused"
    )
    assert _line(out, "difference").endswith("p=0.0080")
    # C's mean is 0.02 better, within the noise between seeds: no threshold needed to refuse it
    code, out, err = _promote(store, capsys, c[0])
    assert code == 2 and len(err) == 1 and "does not beat group" in err[0], (out, err)
    assert "n=3, mean 0.8300 ± 0.0300 (sd)" in _line(out, "candidate:")
    assert _line(out, "threshold").endswith(": refused")
    # the evaluate stage's auto-promotion: the config's threshold, logged refusal, nothing changed either
    evaluated = SimpleNamespace(tracking_uri=store.uri, run_id=g[1])
    assert (
        registry.auto_promote(evaluated, "champion", metric="test_accuracy", mode="max", min_delta=0.02)
        is None
    )
    assert _registry(store) == before
    # the default: params.yaml's tracking.promote_min_delta (a flag given wins over it)
    params = yaml.safe_load(committed_text("params.yaml"))
    params["tracking"].update(promote_min_delta=0.02, promote_min_relative=0.0)
    Path("params.yaml").write_text(yaml.safe_dump(params))
    code, out, err = _promote(store, capsys, g[0])
    assert code == 2 and "past the threshold 0.02" in err[0], (out, err)
    assert _line(out, "threshold").startswith(
        "threshold 0.02 = the larger of tracking.promote_min_delta 0.02 "
    )
    assert _registry(store) == before
    code, out, err = _promote(store, capsys, g[0], "--min-delta", "0.01")  # 0.0173 is past 0.01
    assert code == 0 and out[-1] == f"{NAME} version 2 is 'champion' (was 1)", (out, err)


def test_single_runs_are_said_to_be_one_run_and_compared_as_before(store, capsys):
    (s,), (t,), g = store.ids["S"], store.ids["T"], store.ids["G"]
    _champion(store, capsys, s)
    code, out, err = _promote(store, capsys, t)
    assert code == 2 and err == [
        f"promote: error: 'champion' stays on {NAME} version 1: run {t} has test_accuracy=0.79, worse than 0.83 of "
        f"version 1 (run {s}; promote_mode=max); --force moves it anyway"
    ], (out, err)
    assert _line(out, "difference") == (
        "difference -0.0400 (candidate - champion); one run: no test, compared as single values"
    )
    assert "n=1, mean 0.7900 (one run)" in _line(out, "candidate:")
    # a group of three against one run: no test either; its mean 0.85 beats 0.83
    code, out, err = _promote(store, capsys, g[0])
    assert code == 0 and "one run: no test, compared as single values" in _line(out, "difference"), (out, err)
    assert "n=3, mean 0.8500" in _line(out, "candidate:") and "n=1, mean 0.8300" in _line(out, "champion:")
    # two seeds of one group: the two runs, as single values (G seed 2's 0.85 against seed 1's 0.84)
    code, out, err = _promote(store, capsys, g[1])
    assert code == 0, (out, err)
    assert f"the candidate and version 2 are seeds of one group {_group(store, g[0])}: single values" in out
    assert "n=1, mean 0.8500 (one run)" in _line(out, "candidate:") and "one run: no test" in _line(
        out, "difference"
    )
    assert out[-1] == f"{NAME} version 3 is 'champion' (was 2)"


def test_a_relative_threshold_on_a_metric_where_lower_is_better(store, capsys):
    h, g = store.ids["H"], store.ids["G"]
    _champion(store, capsys, h[0], "--metric", "test_loss", "--mode", "min")
    before = _registry(store)
    loss = ("--metric", "test_loss", "--mode", "min")
    code, out, err = _promote(store, capsys, g[0], *loss, "--min-relative", "0.25")  # 0.13 > the gain 0.11
    assert code == 2 and len(err) == 1 and "past the threshold 0.13: better by" in err[0], (out, err)
    assert _line(out, "threshold").startswith(
        "threshold 0.13 = the larger of tracking.promote_min_delta 0 and --min-relative 0.25 x |0.52|"
    )
    assert _registry(store) == before
    code, out, err = _promote(store, capsys, g[0], *loss, "--min-relative", "0.1")  # 0.052
    assert code == 0 and out[-1] == f"{NAME} version 2 is 'champion' (was 1)", (out, err)
    assert out[0].startswith("test_loss (min is better)")
    assert _line(out, "difference").startswith("difference -0.1100 (candidate - champion), 95% CI [")
    threshold = _line(out, "threshold")
    assert threshold.startswith("threshold 0.052 = ") and threshold.endswith(
        " at the interval's worst end: promoted"
    ), threshold
    worst = float(threshold.split("better by ")[1].split(" ")[0])
    assert 0.067 < worst < 0.11, threshold  # the interval's end nearest the champion, in the better direction


def test_tampered_metrics_tags_and_unrecorded_runs_do_not_change_the_decision(store, capsys):
    from tfpipe.tracking.groups import GROUP_TAG

    h, c = store.ids["H"], store.ids["C"]
    _champion(store, capsys, h[0])
    code, first, _ = _promote(store, capsys, c[0])
    assert code == 2
    before = _registry(store)
    client = store.client
    for run_id in c:  # anyone with EDIT: a newer metric, a tag that looks like the record
        client.log_metric(run_id, "test_accuracy", 0.99, timestamp=1_800_000_000_000, step=1)
        client.set_tag(run_id, "tfpipe.metric.test_accuracy", "0.99")
    for run_id in h:
        client.log_metric(run_id, "test_accuracy", 0.10, timestamp=1_800_000_000_000, step=1)
    experiment = store.experiments["tfpipe"]
    extra = _params(0.002, 99)
    stuffed = _log_run(
        client, experiment, extra, {"test_accuracy": 0.99}, records=False
    )  # a metric, no record
    client.set_tag(stuffed, GROUP_TAG, _group(store, c[0]))  # into C's group by its tag
    running = _log_run(client, experiment, extra, {"test_accuracy": 0.99}, finished=False)
    client.set_tag(running, GROUP_TAG, _group(store, c[0]))  # a record, but not FINISHED
    code, out, err = _promote(store, capsys, c[0])
    assert code == 2 and len(err) == 1 and "does not beat group" in err[0], (out, err)
    assert _line(out, "candidate:").endswith(
        "n=3, mean 0.8300 ± 0.0300 (sd); left out, no recorded value: 1 run(s)"
    ), out
    assert _line(out, "difference") == _line(first, "difference")
    assert _line(out, "champion:") == _line(first, "champion:")
    assert _registry(store) == before
    code, out, err = _promote(store, capsys, stuffed)  # its own metric alone is no value to promote on
    assert code == 2 and not out and len(err) == 1, (out, err)
    assert f"run {stuffed} has no metric 'test_accuracy' yet; evaluate it first" in err[0], err
    assert "(it records none), or --force (promotion reads param tfpipe.metric.test_accuracy" in err[0], err
    assert _registry(store) == before


def test_bad_thresholds_are_one_line_exit_2_and_change_nothing(store, capsys):
    from tfpipe.config import TrackingConfig
    from tfpipe.errors import ConfigError

    h, g = store.ids["H"], store.ids["G"]
    _champion(store, capsys, h[0])
    before = _registry(store)
    for flag, value in (("--min-delta", "-0.01"), ("--min-relative", "nan"), ("--min-delta", "inf")):
        code, out, err = _promote(store, capsys, g[0], flag, value)
        assert code == 2 and not out, (out, err)
        assert err == [f"promote: error: {flag}={float(value)!r}: must be a number >= 0 (0: off)"], err
    assert _registry(store) == before
    for key in ("promote_min_delta", "promote_min_relative"):
        with pytest.raises(ConfigError, match=rf"^tracking\.{key}=-1\.0: must be a number >= 0 \(0: off\)$"):
            TrackingConfig(**{key: -1.0}).check(None)
