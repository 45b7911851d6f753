"""Drift against a reference data report (issue 21, item 3): a policy per check, the class-share distance
(L-infinity or Jensen-Shannon), image statistics, text lengths, and `reference=auto` (the first prepared
version, pinned). Tiny real-shaped image and text trees with planted drift; each planted change is found,
and nothing else is."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
from conftest import prepare_tree, write_image_tree, write_text_tree
from test_data_report import VAL, _argv, _cli, _pixels, _save, _with_val

from tfpipe.data import drift
from tfpipe.data.report import REPORT_FILE, load_report

SHARE_LINE = "test: share of class 'red': reference 0.3333, now 0.1429"


@pytest.fixture(scope="module")
def trees(tmp_path_factory):
    """(clean, skewed: 2 of the 3 red test images gone, brighter: every test image +60, clean's report)."""
    base = tmp_path_factory.mktemp("drift")
    clean = _with_val(write_image_tree(base / "clean", train_per_class=8, test_per_class=3))
    skewed = base / "skewed"
    shutil.copytree(clean, skewed)
    for path in sorted((skewed / "test" / "red").iterdir())[1:]:
        path.unlink()
    brighter = base / "brighter"
    shutil.copytree(clean, brighter)
    for path in sorted((brighter / "test").rglob("*.*")):
        _save(_pixels(path).astype(int) + 60, path.with_suffix(".png"))
        if path.suffix != ".png":
            path.unlink()
    reference = prepare_tree(clean, base / "out" / "clean", *VAL).prepared_dir / REPORT_FILE
    return clean, skewed, brighter, reference


@pytest.fixture(scope="module")
def texts(tmp_path_factory):
    """(clean reviews, longer: every test review three times over, clean's report)."""
    base = tmp_path_factory.mktemp("drift_texts")
    clean = _with_val(write_text_tree(base / "clean", train_per_class=12, test_per_class=6))
    longer = base / "longer"
    shutil.copytree(clean, longer)
    for path in sorted((longer / "test").glob("*/*.txt")):  # the same words 3x: shares and OOV rate stay
        text = path.read_text(encoding="utf-8")
        path.write_text(" ".join([text] * 3), encoding="utf-8")
    reference = prepare_tree(clean, base / "out", "dataset=imdb", *VAL).prepared_dir / REPORT_FILE
    return clean, longer, reference


def _anomalies(tree: Path, out: Path, *overrides: str) -> list:
    return load_report(prepare_tree(tree, out, *VAL, *overrides).prepared_dir)["drift"]["anomalies"]


# ----------------------------------------------------------------------------- a policy per check


def test_a_policy_per_check_fails_only_on_the_checks_set_to_fail(capsys, trees, tmp_path, scratch_root):
    _, skewed, _, reference = trees
    ref = f"data.validation.reference={reference}"
    lenient = _anomalies(skewed, tmp_path / "a", ref, "data.validation.drift={classes:fail,oov:fail}")
    assert lenient == [SHARE_LINE]  # class_share not named: warn
    argv = _argv(skewed, tmp_path / "b", ref, "data.validation.drift={class_share:fail}")
    code, lines = _cli(capsys, argv, scratch_root)
    assert code == 2 and lines == [
        f"prepare: error: data.validation.drift.class_share=fail: {SHARE_LINE}; "
        "or set data.validation.drift.class_share=warn"
    ]
    assert not (tmp_path / "b").exists()


def test_image_statistics_moved_are_found_per_channel_and_nothing_else(capsys, trees, tmp_path, scratch_root):
    clean, _, brighter, reference = trees
    ref = f"data.validation.reference={reference}"
    old = load_report(reference.parent)["splits"]["test"]
    found = _anomalies(brighter, tmp_path / "a", ref)
    new = load_report(tmp_path / "a")["splits"]["test"]
    assert found == [
        f"test: pixel_mean[{c}]: reference {old['pixel_mean'][c]:.3f}, now {new['pixel_mean'][c]:.3f}"
        for c in range(3)
    ]
    assert all(new["pixel_mean"][c] - old["pixel_mean"][c] > 40 for c in range(3))
    assert _anomalies(brighter, tmp_path / "b", ref, "data.validation.max_pixel_shift=80") == []
    assert _anomalies(clean, tmp_path / "c", ref) == []
    argv = _argv(brighter, tmp_path / "d", ref, "data.validation.drift={image_stats:fail,class_share:fail}")
    code, lines = _cli(capsys, argv, scratch_root)
    assert (
        code == 2
        and len(lines) == 1
        and "data.validation.drift.image_stats=fail: test: pixel_mean[0]" in lines[0]
    )
    assert "(and 2 more)" in lines[0]


@pytest.mark.parametrize(
    "override, key",
    [
        ("data.validation.drift={clases:fail}", "data.validation.drift.clases: unknown drift check"),
        ("data.validation.drift={oov:stop}", "data.validation.drift.oov='stop'"),
        ("data.validation.share_distance=kl", "data.validation.share_distance='kl'"),
        (
            "data.validation.max_share_divergence=0",
            "data.validation.max_share_divergence=0.0: must be in (0, 1]",
        ),
        ("data.validation.max_share_divergence=1.5", "max_share_divergence=1.5: must be in (0, 1]"),
        (
            "data.validation.reference=auto data.validation.auto_reference=OUT/ref.json",
            "inside data.output_dir",
        ),
        ("data.validation.max_pixel_shift=300", "data.validation.max_pixel_shift=300.0: must be in (0, 255]"),
        ("data.validation.max_length_shift=0", "data.validation.max_length_shift=0.0: must be in (0, 10]"),
        ("data.validation.max_length_shift=11", "data.validation.max_length_shift=11.0: must be in (0, 10]"),
        ("data.validation.drift={text_lenght:fail}", "unknown drift check (did you mean 'text_length'?)"),
    ],
)
def test_an_unknown_check_policy_or_distance_is_refused_before_anything_is_read(
    capsys, tmp_path, override, key, scratch_root
):
    override = override.replace("OUT", str(tmp_path / "out"))
    argv = _argv(tmp_path / "does-not-exist", tmp_path / "out", *override.split())
    code, lines = _cli(capsys, argv, scratch_root)
    assert code == 2 and len(lines) == 1 and key in lines[0], lines
    assert not (tmp_path / "out").exists()


def test_an_unknown_check_names_the_allowed_ones(capsys, tmp_path, scratch_root):
    _, lines = _cli(
        capsys,
        _argv(tmp_path / "nothing", tmp_path / "out", "data.validation.drift={clases:fail}"),
        scratch_root,
    )
    assert lines[0].endswith(
        "(did you mean 'classes'?); allowed: classes, class_share, oov, text_length, image_modes, image_stats"
    ), lines


# ----------------------------------------------------------------------------- text lengths


def test_a_text_length_jump_is_found_per_statistic_and_nothing_else(texts, tmp_path):
    clean, longer, reference = texts
    ref, imdb = f"data.validation.reference={reference}", "dataset=imdb"
    found = _anomalies(longer, tmp_path / "a", imdb, ref)
    old, new = (load_report(p)["splits"]["test"]["tokens"] for p in (reference.parent, tmp_path / "a"))
    assert found == [
        f"test: tokens.{stat}: reference {old[stat]:.1f}, now {new[stat]:.1f}" for stat in ("median", "p95")
    ]
    assert new["median"] >= 3 * old["median"] - 1  # the planted jump, not noise
    assert _anomalies(clean, tmp_path / "b", imdb, ref) == []  # unchanged lengths
    assert _anomalies(longer, tmp_path / "c", imdb, ref, "data.validation.max_length_shift=3") == []


def test_text_length_fail_stops_prepare_in_one_line_and_writes_nothing(capsys, texts, tmp_path, scratch_root):
    _, longer, reference = texts
    old = load_report(reference.parent)["splits"]["test"]["tokens"]["median"]
    argv = _argv(
        longer,
        tmp_path / "out",
        "dataset=imdb",
        f"data.validation.reference={reference}",
        "data.validation.drift={text_length:fail}",
    )
    code, lines = _cli(capsys, argv, scratch_root)
    assert code == 2 and len(lines) == 1, lines
    assert lines[0].startswith(
        f"prepare: error: data.validation.drift.text_length=fail: test: tokens.median: reference {old:.1f}, now "
    ), lines
    assert lines[0].endswith(" (and 1 more); or set data.validation.drift.text_length=warn"), lines
    assert not (tmp_path / "out").exists() and not list(tmp_path.glob("out.*"))


def test_image_sizes_are_no_text_length_drift(trees):
    """Images have no token lengths: source images five times as wide and high are not a text_length line."""
    from omegaconf import OmegaConf

    reference = load_report(trees[3].parent)
    wider = load_report(trees[3].parent)
    for entry in wider["splits"].values():
        for key in ("width", "height"):
            entry["source_images"][key] = {k: v * 5 for k, v in entry["source_images"][key].items()}
    assert drift.compare(reference, wider, OmegaConf.create({"max_length_shift": 0.01})) == []


# ----------------------------------------------------------------------------- Jensen-Shannon


def test_js_divergence_by_hand():
    assert drift.js_divergence([0.5, 0.5], [0.5, 0.5]) == 0.0
    assert drift.js_divergence([1.0, 0.0], [0.0, 1.0]) == pytest.approx(1.0)
    p, q = np.array([1 / 3] * 3), np.array([3 / 7, 3 / 7, 1 / 7])
    m = (p + q) / 2
    expected = (np.sum(p * np.log2(p / m)) + np.sum(q * np.log2(q / m))) / 2
    assert drift.js_divergence(list(p), list(q)) == pytest.approx(expected)


def test_share_distance_js_reports_the_split_shares_and_the_divergence(trees, tmp_path):
    clean, skewed, _, reference = trees
    ref, js = f"data.validation.reference={reference}", "data.validation.share_distance=js"
    assert _anomalies(skewed, tmp_path / "a", ref, js) == [
        "test: class shares: reference blue 0.3333 green 0.3333 red 0.3333, "
        "now blue 0.4286 green 0.4286 red 0.1429 (Jensen-Shannon divergence 0.0369 > 0.02)"
    ]
    assert _anomalies(skewed, tmp_path / "b", ref, js, "data.validation.max_share_divergence=0.04") == []
    assert _anomalies(clean, tmp_path / "c", ref, js) == []


# ----------------------------------------------------------------------------- reference=auto


def test_auto_reference_pins_the_first_prepare_and_finds_drift_in_the_next(
    capsys, trees, tmp_path, scratch_root
):
    clean, skewed, _, _ = trees
    pinned = tmp_path / "reference" / "report.json"
    auto = ("data.validation.reference=auto", f"data.validation.auto_reference={pinned}")
    first = prepare_tree(clean, tmp_path / "prepared", *VAL, *auto)
    assert pinned.read_bytes() == (first.prepared_dir / REPORT_FILE).read_bytes()
    assert "drift" not in load_report(first.prepared_dir)
    second = prepare_tree(skewed, tmp_path / "prepared", *VAL, *auto)  # the same output_dir, replaced
    assert load_report(second.prepared_dir)["drift"] == {
        "reference": str(pinned),
        "policy": "warn",
        "share_distance": "linf",
        "anomalies": [SHARE_LINE],
    }
    assert load_report(pinned.parent)["splits"]["test"]["num_examples"] == 9  # still the first version's
    code, lines = _cli(
        capsys, _argv(tmp_path / "no-data", tmp_path / "text", *auto, "dataset=imdb"), scratch_root
    )
    assert code == 2 and len(lines) == 1, lines
    assert "data.validation.auto_reference=" in lines[0] and "a report of image data" in lines[0]


# ----------------------------------------------------------------------------- pipeline.compare RUN_A RUN_B


class _Run:
    """The two calls tfpipe.records.data_report makes on a tracking run, on a real MLflow client."""

    def __init__(self, client, experiment):
        self.client, self.run_id = client, client.create_run(experiment).info.run_id

    def log_dict(self, dictionary, artifact_file):
        self.client.log_dict(self.run_id, dictionary, artifact_file)

    def set_tags(self, tags):
        for key, value in tags.items():
            self.client.set_tag(self.run_id, key, str(value))


@pytest.fixture(scope="module")
def logged_runs(trees, tmp_path_factory):
    """A real SQLite MLflow store whose run A logged the clean report, B the skewed one and C none:
    (uri, run A, run B, run C) as run ids."""
    import mlflow

    from tfpipe.records import data_report

    _, skewed, _, reference = trees
    base = tmp_path_factory.mktemp("runs")
    uri = f"sqlite:///{base / 'store.db'}"
    client = mlflow.MlflowClient(uri)
    experiment = client.create_experiment("e", artifact_location=(base / "art").as_uri())
    run_a, run_b, run_c = (_Run(client, experiment) for _ in range(3))
    data_report(run_a, reference.parent)
    data_report(run_b, prepare_tree(skewed, base / "skewed", *VAL).prepared_dir)
    return uri, run_a.run_id, run_b.run_id, run_c.run_id


@pytest.mark.slow  # starts processes
def test_compare_lists_the_data_report_differences_of_two_runs(logged_runs, tmp_path):
    import os
    import subprocess
    import sys

    from conftest import ROOT

    uri, run_a, run_b, run_c = logged_runs
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), str(ROOT)])

    def compare(a, b):
        cmd = [sys.executable, "-m", "pipeline.compare", a, b, "--tracking-uri", uri]
        proc = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
        return proc.returncode, [line.split() for line in proc.stdout.splitlines()[1:]]

    code, rows = compare(run_a, run_b)
    assert code == 1 and ["data", "data.examples_test", "9", "7"] in rows, rows
    report_rows = [r[2:] for r in rows if r[:2] == ["data", "report"]]
    assert report_rows[:4] == [
        ["test.num_examples", "9", "7"],
        ["test.share[blue]", "0.333333", "0.428571"],
        ["test.share[green]", "0.333333", "0.428571"],
        ["test.share[red]", "0.333333", "0.142857"],
    ], rows
    assert all(r[0].startswith("test.") for r in report_rows)  # train and validation are untouched
    assert compare(run_a, run_a)[0] == 0
    code, rows = compare(run_a, run_c)  # run C logged no report
    assert ["data", "report", "report.json", "logged"] in rows, rows


