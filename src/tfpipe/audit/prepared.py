"""The re-run's prepared data, by the hashes the run recorded: its dvc.lock entry, the auditor's DVC cache and
remotes (made absolute for the temporary worktree), else prepared again from the auditor's raw data."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Optional

from tfpipe import provenance
from tfpipe.audit import trust

# Where the re-run's prepared data came from (in its log and report.json "prepared_data").
FROM_CACHE = "restored from the DVC cache"
FROM_REMOTE = "pulled from the DVC remote"
PREPARED_AGAIN = "prepared again from the auditor's raw data"
CHECKOUT_TYPE = "reflink,copy"  # how the worktree's prepared data leaves the auditor's cache: never a link


def dvc_config_local(root: Path) -> str:
    """The auditor's DVC cache and remotes for the worktree, paths made absolute (a relative remote URL would
    resolve against the temporary worktree): prepared data is restored by hash from them, as copies
    (CHECKOUT_TYPE, whatever `cache.type` the commit or the auditor set). URLs only: remote credentials reach the
    re-run only through --pass-env."""
    from dvc.repo import Repo

    with Repo(str(root)) as repo:
        conf = repo.config
        cache = conf["cache"].get("dir") or str(root / ".dvc" / "cache")
        # copies, never links: a hard link or symlink into the auditor's cache would let the stages write it
        lines = ["[cache]", f"    dir = {cache}", f"    type = {CHECKOUT_TYPE}"]
        if conf["core"].get("remote"):
            lines += ["[core]", f"    remote = {conf['core']['remote']}"]
        for name, remote in conf["remote"].items():
            lines += [f"['remote \"{name}\"']", f"    url = {remote['url']}"]
    return "\n".join(lines) + "\n"


def lock_recorded_prepare(wt: Path, recorded_lock: Optional[str]) -> None:
    """Put the prepare entry of the dvc.lock the run recorded at train time into the worktree's dvc.lock: the
    commit's own lock is usually older (a run's dvc.lock is committed after the run) or absent. Outputs are
    kept only at plain relative paths; the entry names content by hash, never a command DVC would run."""
    import yaml

    entry = provenance.lock_stages(recorded_lock).get("prepare") or {}
    try:
        outs = [
            o
            for o in entry["outs"]
            if not Path(o["path"]).is_absolute() and ".." not in Path(o["path"]).parts
        ]
    except (TypeError, KeyError, AttributeError):
        return
    lock_file = wt / "dvc.lock"
    stages = provenance.lock_stages(lock_file.read_text(encoding="utf-8") if lock_file.is_file() else None)
    lock = {"schema": "2.0", "stages": {**stages, "prepare": {**entry, "outs": outs}}}
    trust.write_inside(wt, "dvc.lock", yaml.safe_dump(lock, sort_keys=False))


def restore_prepared(wt: Path, env: dict, log) -> str:
    """The prepared data by the hashes the run's dvc.lock records: from the DVC cache, else from the DVC remote
    (`dvc pull`), else (neither has it) prepared again from the auditor's raw data; returns which."""
    dvc = [sys.executable, "-m", "dvc"]
    if not _recorded_outs(wt / "dvc.lock"):
        log("rerun: no prepared-data hashes recorded: preparing it again from raw data")
        return PREPARED_AGAIN
    for source, cmd in (
        (FROM_CACHE, [*dvc, "checkout", "prepare"]),
        (FROM_REMOTE, [*dvc, "pull", "prepare"]),
    ):
        proc = subprocess.run(cmd, cwd=wt, env=env, capture_output=True, text=True)
        status = subprocess.run(
            [*dvc, "status", "--json", "prepare"], cwd=wt, env=env, capture_output=True, text=True
        )
        if proc.returncode == 0 and status.returncode == 0 and not _outs_changed(status.stdout):
            log(f"rerun: prepared data {source}")
            return source
    log("rerun: prepared data in neither the DVC cache nor a DVC remote: preparing it again from raw data")
    return PREPARED_AGAIN


def _recorded_outs(lock_file: Path) -> list:
    """The prepare outputs the worktree's dvc.lock names by hash (none: there is nothing to restore)."""
    try:
        outs = provenance.lock_stages(lock_file.read_text(encoding="utf-8")).get("prepare", {}).get("outs")
    except OSError:
        return []
    return list(outs) if isinstance(outs, list) else []


def _outs_changed(status_json: str) -> bool:
    """`dvc status --json prepare` lists an output as changed/deleted/not in cache when it is not restored."""
    try:
        entries = json.loads(status_json or "{}").get("prepare", [])
    except (ValueError, AttributeError):
        return True
    return any("changed outs" in entry for entry in entries if isinstance(entry, dict))
