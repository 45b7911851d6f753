"""The re-run's folder before its stages start in the sandbox (`tfpipe.audit.sandbox`): which of its files are the
stages' own and whose they are. Writing a hard link writes every name of the file, so the only files the folder
may share with the auditor's are the raw data's, which the sandbox binds read-only (`raw`); any other (a DVC
cache checked out as links, whatever `cache.type` a commit or the auditor set) is replaced by a copy
(`own_copies`). A root auditor's folder is handed over to the stages' uid (`hand_over`). It knows nothing of
bubblewrap, DVC or git."""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path


def raw(folder: Path) -> Path:
    """The worktree's raw data: hard links to the auditor's, bound read-only inside."""
    return folder / "worktree" / "data" / "raw"


def own_copies(folder: Path) -> list:
    """Every regular file under `folder` with another name elsewhere (a hard link: DVC's cache, a file linked in)
    replaced by a copy of its own, but the raw data's (read-only inside); the paths replaced."""
    replaced = []
    for top, dirs, files in os.walk(folder):
        if Path(top) == raw(folder) or Path(top).is_relative_to(raw(folder)):
            dirs.clear()
            continue
        for name in files:
            path = Path(top) / name
            st = path.lstat()
            if stat.S_ISREG(st.st_mode) and st.st_nlink > 1 and name != ".lock":
                copy = path.with_name(f".{name}.tfpipe-own")
                shutil.copyfile(path, copy)  # the bytes, not the shared inode; the mode below
                copy.chmod(stat.S_IMODE(st.st_mode) | stat.S_IWUSR)
                os.replace(copy, path)
                replaced.append(path)
    return replaced


def hand_over(folder: Path, nobody: int) -> None:
    """Root auditing: what `folder` holds becomes uid 65534's, the folder itself stays root's (its lock, and the
    removal of a killed audit's folder, go by its owner) with group 65534 writing and the sticky bit (root's
    files in it stay root's). Hard-linked files (the auditor's raw data; `own_copies` left no other) and the lock
    keep their owner, so uid 65534 cannot write them; the raw data is made readable (`_readable`)."""
    os.chown(folder, -1, nobody)
    os.chmod(folder, 0o1770)
    raw_data = raw(folder)
    for top, dirs, files in os.walk(folder):
        if Path(top).is_relative_to(raw_data):
            _readable(Path(top), files)
            continue
        for name in dirs + files:
            path = os.path.join(top, name)
            st = os.lstat(path)
            if (top == str(folder) and name == ".lock") or (not stat.S_ISDIR(st.st_mode) and st.st_nlink > 1):
                continue
            os.chown(path, nobody, nobody, follow_symlinks=False)


def _readable(top: Path, files: list) -> None:
    """A folder of the worktree's raw data (its own copy) opened to uid 65534; a file there it could not read (a
    hard link to the auditor's own, 0600) replaced by a readable copy, the auditor's file left as it is."""
    top.chmod(stat.S_IMODE(top.lstat().st_mode) | 0o555)
    for name in files:
        path = top / name
        st = path.lstat()
        if stat.S_ISREG(st.st_mode) and not st.st_mode & stat.S_IROTH:
            copy = top / f".{name}.tfpipe-copy"
            shutil.copyfile(path, copy)
            copy.chmod(0o444)
            os.replace(copy, path)
