"""Writing files so that a reader never sees half of one: write a temporary sibling, then rename it."""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import IO, Iterator


def within(path: str | os.PathLike, folder: str | os.PathLike, resolve: bool = False) -> bool:
    """`path` is `folder` or a place under it: both made absolute with `..` folded (os.path.abspath: as written,
    a symlink not followed), or with `resolve` where the OS would open them (symlinks followed). The one
    containment check: `str.startswith` would take /data2 to be inside /data."""
    if resolve:
        p, f = Path(path).resolve(), Path(folder).resolve()
    else:
        p, f = Path(os.path.abspath(path)), Path(os.path.abspath(folder))
    return p == f or f in p.parents


@contextlib.contextmanager
def atomic_open(path: str | os.PathLike, mode: str = "w", **kwargs) -> Iterator[IO]:
    """Open a temporary sibling of `path` for writing; on success it replaces `path` in one rename, on an
    exception it is removed and `path` is left as it was. Creates the parent folder."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    remove_dead_temps(path)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    if "b" not in mode:
        kwargs.setdefault("encoding", "utf-8")
    try:
        with tmp.open(mode, **kwargs) as fh:
            yield fh
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def remove_dead_temps(path: Path, kinds: tuple = ("tmp",)) -> None:
    """Remove the temporary siblings of `path` (`.<name>.<kind>-<pid>`, files or folders) whose writer is gone: a
    process killed mid-write leaves one, and the next attempt's rename does not take it away. A live writer's is
    kept."""
    for kind in kinds:
        for stale in path.parent.glob(f".{path.name}.{kind}-*"):
            pid = stale.name.rpartition("-")[2]
            if pid.isdigit() and int(pid) != os.getpid() and not pid_alive(int(pid)):
                if stale.is_dir() and not stale.is_symlink():
                    shutil.rmtree(stale, ignore_errors=True)
                else:
                    stale.unlink(missing_ok=True)


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: alive
        return True
    return True


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


def scratch_folder(prefix: str) -> Path:
    """A new folder `<temp dir>/<prefix><pid>-XXXXXXXX` for this process's throwaway files. The folders of the same
    prefix whose process is gone are removed first: a worker killed by SIGKILL, the OOM killer or a lost node
    never runs its own cleanup, and its scratch checkpoints would stay in the node's temp dir for good."""
    root = Path(tempfile.gettempdir())
    for old in root.glob(f"{prefix}*-*"):
        pid = old.name[len(prefix) :].split("-", 1)[0]
        if pid.isdigit() and not pid_alive(int(pid)):
            shutil.rmtree(old, ignore_errors=True)
    return Path(tempfile.mkdtemp(prefix=f"{prefix}{os.getpid()}-", dir=root))


def mirror(source: str | os.PathLike, target: str | os.PathLike, last: str = "") -> None:
    """Make the flat folder `target` hold exactly the regular files of `source`, by hard links where the two
    share a file system (a copy elsewhere). Written for folders whose files are replaced by a rename, never
    edited in place (checkpoints, atomic_open): a file is linked again only when `source` holds a new inode
    under its name. `last` is linked after all the others (an index naming them), and stale names go last,
    so a kill at any point leaves `target` naming only files it holds."""
    source, target = Path(source), Path(target)
    target.mkdir(parents=True, exist_ok=True)
    present = {p.name: p for p in source.iterdir() if p.is_file() and not p.is_symlink()}
    for name in sorted(present, key=lambda n: n == last):
        src, dst = present[name], target / name
        if dst.exists() and _same_file(src.stat(), dst.stat()):
            continue
        tmp = target / f".{name}.tmp-{os.getpid()}"
        tmp.unlink(missing_ok=True)
        try:
            os.link(src, tmp)
        except OSError:  # another file system, or links not allowed: a copy, renamed into place
            shutil.copy2(src, tmp)
        os.replace(tmp, dst)
    for stale in target.iterdir():
        if stale.name not in present:
            stale.unlink() if not stale.is_dir() or stale.is_symlink() else shutil.rmtree(stale)


