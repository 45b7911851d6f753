"""Where a run came from: git state, the DVC lock, and the software/hardware environment.

`collect(project_root)` is cheap (a few git calls, file reads and package metadata look-ups;
well under a second) and never imports TensorFlow: the GPU list is only read when TensorFlow is
already imported. Nothing here imports mlflow; `tracking` turns the result into tags/artifacts.

Dirty flag: True when a TRACKED file differs from HEAD (staged or not), i.e.
`git status --porcelain --untracked-files=no` prints something. Untracked files do not count:
pipeline outputs are git-ignored anyway, and a stray scratch file does not change what the
committed code computes. `git.diff` is `git diff HEAD` (tracked changes only) when dirty, without the
credential files of SECRET_PATHS (`.dvc/config`, `.env`, keys, ...); `git.diff_excluded` names the dirty
ones left out.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import Any, Optional

from tfpipe import hardware

GIT_TIMEOUT_S = 10
MAX_DIFF_CHARS = 1_000_000  # a runaway diff (e.g. a committed data file rewritten) is cut here
# files that hold credentials by convention: never in the recorded diff (`git.diff_excluded` lists the
# ones that were dirty, so an audit knows the diff is partial)
SECRET_PATHS = (
    "**/.dvc/config",
    "**/.dvc/config.local",
    "**/.env",
    "**/.env.*",
    "**/.envrc",
    "**/*.pem",
    "**/*.key",
    "**/*.p12",
    "**/*.pfx",
    "**/id_rsa*",
    "**/id_ed25519*",
    "**/.netrc",
    "**/.pypirc",
    "**/.npmrc",
    "**/.git-credentials",
    "**/credentials.json",
    "**/.aws/credentials",
    "**/.docker/config.json",
    "**/*.tfvars",
)
EXCLUDE_PATHSPECS = tuple(f":(top,glob,exclude){p}" for p in SECRET_PATHS)

# distribution names whose versions are recorded; first installed alternative wins
PACKAGES = {
    "tensorflow": ("tensorflow", "tensorflow-cpu", "tensorflow-macos", "tf-nightly"),
    "keras": ("keras",),
    "mlflow": ("mlflow", "mlflow-skinny"),
    "dvc": ("dvc",),
    "tensorflow_datasets": ("tensorflow-datasets", "tfds-nightly"),
    "hydra": ("hydra-core",),
    "numpy": ("numpy",),
}


def collect(project_root: str | os.PathLike) -> dict:
    """Provenance facts as JSON-able data.

    {
      "git": {"commit": str|None, "branch": str|None, "dirty": bool|None, "diff": str|None,
              "diff_excluded": [path]},
      "dvc_lock": {"present": bool, "content": str|None, "stages": {stage: sha256-hex}},
      "environment": {"python": "3.11.7", "packages": {"tensorflow": "2.21.0", ...},
                      "platform": str, "cpu": str|None, "cpu_flags": str, "num_cpus": int,
                      "gpus": [str]|None},
    }
    `git.*` is None outside a git work tree (or without git). `gpus` is None when TensorFlow
    was not imported yet (not probed, to stay fast).
    """
    root = Path(project_root)
    return {"git": git_info(root), "dvc_lock": dvc_lock_info(root), "environment": environment()}


# ----------------------------------------------------------------------------- git


def environ_snapshot(environ=None) -> dict:
    """A copy of the environment that a concurrent change cannot break: MLflow's threads (telemetry) add and
    remove variables while we read, and iterating os.environ then raises KeyError for a vanished name."""
    if environ is not None:
        return dict(environ)
    for _ in range(
        100
    ):  # listing the names walks a dict in Python code: a change meanwhile raises RuntimeError
        try:
            names = list(os.environ.keys())
            break
        except RuntimeError:
            continue
    snapshot = {}
    for name in names:
        value = os.environ.get(name)
        if value is not None:
            snapshot[name] = value
    return snapshot


def run_git(root: Path, *args: str, timeout: float = GIT_TIMEOUT_S) -> subprocess.CompletedProcess:
    """`git ARGS` in `root`, output captured, C locale, no optional locks (never blocks another git)."""
    env = {**environ_snapshot(), "GIT_OPTIONAL_LOCKS": "0", "LC_ALL": "C"}
    return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, timeout=timeout, env=env)


def _git(root: Path, *args: str) -> Optional[str]:
    try:
        proc = run_git(root, *args)
    except (OSError, subprocess.SubprocessError):
        return None
    return proc.stdout if proc.returncode == 0 else None


def git_info(root: str | os.PathLike) -> dict:
    root = Path(root)
    info: dict[str, Any] = {"commit": None, "branch": None, "dirty": None, "diff": None, "diff_excluded": []}
    if not root.is_dir():
        return info
    commit = _git(root, "rev-parse", "--verify", "-q", "HEAD")
    if commit is None:  # not a repo, no git, or a repo without commits
        return info
    info["commit"] = commit.strip()
    branch = _git(root, "rev-parse", "--abbrev-ref", "HEAD")
    info["branch"] = branch.strip() if branch and branch.strip() != "HEAD" else None
    status = _git(root, "status", "--porcelain", "--untracked-files=no")
    if status is not None:
        info["dirty"] = bool(status.strip())
        if info["dirty"]:
            info["diff"], info["diff_excluded"] = recorded_diff(root)
    return info


def recorded_diff(root: Path, base: str = "HEAD") -> tuple:
    """(`git diff BASE` without the SECRET_PATHS files, the changed tracked files it left out); the audit
    can compare a tree to a run's recorded diff with `recorded_diff(root, commit)`."""
    diff = _git(root, "diff", base, "--no-color", "--no-ext-diff", "--", ":/", *EXCLUDE_PATHSPECS)
    if diff is not None and len(diff) > MAX_DIFF_CHARS:
        diff = diff[:MAX_DIFF_CHARS] + f"\n... [diff truncated at {MAX_DIFF_CHARS} characters]\n"
    names = ("diff", base, "--name-only", "--no-renames")
    everything = set((_git(root, *names) or "").splitlines())
    kept = set((_git(root, *names, "--", ":/", *EXCLUDE_PATHSPECS) or "").splitlines())
    return diff, sorted(everything - kept)


