"""tf.train.Example encoding/parsing and sharded TFRecord writing.

An example holds `label` (int64) and either `image` (raw uint8 bytes, HxWxC row-major, the shape is in
the manifest) or `text` (raw UTF-8 bytes).
"""

from __future__ import annotations

import os
from pathlib import Path

import tensorflow as tf

from tfpipe.data.manifest import sha256_file

LABEL_KEY = "label"
SHARD_SUFFIX = ".tfrecord"


def feature_key(modality: str) -> str:
    return "image" if modality == "image" else "text"


def encode_example(key: str, value: bytes, label: int) -> bytes:
    """A serialized tf.train.Example; deterministic bytes for the same input (map keys sorted)."""
    example = tf.train.Example(
        features=tf.train.Features(
            feature={
                key: tf.train.Feature(bytes_list=tf.train.BytesList(value=[value])),
                LABEL_KEY: tf.train.Feature(int64_list=tf.train.Int64List(value=[int(label)])),
            }
        )
    )
    return example.SerializeToString(deterministic=True)


def parse_batch_fn(manifest: dict):
    """A function: serialized Examples [B] -> (features, labels) per the manifest's feature_spec."""
    modality = manifest["modality"]
    key = feature_key(modality)
    description = {
        key: tf.io.FixedLenFeature([], tf.string),
        LABEL_KEY: tf.io.FixedLenFeature([], tf.int64),
    }
    if modality == "image":
        shape = [int(d) for d in manifest["feature_spec"]["image"]["shape"]]

        def parse(serialized):
            parsed = tf.io.parse_example(serialized, description)
            images = tf.io.decode_raw(parsed[key], tf.uint8)
            images = tf.reshape(images, [-1, *shape])
            images = tf.ensure_shape(images, [serialized.shape[0], *shape])  # static batch dim when known
            return images, parsed[LABEL_KEY]

    else:

        def parse(serialized):
            parsed = tf.io.parse_example(serialized, description)
            return parsed[key], parsed[LABEL_KEY]

    return parse


def shard_name(split: str, index: int, total: int) -> str:
    return f"{split}-{index:05d}-of-{total:05d}{SHARD_SUFFIX}"


class ShardedWriter:
    """Writes serialized examples of one split into shards of `per_shard` examples.

    The shard count is only known at the end (skipped files, streamed sources), so shards are written
    under provisional names and renamed to `<split>-NNNNN-of-MMMMM.tfrecord` by `close()`, which returns
    the manifest's shard entries.
    """

    def __init__(self, directory: Path, split: str, per_shard: int):
        self.directory = Path(directory)
        self.split = split
        self.per_shard = int(per_shard)
        self.num_examples = 0
        self._writer: tf.io.TFRecordWriter | None = None
        self._in_shard = 0
        self._parts: list[tuple[Path, int]] = []

    def write(self, serialized: bytes) -> None:
        if self._writer is None:
            path = self.directory / f".{self.split}-{len(self._parts):05d}.part"
            self._writer = tf.io.TFRecordWriter(str(path))
            self._parts.append((path, 0))
        self._writer.write(serialized)
        self._in_shard += 1
        self.num_examples += 1
        if self._in_shard == self.per_shard:
            self._finish_shard()

    def _finish_shard(self) -> None:
        assert self._writer is not None, "a shard is open"  # write() opened it; close() checks
        self._writer.close()
        self._writer = None
        path, _ = self._parts[-1]
        self._parts[-1] = (path, self._in_shard)
        self._in_shard = 0

    def close(self) -> list[dict]:
        if self._writer is not None:
            self._finish_shard()
        shards = []
        total = len(self._parts)
        for index, (part, count) in enumerate(self._parts):
            final = self.directory / shard_name(self.split, index, total)
            os.replace(part, final)
            shards.append(
                {
                    "file": final.name,
                    "num_examples": count,
                    "bytes": final.stat().st_size,
                    "sha256": sha256_file(final),
                }
            )
        return shards

    def abort(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None
