"""The data report (issue 21): statistics, exact and near duplicates within and across splits, leakage
policies, the DVC metrics file and the evaluate stage's de-duplicated accuracy, on tiny real-shaped trees
with planted duplicates (and the same trees without them: nothing may be found there)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import ROOT, prepare_tree, write_image_tree, write_text_tree

from tfpipe import data
from tfpipe.data import dedup
from tfpipe.data.report import REPORT_FILE, headline, load_report

VAL = ("data.validation_split=val",)


def _with_val(root: Path, per_class: int = 2) -> Path:
    """Move the last `per_class` train files of every class into val/ (so every split is ours to plant in)."""
    for class_dir in sorted((root / "train").iterdir()):
        if class_dir.is_dir():
            target = root / "val" / class_dir.name
            target.mkdir(parents=True)
            for path in sorted(class_dir.iterdir())[-per_class:]:
                shutil.move(path, target / path.name)
    return root


def _pixels(path: Path) -> np.ndarray:
    from PIL import Image

    with Image.open(path) as image:
        return np.asarray(image.convert("RGB"))


def _save(pixels: np.ndarray, path: Path, **kw) -> None:
    from PIL import Image

    Image.fromarray(pixels.clip(0, 255).astype(np.uint8), "RGB").save(path, format="PNG", **kw)


def plant_images(root: Path) -> dict:
    """Exact (other bytes, same pixels) within train; exact train->test twice, one with another label;
    near (brightness shift + a changed patch) train->test and within test."""
    t = root / "train"
    _save(_pixels(t / "blue" / "0000.png"), t / "blue" / "dup_0000.png", compress_level=1)
    _save(_pixels(t / "green" / "0001.jpg"), root / "test" / "green" / "leak_exact.png")
    _save(_pixels(t / "red" / "0002.jpeg"), root / "test" / "blue" / "conflict.png")  # red pixels, blue label
    near = _pixels(t / "blue" / "0003.png").astype(int) + 4
    near[:2, :2] = 0  # pHash distance 2 from the original
    _save(near, root / "test" / "blue" / "leak_near.png")
    near_test = _pixels(root / "test" / "green" / "0000.png").astype(int) + 5
    _save(near_test, root / "test" / "green" / "near_copy.png")
    return {"leaked": ["test/green/leak_exact.png", "test/blue/conflict.png", "test/blue/leak_near.png"]}


def plant_texts(root: Path) -> dict:
    def read(rel):
        return next((root / rel).parent.glob(Path(rel).name)).read_text(encoding="utf-8")

    t = root / "train"
    (t / "pos" / "dup.txt").write_text(read("train/pos/0_*.txt") + "\r\n", encoding="utf-8")
    (root / "test" / "neg" / "leak_exact.txt").write_text(read("train/neg/1_*.txt"), encoding="utf-8")
    (root / "test" / "neg" / "conflict.txt").write_text(read("train/pos/2_*.txt"), encoding="utf-8")
    near = read("train/neg/3_*.txt").upper().replace(" ", "  \n")
    (root / "test" / "neg" / "leak_near.txt").write_text(near, encoding="utf-8")
    (root / "test" / "pos" / "near_copy.txt").write_text(read("test/pos/4_*.txt").lower(), encoding="utf-8")
    (t / "pos" / "empty.txt").write_text("", encoding="utf-8")
    (root / "test" / "neg" / "short.txt").write_text("Awful zyzzyva.", encoding="utf-8")  # near-empty, 1 OOV
    return {"leaked": ["test/neg/leak_exact.txt", "test/neg/conflict.txt", "test/neg/leak_near.txt"]}


@pytest.fixture(scope="module")
def image_trees(tmp_path_factory):
    base = tmp_path_factory.mktemp("report_images")
    clean = _with_val(write_image_tree(base / "clean", train_per_class=8, test_per_class=3))
    planted = base / "planted"
    shutil.copytree(clean, planted)
    return clean, planted, plant_images(planted)


@pytest.fixture(scope="module")
def text_trees(tmp_path_factory):
    base = tmp_path_factory.mktemp("report_texts")
    clean = _with_val(write_text_tree(base / "clean", train_per_class=12, test_per_class=6))
    planted = base / "planted"
    shutil.copytree(clean, planted)
    return clean, planted, plant_texts(planted)


@pytest.fixture(scope="module")
def image_reports(image_trees, tmp_path_factory):
    clean, planted, _ = image_trees
    out = tmp_path_factory.mktemp("report_out")
    return prepare_tree(clean, out / "clean", *VAL), prepare_tree(planted, out / "planted", *VAL)


@pytest.fixture(scope="module")
def text_reports(text_trees, tmp_path_factory):
    clean, planted, _ = text_trees
    out = tmp_path_factory.mktemp("report_out")
    return tuple(
        prepare_tree(src, out / name, "dataset=imdb", *VAL) for src, name in ((clean, "c"), (planted, "p"))
    )


def _counts(report: dict) -> dict:
    """Every duplicate count of a report, flat: what the planted fixtures must match exactly."""
    out = {}
    for kind, section in report["duplicates"].items():
        for split, entry in section["within"].items():
            out[f"{kind}.within.{split}"] = entry["duplicates"]
        for pair, entry in section["across"].items():
            out[f"{kind}.across.{pair}"] = next(v for k, v in entry.items() if k.startswith("examples_in_"))
        out[f"{kind}.conflicting"] = section["conflicting_labels"]["groups"]
    return out


PLANTED = {
    "exact.within.train": 1,
    "exact.across.train-test": 2,
    "exact.conflicting": 1,
    "near.within.test": 1,
    "near.across.train-test": 1,
}


def _expected(planted: bool) -> dict:
    zero = {f"{kind}.within.{s}": 0 for kind in ("exact", "near") for s in ("train", "validation", "test")}
    zero.update(
        {
            f"{k}.across.{p}": 0
            for k in ("exact", "near")
            for p in ("train-validation", "train-test", "validation-test")
        }
    )
    zero.update({"exact.conflicting": 0, "near.conflicting": 0})
    return {**zero, **PLANTED} if planted else zero


@pytest.mark.parametrize("which", ["image", "text"])
def test_planted_duplicates_are_found_with_the_right_counts_and_nothing_else(
    which, image_reports, text_reports, image_trees, text_trees
):
    clean, planted = image_reports if which == "image" else text_reports
    _, source, plan = image_trees if which == "image" else text_trees
    assert _counts(load_report(clean.prepared_dir)) == _expected(False)
    report = load_report(planted.prepared_dir)
    assert _counts(report) == _expected(True)
    leak = report["leakage"]
    assert leak["test_examples_in_train"] == 3 and leak["dropped"] == 0
    # what evaluate matches test examples by: the content hashes of exactly the planted test copies
    assert set(leak["test_hashes"]) == {
        dedup.content_hash(which, _decoded(source / n, which)) for n in plan["leaked"]
    }


def test_report_names_the_files_and_calls_out_the_conflicting_labels(image_reports, image_trees):
    report = load_report(image_reports[1].prepared_dir)
    exact = report["duplicates"]["exact"]
    (conflict,) = exact["conflicting_labels"]["examples"]
    assert {(e["example"], e["class"]) for e in conflict} == {
        ("train/red/0002.jpeg", "red"),
        ("test/blue/conflict.png", "blue"),
    }
    assert [e["example"] for e in exact["within"]["train"]["examples"][0]] == [
        "train/blue/0000.png",
        "train/blue/dup_0000.png",
    ] or sorted(e["example"] for e in exact["within"]["train"]["examples"][0]) == [
        "train/blue/0000.png",
        "train/blue/dup_0000.png",
    ]
    near = report["duplicates"]["near"]["across"]["train-test"]["examples"]
    assert [[e["example"] for e in pair] for pair in near] == [
        ["test/blue/leak_near.png", "train/blue/0003.png"]
    ]


def test_class_shares_and_pixel_statistics_match_the_prepared_shards(image_reports):
    prepared = image_reports[1].prepared_dir
    report = load_report(prepared)
    for split in ("train", "validation", "test"):
        images, labels = zip(
            *[
                (x.numpy(), y.numpy())
                for x, y in data.make_dataset(
                    prepared, split, batch_size=1000, training=False, seed=0, cache=False
                )
            ]
        )
        images, labels = np.concatenate(images).astype(np.float64), np.concatenate(labels)
        entry = report["splits"][split]
        assert entry["num_examples"] == len(labels)
        for label, name in enumerate(("blue", "green", "red")):
            assert entry["classes"][name]["examples"] == int((labels == label).sum())
            assert entry["classes"][name]["share"] == pytest.approx((labels == label).mean(), abs=1e-6)
        np.testing.assert_allclose(entry["pixel_mean"], images.mean(axis=(0, 1, 2)), atol=1e-3)
        np.testing.assert_allclose(entry["pixel_std"], images.std(axis=(0, 1, 2)), atol=1e-3)


def test_text_lengths_oov_and_near_empty_agree_with_keras(text_reports):
    import keras
    import tensorflow as tf

    prepared = text_reports[1].prepared_dir
    report = load_report(prepared)
    vocab = data.read_vocab(prepared)
    layer = keras.layers.TextVectorization(vocabulary=vocab, standardize="lower_and_strip_punctuation")
    for split in ("train", "validation", "test"):
        texts = np.concatenate(
            [
                x.numpy()
                for x, _ in data.make_dataset(
                    prepared, split, batch_size=1000, training=False, seed=0, cache=False
                )
            ]
        )
        ids = layer(tf.constant(texts)).numpy()  # 0 = padding, 1 = out of vocabulary
        lengths = (ids != 0).sum(axis=1)
        entry = report["splits"][split]
        assert entry["oov_rate"] == pytest.approx((ids == 1).sum() / lengths.sum(), abs=1e-6)
        assert entry["tokens"]["max"] == lengths.max() and entry["tokens"]["min"] == lengths.min()
    assert (
        report["splits"]["train"]["oov_rate"] == 0.0
    )  # every train token is in the (untruncated) vocabulary
    assert report["splits"]["test"]["oov_rate"] > 0  # the planted "zyzzyva"
    assert report["splits"]["train"]["empty_or_near_empty"]["empty"] == 1
    assert report["splits"]["test"]["empty_or_near_empty"]["near_empty"] == 1
    assert report["splits"]["test"]["empty_or_near_empty"]["examples"] == ["test/neg/short.txt"]
    assert (
        load_report(text_reports[0].prepared_dir)["splits"]["test"]["empty_or_near_empty"]["near_empty"] == 0
    )


def test_pixel_hash_is_not_file_bytes_and_near_pairs_respect_the_threshold():
    rng = np.random.default_rng(1)
    images = rng.integers(0, 200, size=(50, 32, 32, 3)).astype(np.uint8)
    shifted = np.clip(images[:1].astype(int) + 6, 0, 255).astype(np.uint8)
    hashes = dedup.phashes(np.concatenate([images, shifted]))
    assert dedup.near_pairs(hashes, 4) == [(0, 50)]  # the shifted copy, and no random pair
    brute = [
        (i, j)
        for i in range(51)
        for j in range(i + 1, 51)
        if bin(int(hashes[i]) ^ int(hashes[j])).count("1") <= 30
    ]
    assert dedup.near_pairs(hashes, 12) == [
        p for p in brute if bin(int(hashes[p[0]]) ^ int(hashes[p[1]])).count("1") <= 12
    ]


def _cli(capsys, argv, root: Path):
    """The prepare stage's command line in-process, in the project `root` (a `scratch_root`, never this
    checkout): (exit code, stderr lines without the progress bar)."""
    from tfpipe.commands.entry import cli
    from tfpipe.stages import run_prepare

    capsys.readouterr()
    code = cli("prepare", run_prepare, "test", argv, root, configure_logging=False)
    lines = [x.split("\r")[-1] for x in capsys.readouterr().err.splitlines()]
    return code, [x for x in lines if x.strip() and not x.startswith("prepare ")]


def _argv(source: Path, out: Path, *extra: str) -> list:
    return [
        "data.source=directory",
        f"data.path={source}",
        f"data.output_dir={out}",
        "data.examples_per_shard=8",
        *VAL,
        *extra,
    ]


def test_leakage_fail_stops_prepare_in_one_line_and_writes_nothing(
    capsys, scratch_root, image_trees, tmp_path
):
    code, lines = _cli(
        capsys, _argv(image_trees[1], tmp_path / "out", "data.validation.leakage=fail"), scratch_root
    )
    assert code == 2 and len(lines) == 1, lines
    assert lines[0].startswith("prepare: error: data.validation.leakage=fail: 3 test examples duplicate"), (
        lines
    )
    assert not (tmp_path / "out").exists() and not list(tmp_path.glob("out.*"))


@pytest.mark.parametrize(
    "override, key",
    [
        ("data.validation.leakage=drpo", "data.validation.leakage='drpo'"),
        ("data.validation.near_image_hamming=13", "data.validation.near_image_hamming=13"),
        ("data.validation.near_image_hamming=-1", "data.validation.near_image_hamming=-1"),
        ("data.validation.near_image_max_colour_diff=256", "data.validation.near_image_max_colour_diff=256"),
        ("data.validation.report=false data.validation.leakage=drop", "needs data.validation.report=true"),
        ("data.validation.drift=stop", "data.validation.drift='stop'"),
        ("data.validation.max_share_shift=0", "data.validation.max_share_shift=0"),
        ("data.validation.max_oov_increase=1.5", "data.validation.max_oov_increase=1.5"),
    ],
)
def test_bad_policy_or_threshold_is_refused_before_anything_is_read(
    capsys, scratch_root, tmp_path, override, key
):
    code, lines = _cli(
        capsys, _argv(tmp_path / "does-not-exist", tmp_path / "out", *override.split()), scratch_root
    )
    assert code == 2 and len(lines) == 1 and key in lines[0], lines
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("which", ["image", "text"])
def test_leakage_drop_removes_exactly_the_planted_test_copies(which, image_trees, text_trees, tmp_path):
    _, planted, plan = image_trees if which == "image" else text_trees
    extra = ("dataset=imdb",) if which == "text" else ()
    kept = prepare_tree(planted, tmp_path / "warn", *VAL, *extra).prepared_dir
    dropped = prepare_tree(
        planted, tmp_path / "drop", *VAL, *extra, "data.validation.leakage=drop"
    ).prepared_dir
    before, after = _test_hashes(kept, which), _test_hashes(dropped, which)
    modality = "image" if which == "image" else "text"
    planted_hashes = {
        dedup.content_hash(modality, _decoded(planted / name, which)) for name in plan["leaked"]
    }
    assert len(after) == len(before) - 3 and sorted(before) == sorted(after + list(planted_hashes))
    manifest = data.load_manifest(dropped)
    assert manifest["data_report"]["test_examples_dropped"] == 3
    assert manifest["splits"]["test"]["num_examples"] == len(after)
    data.verify_shards(dropped)
    report = load_report(dropped)
    assert report["leakage"]["dropped"] == 3 and report["leakage"]["test_hashes"] == []
    assert sorted(report["leakage"]["dropped_examples"]) == sorted(plan["leaked"])
    assert report["splits"]["test"]["num_examples"] == len(after)


def _decoded(path: Path, which: str) -> bytes:
    if which == "text":
        return path.read_bytes()
    from tfpipe.data.decode import decode_image_file

    return decode_image_file(path, [32, 32], 3, max_pixels=40_000_000)


def _test_hashes(prepared: Path, which: str) -> list:
    modality = "image" if which == "image" else "text"
    batches = data.make_dataset(prepared, "test", batch_size=1000, training=False, seed=0, cache=False)
    values = [x.tobytes() if modality == "image" else x for b, _ in batches for x in b.numpy()]
    return [dedup.content_hash(modality, v) for v in values]


def test_report_off_writes_no_report_and_the_metrics_hold_the_counts(image_trees, tmp_path):
    from tfpipe import config, stages

    cfg = config.compose(
        _argv(image_trees[0], tmp_path / "off", "data.validation.report=false"), config_dir=ROOT / "conf"
    )
    manifest = stages.run_prepare(cfg, tmp_path)
    prepared = tmp_path / "off"
    assert not (prepared / REPORT_FILE).exists() and "data_report" not in data.load_manifest(prepared)
    metrics = json.loads((tmp_path / stages.DATA_METRICS).read_text())
    assert metrics == {
        f"examples_{s}": manifest["splits"][s]["num_examples"] for s in ("train", "validation", "test")
    }


# ----------------------------------------------------------------------------- evaluate: accuracy without the leak


def _colour_model(path: Path) -> Path:
    """A real SavedModel that predicts the dominant channel (the fixtures' class): blue, green, red = 0, 1, 2."""
    import tensorflow as tf

    class Colour(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None, 32, 32, 3], tf.uint8)])
        def serve(self, image):
            means = tf.reduce_mean(tf.cast(image, tf.float32), axis=[1, 2])
            return {"probabilities": tf.nn.softmax(means / 10.0)}

    module = Colour()
    tf.saved_model.save(module, str(path), signatures={"serving_default": module.serve})
    from tfpipe import files

    files.seal(path)  # what export_saved_model does: evaluate loads only sealed models
    return path


