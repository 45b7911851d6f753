"""Where examples come from: a class-per-folder directory tree, or a TFDS builder.

Both yield `(split, value, label, name, header)`, `value` being the bytes stored in the Example (raw uint8
pixels at the configured size, or the raw UTF-8 text), `name` the example's file or None (the data report
names examples by it), `header` an image's (width, height, mode) before conversion and resize (None for
texts): the data report's source-image statistics. Decoding one file is tfpipe.data.decode.

The directory source lists files itself (sorted, deterministic) instead of Keras' / TFDS's folder readers:
those fail on the first bad file without naming it (or drop it silently); a bad file is reported by its path.
A folder's manifest `source` carries its digest, the one `dvc add` records (tfpipe.data.lineage).
"""

from __future__ import annotations

import hashlib
import os
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator, Optional

from tfpipe.data import walk
from tfpipe.data.decode import Refused, decode_text_file, read_image_file
from tfpipe.errors import DataError, one_line

IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png")
TEXT_EXTENSIONS = (".txt",)
IGNORED_CLASS_FOLDERS = frozenset({"unsup"})  # aclImdb's unlabelled reviews
MAX_SKIPPED_EXAMPLES = 20

Triple = tuple  # (split: str, value: bytes, label: int, name: str | None, header: tuple | None)


@dataclass
class Source:
    """An opened source: what the manifest needs, and the examples as a stream."""

    class_names: list
    info: dict  # manifest "source": {"type", "path", "tfds_name", "version"}
    planned: Optional[int]  # examples the stream will yield at most (progress bar total), None if unknown
    stream: Callable[["BadFiles"], Iterator[Triple]]


@dataclass
class BadFiles:
    """Applies `data.on_bad_file`: 'fail' raises DataError naming the file; 'skip' counts it."""

    policy: str
    root: Path
    count: int = 0
    examples: list = field(default_factory=list)

    def report(self, path: Path, reason: str) -> None:
        if self.policy == "fail":
            raise DataError(f"{path}: {reason}; fix or remove the file, or set data.on_bad_file=skip")
        self.count += 1
        if len(self.examples) < MAX_SKIPPED_EXAMPLES:
            try:
                self.examples.append(Path(path).relative_to(self.root).as_posix())
            except ValueError:
                self.examples.append(str(path))

    def summary(self) -> dict:
        return {"count": self.count, "examples": list(self.examples)}


