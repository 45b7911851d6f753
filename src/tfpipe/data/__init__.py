"""Data: sources (tfds, class-per-folder directories) -> TFRecord shards + manifest.json (+ vocab.txt),
and the tf.data input pipeline that reads them back.

Public API:
    prepare(cfg, *, progress=True) -> dict            # writes cfg.data.output_dir, returns the manifest
    load_manifest(prepared_dir) -> dict
    verify_shards(prepared_dir, manifest=None) -> None
    manifest_digest(prepared_dir) -> str
    is_up_to_date(cfg) -> bool
    make_dataset(prepared_dir, split, *, batch_size, training, seed, shuffle_buffer=10000, cache=True,
                 input_context=None) -> tf.data.Dataset
    DataError

The manifest functions import no TensorFlow; `prepare` and `make_dataset` import it on first use.
"""

from tfpipe.data.manifest import (
    MANIFEST_FILE,
    VOCAB_FILE,
    is_up_to_date,
    load_manifest,
    manifest_digest,
    verify_shards,
)
from tfpipe.errors import DataError

__all__ = [
    "DataError",
    "MANIFEST_FILE",
    "VOCAB_FILE",
    "is_up_to_date",
    "load_manifest",
    "make_dataset",
    "manifest_digest",
    "prepare",
    "read_vocab",
    "verify_shards",
]


def prepare(cfg, *, progress: bool = True) -> dict:
    """Read `cfg.data.source`, write TFRecord shards, manifest.json (and vocab.txt) to `cfg.data.output_dir`."""
    from tfpipe.data.build import prepare as _prepare

    return _prepare(cfg, progress=progress)


def make_dataset(prepared_dir, split, **kwargs):
    """`(features, labels)` batches of one prepared split; see `tfpipe.data.inputs.make_dataset`."""
    from tfpipe.data.inputs import make_dataset as _make_dataset

    return _make_dataset(prepared_dir, split, **kwargs)


def make_train_stream(prepared_dir, **kwargs):
    """Every remaining training epoch, back to back, resumable at any batch; see `tfpipe.data.inputs`."""
    from tfpipe.data.inputs import make_train_stream as _make_train_stream

    return _make_train_stream(prepared_dir, **kwargs)


def read_vocab(prepared_dir) -> list:
    """The tokens of a prepared text dataset's vocab.txt (most frequent first, no special tokens)."""
    from tfpipe.data.vocab import read_vocab as _read_vocab

    return _read_vocab(prepared_dir)
