"""The tf.data input pipelines over prepared TFRecord shards.

`make_dataset` reads one split once (evaluation, validation, input examples). `make_train_stream` is
what training iterates: every remaining epoch of the train split back to back, each epoch shuffled with
its own seed (`seed`, epoch) so the order of epoch e never depends on how many epochs this process has
already run. A run resumed at (epoch, batch) therefore reads exactly the batches the uninterrupted run
would have read from there on, which is what makes a resumed run bit-identical (with op determinism).

Text: with `vectorize` (the TextVectorization layer) both return token ids, vectorised once (`_vectorised_once`).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable, Optional

import tensorflow as tf

from tfpipe.choices import SHARD_POLICIES  # noqa: F401 - how input pipelines (workers) split a split
from tfpipe.data.manifest import load_manifest
from tfpipe.data.tfrecords import parse_batch_fn
from tfpipe.errors import DataError

_VECTORIZE_BATCH = 1024  # texts per vectorizer call in `_vectorised_once`


def make_dataset(
    prepared_dir: str | os.PathLike,
    split: str,
    *,
    batch_size: int,
    training: bool,
    seed: int,
    shuffle_buffer: int = 10000,
    cache: bool = True,
    input_context: tf.distribute.InputContext | None = None,
    shard_policy: str = "auto",
    vectorize: Optional[Callable] = None,
) -> tf.data.Dataset:
    """`(features, labels)` batches of one prepared split.

    features: uint8 [B, H, W, C] images (H, W, C static, from the manifest) or tf.string [B] texts;
    labels: int64 [B]. Shards are read with a parallel, deterministic interleave; records are cached
    (serialized, when `cache`), shuffled with `seed` when `training` (a new, seed-determined order every
    epoch), batched (`drop_remainder=training`), parsed in parallel and prefetched.

    With `input_context` (from `strategy.distribute_datasets_from_function`), `batch_size` is the GLOBAL
    batch: each input pipeline reads its own part of the data (`shard_policy`: `file` whole shards, `data`
    every n-th record, `auto` whole shards when there are at least as many shards as pipelines, else every
    n-th record) and batches `get_per_replica_batch_size(batch_size)`.

    `vectorize` (texts [B] -> token ids [B, L]): features are token ids instead (see `_decoder`).
    """
    manifest, records, batch_size = _records(
        prepared_dir, split, batch_size, cache, input_context, shard_policy
    )
    records, decode = _decoder(manifest, records, vectorize, cache)
    if training:
        records = records.shuffle(int(shuffle_buffer), seed=seed, reshuffle_each_iteration=True)
    ds = records.batch(batch_size, drop_remainder=training)
    ds = ds.map(decode, num_parallel_calls=tf.data.AUTOTUNE)
    return ds.prefetch(tf.data.AUTOTUNE)


def make_train_stream(
    prepared_dir: str | os.PathLike,
    *,
    batch_size: int,
    seed: int,
    start_epoch: int,
    epochs: int,
    batches_per_epoch: int,
    skip_batches: int = 0,
    shuffle_buffer: int = 10000,
    cache: bool = True,
    input_context: tf.distribute.InputContext | None = None,
    shard_policy: str = "auto",
    split: str = "train",
    vectorize: Optional[Callable] = None,
) -> tf.data.Dataset:
    """Epochs `start_epoch .. epochs-1` of `split`, `batches_per_epoch` full global batches (steps) each,
    back to back, minus the first `skip_batches` of `start_epoch` (those a resumed run already trained on).

    Epoch e is shuffled with the seed pair (seed, e) and no reshuffling, so it is the same order in an
    uninterrupted run and in one resumed at any point. Batching, sharding and caching as `make_dataset`;
    the record cache is shared by all epochs (the first epoch fills it); `vectorize` as `make_dataset`.
    """
    manifest, records, batch_size = _records(
        prepared_dir, split, batch_size, cache, input_context, shard_policy
    )
    records, decode = _decoder(manifest, records, vectorize, cache)
    # The counts are in global batches (steps); a pipeline feeding several replicas (mirrored on one host)
    # yields one per-replica batch per replica and step.
    per_step = 1
    if input_context is not None:
        per_step = max(input_context.num_replicas_in_sync // max(input_context.num_input_pipelines, 1), 1)
    batches_per_epoch, skip_batches = int(batches_per_epoch) * per_step, int(skip_batches) * per_step
    buffer = int(shuffle_buffer)

    def one_epoch(epoch: int) -> tf.data.Dataset:
        shuffled = records.shuffle(buffer, seed=_epoch_seed(seed, epoch), reshuffle_each_iteration=False)
        return shuffled.batch(batch_size, drop_remainder=True).take(int(batches_per_epoch))

    # The epochs are chained at the top level, not built in a `flat_map` function: a shuffle inside a
    # tf.data function is a stateful op there (DummySeedGenerator), which makes TensorFlow's op-determinism
    # rewrite run the whole pipeline sequentially (parse map made serial, prefetch off).
    epochs_left = [one_epoch(e) for e in range(int(start_epoch), int(epochs))] or [one_epoch(0).take(0)]
    ds = _back_to_back(epochs_left)
    if skip_batches:
        ds = ds.skip(int(skip_batches))  # before parsing: skipped batches are read but not decoded
    ds = ds.map(decode, num_parallel_calls=tf.data.AUTOTUNE)
    return ds.prefetch(tf.data.AUTOTUNE)


def _decoder(manifest, records, vectorize, cache):
    """(what is shuffled and batched, the map from one batch of it to (features, labels))."""
    parse = parse_batch_fn(manifest)
    if vectorize is None:
        return records, parse
    if cache and tf.executing_eagerly():
        return _vectorised_once(records, parse, vectorize)
    # No cache (nothing is held in memory), or traced (parameter_server workers): vectorised every epoch.
    return records, lambda serialized: _apply(vectorize, parse(serialized))


def _apply(vectorize, parsed):
    texts, labels = parsed
    return vectorize(texts), labels


def _vectorised_once(records, parse, vectorize):
    """Vectorise this pipeline's records once, here, eagerly (fed by a tf.data pass that only parses); the
    dataset then shuffles and batches record indices and gathers their token ids, held in memory as int32.

    Design: not `.map(vectorize).cache()` (vectorising inside tf.data in the first epoch, then reading cached
    ids): the vocabulary lookup (LookupTableFindV2) is a stateful op, and one anywhere in a dataset's graph,
    even before its cache, makes TensorFlow's op-determinism rewrite (train.deterministic) serialise every
    parallel map and turn off every prefetch of that graph, for every epoch. Nor ids written at prepare: that
    changes the prepared format and ties dataset.sequence_length to prepare. Records keep their order and a
    shuffle's order depends only on its seed and the element count, so the batches hold the same examples,
    with the same ids, as when the vectorizer ran every epoch."""
    ids, labels = [], []
    batches = records.batch(_VECTORIZE_BATCH).map(parse, num_parallel_calls=tf.data.AUTOTUNE)
    for texts, y in batches.prefetch(tf.data.AUTOTUNE):
        ids.append(vectorize(texts))
        labels.append(y)
    if not ids:  # an empty split (or part of one)
        ids, labels = [vectorize(tf.constant([], tf.string))], [tf.constant([], tf.int64)]
    dtype = ids[0].dtype
    ids = tf.concat([tf.cast(x, tf.int32) for x in ids], 0)
    labels = tf.concat(labels, 0)

    def decode(index):
        return tf.cast(tf.gather(ids, index), dtype), tf.gather(labels, index)

    return tf.data.Dataset.range(int(labels.shape[0])), decode


def _epoch_seed(seed: int, epoch: int) -> int:
    """Distinct and reproducible per (seed, epoch): seed * 1_000_003 + epoch in int64 arithmetic (wrapping)."""
    return (int(seed) * 1_000_003 + int(epoch) + 2**63) % 2**64 - 2**63


def _back_to_back(datasets: list) -> tf.data.Dataset:
    """`datasets` concatenated in order, as a balanced tree (nesting depth log2(n), not n)."""
    while len(datasets) > 1:
        pairs = [datasets[i : i + 2] for i in range(0, len(datasets), 2)]
        datasets = [pair[0].concatenate(pair[1]) if len(pair) == 2 else pair[0] for pair in pairs]
    return datasets[0]


def shard_by_file(num_files: int, num_pipelines: int, shard_policy: str = "auto") -> bool:
    """Whether each input pipeline reads whole shard files (else every n-th record); see make_dataset."""
    if shard_policy not in SHARD_POLICIES:
        raise DataError(f"train.shard_policy={shard_policy!r}: expected one of {', '.join(SHARD_POLICIES)}")
    if num_pipelines <= 1:
        return False
    if shard_policy == "file":
        if num_files < num_pipelines:
            raise DataError(
                f"train.shard_policy=file: {num_files} shard file(s) cannot give each of {num_pipelines} input "
                f"pipelines its own; lower data.examples_per_shard and prepare again, or use shard_policy=auto|data"
            )
        return True
    return shard_policy == "auto" and num_files >= num_pipelines


def _records(prepared_dir, split, batch_size, cache, input_context, shard_policy):
    """(manifest, serialized records of this input pipeline's part of the split, per-pipeline batch size)."""
    prepared_dir = Path(prepared_dir)
    manifest = load_manifest(prepared_dir)
    splits = manifest["splits"]
    if split not in splits:
        raise DataError(f"{prepared_dir}: no split {split!r} in the manifest; available: {', '.join(splits)}")
    if batch_size <= 0:
        raise DataError(f"batch_size={batch_size!r}: must be > 0")
    files = [str(prepared_dir / shard["file"]) for shard in splits[split]["shards"]]
    for path in files:
        if not os.path.isfile(path):
            raise DataError(f"{path}: shard of split {split!r} is missing; run the prepare stage again")

    num_pipelines, pipeline_id = 1, 0
    if input_context is not None:
        batch_size = input_context.get_per_replica_batch_size(batch_size)
        num_pipelines, pipeline_id = input_context.num_input_pipelines, input_context.input_pipeline_id
    by_file = shard_by_file(len(files), num_pipelines, shard_policy)

    ds = tf.data.Dataset.from_tensor_slices(tf.constant(files, dtype=tf.string, shape=[len(files)]))
    if by_file:
        ds = ds.shard(num_pipelines, pipeline_id)
    ds = ds.interleave(
        tf.data.TFRecordDataset,
        cycle_length=max(1, min(len(files), 16)),
        num_parallel_calls=tf.data.AUTOTUNE,
        deterministic=True,
    )
    if num_pipelines > 1 and not by_file:
        ds = ds.shard(num_pipelines, pipeline_id)
    if cache:
        ds = ds.cache()
    return manifest, ds, batch_size
