"""Per-split statistics for the data report, accumulated while prepare streams the examples.

Images: per-channel mean/std of the prepared pixels (0..255) and each example's perceptual hash, computed
in batches. Texts: length in characters and in tokens (cut as the vocabulary was: dataset.standardize, then
whitespace), token counts for the out-of-vocabulary rate, empty and near-empty documents, and each example's
near-duplicate key. No TensorFlow here: the standardisation is re-done in Python, and a test checks it agrees
with the vocabulary TextVectorization builds.
"""

from __future__ import annotations

import re
from collections import Counter

import numpy as np

from tfpipe.data import dedup

BATCH = 1024
# Keras' lower_and_strip_punctuation: ASCII lower-casing (tf.strings.lower), then this class removed.
_KERAS_STRIP = re.compile(r"""[!"#$%&()\*\+,-\./:;<=>?@\[\\\]^_`{|}~']""")
_ASCII_LOWER = {c: c + 32 for c in range(ord("A"), ord("Z") + 1)}
_TF_SPACE = re.compile(r"[ \t\n\v\f\r]+")  # tf.strings.split's whitespace
_RE2_BREAK = re.compile(r"<br[\t\n\f\r ]*/?>")
_PUNCTUATION = re.compile(r"""([!"#$%&()*+,\-./:;<=>?@\[\\\]^_`{|}~])""")  # tfpipe.textnorm


def tokens(text: str, standardize: str) -> list:
    """The tokens TextVectorization(standardize=tfpipe.textnorm.standardizer(standardize)) cuts `text` into."""
    text = text.translate(_ASCII_LOWER)
    if standardize == "split_punctuation":
        text = _PUNCTUATION.sub(r" \1 ", _RE2_BREAK.sub(" ", text))
    else:
        text = _KERAS_STRIP.sub("", text)
    return [t for t in _TF_SPACE.split(text) if t]


def _spread(values: list) -> dict:
    if not values:
        return {"min": None, "median": None, "p95": None, "max": None}
    array = np.asarray(values)
    median, p95 = np.percentile(array, [50, 95])
    return {"min": int(array.min()), "median": float(median), "p95": float(p95), "max": int(array.max())}


class ImageStats:
    def __init__(self, splits, shape):
        self.shape = tuple(int(d) for d in shape)
        channels = self.shape[-1]
        self.sums = {s: np.zeros(channels) for s in splits}
        self.squares = {s: np.zeros(channels) for s in splits}
        self.pixels = dict.fromkeys(splits, 0)
        self.hashes: list = []
        self.thumbs: list = []
        self._pending: list = []

    def add(self, split: str, value: bytes, name: str) -> None:
        self._pending.append((split, value))
        if len(self._pending) == BATCH:
            self.flush()

    def flush(self) -> None:
        if not self._pending:
            return
        splits = np.array([s for s, _ in self._pending])
        raw = np.frombuffer(b"".join(v for _, v in self._pending), np.uint8)
        images = raw.reshape(len(self._pending), *self.shape)
        self._pending = []
        self.hashes.extend(dedup.phashes(images).tolist())
        self.thumbs.append(dedup.thumbnails(images))
        flat = images.reshape(len(images), -1, self.shape[-1]).astype(np.float64)
        for split in np.unique(splits):
            chosen = flat[splits == split]
            self.sums[split] += chosen.sum(axis=(0, 1))
            self.squares[split] += np.square(chosen).sum(axis=(0, 1))
            self.pixels[split] += chosen.shape[0] * chosen.shape[1]

    def split_report(self, split: str, vocabulary=None) -> dict:
        n = self.pixels[split]
        if not n:
            return {"pixel_mean": None, "pixel_std": None}
        mean = self.sums[split] / n
        std = np.sqrt(np.maximum(self.squares[split] / n - mean**2, 0.0))
        return {"pixel_mean": [round(float(v), 3) for v in mean], "pixel_std": [round(float(v), 3) for v in std]}


class TextStats:
    def __init__(self, splits, standardize: str, near_empty_tokens: int, listed: int):
        self.standardize = standardize
        self.near_empty_tokens = int(near_empty_tokens)
        self.listed = int(listed)
        self.chars = {s: [] for s in splits}
        self.lengths = {s: [] for s in splits}
        self.counts = {s: Counter() for s in splits}
        self.empty = {s: {"empty": 0, "near_empty": 0, "examples": []} for s in splits}
        self.near_keys: list = []

    def add(self, split: str, value: bytes, name: str) -> None:
        text = dedup.standard_text(value)
        cut = tokens(text, self.standardize)
        self.chars[split].append(len(text))
        self.lengths[split].append(len(cut))
        self.counts[split].update(cut)
        self.near_keys.append(dedup.near_text_key(text))
        if len(cut) <= self.near_empty_tokens:
            entry = self.empty[split]
            entry["empty" if not cut else "near_empty"] += 1
            if len(entry["examples"]) < self.listed:
                entry["examples"].append(name)

    def flush(self) -> None:
        pass

    def split_report(self, split: str, vocabulary=None) -> dict:
        counts = self.counts[split]
        total = sum(counts.values())
        unknown = sum(c for t, c in counts.items() if t not in vocabulary) if vocabulary is not None else None
        return {
            "characters": _spread(self.chars[split]),
            "tokens": _spread(self.lengths[split]),
            "oov_rate": round(unknown / total, 6) if total and unknown is not None else None,
            "empty_or_near_empty": {"max_tokens": self.near_empty_tokens, **self.empty[split]},
        }
