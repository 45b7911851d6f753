"""The re-run's stages in a sandbox: an audit re-executes code someone else recorded, so it runs under
bubblewrap (`bwrap`), or not at all unless the auditor says `--sandbox off`.

Inside, whoever audits: a kernel uid that is not root and holds no capability (an auditor who is root: uid and
gid 65534, `setpriv` dropping every capability, the bounding set and new privileges once bwrap has built the
view; anyone else: their own uid in a user namespace, `--cap-drop ALL`); new pid, ipc, uts, net and cgroup
namespaces (no other process, no network, not even this machine's loopback or its abstract Unix sockets) with a
fresh `/proc`; a file system that holds only the system folders read-only (`SYSTEM`), the Python installation
read-only, an empty `/tmp` and an empty home, the project's `.git` read-only with its config reduced to the core
settings, and the re-run's own folder writable (its raw data hard links read-only; any other file it shares
with the auditor's, a DVC cache's hard link, replaced by a copy first: `workfolder`). Not there: the rest of the
project (`.env`, `.dvc/config.local`), your home, `/root`, `/home`, `/run`, `/var` and the host's `/tmp`, so no
host Unix socket either. The environment is an allowlist (`environment`), handed to bwrap as its whole
environment (bwrap's `--setenv` would show the values in the process list).

Why root drops its uid inside and not before bwrap: bwrap run by uid 65534 cannot bind what uid 65534 cannot
reach (a Python under `/root`, a project under a 0700 folder; `--bind-fd` too resolves the path), so root's
bwrap builds the view and `setpriv` drops to 65534 before the stage's first instruction."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Optional

from tfpipe.audit import workfolder
from tfpipe.audit.common import UserError
from tfpipe.audit.trust import ENV_SECRET
from tfpipe.errors import one_line

MODES = ("auto", "on", "off")  # auto: as on (kept so that existing command lines parse)
INSTALL = "install bubblewrap (Debian/Ubuntu: apt-get install bubblewrap)"
INSTALL_SETPRIV = "install util-linux (Debian/Ubuntu: apt-get install util-linux)"
NOBODY = 65534  # the uid and gid a root auditor's stages run as
SYSTEM = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/opt", "/sys")
# The stages' environment inside: what `trust.stage_env` keeps and `rerun` sets (its temporary store, no DVC
# analytics), less HOME, TMPDIR and USER, which the sandbox sets or drops; plus the names passed with --pass-env.
ENV_KEEP = {"PATH", "LANG", "LANGUAGE", "TZ", "TERM", "PYTHONPATH", "PYTHONHASHSEED", "CUDA_VISIBLE_DEVICES"}
ENV_KEEP |= {"MLFLOW_TRACKING_URI", "DVC_NO_ANALYTICS"}
ENV_KEEP_PREFIXES = ("LC_", "TF_", "OMP_", "KMP_", "ONEDNN_", "DNNL_")
SITE = ("site-packages", "dist-packages")
ENV_SECRET_TOO = re.compile(r"USER|LOGIN|NETRC|COOKIE|SESSION", re.IGNORECASE)


def problem() -> Optional[str]:
    """None when the sandbox runs this Python here, as `wrap` builds it, else why not, in a few words."""
    if not shutil.which("bwrap"):
        return "bubblewrap (bwrap) is not installed"
    if os.geteuid() == 0 and not shutil.which("setpriv"):
        return f"setpriv, which drops root to uid {NOBODY} in the sandbox, is not installed"
    with tempfile.TemporaryDirectory(prefix="tfpipe-sandbox-probe-") as folder:
        argv = wrap([sys.executable, "-I", "-S", "-c", ""], Path(folder), None)
        env = environment(dict(os.environ), (), Path(folder))
        try:
            proc = subprocess.run(argv, cwd=folder, env=env, capture_output=True, text=True, timeout=60)
            why = None if proc.returncode == 0 else proc.stderr
        except (OSError, subprocess.SubprocessError) as exc:
            why = str(exc)
    return None if why is None else f"bwrap cannot start here ({one_line(why, 160)})"


def decide(mode: str, log) -> bool:
    """Whether the stages run sandboxed, said in one line; without a working sandbox anything but `off` is
    refused (called before the re-run makes its folder or worktree)."""
    if mode not in MODES:
        raise UserError(f"audit: --sandbox {mode!r}: allowed: {', '.join(MODES)}")
    if mode == "off":
        log("rerun: not sandboxed (--sandbox off): the stages run with your files, home and network")
        return False
    why = problem()
    if why is not None:
        fix = INSTALL_SETPRIV if why.startswith("setpriv") else INSTALL
        raise UserError(f"audit: --sandbox {mode}: {why}; {fix}, or choose --sandbox off")
    who = f"as uid {NOBODY}" if os.geteuid() == 0 else "in a user namespace"
    log(
        f"rerun: sandboxed (bubblewrap): {who}, no capabilities, no home, no network, no other process, "
        "writes only in the re-run's folder"
    )
    return True


def _home() -> Path:
    """The home the stages see (an empty tmpfs): yours by name, a fixed one where yours is none."""
    home = Path(os.path.abspath(os.path.expanduser("~")))
    return home if home != Path("/") else Path("/tmp/home")


def environment(env: dict, passed: tuple, folder: Path) -> dict:
    """The stages' whole environment inside: locale, thread and kernel settings, `PATH` (this Python's folder
    first), `PYTHONPATH`, the temporary store's URI, the names passed with `--pass-env`; HOME the empty home,
    TMPDIR in the re-run's folder, git told the worktree is safe (its owner inside may differ from its
    .git's). Nothing else: no credential-looking name (`trust.ENV_SECRET`, `...USER...`) unless passed."""
    out = {}
    for name, value in env.items():
        kept = name in ENV_KEEP or name.startswith(ENV_KEEP_PREFIXES)
        if name in passed or (kept and not ENV_SECRET.search(name) and not ENV_SECRET_TOO.search(name)):
            out[name] = value
    out["PATH"] = os.pathsep.join([os.path.dirname(sys.executable), out.get("PATH") or os.defpath])
    out.update(HOME=str(_home()), TMPDIR=str(folder / "tmp"))
    out.update(GIT_CONFIG_COUNT="1", GIT_CONFIG_KEY_0="safe.directory", GIT_CONFIG_VALUE_0="*")
    return out


