"""The tf.data input pipeline over prepared TFRecord shards."""

from __future__ import annotations

import os
from pathlib import Path

import tensorflow as tf

from tfpipe.data.manifest import load_manifest
from tfpipe.data.tfrecords import parse_batch_fn
from tfpipe.errors import DataError


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
) -> tf.data.Dataset:
    """`(features, labels)` batches of one prepared split.

    features: uint8 [B, H, W, C] images (H, W, C static, from the manifest) or tf.string [B] texts;
    labels: int64 [B]. Shards are read with a parallel, deterministic interleave; records are cached
    (serialized, when `cache`), shuffled with `seed` when `training` (a new, seed-determined order every
    epoch), batched (`drop_remainder=training`), parsed in parallel and prefetched.

    With `input_context` (from `strategy.distribute_datasets_from_function`), `batch_size` is the GLOBAL
    batch: each input pipeline reads its own part of the data (whole shards when there are at least as many
    shards as pipelines, else every n-th record) and batches `get_per_replica_batch_size(batch_size)`.
    """
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
    shard_by_file = num_pipelines > 1 and len(files) >= num_pipelines

    ds = tf.data.Dataset.from_tensor_slices(tf.constant(files, dtype=tf.string, shape=[len(files)]))
    if shard_by_file:
        ds = ds.shard(num_pipelines, pipeline_id)
    ds = ds.interleave(
        tf.data.TFRecordDataset,
        cycle_length=max(1, min(len(files), 16)),
        num_parallel_calls=tf.data.AUTOTUNE,
        deterministic=True,
    )
    if num_pipelines > 1 and not shard_by_file:
        ds = ds.shard(num_pipelines, pipeline_id)
    if cache:
        ds = ds.cache()
    if training:
        ds = ds.shuffle(int(shuffle_buffer), seed=seed, reshuffle_each_iteration=True)
    ds = ds.batch(batch_size, drop_remainder=training)
    ds = ds.map(parse_batch_fn(manifest), num_parallel_calls=tf.data.AUTOTUNE)
    return ds.prefetch(tf.data.AUTOTUNE)