def test_evaluate_reports_dedup_accuracy_only_when_test_examples_leak(image_reports, tmp_path):
    from tfpipe import evaluation
    from tfpipe.data.report import leaked_test_hashes

    model = _colour_model(tmp_path / "saved_model")
    clean, planted = image_reports
    assert leaked_test_hashes(clean.prepared_dir) == set()
    result = evaluation.evaluate(
        model, clean.prepared_dir, leaked_hashes=leaked_test_hashes(clean.prepared_dir)
    )
    evaluation.write_metrics(result, tmp_path / "clean.json")
    assert "accuracy_dedup" not in json.loads((tmp_path / "clean.json").read_text())

    leaked = leaked_test_hashes(planted.prepared_dir)
    result = evaluation.evaluate(model, planted.prepared_dir, leaked_hashes=leaked)
    evaluation.write_metrics(result, tmp_path / "planted.json")
    metrics = json.loads((tmp_path / "planted.json").read_text())
    hashes = _test_hashes(planted.prepared_dir, "image")
    keep = np.array([h not in leaked for h in hashes])
    assert metrics["num_examples_dedup"] == keep.sum() == metrics["num_examples"] - 3
    hits = (
        result.predictions == result.labels
    )  # evaluate's order is the order make_dataset reads: as _test_hashes
    assert metrics["accuracy_dedup"] == pytest.approx(hits[keep].mean())
    assert (
        metrics["accuracy_dedup"] > metrics["accuracy"]
    )  # the conflicting copy (red pixels, blue label) is wrong