def link_tree(source: str | os.PathLike, target: str | os.PathLike) -> None:
    """`target` replaced by a copy of the folder `source`, by hard links where the two share a file system (a copy
    elsewhere): built in a temporary sibling and renamed into place, so a kill leaves the old target or the new."""
    source, target = Path(source), Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    for stale in target.parent.glob(f".{target.name}.tmp-*"):  # left by a kill in an earlier attempt
        shutil.rmtree(stale, ignore_errors=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.tmp-", dir=target.parent))
    try:
        shutil.copytree(source, staging / "x", copy_function=_link_or_copy)
        old = staging / "old"
        if target.exists():
            os.replace(target, old)
        os.replace(staging / "x", target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _link_or_copy(src: str, dst: str) -> None:
    try:
        os.link(src, dst)
    except OSError:  # another file system, or links not allowed
        shutil.copy2(src, dst)


def _same_file(a: os.stat_result, b: os.stat_result) -> bool:
    """The same inode, or a copy2 of it (same size and modification time)."""
    return os.path.samestat(a, b) or (a.st_size == b.st_size and a.st_mtime_ns == b.st_mtime_ns)


# ----------------------------------------------------------------------------- a save that cannot finish

_NO_SPACE = (errno.ENOSPC, errno.EDQUOT)
_NOT_WRITABLE = (errno.EROFS, errno.EACCES, errno.EPERM)


def save_cause(exc: BaseException, needed_bytes: int | None = None) -> str | None:
    """'no space left ...' / 'the folder is not writable ...' for a full or read-only disk (an OSError, or a
    TensorFlow error that ends in the OS's reason), None for any other failure."""
    code = getattr(exc, "errno", None)
    text = str(exc).lower()
    if code in _NO_SPACE or "space left" in text or type(exc).__name__ == "ResourceExhaustedError":
        need = f" (the save needs about {needed_bytes / 1e6:.1f} MB)" if needed_bytes else ""
        return f"no space left on the device{need}"
    if code in _NOT_WRITABLE or "read-only" in text or "permission denied" in text:
        return "the folder is not writable (read-only or permission denied)"
    return None


@contextlib.contextmanager
def saving(folder: str | os.PathLike, what: str, needed_bytes: int | None = None, fix: str = "") -> Iterator:
    """Turn a full or read-only disk while writing `what` into `folder` into one line (a UserError, exit 2)
    naming the folder, the cause and the space needed; other failures pass through unchanged."""
    from tfpipe.errors import UserError

    try:
        yield
    except Exception as exc:
        cause = save_cause(exc, needed_bytes)
        if cause is None or isinstance(exc, UserError):
            raise
        fix = fix or "free space or make it writable and run the same command again"
        raise UserError(f"{folder}: cannot save {what}: {cause}; {fix}") from None


# ----------------------------------------------------------------------------- a folder sealed when whole

SEAL = "tfpipe_digest.json"


def _digest(folder: Path) -> dict:
    out = {}
    for p in sorted(folder.rglob("*")):
        if p.is_file() and p.name != SEAL:
            out[p.relative_to(folder).as_posix()] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def seal(folder: str | os.PathLike, **facts: str) -> None:
    """Record every file's digest in `folder`/SEAL, written last: a folder without it was never finished. `facts`:
    what the folder was made from (the export's weights digest), read back by seal_facts; not part of seal_digest."""
    folder = Path(folder)
    write_json(folder / SEAL, {**facts, "files": _digest(folder)}, sort_keys=True)


def seal_facts(folder: str | os.PathLike) -> dict:
    """The facts a whole sealed folder was sealed with ({} when it is not whole: check_seal says why)."""
    if check_seal(folder) is not None:
        return {}
    recorded = json.loads((Path(folder) / SEAL).read_text(encoding="utf-8"))
    return {k: v for k, v in recorded.items() if k != "files"}


def seal_digest(folder: str | os.PathLike) -> str:
    """One sha256 for a sealed folder: of its seal's file list (each file's digest), as JSON with sorted keys. Check
    the seal first (check_seal): this reads the list, not the files."""
    recorded = json.loads((Path(folder) / SEAL).read_text(encoding="utf-8"))["files"]
    return hashlib.sha256(json.dumps(recorded, sort_keys=True).encode("utf-8")).hexdigest()


def check_seal(folder: str | os.PathLike) -> str | None:
    """None when `folder` is whole (its files match its seal), else why not."""
    folder = Path(folder)
    try:
        recorded = json.loads((folder / SEAL).read_text(encoding="utf-8"))["files"]
    except (OSError, ValueError, KeyError, TypeError):
        return f"no valid {SEAL} (the save never finished)"
    actual = _digest(folder)
    changed = sorted(set(recorded) ^ set(actual) | {k for k in recorded if actual.get(k) != recorded[k]})
    return f"{len(changed)} file(s) missing or changed since it was saved ({changed[0]})" if changed else None
