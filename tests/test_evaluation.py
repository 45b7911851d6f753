"""tfpipe.evaluation: hand-checkable metrics, the SavedModel scored on prepared data, the reports."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import numpy as np
import pytest

from tfpipe import evaluation
from tfpipe.errors import DataError

POS_WORDS = "wonderful|great|excellent|loved|brilliant|superb|moving|delightful"  # conftest's positive words


# ----------------------------------------------------------------------------- score(): pure numpy


def test_always_class_zero():
    labels = np.array([0, 0, 1, 2, 2, 2])
    probs = np.tile([0.5, 0.3, 0.2], (6, 1))
    r = evaluation.score(labels, probs, ["a", "b", "c"])
    assert r.num_examples == 6
    assert r.accuracy == pytest.approx(2 / 6)
    assert r.loss == pytest.approx(-(2 * math.log(0.5) + math.log(0.3) + 3 * math.log(0.2)) / 6)
    np.testing.assert_array_equal(r.confusion, [[2, 0, 0], [1, 0, 0], [3, 0, 0]])
    assert r.precision == pytest.approx([2 / 6, 0, 0]) and r.recall == pytest.approx([1, 0, 0])
    assert r.f1[0] == pytest.approx(2 * (1 / 3) / (1 + 1 / 3))
    assert r.macro_f1 == pytest.approx(r.f1[0] / 3)
    assert r.support == [2, 1, 3]
    assert r.roc_auc is None  # multi-class
    assert set(r.scalar_metrics()) == {
        "accuracy",
        "loss",
        "macro_precision",
        "macro_recall",
        "macro_f1",
        "num_examples",
    }


def test_loss_is_clipped():
    r = evaluation.score([1], [[1.0, 0.0]], ["a", "b"])
    assert r.loss == pytest.approx(-math.log(1e-7))


def test_binary_auc_by_rank_statistic():
    labels = np.array([0, 0, 1, 1, 0, 1])
    perfect = np.array([0.1, 0.2, 0.8, 0.9, 0.3, 0.7])
    assert evaluation.binary_roc_auc(labels, perfect) == 1.0
    assert evaluation.binary_roc_auc(labels, 1 - perfect) == 0.0
    assert evaluation.binary_roc_auc(labels, np.full(6, 0.5)) == 0.5  # all tied
    assert evaluation.binary_roc_auc(labels, np.array([0.1, 0.4, 0.35, 0.8, 0.2, 0.4])) == pytest.approx(
        # positives 0.35, 0.8, 0.4 vs negatives 0.1, 0.4, 0.2: pairs won 2 + 3 + (2 + 0.5 tie) = 7.5 of 9
        7.5 / 9
    )
    assert evaluation.binary_roc_auc(np.zeros(3), np.arange(3)) is None
    r = evaluation.score(labels, np.stack([1 - perfect, perfect], axis=1), ["neg", "pos"])
    assert r.roc_auc == 1.0 and r.accuracy == 1.0 and "roc_auc" in r.scalar_metrics()


def test_auc_is_the_share_of_correctly_ordered_pairs():
    """Expected value counted pair by pair (positive above negative: 1, tie: 1/2), not with the code's library."""
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 2, 300)
    scores = np.round(rng.random(300) * 0.6 + labels * 0.3, 2)  # overlapping, with ties
    pos, neg = scores[labels == 1], scores[labels == 0]
    pairs = [(1.0 if p > q else 0.5 if p == q else 0.0) for p in pos for q in neg]
    assert evaluation.binary_roc_auc(labels, scores) == pytest.approx(sum(pairs) / len(pairs))


def test_score_refuses_mismatched_shapes():
    with pytest.raises(DataError, match="expected"):
        evaluation.score([0, 1], np.ones((2, 3)) / 3, ["a", "b"])


# ----------------------------------------------------------------------------- evaluate() on prepared data


def _export(path: Path, fn, spec) -> Path:
    import tensorflow as tf

    module = tf.Module()
    module.serve = tf.function(fn, input_signature=[spec])
    tf.saved_model.save(
        module, str(path), signatures={"serving_default": module.serve.get_concrete_function()}
    )
    from tfpipe import files

    files.seal(path)  # what export_saved_model does: evaluate loads only sealed models
    return path


