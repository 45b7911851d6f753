"""The TFDS source: a TensorFlow Datasets builder's splits as (split, value bytes, label) examples, with a
validation split carved deterministically from train when none is named, and a one-line DataError where the
download cannot work (no network: the directory source is the way)."""

from __future__ import annotations

import socket
import threading
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Optional
from urllib.parse import urlparse
from urllib.request import getproxies

from tfpipe.data.sources import BadFiles, Source, Triple, stable_fraction
from tfpipe.errors import DataError, one_line

REACHABILITY_TIMEOUT = 3.0
# Where TFDS fetches each builder's source files; anything else is checked against the TFDS GCS bucket.
TFDS_DOWNLOAD_HOSTS = {
    "cifar10": ("www.cs.toronto.edu", 443),
    "cifar100": ("www.cs.toronto.edu", 443),
    "imdb_reviews": ("ai.stanford.edu", 80),
}
TFDS_DEFAULT_HOST = ("storage.googleapis.com", 443)


def _download_is_patched(builder) -> bool:
    """True under `tfds.testing.mock_data` (or any other patch of download_and_prepare): nothing is fetched."""
    fn = getattr(type(builder), "download_and_prepare", None)
    module = getattr(fn, "__module__", "") or ""
    return not module.startswith("tensorflow_datasets.") or module.startswith("tensorflow_datasets.testing")


def _probe_target(tfds_name: str) -> tuple:
    proxy = getproxies().get("https") or getproxies().get("http")
    if proxy:
        parsed = urlparse(proxy if "://" in proxy else f"http://{proxy}")
        if parsed.hostname:
            return parsed.hostname, parsed.port or 80
    return TFDS_DOWNLOAD_HOSTS.get(tfds_name, TFDS_DEFAULT_HOST)


def is_reachable(host: str, port: int, timeout: float = REACHABILITY_TIMEOUT) -> bool:
    """A TCP connect within `timeout` seconds (DNS included: it runs in a thread that is not waited for)."""
    result = []

    def attempt():
        try:
            with socket.create_connection((host, port), timeout=timeout):
                result.append(True)
        except OSError:
            result.append(False)

    thread = threading.Thread(target=attempt, name="tfpipe-reachability", daemon=True)
    thread.start()
    thread.join(timeout + 0.5)
    return bool(result) and result[0]


def _offline_message(cfg, builder_dir: str, host: str) -> str:
    return (
        f"tfds dataset {cfg.dataset.tfds_name!r} is not prepared in {builder_dir} and {host} is unreachable "
        f"(no network); use a local copy instead: data.source=directory data.path=<folder with "
        f"{cfg.data.train_split}/ and {cfg.data.test_split}/ class folders> (e.g. data.path={cfg.data.path}), "
        f"or point data.tfds_data_dir at a prepared TFDS data_dir"
    )


def _builder(cfg):
    """The prepared TFDS builder, downloading when it is not prepared and the download host answers."""
    import tensorflow_datasets as tfds

    d, ds_cfg = cfg.data, cfg.dataset
    try:
        builder = tfds.builder(ds_cfg.tfds_name, data_dir=d.tfds_data_dir)
    except Exception as exc:  # noqa: BLE001 - unknown name, bad data_dir...
        raise DataError(
            f"tfds builder {ds_cfg.tfds_name!r}: {one_line(exc, 200)} (dataset.tfds_name)"
        ) from None
    if not builder.is_prepared() and not _download_is_patched(builder):
        host, port = _probe_target(ds_cfg.tfds_name)
        if not is_reachable(host, port):
            raise DataError(_offline_message(cfg, str(builder.data_dir), host))
    try:
        builder.download_and_prepare()
    except Exception as exc:  # noqa: BLE001
        raise DataError(
            f"tfds {ds_cfg.tfds_name!r}: download_and_prepare failed ({one_line(exc, 200)}); "
            f"data.source=directory data.path=<local copy> avoids the download"
        ) from None
    return builder


def _reads(cfg, known_splits: dict) -> list:
    """(output split, TFDS split) pairs in reading order; a TFDS split the builder lacks is refused."""
    d = cfg.data
    names = [("train", d.train_split)]
    if d.validation_split:
        names.append(("validation", d.validation_split))
    names.append(("test", d.test_split))
    for _, name in names:
        base = name.split("[")[0]
        if known_splits and base not in known_splits:
            raise DataError(
                f"tfds {cfg.dataset.tfds_name!r}: no split {name!r}; available: {', '.join(known_splits)}"
            )
    return names


def _planned(cfg, reads: list, known_splits: dict) -> Optional[int]:
    cap, planned = cfg.data.max_examples_per_split, 0
    for out, name in reads:
        if name not in known_splits:
            return None
        n = known_splits[name].num_examples
        planned += (
            n
            if cap is None
            else min(n, cap * (2 if (out == "train" and not cfg.data.validation_split) else 1))
        )
    return planned