# ----------------------------------------------------------------------------- DVC: metrics/data.json


@pytest.mark.slow
def test_dvc_repro_writes_the_data_metrics_and_status_is_clean(image_trees, tmp_path):
    from test_pipeline_e2e import copy_project

    project = copy_project(tmp_path / "project")
    shutil.copytree(image_trees[1], project / "data" / "raw" / "cifar10")
    from tfpipe import config

    params = config.compose_yaml(
        ["data.source=directory", "data.examples_per_shard=8", *VAL], config_dir=ROOT / "conf"
    )
    (project / "params.yaml").write_text(params, encoding="utf-8")
    env = _env(project)
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t"]
    for cmd in (
        ["git", "init", "-q", "-b", "main"],
        [*git, "add", "-A"],
        [*git, "commit", "-qm", "init"],
        [sys.executable, "-m", "dvc", "repro", "prepare"],
    ):
        subprocess.run(cmd, cwd=project, env=env, check=True, capture_output=True, timeout=600)
    status = subprocess.run(
        [sys.executable, "-m", "dvc", "status", "prepare"],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert "changed" not in status.stdout and "modified" not in status.stdout, status.stdout
    shown = subprocess.run(
        [sys.executable, "-m", "dvc", "metrics", "show", "--json", "metrics/data.json"],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    metrics = json.loads((project / "metrics" / "data.json").read_text())
    assert metrics == headline(load_report(project / "data" / "prepared" / "cifar10"))
    assert metrics["exact_test_in_train"] == 2 and metrics["near_test_in_train"] == 1
    assert (
        _find(json.loads(shown.stdout), "metrics/data.json") == metrics
    )  # DVC reads it when named (a prepare output, not one of dvc exp show's metric columns)


def _find(tree, key):
    if isinstance(tree, dict):
        if key in tree:
            return tree[key].get("data", tree[key])
        return next((found for v in tree.values() if (found := _find(v, key)) is not None), None)
    return None


def _env(project: Path) -> dict:
    import os

    env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "DVC_"))}
    env.update(PYTHONPATH=str(project / "src"), TF_CPP_MIN_LOG_LEVEL="2", DVC_NO_ANALYTICS="1")
    return env


