"""Per-channel pixel statistics of the train split, computed by prepare and stored in the manifest
(`normalization`): the models normalise with them, so no dataset's constants live in model code."""

from __future__ import annotations

import numpy as np

BATCH = 1024  # images per bincount pass


class ChannelMoments:
    """Exact per-channel mean and standard deviation (on the [0, 1] scale) of uint8 images, from a histogram
    of the 256 pixel values per channel: integer counting only, so the result does not depend on the order."""

    def __init__(self, shape):
        self.shape = tuple(int(d) for d in shape)
        self.histogram = np.zeros((self.shape[-1], 256), dtype=np.int64)
        self._pending: list = []

    def add(self, value: bytes) -> None:
        self._pending.append(value)
        if len(self._pending) == BATCH:
            self.flush()

    def flush(self) -> None:
        if not self._pending:
            return
        pixels = np.frombuffer(b"".join(self._pending), np.uint8).reshape(-1, self.shape[-1])
        self._pending = []
        for c in range(self.shape[-1]):
            self.histogram[c] += np.bincount(pixels[:, c], minlength=256)

    def result(self) -> dict:
        self.flush()
        return moments(self.histogram)


def moments(histogram: np.ndarray) -> dict:
    """{"mean": [...], "std": [...]} per channel on the [0, 1] scale from a [channels, 256] value histogram."""
    counts = histogram.astype(np.float64)
    n = counts[0].sum()
    values = np.arange(256, dtype=np.float64) / 255.0
    mean = counts @ values / n
    std = np.sqrt(np.maximum(counts @ values**2 / n - mean**2, 0.0))
    return {"mean": [float(v) for v in mean], "std": [float(v) for v in std]}