def stable_fraction(seed: int, key: str) -> float:
    """A uniform number in [0, 1) from (seed, key): the same on every machine and Python run."""
    digest = hashlib.sha256(f"{seed}:{key}".encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") / 2.0**64


# ----------------------------------------------------------------------------- directory


@dataclass(frozen=True)
class FileEntry:
    key: str  # path relative to the split folder, posix: the carve/selection key
    path: Path
    label: int


def _layout_hint(cfg) -> str:
    d = cfg.data
    exts = "|".join(f"*{e}" for e in _extensions(cfg))
    splits = ", ".join(s for s in (d.train_split, d.validation_split, d.test_split) if s)
    return f"expected one folder per split ({splits}), each holding one folder per class with {exts} files"


def _extensions(cfg) -> tuple:
    return IMAGE_EXTENSIONS if cfg.dataset.modality == "image" else TEXT_EXTENSIONS


def _class_folders(split_dir: Path) -> list:
    return sorted(
        p.name
        for p in split_dir.iterdir()
        if p.is_dir() and not p.name.startswith(".") and p.name not in IGNORED_CLASS_FOLDERS
    )


def _check_root(root: Path, hint: str) -> None:
    if not root.exists():
        raise DataError(f"{root}: data directory not found; {hint}")
    if not root.is_dir():
        raise DataError(f"{root}: not a directory; {hint}")
    if not any(root.iterdir()):
        raise DataError(f"{root}: data directory is empty; {hint}")


def scan_directory(cfg) -> tuple:
    """Cheap layout checks, then the file lists: (class_names, {source split name: [FileEntry]}, refused)
    where `refused` lists (path, reason) of files the walk would not read (tfpipe.data.walk: links out of
    the root, non-regular files). Each real file is listed once across all splits.

    Raises DataError (one line naming the path and what is expected) before any file is decoded.
    """
    d = cfg.data
    root = Path(d.path)
    hint = _layout_hint(cfg)
    _check_root(root, hint)
    extensions = _extensions(cfg)
    walker = walk.Walk(root, Path(os.path.realpath(root)), extensions)
    wanted = [("train", d.train_split), ("test", d.test_split)]
    if d.validation_split:
        wanted.insert(1, ("validation", d.validation_split))
    for _, name in wanted:
        if not (root / name).is_dir():
            raise DataError(f"{root / name}: split folder not found; {hint}")

    train_dir = root / d.train_split
    class_names = _class_folders(train_dir)
    if not class_names:
        raise DataError(
            f"{train_dir}: no class folders; expected one folder per class with "
            f"{'|'.join('*' + e for e in extensions)} files"
        )
    if len(class_names) < 2:
        raise DataError(
            f"{train_dir}: only one class folder ({class_names[0]}); expected at least two classes"
        )
    items = []
    for split, name in wanted:
        _check_classes(root / name, class_names)
        items.extend(_list_split(walker, split, root / name, class_names))
    files: dict = {split: [] for split, _ in wanted}
    for split, entry in walk.dedupe(items):
        files[split].append(entry)
    return class_names, files, walker.refused


def _check_classes(split_dir: Path, class_names: list) -> None:
    present = _class_folders(split_dir)
    if present != class_names:
        missing = sorted(set(class_names) - set(present))
        extra = sorted(set(present) - set(class_names))
        detail = "; ".join(
            part
            for part in (
                f"missing {', '.join(missing)}" if missing else "",
                f"unexpected {', '.join(extra)}" if extra else "",
            )
            if part
        )
        raise DataError(
            f"{split_dir}: class folders do not match the train split's ({detail}); "
            f"expected {', '.join(class_names)}"
        )


def _list_split(walker: walk.Walk, split: str, split_dir: Path, class_names: list) -> list:
    """[(Found, (split, FileEntry))] of one split, class by class."""
    items: list[tuple[walk.Found, tuple[str, FileEntry]]] = []
    for label, class_name in enumerate(class_names):
        class_dir = split_dir / class_name
        listed = walker.list_class(class_dir)
        if not listed:
            raise DataError(
                f"{class_dir}: empty class folder; expected "
                f"{'|'.join('*' + e for e in walker.extensions)} files"
            )
        items.extend(
            (f, (split, FileEntry(f.path.relative_to(split_dir).as_posix(), f.path, label))) for f in listed
        )
    return items


def carve_validation(entries: list, fraction: float, seed: int) -> tuple:
    """(train, validation): per class, the round(fraction * n) files (at least 1 when the class has 2+)
    with the smallest stable hash of (seed, relative path). Deterministic and independent of listing order."""
    by_class: dict = {}
    for e in entries:
        by_class.setdefault(e.label, []).append(e)
    train, validation = [], []
    for label in sorted(by_class):
        group = sorted(by_class[label], key=lambda e: (stable_fraction(seed, e.key), e.key))
        k = max(1, round(fraction * len(group))) if len(group) >= 2 else 0
        validation.extend(group[:k])
        train.extend(group[k:])
    return train, validation


def select_and_order(entries: list, split: str, max_examples: Optional[int], seed: int) -> list:
    """At most `max_examples` entries, class-balanced (round robin over per-class seeded shuffles), in a
    seeded shuffled order (so shards are not sorted by class). Only the file list is held in memory."""
    rng = random.Random(f"{seed}:{split}")
    if max_examples is not None and len(entries) > max_examples:
        by_class: dict = {}
        for e in entries:
            by_class.setdefault(e.label, []).append(e)
        queues = []
        for label in sorted(by_class):
            group = list(by_class[label])
            rng.shuffle(group)
            queues.append(group)
        chosen: list[FileEntry] = []
        i = 0
        while len(chosen) < max_examples:
            for q in queues:
                if i < len(q) and len(chosen) < max_examples:
                    chosen.append(q[i])
            i += 1
        entries = chosen
    ordered = list(entries)
    rng.shuffle(ordered)
    return ordered


def _decoder(cfg) -> tuple:
    """(decode(path) -> (bytes, header or None), what a decoding failure means)."""
    d, ds = cfg.data, cfg.dataset
    if ds.modality == "image":
        size, channels = ds.image_size, ds.channels
        decode = lambda path: read_image_file(path, size, channels, d.max_image_pixels)  # (pixels, header)
        return decode, "unreadable or corrupt image"
    return (lambda path: (decode_text_file(path, d.max_text_bytes), None)), "not a UTF-8 text file"


def _plan(cfg, files: dict) -> dict:
    d = cfg.data
    if d.validation_split:
        train, validation = files["train"], files["validation"]
    else:
        train, validation = carve_validation(files["train"], d.validation_fraction, d.seed)
    return {
        "train": select_and_order(train, "train", d.max_examples_per_split, d.seed),
        "validation": select_and_order(validation, "validation", d.max_examples_per_split, d.seed),
        "test": select_and_order(files["test"], "test", d.max_examples_per_split, d.seed),
    }


def open_directory(cfg) -> Source:
    d = cfg.data
    class_names, files, refused = scan_directory(cfg)
    if refused and d.on_bad_file == "fail":  # before any shard is written: the same one line as any bad file
        BadFiles("fail", Path(os.path.abspath(d.path))).report(*refused[0])
    plan = _plan(cfg, files)
    decode, what = _decoder(cfg)

    folders = {
        "train": d.train_split,
        "validation": d.validation_split or d.train_split,
        "test": d.test_split,
    }

    def stream(bad: BadFiles) -> Iterator[Triple]:
        for path, reason in refused:
            bad.report(path, reason)
        for split in ("train", "validation", "test"):
            for entry in plan[split]:
                try:
                    value, header = decode(entry.path)
                except Refused as exc:
                    bad.report(entry.path, str(exc))
                    continue
                except Exception as exc:  # noqa: BLE001 - any decoder failure is this file's fault
                    bad.report(entry.path, f"{what} ({one_line(exc, 200)})")
                    continue
                yield split, value, entry.label, f"{folders[split]}/{entry.key}", header

    from tfpipe.data.lineage import directory_info
    from tfpipe.data.manifest import portable_path

    info = directory_info(d.path, portable_path(d.path))  # with the folder's digest: which data was read
    return Source(class_names, info, sum(len(v) for v in plan.values()), stream)