# ----------------------------------------------------------------------------- MLflow: the run carries the report


@pytest.mark.slow
def test_train_logs_the_report_and_evaluate_the_dedup_accuracy(image_reports, tmp_path, monkeypatch):
    from conftest import stages_in_process
    from mlflow import MlflowClient

    from tfpipe import config

    prepared = image_reports[1].prepared_dir
    cfg = config.compose(
        [
            "data.source=directory",
            f"data.output_dir={prepared}",
            "model.filters=[8,8]",
            "model.dense_units=16",
            "train.batch_size_per_replica=4",
            "train.epochs=1",
            "train.steps_per_epoch=2",
            "tracking.log_model=true",
        ],
        config_dir=ROOT / "conf",
    )
    run_id = stages_in_process(cfg, tmp_path, monkeypatch, "train", "evaluate")
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")
    run = client.get_run(run_id)
    assert {a.path for a in client.list_artifacts(run_id, "data")} == {"data/report.json"}
    assert (
        run.data.tags["data.exact_test_in_train"] == "2" and run.data.tags["data.near_test_in_train"] == "1"
    )
    profiles = [json.loads(d.dataset.profile) for d in run.inputs.dataset_inputs]
    assert all(p["data_report"]["exact_duplicates_within"] == 1 for p in profiles)
    eval_json = json.loads((tmp_path / "metrics" / "eval.json").read_text())
    assert run.data.metrics["test_accuracy_dedup"] == pytest.approx(eval_json["accuracy_dedup"])
    assert eval_json["num_examples_dedup"] == eval_json["num_examples"] - 3


