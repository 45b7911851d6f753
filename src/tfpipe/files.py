"""Writing files so that a reader never sees half of one: write a temporary sibling, then rename it."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from pathlib import Path
from typing import IO, Iterator


@contextlib.contextmanager
def atomic_open(path: str | os.PathLike, mode: str = "w", **kwargs) -> Iterator[IO]:
    """Open a temporary sibling of `path` for writing; on success it replaces `path` in one rename, on an
    exception it is removed and `path` is left as it was. Creates the parent folder."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    if "b" not in mode:
        kwargs.setdefault("encoding", "utf-8")
    try:
        with tmp.open(mode, **kwargs) as fh:
            yield fh
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def write_text(path: str | os.PathLike, text: str) -> None:
    with atomic_open(path) as fh:
        fh.write(text)


def write_json(path: str | os.PathLike, payload, **dumps_kwargs) -> None:
    dumps_kwargs.setdefault("indent", 2)
    write_text(path, json.dumps(payload, **dumps_kwargs) + "\n")


def read_line(path: str | os.PathLike):
    """The file's stripped text, or None when it is missing or empty."""
    path = Path(path)
    return (path.read_text(encoding="utf-8").strip() or None) if path.is_file() else None


def clear_folder(path: str | os.PathLike) -> None:
    """Remove what is inside `path`, never `path` itself: it may be a mount point or a symlink."""
    path = Path(path)
    for child in path.iterdir():
        if child.is_dir() and not child.is_symlink():
            shutil.rmtree(child)
        else:
            child.unlink()