# ----------------------------------------------------------------------------- pipeline.audit RUN --against


@pytest.mark.slow  # shares the three logged runs with the compare test
def test_audit_against_lists_the_data_report_rows_compare_lists(capsys, logged_runs, tmp_path, monkeypatch):
    from tfpipe.commands.audit import audit_main, compare_main

    uri, run_a, run_b, run_c = logged_runs
    monkeypatch.chdir(tmp_path)  # no params.yaml, no git: the check's items are n/a, the audit passes

    def cli(main, *argv):
        capsys.readouterr()
        code = main([*argv, "--tracking-uri", uri])
        out, err = capsys.readouterr()
        return code, out.splitlines(), err.splitlines()

    code, out, _ = cli(audit_main, run_a, "--against", run_b)
    section = out[out.index(f"data report against run {run_b}:") + 1 :]
    rows = [line.split() for line in section if line.startswith("data report")]
    compared = [line.split() for line in cli(compare_main, run_a, run_b)[1] if line.startswith("data report")]
    assert rows == compared and rows[0] == ["data", "report", "test.num_examples", "9", "7"], out
    assert code == 0 and out[-1] == "ALL MATCH", out  # the data report informs; the check decides
    code, out, _ = cli(audit_main, run_a, "--against", run_a)
    assert f"data report against run {run_a}: the same figures" in out and code == 0, out
    out = cli(audit_main, run_a, "--against", run_c)[1]
    assert ["data", "report", "report.json", "logged"] in [line.split()[:4] for line in out], out
    code, out, err = cli(audit_main, run_a, "--against", "0" * 32)
    assert code == 2 and out == [] and len(err) == 1 and err[0].startswith(f"audit: error: run '{'0' * 32}'")
    code, out, err = cli(audit_main, run_a, "--against", run_b, "--rerun")
    assert code == 2 and err == [
        "audit: error: --against works with the check, not with --rerun; drop one of them"
    ]
