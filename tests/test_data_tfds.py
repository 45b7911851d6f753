"""The tfds source, under `tfds.testing.mock_data` (no download), and its fast offline failure."""

from __future__ import annotations

import time

import pytest
import tensorflow as tf
import tensorflow_datasets as tfds

from tfpipe import data
from tfpipe.data import DataError, sources, tfds_source  # noqa: F401


def _cfg(make_config, tmp_path, *overrides: str):
    return make_config(
        "data.source=tfds",
        f"data.tfds_data_dir={tmp_path / 'tfds'}",
        f"data.output_dir={tmp_path / 'out'}",
        "data.examples_per_shard=8",
        *overrides,
    )


def test_cifar10_from_tfds(tmp_path, make_config):
    cfg = _cfg(make_config, tmp_path, "data.validation_fraction=0.25")
    with tfds.testing.mock_data(num_examples=24):
        manifest = data.prepare(cfg, progress=False)
    assert manifest["source"]["type"] == "tfds" and manifest["source"]["tfds_name"] == "cifar10"
    assert manifest["source"]["version"] == str(tfds.builder("cifar10").version)
    assert manifest["num_classes"] == 10 and len(manifest["class_names"]) == 10
    assert manifest["feature_spec"]["image"] == {"dtype": "uint8", "shape": [32, 32, 3], "encoding": "raw"}
    counts = {split: info["num_examples"] for split, info in manifest["splits"].items()}
    assert counts["train"] + counts["validation"] == 24 and counts["test"] == 24
    assert 0 < counts["validation"] < 24
    data.verify_shards(tmp_path / "out")

    images, labels = next(
        iter(data.make_dataset(tmp_path / "out", "train", batch_size=4, training=True, seed=0))
    )
    assert images.shape == (4, 32, 32, 3) and images.dtype == tf.uint8
    assert labels.dtype == tf.int64 and all(0 <= int(v) < 10 for v in labels)

    with tfds.testing.mock_data(num_examples=24):  # deterministic: the same carve and the same bytes
        again = data.prepare(_cfg(make_config, tmp_path, "data.validation_fraction=0.25"), progress=False)
    assert again["splits"] == manifest["splits"]


def test_cifar10_from_tfds_resized_with_max_examples(tmp_path, make_config):
    cfg = _cfg(
        make_config,
        tmp_path,
        "data.max_examples_per_split=5",
        "data.validation_fraction=0.5",
        "dataset.image_size=[16,20]",
        "dataset.channels=1",
    )
    with tfds.testing.mock_data(num_examples=40):
        manifest = data.prepare(cfg, progress=False)
    counts = {split: info["num_examples"] for split, info in manifest["splits"].items()}
    assert counts == {"train": 5, "validation": 5, "test": 5}
    images, _ = next(iter(data.make_dataset(tmp_path / "out", "test", batch_size=5, training=False, seed=0)))
    assert images.shape == (5, 16, 20, 1)


def test_imdb_reviews_from_tfds(tmp_path, make_config):
    cfg = _cfg(make_config, tmp_path, "dataset=imdb")
    with tfds.testing.mock_data(num_examples=30):
        manifest = data.prepare(cfg, progress=False)
    assert manifest["source"]["tfds_name"] == "imdb_reviews"
    assert manifest["source"]["version"] == str(tfds.builder("imdb_reviews").version)
    assert manifest["class_names"] == ["neg", "pos"]
    assert manifest["feature_spec"]["text"] == {"dtype": "string", "shape": []}
    counts = {split: info["num_examples"] for split, info in manifest["splits"].items()}
    assert counts["train"] + counts["validation"] == 30 and counts["test"] == 30
    vocab = data.read_vocab(tmp_path / "out")
    assert manifest["vocab_size"] == len(vocab) > 0
    texts, labels = next(
        iter(data.make_dataset(tmp_path / "out", "test", batch_size=4, training=False, seed=0))
    )
    assert texts.dtype == tf.string and labels.dtype == tf.int64
    words = {w for t in texts.numpy() for w in t.decode("utf-8").split()}
    assert words and words & set(vocab)


def test_unknown_tfds_name_is_a_data_error(tmp_path, make_config):
    cfg = _cfg(make_config, tmp_path, "dataset.tfds_name=no_such_dataset_xyz")
    with pytest.raises(DataError, match="no_such_dataset_xyz"):
        data.prepare(cfg, progress=False)
    assert not (tmp_path / "out").exists()


def test_offline_tfds_with_nothing_cached_fails_fast(tmp_path, make_config):
    host, port = tfds_source.TFDS_DOWNLOAD_HOSTS["cifar10"]
    if tfds_source.is_reachable(host, port, timeout=2.0):
        pytest.skip(f"{host} is reachable: this test is about the offline case")
    (tmp_path / "tfds").mkdir()
    cfg = _cfg(make_config, tmp_path)
    start = time.monotonic()
    with pytest.raises(DataError) as info:
        data.prepare(cfg, progress=False)
    assert time.monotonic() - start < 10
    message = str(info.value)
    assert "data.source=directory" in message and "data.path=" in message and "cifar10" in message
    assert "\n" not in message
    assert not (tmp_path / "out").exists()