def test_near_images_must_also_share_their_colours():
    """pHash sees luminance only: the same picture tinted (luma kept) is a pHash twin but not a near duplicate."""
    rng = np.random.default_rng(2)
    base = rng.integers(60, 150, size=(1, 32, 32, 3)).astype(float)
    tinted = base + np.array([100.0, -100.0 * 0.299 / 0.587, 0.0])  # same luma, other colours
    brighter = base + 5.0
    images = np.clip(np.concatenate([base, tinted, brighter]), 0, 255).astype(np.uint8)
    pairs = dedup.near_pairs(dedup.phashes(images), 4)
    assert pairs == [(0, 1), (0, 2), (1, 2)]
    assert dedup.same_colours(dedup.thumbnails(images), pairs, 32) == [(0, 2)]


# ----------------------------------------------------------------------------- drift against a reference report


def test_drift_finds_the_planted_class_share_shift_and_nothing_else(image_trees, image_reports, tmp_path):
    clean, _, _ = image_trees
    reference = image_reports[0].prepared_dir / REPORT_FILE
    same = prepare_tree(clean, tmp_path / "same", *VAL, f"data.validation.reference={reference}")
    assert load_report(same.prepared_dir)["drift"]["anomalies"] == []
    skewed = tmp_path / "skewed"
    shutil.copytree(clean, skewed)
    for path in sorted((skewed / "test" / "red").iterdir())[1:]:  # 3 red test images -> 1
        path.unlink()
    out = prepare_tree(skewed, tmp_path / "out", *VAL, f"data.validation.reference={reference}")
    assert load_report(out.prepared_dir)["drift"]["anomalies"] == [
        "test: share of class 'red': reference 0.3333, now 0.1429"
    ]


