"""Duplicates for the data report: content hashes, a 64-bit DCT perceptual hash, near pairs, clusters.

Exact duplicates share the hash of the decoded pixels (as prepared) or of the standardised text (UTF-8
decoded, NFC, line ends unified, outer whitespace stripped), never of the file bytes: the same picture saved
as PNG and as JPEG-at-the-same-pixels, or the same review with a trailing newline, is one example.
Near duplicates: images whose pHashes differ in at most `near_image_hamming` bits (and whose colour
thumbnails agree); texts cut into the same tokens as the vocabulary cuts them (case, whitespace and, with
the default standardisation, punctuation ignored). No TensorFlow here.
"""

from __future__ import annotations

import hashlib
import unicodedata
from typing import Any

import numpy as np

PHASH_SIDE = 32  # the grayscale image the DCT runs on (as imagehash.phash)
PHASH_LOW = 8  # the 8x8 lowest frequencies -> 64 bits
_LUMA = np.array([0.299, 0.587, 0.114], dtype=np.float32)


def standard_text(value: bytes) -> str:
    text = value.decode("utf-8").replace("\r\n", "\n")
    return unicodedata.normalize("NFC", text).strip()


def digest(data: bytes) -> str:
    return hashlib.blake2b(data, digest_size=16).hexdigest()


def content_hash(modality: str, value: bytes) -> str:
    """The exact-duplicate key of one stored example (raw pixels, or the raw UTF-8 text)."""
    if modality == "image":
        return digest(value)
    return digest(standard_text(value).encode("utf-8"))


# ----------------------------------------------------------------------------- perceptual hash
# Our own pHash (as imagehash.phash: 32x32 grayscale, 2-D DCT, 8x8 low frequencies > their median) with
# scipy.fft, because imagehash would add Pillow and PyWavelets to the runtime dependencies.