# ----------------------------------------------------------------------------- dvc.lock


def dvc_lock_info(root: str | os.PathLike) -> dict:
    """dvc.lock text plus, per stage, the sha256 of its lock entry (cmd, deps, params, outs).

    The per-stage hash changes exactly when DVC would consider that stage's recorded state
    changed, so it identifies which data/code/params versions produced a run.
    """
    path = Path(root) / "dvc.lock"
    info: dict[str, Any] = {"present": False, "content": None, "stages": {}}
    if not path.is_file():
        return info
    content = path.read_text(encoding="utf-8")
    info["present"] = True
    info["content"] = content
    info["stages"] = stage_hashes(content)
    return info


def lock_stages(lock_text: Optional[str]) -> dict:
    """The stages of a dvc.lock's text, {name: entry}: {} for none, for text that is no YAML or no lock, and an
    entry that is no mapping is left out. Never raises: the one reader of dvc.lock (a run record's is untrusted)."""
    import yaml

    try:
        lock = yaml.safe_load(lock_text or "") or {}
    except yaml.YAMLError:
        return {}
    stages = lock.get("stages") if isinstance(lock, dict) else None
    if not isinstance(stages, dict):
        return {}
    return {name: entry for name, entry in stages.items() if isinstance(entry, dict)}


def stage_hashes(lock_text: str) -> dict:
    stages = lock_stages(lock_text)
    return {
        str(name): hashlib.sha256(json.dumps(entry, sort_keys=True, default=str).encode("utf-8")).hexdigest()
        for name, entry in stages.items()
    }


# ----------------------------------------------------------------------------- environment


def package_versions() -> dict:
    out: dict[str, Optional[str]] = {}
    for key, dists in PACKAGES.items():
        out[key] = None
        for dist in dists:
            try:
                out[key] = metadata.version(dist)
                break
            except metadata.PackageNotFoundError:
                continue
    return out


def cpu_model() -> Optional[str]:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as fh:
            for line in fh:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def gpus() -> Optional[list]:
    tf = sys.modules.get("tensorflow")
    if tf is None:
        return None
    try:
        return [d.name for d in tf.config.list_physical_devices("GPU")]
    except Exception:  # a half-initialised TF must not break provenance
        return None


def environment() -> dict:
    try:
        num_cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        num_cpus = os.cpu_count() or 0
    return {
        "python": platform.python_version(),
        "packages": package_versions(),
        "platform": platform.platform(),
        "cpu": cpu_model(),
        "cpu_flags": hardware.cpu_kernels(),  # the model name alone does not tell AVX2-only from AVX512 EPYCs
        "num_cpus": num_cpus,
        "gpus": gpus(),
    }


def pip_freeze() -> str:
    """Every installed distribution as sorted `name==version` lines (what `pip freeze` lists for
    non-editable installs), read from package metadata without starting pip."""
    seen = {}
    for dist in metadata.distributions():
        name = (dist.metadata["Name"] if "Name" in dist.metadata else "").strip()  # no Name header: none
        if name and name.lower() not in seen:
            seen[name.lower()] = f"{name}=={dist.version}"
    return "\n".join(seen[k] for k in sorted(seen)) + "\n"
