"""The nblr text model (tfpipe.models.nblr) on tiny data: naive Bayes ratios fitted from the train split,
coefficients trained from zero under an L2 penalty, served on raw strings."""

from __future__ import annotations

from pathlib import Path

import keras
import numpy as np
import pytest
import tensorflow as tf

from tfpipe import config, models
from tfpipe.models import text

ROOT = Path(__file__).resolve().parents[1]
VOCAB = ["great", "good", "awful", "bad", "film", "!", "not"]
TEXTS = ["A great film!", "good, good film", "awful film", "bad! not good", "not bad at all", "so great!!"]
LABELS = [1, 1, 0, 0, 1, 1]

pytestmark = pytest.mark.usefixtures("restore_float32_policy")


def _nblr(**overrides):
    args = [
        "dataset=imdb",
        "model=nblr",
        "dataset.sequence_length=6",
        "dataset.standardize=split_punctuation",
    ]
    args += [f"model.{k}={v}" for k, v in overrides.items()]
    cfg = config.compose(args, config_dir=ROOT / "conf")
    return cfg, models.build_model(cfg, num_classes=2, vocab_size=len(VOCAB))


@pytest.mark.slow  # fits and trains a model
def test_nblr_starts_at_even_odds_learns_from_the_ratios_and_serves_raw_strings(tmp_path):
    cfg, model = _nblr(hash_buckets=1000, min_documents=1, l2=0.001, max_features=100)
    vec = models.make_text_vectorizer(VOCAB, 6, "split_punctuation")
    tokens, labels = vec(tf.constant(TEXTS)), tf.constant(LABELS, tf.int64)
    stats = models.fit_to_train_split(model, cfg.model, [(tokens, labels)], num_classes=2)
    assert stats["documents"] == 6 and stats["features_kept"] == stats["features_seen"] > len(VOCAB)
    n, lookup = stats["features_kept"], model.get_layer("feature_index")
    keys = lookup.get_weights()[0]
    assert (np.diff(keys[:n]) > 0).all() and (keys[n:] == np.iinfo(np.int64).max).all()  # sorted, sentinel
    compact = lookup(tf.constant([[keys[0], keys[n - 1], 0, keys[n - 1] + 1]], tf.int64)).numpy()
    np.testing.assert_array_equal(compact, [[1, n, 0, 0]])  # kept: 1..n; padding and unknown ids: 0
    r = model.get_layer("nb_ratios").get_weights()[0]
    counts, _ = text.class_document_counts(model, [(tokens, labels)], 2, int(keys[n - 1]) + 1)
    expected = text.nb_log_ratios(counts)  # nbsvm's ratios over the whole feature space
    np.testing.assert_allclose(r[1 : n + 1], expected[:, keys[:n]].T, rtol=1e-5)
    assert (r[0] == 0).all() and (r[stats["features_kept"] + 1 :] == 0).all()  # padding, unused rows
    np.testing.assert_allclose(r[:, 0], -r[:, 1], atol=1e-6)  # two classes: opposite ratios
    np.testing.assert_allclose(model.predict(tokens, verbose=0), 0.5)  # u starts at 0: even odds
    assert len(model.losses) == 1  # the L2 penalty on the coefficient table, which the train step adds
    model.compile(optimizer=keras.optimizers.Adam(0.1), loss="sparse_categorical_crossentropy")
    model.fit(tokens, labels, batch_size=6, epochs=5, verbose=0)
    probs = model.predict(tokens, verbose=0)
    assert (probs.argmax(axis=1) == np.array(LABELS)).all()
    export_dir = tmp_path / "nblr"
    models.export_saved_model(model, export_dir, modality="text", vectorizer=vec, class_names=["neg", "pos"])
    serve = tf.saved_model.load(str(export_dir)).signatures["serving_default"]
    served = serve(text=tf.constant(TEXTS + ["", "AWFUL!"]))["probabilities"].numpy()
    assert served.dtype == np.float32 and served.shape == (8, 2)
    np.testing.assert_allclose(served[:6], probs, atol=1e-6)
    assert served[0, 1] > 0.5 > served[7, 1]


def test_nblr_config_is_checked():
    from tfpipe.errors import ConfigError

    with pytest.raises(ConfigError, match="model.l2"):
        _nblr(l2=-1.0)
    with pytest.raises(ConfigError, match="model.max_features"):
        _nblr(max_features=0)
    with pytest.raises(ConfigError, match="model.hash_buckets=2147480000: .* below 2.31"):
        _nblr(hash_buckets=2147480000)
    cfg, model = _nblr(ngrams=1, l2=0.0, max_features=2)  # unigrams only, no penalty, 2 features kept
    assert model.name == "nblr" and not model.losses
    vec = models.make_text_vectorizer(VOCAB, 6, "split_punctuation")
    tokens, labels = vec(tf.constant(TEXTS)), tf.constant(LABELS, tf.int64)
    cfg.model.min_documents = 1
    stats = models.fit_to_train_split(model, cfg.model, [(tokens, labels)], num_classes=2)
    keys = model.get_layer("feature_index").get_weights()[0]
    assert stats["features_kept"] == 2 and 2 + VOCAB.index("film") in keys  # "film": in 3 of 6 reviews


@pytest.mark.slow
def test_imdb_nblr_preset_trains_through_the_train_stage_and_serves_raw_strings(text_dir, tmp_path):
    from conftest import prepare_tree

    from tfpipe import training

    prepared = prepare_tree(text_dir, tmp_path / "prepared", "experiment=imdb_nblr")
    cfg = config.compose(
        [
            "experiment=imdb_nblr",
            "model.min_documents=2",
            "train.batch_size_per_replica=4",
            "train.epochs=2",
            "train.steps_per_epoch=2",
            "train.tensorboard=false",
        ],
        config_dir=ROOT / "conf",
    )
    assert cfg.model.name == "nblr" and cfg.dataset.standardize == "split_punctuation"
    result = training.train(cfg, prepared_dir=prepared.prepared_dir, output_dir=tmp_path / "out")
    assert result.steps == 4 and np.isfinite(result.history[-1]["epoch_train_loss"])
    serve = tf.saved_model.load(str(result.saved_model_dir)).signatures["serving_default"]
    probs = serve(text=tf.constant(["a wonderful, great film!", "awful and boring..."]))[
        "probabilities"
    ].numpy()
    assert probs.dtype == np.float32 and probs[0, 1] > 0.5 > probs[1, 1]
