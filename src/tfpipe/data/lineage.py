"""Which raw data a prepare read: the manifest's `source` (type, path, TFDS name and version, and for a folder its
digest), which the train stage's MLflow dataset input carries as its profile's `source`.

The digest is the one `dvc add` records in `<folder>.dvc` (DVC's directory md5: the md5 of the sorted
`[{"md5", "relpath"}]` listing of every file, hidden ones too, `.dir` appended), so a folder's manifest says
the same as DVC wherever the data came from; links out of the folder are left out of it as prepare leaves them
unread (`walk.every_file`).

In a DVC experiment's copy reading the project's folder (`tfpipe.config.rooting`), DVC hashes prepare's
dependency `data/raw` inside the copy, where the folder is absent: before prepare runs, every copy hashes the
same, whatever the project's data. So that DVC's run-cache can never answer a later experiment with data
prepared from other raw data, prepare leaves a note of what it read (`NOTE`, naming the folder and its digest)
in the copy's nearest existing parent of the folder: DVC hashes the dependency again after the run and files
the run under that hash, which no copy has before its prepare runs. What it does not know: data that changes
while it is read (the digest is taken before the examples are)."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Optional

from tfpipe import files
from tfpipe.config.rooting import experiment_copy
from tfpipe.data import walk

NOTE = ".tfpipe-read-{name}.json"  # in the copy's data/raw: git-ignored there, hashed with the dependency
_CHUNK = 1 << 20


def folder_digest(folder) -> str:
    """DVC's directory md5 of `folder` (what `dvc add` writes in its .dvc file)."""
    listing = []
    for relpath, path in walk.every_file(Path(folder)):
        digest = hashlib.md5()
        with open(path, "rb") as fh:
            for block in iter(lambda: fh.read(_CHUNK), b""):
                digest.update(block)
        listing.append({"md5": digest.hexdigest(), "relpath": relpath})
    text = json.dumps(listing, sort_keys=True).encode("utf-8")
    return hashlib.md5(text).hexdigest() + ".dir"


def directory_info(path, recorded_path: str) -> dict:
    """The manifest's `source` of a folder, its digest taken now; in a DVC experiment's copy reading the
    project's folder, the note for DVC's run-cache is left too."""
    info = {
        "type": "directory",
        "path": recorded_path,
        "tfds_name": None,
        "version": None,
        "digest": folder_digest(path),
    }
    leave_note(Path(path), info, Path.cwd())
    return info


def leave_note(folder: Path, info: dict, root: Path) -> Optional[Path]:
    """The note in the copy `root` (the stage's working directory: DVC runs it there) when `folder` is the
    project's and the copy lacks it; None elsewhere (nothing written)."""
    project = experiment_copy(root)
    folder = Path(os.path.abspath(folder))
    if project is None or not files.within(folder, project) or files.within(folder, Path(root).resolve()):
        return None
    relative = folder.relative_to(project)
    parent = Path(root).resolve() / relative.parent
    while not parent.is_dir():
        parent = parent.parent
    if parent == Path(root).resolve():
        return None  # no folder of the copy above it: nothing DVC hashes as a dependency
    note = parent / NOTE.format(name=relative.name)
    note.write_text(json.dumps(info, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return note
