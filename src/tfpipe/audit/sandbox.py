"""The re-run's stages in a sandbox: an audit re-executes code someone else recorded, so with bubblewrap (`bwrap`)
its stages see the machine read-only, neither the auditor's home nor the network, and write only in the re-run's
own temporary folder (the worktree, its temporary store and DVC cache), which the audit removes afterwards.

What it knows: bwrap's command line, and which folders a Python process needs back from a hidden home (the
interpreter and its packages, when installed there). What it does not: whether the kernel lets bwrap make its
namespaces, until `problem` tries once. Without a working bwrap, `--sandbox auto` (the default) runs the stages
unsandboxed with one line saying so, `--sandbox on` refuses."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Optional

from tfpipe.audit.common import UserError
from tfpipe.errors import one_line

MODES = ("auto", "on", "off")
INSTALL = "install bubblewrap (Debian/Ubuntu: apt-get install bubblewrap)"


def problem() -> Optional[str]:
    """None when bwrap runs a command here, else why not, in a few words."""
    exe = shutil.which("bwrap")
    if not exe:
        return "bubblewrap (bwrap) is not installed"
    try:
        proc = subprocess.run(
            [exe, "--ro-bind", "/", "/", "--unshare-net", "true"], capture_output=True, timeout=60
        )
    except (OSError, subprocess.SubprocessError) as exc:
        return f"bwrap cannot start here ({one_line(exc, 160)})"
    return (
        None if proc.returncode == 0 else f"bwrap cannot start here ({one_line(proc.stderr.decode(), 160)})"
    )


def decide(mode: str, log) -> bool:
    """Whether the stages run sandboxed, said in one line; `on` without a working bwrap is refused."""
    if mode not in MODES:
        raise UserError(f"audit: --sandbox {mode!r}: allowed: {', '.join(MODES)}")
    if mode == "off":
        log("rerun: not sandboxed (--sandbox off): the stages run with your files, home and network")
        return False
    why = problem()
    if why is None:
        log("rerun: sandboxed (bubblewrap): no home, no network, writes only in the re-run's folder")
        return True
    if mode == "on":
        raise UserError(f"audit: --sandbox on: {why}; {INSTALL}, or choose --sandbox off")
    log(f"rerun: not sandboxed: {why} ({INSTALL}; --sandbox on refuses instead)")
    return False


def _python_folders_under(home: Path) -> list:
    """The interpreter's prefixes and import path entries inside `home`, which the hidden home must give back."""
    wanted = {sys.prefix, sys.base_prefix, sys.exec_prefix, *sys.path}
    inside = sorted({Path(p).resolve() for p in wanted if p and os.path.isdir(p)})
    inside = [p for p in inside if p.is_relative_to(home) and p != home]
    return [p for p in inside if not any(p != q and p.is_relative_to(q) for q in inside)]  # outermost only


def wrap(cmd: list, folder: Path, project: Path) -> list:
    """`cmd` under bwrap: everything read-only, the home an empty tmpfs (the Python installation bound back
    read-only), no network, `folder` (the re-run's temporary folder) writable, and the project's own remote
    settings hidden: `.dvc/config.local` (remote URLs and passwords), and in `.git/config` all but core settings."""
    home = Path.home().resolve()
    argv = ["bwrap", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
    if home != Path("/") and home.is_dir():  # the re-run's folder, bound below, shows through even inside it
        argv += ["--tmpfs", str(home)]
        for kept in _python_folders_under(home):
            argv += ["--ro-bind", str(kept), str(kept)]
        if project.resolve().is_relative_to(home):  # the worktree's .git points into the project's .git
            argv += ["--ro-bind", str(project / ".git"), str(project.resolve() / ".git")]
    git_config = project / ".git" / "config"  # remote URLs and http headers may carry tokens
    if git_config.is_file():  # the stages' git sees its core settings only
        kept = folder / "git-config"
        kept.write_text(_core_settings(git_config), encoding="utf-8")
        argv += ["--ro-bind", str(kept), str(git_config.resolve())]
    argv += ["--bind", str(folder), str(folder)]
    raw = folder / "worktree" / "data" / "raw"
    if raw.is_dir():  # hard links to the auditor's raw files: writing them would write those
        argv += ["--ro-bind", str(raw), str(raw)]
    secret = project / ".dvc" / "config.local"
    if secret.is_file():  # an empty file over it (a device node would not open: bwrap binds with nodev)
        empty = folder / "empty"
        empty.write_bytes(b"")
        argv += ["--ro-bind", str(empty), str(secret.resolve())]
    scratch = folder / "tmp"
    scratch.mkdir(exist_ok=True)
    argv += ["--setenv", "TMPDIR", str(scratch), "--setenv", "HOME", str(home)]
    return [*argv, "--unshare-net", "--die-with-parent", "--", *cmd]


def _core_settings(git_config: Path) -> str:
    """The `core.*` and `extensions.*` settings of a git config file, as one (what the worktree's git needs)."""
    listed = subprocess.run(
        ["git", "config", "--file", str(git_config), "--null", "--get-regexp", r"^(core|extensions)\."],
        capture_output=True,
        text=True,
    ).stdout
    sections: dict = {}
    for entry in filter(None, listed.split("\0")):
        key, _, value = entry.partition("\n")
        section, _, name = key.partition(".")
        quoted = value.replace("\\", "\\\\").replace('"', '\\"')
        sections.setdefault(section, []).append(f'\t{name} = "{quoted}"\n')
    return "".join(f"[{section}]\n" + "".join(lines) for section, lines in sections.items())


def dvc_config(folder: Path) -> str:
    """The worktree's `.dvc/config.local` while sandboxed: no remotes (restoring the prepared data is done by
    then), DVC's cache and site cache inside the re-run's folder, and no `git add` into the project's .git."""
    return (
        f"[core]\n    autostage = false\n    site_cache_dir = {folder / 'dvc-site'}\n"
        f"[cache]\n    dir = {folder / 'dvc-cache'}\n"
    )