def _python_folders(avoid: list) -> list:
    """The interpreter's prefixes, and the import path folders under one of them or named site-packages (a
    user site), outermost only; not those the system folders hold already, nor one that is or holds one of
    `avoid` (the project, the home, the re-run's folder), nor other import path folders (the current folder,
    PYTHONPATH's, a source checkout's): binding one would show the files beside its modules."""
    prefixes = {Path(p).resolve() for p in (sys.prefix, sys.base_prefix, sys.exec_prefix)}
    found = {Path(p).resolve() for p in sys.path if p and os.path.isdir(p)}
    found = {p for p in found if p.name in SITE or any(p.is_relative_to(q) for q in prefixes)} | prefixes
    found = {p for p in found if p.is_dir() and not any(p.is_relative_to(s) for s in SYSTEM)}
    found = {p for p in found if not any(a.is_relative_to(p) for a in avoid)}
    return sorted(p for p in found if not any(p != q and p.is_relative_to(q) for q in found))


def _parents(dest: Path) -> list:
    """`--dir` for each folder above `dest`, readable by all (bwrap makes missing ones 0700, root's when root
    runs it, which uid 65534 could not pass)."""
    return [a for p in reversed(dest.parents) if p.parent != p for a in ("--perms", "0755", "--dir", str(p))]


def _bind(src: Path, dest: Path, writable: bool = False) -> list:
    return [*_parents(dest), "--bind" if writable else "--ro-bind", str(src), str(dest)]


def _system() -> list:
    """The system folders read-only (a symlink such as /bin -> usr/bin as the same symlink)."""
    argv = []
    for name in SYSTEM:
        if os.path.islink(name):
            argv += ["--symlink", os.readlink(name), name]
        elif os.path.isdir(name):
            argv += _bind(Path(name), Path(name))
    return argv


def _namespaces(privileged: bool) -> list:
    """Root's bwrap keeps only what `setpriv` needs to drop to uid 65534 (and drop those too); anyone else's
    makes a user namespace and holds no capability in it."""
    unshare = ["--unshare-pid", "--unshare-ipc", "--unshare-net", "--unshare-uts", "--unshare-cgroup-try"]
    if privileged:
        kept = [a for cap in ("CAP_SETUID", "CAP_SETGID", "CAP_SETPCAP") for a in ("--cap-add", cap)]
        return [*unshare, "--cap-drop", "ALL", *kept]
    return ["--unshare-all", "--unshare-user", *unshare, "--cap-drop", "ALL"]


