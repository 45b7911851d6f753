"""manifest.json: write, load, verify shards against it, digest. No TensorFlow here."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from pathlib import Path
from typing import overload

from tfpipe.errors import DataError

FORMAT_VERSION = 1
MANIFEST_FILE = "manifest.json"
VOCAB_FILE = "vocab.txt"
SPLITS = ("train", "validation", "test")
_CHUNK = 1 << 20


def sha256_file(path: str | os.PathLike) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(_CHUNK), b""):
            digest.update(block)
    return digest.hexdigest()


@overload
def portable_path(path: str | os.PathLike) -> str: ...
@overload
def portable_path(path: None) -> None: ...
def portable_path(path: str | os.PathLike | None) -> str | None:
    """A path as recorded in the manifest: relative to the working directory when inside it (so a project
    prepared from its root records `data/raw/cifar10` on every machine), else absolute."""
    if path is None:
        return None
    absolute = Path(os.path.abspath(path))
    try:
        return absolute.relative_to(Path.cwd().resolve()).as_posix()
    except ValueError:
        return absolute.as_posix()


def manifest_config(cfg) -> dict:
    """The part of the config that determines the prepared data (data + dataset), paths made portable."""
    data = dataclasses.asdict(cfg.data)
    for key in ("path", "output_dir", "tfds_data_dir"):
        data[key] = portable_path(data[key])
    return {"data": data, "dataset": dataclasses.asdict(cfg.dataset)}


def write_manifest(directory: Path, manifest: dict) -> Path:
    path = Path(directory) / MANIFEST_FILE
    path.write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    return path


def load_manifest(prepared_dir: str | os.PathLike) -> dict:
    """Read and sanity-check `<prepared_dir>/manifest.json`."""
    path = Path(prepared_dir) / MANIFEST_FILE
    if not path.is_file():
        raise DataError(
            f"{path}: manifest not found; run the prepare stage first (python pipeline/prepare.py)"
        )
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise DataError(
            f"{path}: unreadable manifest ({_one_line(exc)}); run the prepare stage again"
        ) from None
    if not isinstance(manifest, dict):
        raise DataError(f"{path}: expected a JSON object; run the prepare stage again")
    version = manifest.get("format_version")
    if version != FORMAT_VERSION:
        raise DataError(
            f"{path}: format_version {version!r}, this code reads {FORMAT_VERSION}; run prepare again"
        )
    missing = [
        k for k in ("modality", "feature_spec", "class_names", "num_classes", "splits") if k not in manifest
    ]
    if missing:
        raise DataError(f"{path}: missing keys {', '.join(missing)}; run the prepare stage again")
    return manifest


def verify_shards(prepared_dir: str | os.PathLike, manifest: dict | None = None) -> None:
    """Every shard listed in the manifest exists with the recorded size and sha256, else DataError naming it."""
    prepared_dir = Path(prepared_dir)
    manifest = load_manifest(prepared_dir) if manifest is None else manifest
    for split, info in manifest["splits"].items():
        for shard in info["shards"]:
            path = prepared_dir / shard["file"]
            if not path.is_file():
                raise DataError(f"{path}: shard of split {split!r} is missing; run the prepare stage again")
            size = path.stat().st_size
            if size != shard["bytes"]:
                raise DataError(
                    f"{path}: shard is {size} bytes, the manifest says {shard['bytes']} (truncated or altered); "
                    "run the prepare stage again"
                )
            if sha256_file(path) != shard["sha256"]:
                raise DataError(
                    f"{path}: sha256 does not match the manifest (altered); run the prepare stage again"
                )
    vocab = manifest.get("vocab_file")
    if vocab and not (prepared_dir / vocab).is_file():
        raise DataError(f"{prepared_dir / vocab}: vocabulary file is missing; run the prepare stage again")


def manifest_digest(prepared_dir: str | os.PathLike) -> str:
    """sha256 of the manifest.json bytes: identifies the prepared data (it holds every shard's sha256)."""
    path = Path(prepared_dir) / MANIFEST_FILE
    if not path.is_file():
        raise DataError(
            f"{path}: manifest not found; run the prepare stage first (python pipeline/prepare.py)"
        )
    return sha256_file(path)


def is_up_to_date(cfg) -> bool:
    """True when `cfg.data.output_dir` holds a complete, intact preparation made with this data/dataset config."""
    prepared_dir = Path(cfg.data.output_dir)
    if not (prepared_dir / MANIFEST_FILE).is_file():
        return False
    try:
        manifest = load_manifest(prepared_dir)
        if manifest.get("config") != manifest_config(cfg):
            return False
        verify_shards(prepared_dir, manifest)
    except DataError:
        return False
    return True


def _one_line(exc: BaseException | str) -> str:
    return " ".join(part.strip() for part in str(exc).splitlines() if part.strip())
