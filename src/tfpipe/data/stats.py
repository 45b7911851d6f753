"""Per-split statistics for the data report, accumulated while prepare streams the examples.

Images: per-channel mean/std of the prepared pixels (0..255) and each example's perceptual hash, computed
in batches; the width, height, aspect ratio and mode of the source images as the one decode read them (the
header, before conversion and resize: no second read), counted per distinct size and mode. Texts: length
in characters and in tokens (cut as the vocabulary was: dataset.standardize, then whitespace), token
counts for the out-of-vocabulary rate, empty and near-empty documents, and each example's near-duplicate
key. No TensorFlow here: the standardisation is re-done in Python, and a test checks it agrees with the
vocabulary TextVectorization builds.
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Any

import numpy as np

from tfpipe.data import dedup

BATCH = 1024
# The out-of-vocabulary rate counts the tokens of the first OOV_DOCUMENTS documents of each split (the
# stream order is seeded-shuffled, so a random sample): counting every token of IMDb doubled the report's cost.
OOV_DOCUMENTS = 5000
# Keras' lower_and_strip_punctuation: ASCII lower-casing (tf.strings.lower), then this class removed.
_KERAS_STRIP = rb"""!"#$%&()*+,-./:;<=>?@[\]^_`{|}~'"""
# Both on the UTF-8 bytes with one bytes.translate (ASCII bytes never occur inside a multi-byte character),
# and bytes.split() cuts at exactly tf.strings.split's ASCII whitespace: far cheaper than regexes on str.
_ASCII_LOWER = bytes.maketrans(bytes(range(65, 91)), bytes(range(97, 123)))
_RE2_BREAK = re.compile(rb"<br[\t\n\f\r ]*/?>")
_PUNCTUATION = re.compile(rb"""([!"#$%&()*+,\-./:;<=>?@\[\\\]^_`{|}~])""")  # tfpipe.textnorm


def tokens(raw: bytes, standardize: str) -> list:
    """The tokens (UTF-8 bytes) TextVectorization(standardize=tfpipe.textnorm.standardizer(standardize))
    cuts the stored text `raw` into."""
    if standardize == "split_punctuation":
        return _PUNCTUATION.sub(rb" \1 ", _RE2_BREAK.sub(b" ", raw.translate(_ASCII_LOWER))).split()
    return raw.translate(_ASCII_LOWER, _KERAS_STRIP).split()


def _spread(values, digits=None) -> dict:
    """min/median/p95/max: integers' ends as integers and percentiles to 0.1, or everything to `digits`."""
    if len(values) == 0:
        return {"min": None, "median": None, "p95": None, "max": None}
    array = np.asarray(values)
    median, p95 = np.percentile(array, [50, 95])
    end = int if digits is None else (lambda v: round(float(v), digits))
    at = 1 if digits is None else digits
    return {
        "min": end(array.min()),
        "median": round(float(median), at),
        "p95": round(float(p95), at),
        "max": end(array.max()),
    }


def source_images(sizes: Counter, modes: Counter, read_from: str) -> dict:
    """The source images' spread of width, height and aspect ratio (width / height) from {(w, h): count},
    and the count per mode, most frequent first."""
    counts = np.fromiter(sizes.values(), dtype=np.int64, count=len(sizes))
    width, height = (np.repeat(np.array([k[i] for k in sizes], dtype=np.int64), counts) for i in (0, 1))
    return {
        "read_from": read_from,
        "width": _spread(width),
        "height": _spread(height),
        "aspect_ratio": _spread(width / np.maximum(height, 1), 3),
        "modes": dict(sorted(modes.items(), key=lambda kv: (-kv[1], kv[0]))),
    }


class ImageStats:
    def __init__(self, splits, shape, read_from: str):
        self.shape = tuple(int(d) for d in shape)
        self.read_from = read_from  # where the source images' sizes come from, said in the report
        self.sizes: dict[str, Counter[tuple[int, int]]] = {s: Counter() for s in splits}  # (width, height)
        self.modes: dict[str, Counter[str]] = {s: Counter() for s in splits}
        # per split and channel, how many pixels hold each value 0..255: exact mean/std, integer work only
        self.histograms = {s: np.zeros((self.shape[-1], 256), dtype=np.int64) for s in splits}
        self.hashes: list = []
        self.thumbs: list = []
        self._pending: list = []

    def add(self, split: str, value: bytes, name: str, text=None, header=None) -> None:
        if header is not None:
            width, height, mode = header
            self.sizes[split][width, height] += 1
            self.modes[split][mode] += 1
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
        for split in np.unique(splits).tolist():
            chosen = images[splits == split]
            for c in range(self.shape[-1]):
                self.histograms[split][c] += np.bincount(chosen[..., c].ravel(), minlength=256)

    def split_report(self, split: str, vocabulary=None) -> dict:
        histogram = self.histograms[split].astype(np.float64)
        n = histogram[0].sum()
        source = {"source_images": source_images(self.sizes[split], self.modes[split], self.read_from)}
        if not n:
            return {"pixel_mean": None, "pixel_std": None, **source}
        values = np.arange(256, dtype=np.float64)
        mean = histogram @ values / n
        std = np.sqrt(np.maximum(histogram @ values**2 / n - mean**2, 0.0))
        return {
            "pixel_mean": [round(float(v), 3) for v in mean],
            "pixel_std": [round(float(v), 3) for v in std],
            **source,
        }


class TextStats:
    def __init__(self, splits, standardize: str, near_empty_tokens: int, listed: int):
        self.standardize = standardize
        self.near_empty_tokens = int(near_empty_tokens)
        self.listed = int(listed)
        self.chars: dict[str, list[int]] = {s: [] for s in splits}
        self.lengths: dict[str, list[int]] = {s: [] for s in splits}
        self.counts: dict[str, Counter[bytes]] = {s: Counter() for s in splits}
        self.empty: dict[str, dict[str, Any]] = {
            s: {"empty": 0, "near_empty": 0, "examples": []} for s in splits
        }
        self.near_keys: list = []

    def add(self, split: str, value: bytes, name: str, text: str, header=None) -> None:
        cut = tokens(value, self.standardize)
        self.chars[split].append(len(text))
        self.lengths[split].append(len(cut))
        if len(self.lengths[split]) <= OOV_DOCUMENTS:
            self.counts[split].update(cut)
        self.near_keys.append(
            dedup.digest(b" ".join(cut))
        )  # near: the same tokens, whatever case and spacing
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
        known = {t.encode("utf-8") for t in vocabulary} if vocabulary is not None else None
        unknown = sum(c for t, c in counts.items() if t not in known) if known is not None else None
        return {
            "characters": _spread(self.chars[split]),
            "tokens": _spread(self.lengths[split]),
            "oov_rate": round(unknown / total, 6) if total and unknown is not None else None,
            "oov_documents": min(len(self.lengths[split]), OOV_DOCUMENTS),
            "empty_or_near_empty": {"max_tokens": self.near_empty_tokens, **self.empty[split]},
        }