@dataclass
class _ImageValue:
    """A TFDS image example -> (uint8 [height, width, channels] (grey/colour converted, resized), label, the
    decoded example's shape before that: the data report's source-image statistics)."""

    height: int
    width: int
    channels: int

    def __call__(self, example):
        import tensorflow as tf

        image = example["image"]
        shape = tf.shape(image)
        if image.shape.rank == 2:
            image = image[..., tf.newaxis]
        if image.shape[-1] != self.channels:
            image = (
                tf.image.grayscale_to_rgb(image) if self.channels == 3 else tf.image.rgb_to_grayscale(image)
            )
        if image.shape[0] != self.height or image.shape[1] != self.width:
            image = tf.image.resize(image, [self.height, self.width], antialias=True)
            image = tf.cast(tf.clip_by_value(tf.round(image), 0, 255), tf.uint8)
        return tf.ensure_shape(image, [self.height, self.width, self.channels]), example["label"], shape


_MODES = {1: "L", 3: "RGB", 4: "RGBA"}  # the channel counts tfds.features.Image holds, named as PIL modes


def _header(shape) -> Optional[tuple]:
    """(width, height, mode) of a decoded TFDS image's shape ([h, w] or [h, w, c]), None for texts."""
    if shape is None:
        return None
    channels = int(shape[2]) if len(shape) > 2 else 1
    return int(shape[1]), int(shape[0]), _MODES.get(channels, f"{channels} channels")


def _text_value(example):
    return example["text"], example["label"]


def _image_bytes(value) -> bytes:
    return value.tobytes()


@dataclass
class _Stream:
    """Iterates the reads, carving validation from train by a stable hash and capping each split."""

    builder: Any  # a tfds.core.DatasetBuilder
    reads: list
    to_value: Callable[[dict], tuple]  # a TFDS example -> (value, label, *source shape)
    to_bytes: Callable[[Any], bytes]  # a value, as a numpy array -> the prepared example's bytes
    carve: bool
    fraction: float
    seed: int
    cap: Optional[int]

    def __call__(self, bad: BadFiles) -> Iterator[Triple]:
        del bad  # TFDS examples were validated when TFDS prepared them
        for out, name in self.reads:
            yield from self._split(out, name)

    def _split(self, out: str, name: str) -> Iterator[Triple]:
        import tensorflow as tf

        ds = self.builder.as_dataset(split=name, shuffle_files=False)
        ds = ds.map(self.to_value, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True).prefetch(
            tf.data.AUTOTUNE
        )
        counts = {"train": 0, "validation": 0, "test": 0}
        routes = ("train", "validation") if (out == "train" and self.carve) else (out,)
        cap = self.cap
        for index, (value, label, *shape) in enumerate(ds.as_numpy_iterator()):
            target = out
            if (
                out == "train"
                and self.carve
                and stable_fraction(self.seed, f"{name}:{index}") < self.fraction
            ):
                target = "validation"
            if cap is not None and counts[target] >= cap:
                if all(counts[r] >= cap for r in routes):
                    break
                continue
            counts[target] += 1
            yield target, self.to_bytes(value), int(label), None, _header(shape[0] if shape else None)


def open_tfds(cfg) -> Source:
    d, ds_cfg = cfg.data, cfg.dataset
    builder = _builder(cfg)
    key = "image" if ds_cfg.modality == "image" else "text"
    features = builder.info.features
    if key not in features or "label" not in features:
        raise DataError(
            f"tfds {ds_cfg.tfds_name!r}: features {sorted(features.keys())} lack {key!r}/'label' "
            f"needed for dataset.modality={ds_cfg.modality}"
        )
    known_splits = dict(builder.info.splits) if builder.info.splits else {}
    reads = _reads(cfg, known_splits)
    to_value: Callable[[dict], tuple]
    to_bytes: Callable[[Any], bytes]
    if ds_cfg.modality == "image":
        to_value, to_bytes = (
            _ImageValue(int(ds_cfg.image_size[0]), int(ds_cfg.image_size[1]), int(ds_cfg.channels)),
            _image_bytes,
        )
    else:
        to_value, to_bytes = _text_value, bytes
    stream = _Stream(
        builder,
        reads,
        to_value,
        to_bytes,
        not d.validation_split,
        d.validation_fraction,
        d.seed,
        d.max_examples_per_split,
    )
    info = {"type": "tfds", "path": None, "tfds_name": ds_cfg.tfds_name, "version": str(builder.version)}
    return Source(list(features["label"].names), info, _planned(cfg, reads, known_splits), stream)
