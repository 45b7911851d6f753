"""Listing a class folder of the directory source without leaving the data root.

Rules (docs/tutorials/first-run.md, "the directory source"):
- a symlink (to a file or a folder) is followed only when its resolved target is inside the resolved
  data root; a link pointing outside it is refused (a bad file: `data.on_bad_file` fail or skip);
- each folder is entered at most once per class walk (by (st_dev, st_ino)), so link loops end;
- each real file becomes at most one example across all splits and classes: when several paths reach
  it (links), the path without links wins (else the first in listing order), so a link can neither
  duplicate an example nor copy a train file into test;
- a split or class folder resolving outside the root stops prepare (a layout error, whatever on_bad_file);
- only regular files are read (a FIFO or device named *.txt is refused, it would block or never end).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from tfpipe import files
from tfpipe.errors import DataError

OUTSIDE_ROOT = (
    "symlink target {target} is outside the data root {root}; only links resolving inside it are followed"
)
NOT_REGULAR = "not a regular file"


@dataclass(frozen=True)
class Found:
    path: Path  # as listed (under the configured data.path)
    real: Path  # resolved
    direct: bool  # reached without any symlink


@dataclass
class Walk:
    """One scan of the data root: `given` as configured, `root` resolved; refused files as (path, reason)."""

    given: Path
    root: Path
    extensions: tuple
    refused: list = field(default_factory=list)

    def list_class(self, class_dir: Path) -> list:
        """Files under `class_dir` (sorted by relative path, hidden names skipped), as Found.

        A split or class folder resolving outside the root is a layout error (DataError), whatever on_bad_file.
        """
        real = Path(os.path.realpath(class_dir))
        if not files.within(real, self.root):
            raise DataError(f"{class_dir}: " + OUTSIDE_ROOT.format(target=real, root=self.root))
        found: list = []
        self._walk(class_dir, found, set())
        return sorted(found, key=lambda f: f.path.relative_to(class_dir).as_posix())

    def _walk(self, folder: Path, found: list, seen: set) -> None:
        info = os.stat(folder)
        if (info.st_dev, info.st_ino) in seen:
            return
        seen.add((info.st_dev, info.st_ino))
        for entry in sorted(os.scandir(folder), key=lambda e: e.name):
            if entry.name.startswith("."):
                continue
            path, wanted = Path(entry.path), entry.name.lower().endswith(self.extensions)
            real = Path(os.path.realpath(path))
            if not files.within(real, self.root):
                if wanted or entry.is_dir():
                    self.refused.append((path, OUTSIDE_ROOT.format(target=real, root=self.root)))
            elif entry.is_dir():
                self._walk(path, found, seen)
            elif wanted:
                self._add_file(path, real, found)

    def _add_file(self, path: Path, real: Path, found: list) -> None:
        if real.exists() and not real.is_file():
            self.refused.append((path, NOT_REGULAR))
            return
        direct = self.root / path.relative_to(self.given) == real
        found.append(Found(path, real, direct))


def dedupe(items: list) -> list:
    """`items` are (Found, payload); keep one per real file: the direct one, else the first. Order kept."""
    best: dict = {}
    for index, (found, _) in enumerate(items):
        current = best.get(found.real)
        if current is None or (found.direct and not items[current][0].direct):
            best[found.real] = index
    keep = set(best.values())
    return [payload for index, (_, payload) in enumerate(items) if index in keep]


def every_file(root: Path) -> list:
    """[(relative posix path, Path)] of every regular file under `root`, hidden ones too, sorted by relative path:
    what `dvc add` hashes. Links are followed when they resolve inside the resolved root (a folder is not
    entered again below itself, so loops end); links out of it and non-regular files are left out."""
    real_root = Path(os.path.realpath(root))
    found: list = []

    def visit(folder: Path, real_folder: Path, prefix: str, chain: frozenset) -> None:
        for entry in sorted(os.scandir(folder), key=lambda e: e.name):
            if entry.is_symlink():  # resolved only for links: a plain entry is where its folder is
                real = Path(os.path.realpath(entry.path))
                if not files.within(real, real_root):
                    continue
                is_dir, is_file = real.is_dir(), real.is_file()
            else:
                real = real_folder / entry.name
                is_dir, is_file = entry.is_dir(follow_symlinks=False), entry.is_file(follow_symlinks=False)
            if is_dir and real not in chain:
                visit(Path(entry.path), real, f"{prefix}{entry.name}/", chain | {real})
            elif is_file:
                found.append((f"{prefix}{entry.name}", Path(entry.path)))

    visit(Path(root), real_root, "", frozenset({real_root}))
    return sorted(found)