def test_drift_finds_the_planted_oov_jump(text_trees, text_reports, tmp_path):
    clean, _, _ = text_trees
    reference = text_reports[0].prepared_dir / REPORT_FILE
    jumped = tmp_path / "jumped"
    shutil.copytree(clean, jumped)
    for label in ("neg", "pos"):  # one more review per class: the shares stay at 0.5
        # as long as the generated reviews (14 tokens): the lengths stay too (drift check text_length)
        words = " ".join(f"qz{label}{i}x" for i in range(14))
        (jumped / "test" / label / "oov_0.txt").write_text(words, encoding="utf-8")
    out = prepare_tree(
        jumped, tmp_path / "out", "dataset=imdb", *VAL, f"data.validation.reference={reference}"
    )
    report, old = load_report(out.prepared_dir), load_report(text_reports[0].prepared_dir)
    (line,) = report["drift"]["anomalies"]
    before, after = old["splits"]["test"]["oov_rate"], report["splits"]["test"]["oov_rate"]
    assert line == f"test: oov_rate: reference {before:.4f}, now {after:.4f}" and after - before > 0.02


def test_drift_fail_stops_prepare_in_one_line(capsys, scratch_root, image_trees, image_reports, tmp_path):
    skewed = tmp_path / "skewed"
    shutil.copytree(image_trees[0], skewed)
    for path in sorted((skewed / "test" / "red").iterdir())[1:]:
        path.unlink()
    reference = image_reports[0].prepared_dir / REPORT_FILE
    argv = _argv(
        skewed, tmp_path / "out", f"data.validation.reference={reference}", "data.validation.drift=fail"
    )
    code, lines = _cli(capsys, argv, scratch_root)
    assert code == 2 and len(lines) == 1, lines
    assert lines[0] == (
        "prepare: error: data.validation.drift=fail: test: share of class 'red': reference 0.3333, now 0.1429; "
        "or set data.validation.drift=warn"
    )
    assert not (tmp_path / "out").exists()


def test_a_missing_or_foreign_reference_is_refused_before_anything_is_read(
    capsys, scratch_root, image_reports, tmp_path
):
    missing = tmp_path / "nope.json"
    code, lines = _cli(
        capsys,
        _argv(tmp_path / "no-data", tmp_path / "out", f"data.validation.reference={missing}"),
        scratch_root,
    )
    assert (
        code == 2 and len(lines) == 1 and "data.validation.reference=" in lines[0] and "not found" in lines[0]
    )
    image_report = image_reports[0].prepared_dir / REPORT_FILE
    argv = _argv(
        tmp_path / "no-data", tmp_path / "out", f"data.validation.reference={image_report}", "dataset=imdb"
    )
    code, lines = _cli(capsys, argv, scratch_root)
    assert (
        code == 2 and len(lines) == 1 and "a report of image data, but dataset 'imdb' is text" in lines[0]
    ), lines
    assert not (tmp_path / "out").exists()
