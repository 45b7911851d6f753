"""Determinism: the switch is recorded, and two runs of the same tiny config give bit-identical weights."""

from __future__ import annotations

import numpy as np
import pytest

from tfpipe import determinism

TINY = (
    "experiment=smoke",
    "model.filters=[8,8]",
    "model.dense_units=16",
    "train.batch_size_per_replica=8",
    "train.epochs=2",
    "train.log_every_steps=1",
)


def test_weights_hash_changes_with_any_bit_and_not_otherwise():
    a = [np.arange(6, dtype=np.float32).reshape(2, 3), np.ones(3, np.float32)]
    b = [x.copy() for x in a]
    assert determinism.weights_sha256(a) == determinism.weights_sha256(b)
    b[1][2] = np.nextafter(np.float32(1.0), np.float32(2.0))  # one ulp
    assert determinism.weights_sha256(a) != determinism.weights_sha256(b)
    assert determinism.weights_sha256([a[0].reshape(3, 2), a[1]]) != determinism.weights_sha256(
        a
    )  # shape counts


def test_setup_seeds_everything_and_reports_it():
    import random

    import tensorflow as tf

    settings = determinism.setup(7, True)
    first = (random.random(), np.random.rand(), float(tf.random.uniform(())))
    determinism.setup(7, True)
    assert (random.random(), np.random.rand(), float(tf.random.uniform(()))) == first
    assert settings["deterministic"] is True and settings["seed"] == 7 and settings["op_determinism"] is True
    assert determinism.as_tags(settings)["determinism.seed"] == 7


def test_deterministic_is_a_validated_config_field(make_config):
    from tfpipe.errors import ConfigError

    assert make_config().train.deterministic is True
    assert make_config("train.deterministic=false").train.deterministic is False
    with pytest.raises(ConfigError, match="train.deterministic"):
        make_config("train.deterministic=maybe")


@pytest.mark.slow
def test_two_runs_of_the_same_config_give_bit_identical_weights_and_metrics(
    prepared_image, make_config, tmp_path
):
    from tfpipe import training

    _, prepared = prepared_image
    cfg = make_config(*TINY)
    results = [training.train(cfg, prepared_dir=prepared, output_dir=tmp_path / f"run{i}") for i in range(2)]
    a, b = results
    assert a.weights_sha256 and len(a.weights_sha256) == 64
    assert a.weights_sha256 == b.weights_sha256
    assert a.final_metrics == b.final_metrics
    strip = lambda h: [
        {k: v for k, v in row.items() if "seconds" not in k and "per_sec" not in k} for row in h
    ]
    assert strip(a.history) == strip(b.history)
    assert a.determinism["deterministic"] is True and a.determinism["seed"] == cfg.train.seed
    # a different seed trains other weights: the hash is not a constant
    other = training.train(
        make_config(*TINY, "train.seed=1"), prepared_dir=prepared, output_dir=tmp_path / "seed1"
    )
    assert other.weights_sha256 != a.weights_sha256


@pytest.mark.slow
def test_text_runs_give_the_same_weights_with_texts_vectorised_once_or_every_epoch(
    prepared_text, make_config, tmp_path
):
    """Issue 17 item 4: train.cache=true vectorises each text once (token ids held in memory), cache=false
    vectorises every epoch's batches in tf.data: same batches, so bit-identical weights and metrics."""
    from tfpipe import training

    tiny = ("dataset=imdb", "dataset.sequence_length=32", "train.batch_size_per_replica=6", "train.epochs=2")
    runs = [
        training.train(
            make_config(*tiny, f"train.cache={cache}"),
            prepared_dir=prepared_text.prepared_dir,
            output_dir=tmp_path / str(cache),
        )
        for cache in ("true", "false")
    ]
    once, every_epoch = runs
    assert once.weights_sha256 == every_epoch.weights_sha256
    assert once.final_metrics == every_epoch.final_metrics