def _pool(n: int, side: int) -> np.ndarray:
    """[side, n] weights taking n pixels to side: area means when n >= side, the nearest pixel otherwise."""
    weights = np.zeros((side, n), dtype=np.float32)
    if n >= side:
        edges = np.linspace(0, n, side + 1).astype(int)
        for k in range(side):
            weights[k, edges[k] : edges[k + 1]] = 1.0 / (edges[k + 1] - edges[k])
    else:
        weights[np.arange(side), (np.arange(side) * n) // side] = 1.0
    return weights


def _shrink(planes: np.ndarray, side: int) -> np.ndarray:
    """[..., H, W] float32 -> [..., side, side] (two matrix products: far cheaper than strided means)."""
    h, w = planes.shape[-2:]
    if (h, w) == (side, side):
        return planes
    return _pool(h, side) @ planes @ _pool(w, side).T


def phashes(images: np.ndarray) -> np.ndarray:
    """64-bit perceptual hashes (uint64 [N]) of uint8 images [N, H, W, C]."""
    from scipy.fft import dctn

    pixels = images.astype(np.float32)
    gray = pixels @ _LUMA if images.shape[-1] == 3 else pixels[..., 0]
    low = dctn(_shrink(gray, PHASH_SIDE), type=2, axes=(1, 2), norm="ortho")[:, :PHASH_LOW, :PHASH_LOW]
    low = low.reshape(len(images), -1)
    bits = low > np.median(low, axis=1, keepdims=True)
    return np.packbits(bits, axis=1).view(">u8").ravel().astype(np.uint64)


def thumbnails(images: np.ndarray, side: int = 8) -> np.ndarray:
    """uint8 [N, side, side, C] colour thumbnails (area means): pHash sees only luminance, these the colours."""
    planes = _shrink(images.astype(np.float32).transpose(0, 3, 1, 2), side)
    return np.rint(planes.transpose(0, 2, 3, 1)).astype(np.uint8)


def same_colours(thumbs: np.ndarray, pairs: list, max_diff: float) -> list:
    """The pairs whose thumbnails differ by at most `max_diff` (mean absolute difference, 0..255)."""
    if not pairs:
        return []
    i, j = np.asarray(pairs).T
    diff = (
        np.abs(thumbs[i].astype(np.int16) - thumbs[j].astype(np.int16)).reshape(len(pairs), -1).mean(axis=1)
    )
    return [pair for pair, d in zip(pairs, diff.tolist()) if d <= max_diff]


def near_pairs(hashes: np.ndarray, threshold: int) -> list:
    """Index pairs (i < j) whose hashes differ in at most `threshold` bits. Pigeonhole: cut the 64 bits into
    threshold + 1 bands; two hashes that close agree on a whole band, so only band-mates are compared."""
    hashes = np.asarray(hashes, dtype=np.uint64)
    edges = np.linspace(0, 64, threshold + 2).astype(int)
    found = set()
    for lo, hi in zip(edges[:-1], edges[1:]):
        band = (hashes >> np.uint64(lo)) & np.uint64((1 << (hi - lo)) - 1)
        order = np.argsort(band, kind="stable")
        starts = np.flatnonzero(np.r_[True, band[order][1:] != band[order][:-1]])
        sizes = np.diff(np.r_[starts, len(order)])
        for start, size in zip(starts[sizes > 1], sizes[sizes > 1]):
            found.update(_close_in_group(hashes, np.sort(order[start : start + size]), threshold))
    return sorted(found)


def _close_in_group(hashes: np.ndarray, members: np.ndarray, threshold: int):
    i, j = np.triu_indices(len(members), 1)
    distance = np.bitwise_count(hashes[members[i]] ^ hashes[members[j]])
    keep = distance <= threshold
    return zip(members[i[keep]].tolist(), members[j[keep]].tolist())


# ----------------------------------------------------------------------------- clusters


def exact_clusters(keys: list) -> list:
    """Index lists (2+ members, in index order) of equal keys."""
    groups: dict = {}
    for index, key in enumerate(keys):
        groups.setdefault(key, []).append(index)
    return [members for members in groups.values() if len(members) > 1]


def linked_clusters(n: int, pairs) -> list:
    """Connected components (2+ members) of the graph of `pairs` over n examples (union-find)."""
    parent = list(range(n))

    def root(i):
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for i, j in pairs:
        a, b = root(i), root(j)
        if a != b:
            parent[max(a, b)] = min(a, b)
    groups: dict = {}
    for i in range(n):
        groups.setdefault(root(i), []).append(i)
    return [members for members in groups.values() if len(members) > 1]


# ----------------------------------------------------------------------------- counting

ACROSS = (("train", "validation"), ("train", "test"), ("validation", "test"))


def _units(members: list, keys: list, near: bool) -> list:
    """The members that count as distinct: all of them (exact), one per exact key (near)."""
    if not near:
        return members
    first: dict = {}
    for m in members:
        first.setdefault(keys[m], m)
    return list(first.values())


def _within(clusters, ex, near: bool, listed: int) -> dict:
    out: dict[str, dict[str, Any]] = {
        s: {"groups": 0, "duplicates": 0, "examples": []} for s in ex.split_names
    }
    for members in clusters:
        for split, entry in out.items():
            units = _units([m for m in members if ex.splits[m] == split], ex.keys, near)
            if len(units) > 1:
                entry["groups"] += 1
                entry["duplicates"] += len(units) - 1
                if len(entry["examples"]) < listed:
                    entry["examples"].append([ex.describe(m) for m in units])
    return out


def _across(clusters, ex, listed: int) -> tuple:
    """Per (a, b): b-split examples with a twin in split a (near: a twin of other content); test ids leaked."""
    out: dict[str, dict[str, Any]] = {f"{a}-{b}": {f"examples_in_{b}": 0, "examples": []} for a, b in ACROSS}
    leaked = set()
    for members in clusters:
        for a, b in ACROSS:
            left = [m for m in members if ex.splits[m] == a]
            if not left:
                continue
            left_keys = {ex.keys[m] for m in left}
            right = [m for m in members if ex.splits[m] == b and (not ex.near or ex.keys[m] not in left_keys)]
            entry = out[f"{a}-{b}"]
            entry[f"examples_in_{b}"] += len(right)
            for m in right[: max(0, listed - len(entry["examples"]))]:
                entry["examples"].append([ex.describe(m), ex.describe(left[0])])
            if (a, b) == ("train", "test"):
                leaked.update(right)
    return out, leaked


def _conflicts(clusters, ex, listed: int) -> dict:
    out: dict[str, Any] = {"groups": 0, "examples": []}
    for members in clusters:
        units = _units(members, ex.keys, ex.near)
        if len({ex.labels[m] for m in units}) > 1:
            out["groups"] += 1
            if len(out["examples"]) < listed:
                out["examples"].append([ex.describe(m) for m in units])
    return out


def summarize(clusters: list, ex, listed: int) -> tuple:
    """(the report section of one kind of duplicate, the test ids that duplicate a train example)."""
    across, leaked = _across(clusters, ex, listed)
    section = {
        "clusters": len(clusters),
        "within": _within(clusters, ex, ex.near, listed),
        "across": across,
        "conflicting_labels": _conflicts(clusters, ex, listed),
    }
    return section, leaked