def _drop() -> list:
    """`setpriv` to uid and gid 65534: no groups, no capability in any set, no new privileges (setuid files)."""
    return [
        shutil.which("setpriv") or "setpriv",
        f"--reuid={NOBODY}",
        f"--regid={NOBODY}",
        "--clear-groups",
        "--inh-caps=-all",
        "--bounding-set=-all",
        "--no-new-privs",
        "--",
    ]


def wrap(cmd: list, folder: Path, project: Optional[Path], privileged: Optional[bool] = None) -> list:
    """`cmd` under bwrap (see the module's docstring): `folder` (the re-run's temporary folder) writable, the
    project's .git read-only with a config of core settings, nothing else of the project. `privileged`
    (default: whether this process is root) drops to uid 65534 inside and hands `folder` over to it."""
    privileged = os.geteuid() == 0 if privileged is None else privileged
    folder, home = Path(folder).resolve(), _home()
    project = Path(project).resolve() if project is not None else None
    (folder / "tmp").mkdir(exist_ok=True)
    workfolder.own_copies(folder)  # no file shared with the auditor's (a DVC cache's link) but the raw data
    if privileged:
        workfolder.hand_over(folder, NOBODY)
    argv = [shutil.which("bwrap") or "bwrap", *_namespaces(privileged), "--die-with-parent", "--new-session"]
    argv += ["--dev", "/dev", "--proc", "/proc", "--perms", "1777", "--tmpfs", "/tmp", *_system()]
    argv += [*_parents(home), "--perms", "0777", "--tmpfs", str(home)]
    if project is not None and any(project.is_relative_to(s) for s in SYSTEM):
        argv += ["--tmpfs", str(project)]  # a project under /opt: none of its files but .git
    for kept in _python_folders([p for p in (project, home, folder) if p is not None]):
        argv += _bind(kept, kept)
    argv += _git_dir(project, folder) if project is not None else []
    argv += _bind(folder, folder, writable=True)
    raw = workfolder.raw(folder)
    if raw.is_dir():  # hard links to the auditor's raw files: writing them would write those
        argv += ["--ro-bind", str(raw), str(raw)]
    return [*_once(argv), "--", *(_drop() if privileged else []), *cmd]


def _once(argv: list) -> list:
    """bwrap's options without a second `--dir` of a folder, nor one over a folder a tmpfs made."""
    out, made, i = [], set(), 0
    while i < len(argv):
        if argv[i] == "--perms" and argv[i + 2] == "--dir":
            if argv[i + 3] not in made:
                out += argv[i : i + 4]
            made.add(argv[i + 3])
            i += 4
            continue
        if argv[i] == "--tmpfs":
            made.add(argv[i + 1])
        out.append(argv[i])
        i += 1
    return out


def _git_dir(project: Path, folder: Path) -> list:
    """The project's git directory read-only (the worktree's `.git` points into it), its config reduced to the
    core settings (remote URLs and http headers may carry tokens), written in `folder` (root's, read-only)."""
    git = _common_git_dir(project)
    if git is None:
        return []
    argv = _bind(git, git)
    config = git / "config"
    if config.is_file():
        kept = folder / "git-config"
        kept.write_text(_core_settings(config), encoding="utf-8")
        kept.chmod(0o644)  # root's, read by uid 65534 inside, whatever the umask
        argv += ["--ro-bind", str(kept), str(config)]
    return argv


def _common_git_dir(project: Path) -> Optional[Path]:
    """The project's `.git`, or where its `.git` file points (a worktree's: its `commondir`), read as files:
    git itself would refuse a repository its caller does not own."""
    dot = project / ".git"
    if dot.is_dir():
        return dot.resolve()
    try:
        line = dot.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError):
        return None
    if not line.startswith("gitdir: "):
        return None
    gitdir = (project / line[len("gitdir: ") :]).resolve()
    common = gitdir / "commondir"
    return (gitdir / common.read_text(encoding="utf-8").strip()).resolve() if common.is_file() else gitdir


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