@pytest.fixture(scope="module")
def image_models(tmp_path_factory, prepared_image):
    import tensorflow as tf

    h, w = prepared_image.cfg.dataset.image_size
    spec = tf.TensorSpec([None, h, w, 3], tf.uint8, name="image")
    root = tmp_path_factory.mktemp("eval_models")

    def constant(image):
        batch = tf.shape(image)[0]
        return {"probabilities": tf.tile(tf.constant([[0.6, 0.3, 0.1]]), [batch, 1])}

    def dominant_colour(image):  # the conftest images: class k has +150 on channel k
        means = tf.reduce_mean(tf.cast(image, tf.float32), axis=[1, 2]) / 255.0
        return {"probabilities": tf.nn.softmax(10.0 * means)}

    return {
        "constant": _export(root / "constant", constant, spec),
        "perfect": _export(root / "perfect", dominant_colour, spec),
    }


def test_evaluate_constant_model_on_images(prepared_image, image_models):
    from tfpipe import data

    manifest = data.load_manifest(prepared_image.prepared_dir)
    r = evaluation.evaluate(image_models["constant"], prepared_image.prepared_dir, batch_size=4)
    n = manifest["splits"]["test"]["num_examples"]
    assert r.class_names == manifest["class_names"]
    assert r.num_examples == n == int(r.confusion.sum())
    share0 = r.support[0] / n
    assert r.accuracy == pytest.approx(share0)
    assert r.confusion[:, 1:].sum() == 0  # everything predicted as class 0
    expected_loss = -sum(s * math.log(p) for s, p in zip(r.support, (0.6, 0.3, 0.1))) / n
    assert r.loss == pytest.approx(expected_loss, rel=1e-5)


def test_evaluate_perfect_model_on_images(prepared_image, image_models):
    r = evaluation.evaluate(image_models["perfect"], prepared_image.prepared_dir)
    assert r.accuracy == 1.0 and r.macro_f1 == 1.0
    np.testing.assert_array_equal(r.confusion, np.diag(r.support))


def test_evaluate_text_model_auc(prepared_text, tmp_path):
    import tensorflow as tf

    def sentiment(text):
        positive = tf.strings.regex_full_match(tf.strings.lower(text), f".*({POS_WORDS}).*")
        p = tf.where(positive, 0.9, 0.2)
        return {"probabilities": tf.stack([1.0 - p, p], axis=1)}

    model = _export(tmp_path / "text", sentiment, tf.TensorSpec([None], tf.string, name="text"))
    r = evaluation.evaluate(model, prepared_text.prepared_dir, batch_size=8)
    assert r.class_names == ["neg", "pos"]
    assert r.num_examples == 20
    assert r.accuracy == 1.0 and r.roc_auc == 1.0
    assert r.loss == pytest.approx(-(10 * math.log(0.8) + 10 * math.log(0.9)) / 20, rel=1e-5)


def test_evaluate_refuses_missing_saved_model(prepared_image, tmp_path):
    with pytest.raises(DataError, match="no SavedModel"):
        evaluation.evaluate(tmp_path / "missing", prepared_image.prepared_dir)


# ----------------------------------------------------------------------------- reports


def test_write_reports(tmp_path):
    labels = np.array([0, 1, 1, 0, 1])
    probs = np.array([[0.9, 0.1], [0.2, 0.8], [0.6, 0.4], [0.7, 0.3], [0.1, 0.9]])
    r = evaluation.score(labels, probs, ["neg, bad", "pos"])  # a comma in a class name must survive the CSV
    paths = {
        "metrics_path": tmp_path / "metrics" / "eval.json",
        "confusion_csv_path": tmp_path / "plots" / "confusion_matrix.csv",
        "confusion_png_path": tmp_path / "plots" / "confusion_matrix.png",
        "per_class_path": tmp_path / "metrics" / "eval_per_class.json",
    }
    evaluation.write_reports(r, **paths)

    metrics = json.loads(paths["metrics_path"].read_text())
    assert metrics["accuracy"] == pytest.approx(0.8) and metrics["num_examples"] == 5
    assert metrics["roc_auc"] == 1.0
    per_class = json.loads(paths["per_class_path"].read_text())  # its own file: rows for `dvc plots`
    assert [row["class"] for row in per_class] == ["neg, bad", "pos"]
    assert per_class[1] == pytest.approx(
        {"class": "pos", "precision": 1.0, "recall": 2 / 3, "f1": 0.8, "support": 3}
    )
    assert all(isinstance(v, (int, float)) for v in metrics.values())  # flat: one `dvc exp show` column each

    with paths["confusion_csv_path"].open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert [(row["actual"], row["predicted"]) for row in rows] == [
        ("neg, bad", "neg, bad"),
        ("pos", "pos"),
        ("pos", "neg, bad"),
        ("neg, bad", "neg, bad"),
        ("pos", "pos"),
    ]

    png = paths["confusion_png_path"].read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 1000
    leftovers = [p.name for p in tmp_path.rglob("*") if ".tmp" in p.name]
    assert leftovers == []
