"""The re-run's own folder, `<temp dir>/tfpipe-rerun-<pid>-XXXXXXXX` (its git worktree, temporary store and DVC
cache), and what killed audits left of theirs.

An audit stopped by SIGKILL, the OOM killer or a lost machine never runs its own cleanup: its folder stays, and
the repository it made the worktree in keeps naming that worktree (`git worktree list`). So every re-run first
removes the folders of this prefix whose audit is gone, as `files.scratch_folder` does for the workers' scratch
folders, then runs `git worktree prune` in the repository each one's worktree was registered in (its entry under
`.git/worktrees/`, read from the worktree's `.git` file before the folder goes).

Gone: nobody holds the folder's `.lock` (an flock its audit takes when it makes the folder and holds until it
removes it; the kernel lets go of it when the process dies, however it dies), or, without that file, the pid in
its name is no process. A folder whose audit still runs beside this one is left alone (one in another pid
namespace, or whose pid was reused, too: the lock tells), and so is one of another user, or one kept on request.
Not known: folders in another temp dir."""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Optional

from tfpipe.audit.common import git_in
from tfpipe.files import pid_alive

PREFIX = "tfpipe-rerun-"
KEPT = f"{PREFIX}kept-"  # kept on request (`keep=True`): no pid in the name, never a leftover
LOCK = ".lock"
_held: dict = {}  # this process's folders -> the descriptor holding each one's lock


def folder(log) -> Path:
    """A new folder for this re-run, locked, once the leftovers of killed audits are removed."""
    gone = remove_leftovers()
    if gone:
        log(f"rerun: removed what {len(gone)} killed audit(s) left: {', '.join(str(p) for p in gone)}")
    tmp = Path(tempfile.mkdtemp(prefix=f"{PREFIX}{os.getpid()}-"))
    fd = os.open(tmp / LOCK, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    _held[tmp] = fd
    return tmp


def remove_leftovers(temp_dir: Optional[Path] = None) -> list:
    """Remove this user's folders of killed audits and prune their worktrees' registrations; the folders removed."""
    gone, registries = [], set()
    for old in sorted(Path(temp_dir or tempfile.gettempdir()).glob(f"{PREFIX}*-*")):
        if old.is_symlink() or not old.is_dir() or old.stat().st_uid != os.getuid() or not _abandoned(old):
            continue
        registries.add(_registered_in(old / "worktree"))
        shutil.rmtree(old, ignore_errors=True)
        gone.append(old)
    for git_dir in filter(
        None, registries
    ):  # only entries whose worktree is missing go: a running audit's stays
        subprocess.run(
            ["git", f"--git-dir={git_dir}", "worktree", "prune"], capture_output=True, timeout=60, check=False
        )
    return gone


def _abandoned(old: Path) -> bool:
    """Whether the audit that made `old` is gone: nobody holds its lock (no lock file: its pid is no process)."""
    pid = old.name[len(PREFIX) :].split("-", 1)[0]
    if not pid.isdigit():  # a kept folder
        return False
    try:
        fd = os.open(old / LOCK, os.O_RDWR | os.O_NOFOLLOW)
    except FileNotFoundError:  # killed between making the folder and its lock
        return not pid_alive(int(pid))
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:  # held: its audit runs
        return False
    finally:
        os.close(fd)
    return True


def _registered_in(wt: Path) -> Optional[Path]:
    """The git directory whose `worktrees/` names `wt`, from the worktree's `.git` file (`gitdir: ...`)."""
    try:
        line = (wt / ".git").read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError):
        return None
    if not line.startswith("gitdir: "):
        return None
    entry = Path(line[len("gitdir: ") :])
    try:
        common = (entry / (entry / "commondir").read_text(encoding="utf-8").strip()).resolve()
    except (OSError, UnicodeDecodeError):
        common = entry.parent.parent
    return common if (common / "worktrees").is_dir() else None


def remove(root: Path, wt: Path, tmp: Path, keep: bool, log) -> None:
    """The re-run's worktree and folder gone at its end; with `keep` the folder stays, renamed so that no later
    audit takes it for a leftover."""
    git_in(root, "worktree", "remove", "--force", str(wt))
    try:
        if not keep:
            shutil.rmtree(tmp, ignore_errors=True)
            return
        kept = Path(tempfile.mkdtemp(prefix=KEPT, dir=tmp.parent))
        os.replace(tmp, kept)
        log(f"rerun: kept {kept}")
    finally:  # only now: another audit would take an unlocked folder for a leftover
        fd = _held.pop(tmp, None)
        if fd is not None:
            os.close(fd)
