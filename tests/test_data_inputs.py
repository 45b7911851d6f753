"""make_dataset: shapes, dtypes, determinism, and per-input-pipeline sharding."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

from tfpipe import data
from tfpipe.data import DataError

ROOT = Path(__file__).resolve().parents[1]


def _labels_and_keys(ds):
    """Per example: (label, a key identifying the example's content)."""
    out = []
    for x, y in ds:
        for feature, label in zip(x.numpy(), y.numpy()):
            key = feature if isinstance(feature, bytes) else feature.tobytes()
            out.append((int(label), key))
    return out


def test_training_batches_have_static_shapes_and_dtypes(prepared_image):
    _, prepared_dir = prepared_image
    ds = data.make_dataset(prepared_dir, "train", batch_size=4, training=True, seed=0)
    images_spec, labels_spec = ds.element_spec
    assert images_spec.shape.as_list() == [4, 32, 32, 3] and images_spec.dtype == tf.uint8
    assert labels_spec.shape.as_list() == [4] and labels_spec.dtype == tf.int64
    batches = list(ds)
    assert len(batches) == 21 // 4  # drop_remainder when training
    assert all(x.shape == (4, 32, 32, 3) for x, _ in batches)


def test_evaluation_reads_every_example_once_in_order(prepared_image):
    _, prepared_dir = prepared_image
    manifest = data.load_manifest(prepared_dir)
    ds = data.make_dataset(prepared_dir, "test", batch_size=4, training=False, seed=0)
    images_spec, _ = ds.element_spec
    assert images_spec.shape.as_list() == [None, 32, 32, 3]
    first = _labels_and_keys(ds)
    assert len(first) == manifest["splits"]["test"]["num_examples"] == 9  # the last batch is kept
    assert _labels_and_keys(ds) == first  # no shuffling when not training
    assert (
        _labels_and_keys(
            data.make_dataset(prepared_dir, "test", batch_size=2, training=False, seed=5, cache=False)
        )
        == first
    )


def test_text_batches_are_strings(prepared_text):
    _, prepared_dir = prepared_text
    ds = data.make_dataset(prepared_dir, "validation", batch_size=3, training=False, seed=0)
    texts_spec, labels_spec = ds.element_spec
    assert texts_spec.dtype == tf.string and texts_spec.shape.as_list() == [None]
    assert labels_spec.dtype == tf.int64
    texts, labels = next(iter(ds))
    assert texts.shape == (3,) and all(t.decode("utf-8") for t in texts.numpy())
    assert set(labels.numpy().tolist()) <= {0, 1}


def test_shuffle_is_seeded_and_reshuffles_each_epoch(prepared_text):
    _, prepared_dir = prepared_text

    def epochs(seed, n=2):
        ds = data.make_dataset(
            prepared_dir, "train", batch_size=1, training=True, seed=seed, shuffle_buffer=100
        )
        return [_labels_and_keys(ds) for _ in range(n)]

    a1, a2 = epochs(7)
    b1, b2 = epochs(7)
    c1, _ = epochs(8)
    assert (a1, a2) == (b1, b2)  # same seed: same orders, epoch by epoch
    assert a1 != a2  # a new order each epoch
    assert sorted(a1) == sorted(a2)  # of the same examples
    assert a1 != c1
    unshuffled = _labels_and_keys(
        data.make_dataset(prepared_dir, "train", batch_size=1, training=False, seed=7)
    )
    assert sorted(unshuffled) == sorted(a1) and unshuffled != a1


@pytest.mark.parametrize("split, by_file", [("train", True), ("validation", False)])
def test_input_context_shards_across_pipelines(prepared_text, split, by_file):
    _, prepared_dir = prepared_text
    manifest = data.load_manifest(prepared_dir)
    assert (len(manifest["splits"][split]["shards"]) >= 2) == by_file  # 5 train shards, 1 validation shard
    everything = _labels_and_keys(
        data.make_dataset(prepared_dir, split, batch_size=8, training=False, seed=0)
    )
    parts = []
    for pipeline_id in range(2):
        ctx = tf.distribute.InputContext(
            num_input_pipelines=2, input_pipeline_id=pipeline_id, num_replicas_in_sync=2
        )
        ds = data.make_dataset(prepared_dir, split, batch_size=4, training=False, seed=0, input_context=ctx)
        sizes = [int(y.shape[0]) for _, y in ds]
        assert max(sizes) == 2  # the global batch of 4 split over 2 replicas
        parts.append(_labels_and_keys(ds))
    assert parts[0] and parts[1]
    assert not set(parts[0]) & set(parts[1])
    assert sorted(parts[0] + parts[1]) == sorted(everything)

    ctx = tf.distribute.InputContext(num_input_pipelines=2, input_pipeline_id=0, num_replicas_in_sync=2)
    ds = data.make_dataset(prepared_dir, split, batch_size=4, training=True, seed=0, input_context=ctx)
    assert ds.element_spec[1].shape.as_list() == [2]


def test_unknown_split_and_bad_batch_size(prepared_image):
    _, prepared_dir = prepared_image
    with pytest.raises(DataError, match="no split 'dev'"):
        data.make_dataset(prepared_dir, "dev", batch_size=4, training=False, seed=0)
    with pytest.raises(DataError, match="batch_size"):
        data.make_dataset(prepared_dir, "test", batch_size=0, training=False, seed=0)


@pytest.mark.parametrize("policy", ["file", "data"])
def test_shard_policy_splits_the_train_split_without_overlap(prepared_text, policy):
    """train.shard_policy: file gives each pipeline whole shards, data every 2nd record; never an example twice."""
    _, prepared_dir = prepared_text
    everything = _labels_and_keys(
        data.make_dataset(prepared_dir, "train", batch_size=8, training=False, seed=0)
    )
    parts = []
    for pipeline_id in range(2):
        ctx = tf.distribute.InputContext(
            num_input_pipelines=2, input_pipeline_id=pipeline_id, num_replicas_in_sync=2
        )
        parts.append(
            _labels_and_keys(
                data.make_dataset(
                    prepared_dir,
                    "train",
                    batch_size=4,
                    training=False,
                    seed=0,
                    input_context=ctx,
                    shard_policy=policy,
                )
            )
        )
    assert not set(parts[0]) & set(parts[1]) and sorted(parts[0] + parts[1]) == sorted(everything)
    from tfpipe.data.inputs import shard_by_file

    assert shard_by_file(5, 2, policy) == (policy == "file")


def test_file_shard_policy_with_too_few_shards_is_a_clear_error(prepared_text):
    _, prepared_dir = prepared_text  # validation has 1 shard
    ctx = tf.distribute.InputContext(num_input_pipelines=2, input_pipeline_id=0, num_replicas_in_sync=2)
    with pytest.raises(DataError, match="train.shard_policy=file: 1 shard file"):
        data.make_dataset(
            prepared_dir,
            "validation",
            batch_size=4,
            training=False,
            seed=0,
            input_context=ctx,
            shard_policy="file",
        )


# One pass over the train stream under op determinism (what train.deterministic=true turns on), as training
# builds it; "text" passes the vectorizer of text runs (the texts vectorised once, before the stream).
DETERMINISTIC_STREAM = """
import sys, tensorflow as tf
from tfpipe import data
tf.config.experimental.enable_op_determinism()
vectorize = None
if sys.argv[2] == "text":
    from tfpipe.models import make_text_vectorizer
    vectorize = make_text_vectorizer(data.read_vocab(sys.argv[1]), 16)
ds = data.make_train_stream(
    sys.argv[1], batch_size=4, seed=0, start_epoch=0, epochs=2, batches_per_epoch=4, vectorize=vectorize
)
print(sum(1 for _ in ds.prefetch(tf.data.AUTOTUNE)))
"""


def _deterministic_stream_stderr(prepared_dir, modality: str) -> str:
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT / "src"),
        "CUDA_VISIBLE_DEVICES": "",
        "TF_CPP_MIN_LOG_LEVEL": "0",  # the E0000 line is hidden at 2
        "TF_CPP_VMODULE": "make_deterministic=1",  # "Rewriting node ..." for each node the rewrite serialises
    }
    proc = subprocess.run(
        [sys.executable, "-c", DETERMINISTIC_STREAM, str(prepared_dir), modality],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0 and proc.stdout.split() == ["8"], proc.stderr[-3000:]
    return proc.stderr


@pytest.mark.slow
def test_the_train_stream_keeps_its_parallel_map_and_prefetch_under_op_determinism(prepared_image):
    """Issue 17 item 5: the epochs' shuffles were built inside a `flat_map` function, where tf.data makes each a
    stateful DummySeedGenerator op; TensorFlow's op-determinism rewrite (grappler make_deterministic) then made
    the parse map sequential and prefetch a no-op, and logged on every train run `E0000 ... NodeDef mentions
    attribute use_unbounded_threadpool which is not in the op definition` (its ParallelMapDatasetV2 -> MapDataset
    conversion keeps that attribute)."""
    stderr = _deterministic_stream_stderr(prepared_image.prepared_dir, "image")
    assert "use_unbounded_threadpool" not in stderr and "Rewriting node" not in stderr, stderr[-3000:]


@pytest.mark.slow
def test_the_text_train_stream_keeps_its_parallel_map_and_prefetch_under_op_determinism(prepared_text):
    """Issue 17 item 4: the texts are vectorised once, outside tf.data, so no vocabulary lookup (a stateful
    LookupTableFindV2, which made the rewrite serialise the whole text pipeline) is in the stream's graph."""
    stderr = _deterministic_stream_stderr(prepared_text.prepared_dir, "text")
    assert "use_unbounded_threadpool" not in stderr and "Rewriting node" not in stderr, stderr[-3000:]


def _batches(ds) -> list:
    return [(x.numpy(), y.numpy()) for x, y in ds]


@pytest.mark.parametrize("resume", [False, True], ids=["from_start", "resumed"])
def test_text_vectorised_once_gives_the_batches_of_vectorising_every_epoch(prepared_text, resume):
    """The token ids held in memory (cache=true) give bit-identical batches, in the same order, to the vectorizer
    run on every epoch's batches (cache=false), from the start and resumed mid-epoch; validation too."""
    from tfpipe.models import make_text_vectorizer

    prepared_dir = prepared_text.prepared_dir
    vectorize = make_text_vectorizer(data.read_vocab(prepared_dir), 16)
    start = dict(start_epoch=1, skip_batches=3) if resume else dict(start_epoch=0)
    streams = [
        data.make_train_stream(
            prepared_dir,
            batch_size=4,
            seed=3,
            epochs=3,
            batches_per_epoch=9,
            cache=cache,
            vectorize=vectorize,
            **start,
        )
        for cache in (True, False)
    ]
    once, every_epoch = (_batches(ds) for ds in streams)
    assert (
        len(once) == (15 if resume else 27) and once[0][0].dtype == np.int64 and once[0][0].shape == (4, 16)
    )
    for (x1, y1), (x2, y2) in zip(once, every_epoch, strict=True):
        np.testing.assert_array_equal(x1, x2)
        np.testing.assert_array_equal(y1, y2)
    val = [
        _batches(
            data.make_dataset(
                prepared_dir, "validation", batch_size=3, training=False, seed=0, cache=c, vectorize=vectorize
            )
        )
        for c in (True, False)
    ]
    assert [b[1].tolist() for b in val[0]] == [b[1].tolist() for b in val[1]]
    assert all((a[0] == b[0]).all() for a, b in zip(*val, strict=True))
