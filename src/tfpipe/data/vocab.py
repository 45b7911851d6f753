"""vocab.txt: the train split's vocabulary with TextVectorization's standardisation, most frequent first."""

from __future__ import annotations

import os
from pathlib import Path

from tfpipe import textnorm
from tfpipe.data.manifest import load_manifest
from tfpipe.errors import DataError

ADAPT_BATCH = 1024


def build_vocab(shard_paths: list, output: Path, max_tokens: int, standardize: str = textnorm.DEFAULT) -> int:
    """Adapt `keras.layers.TextVectorization(max_tokens)` (text standardised as `standardize`, see
    tfpipe.textnorm) over the texts in `shard_paths` (streamed, batched)
    and write its vocabulary without special tokens, one per line. Returns the number of tokens written."""
    import keras
    import tensorflow as tf

    description = {"text": tf.io.FixedLenFeature([], tf.string)}
    texts = (
        tf.data.TFRecordDataset([str(p) for p in shard_paths])
        .batch(ADAPT_BATCH)
        .map(lambda s: tf.io.parse_example(s, description)["text"], num_parallel_calls=tf.data.AUTOTUNE)
        .prefetch(tf.data.AUTOTUNE)
    )
    layer = keras.layers.TextVectorization(
        max_tokens=int(max_tokens), standardize=textnorm.standardizer(standardize)
    )
    layer.adapt(texts)
    tokens = layer.get_vocabulary(include_special_tokens=False)
    # A token never holds "\n" after whitespace splitting, so one line per token is unambiguous.
    with open(output, "w", encoding="utf-8", newline="\n") as fh:
        for token in tokens:
            fh.write(f"{token}\n")
    return len(tokens)


def read_vocab(prepared_dir: str | os.PathLike) -> list:
    manifest = load_manifest(prepared_dir)
    name = manifest.get("vocab_file")
    if not name:
        raise DataError(f"{prepared_dir}: dataset {manifest.get('dataset')!r} has no vocabulary (not text)")
    path = Path(prepared_dir) / name
    if not path.is_file():
        raise DataError(f"{path}: vocabulary file is missing; run the prepare stage again")
    # Split on "\n" only: str.splitlines() would also split tokens holding U+0085 or U+2028,
    # which TextVectorization keeps inside tokens (real IMDb reviews have them).
    text = path.read_text(encoding="utf-8")
    return text[:-1].split("\n") if text.endswith("\n") else text.split("\n") if text else []
