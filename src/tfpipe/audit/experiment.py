"""Which code a re-run of a `dvc exp run` experiment takes: the experiment's own commit when this clone has it,
else the run record's diff.

DVC commits every finished experiment under `refs/exps/`, named as the run's `dvc.exp_name` tag says, its first
parent the baseline the run records as `git.commit`; a teammate shares it with `dvc exp push REMOTE NAME` and
the auditor fetches it with `dvc exp pull REMOTE NAME`. Its changes against the baseline then come from git
(pushed by someone who can push) rather than from the run's `provenance/git_diff.patch` (which anyone with EDIT
on the store can replace), and its dvc.lock is DVC's record of which prepared data it read. Either way the
changes go through the same gate as a recorded diff (`--apply-diff`, `--allow-diff-code`), dvc.lock is never
applied, and the audit says which of the two it did. What this does not know: an experiment fetched under
another name, or one whose baseline is not the recorded commit (then it is not the run's, and is not used)."""

from __future__ import annotations

import re
from pathlib import Path

from tfpipe.audit.common import git_in
from tfpipe.audit.trust import LEFT_OUT


def shared_commit(root: Path, tags: dict):
    """(ref, commit) of the experiment the run names, if this clone has it with the run's commit as its baseline."""
    name, baseline = tags.get("dvc.exp_name"), tags.get("git.commit")
    if not name or not baseline:
        return None
    listed = git_in(root, "for-each-ref", "--format=%(refname) %(objectname)", "refs/exps/").stdout
    for line in listed.splitlines():
        ref, _, commit = line.partition(" ")
        if (
            ref.rsplit("/", 1)[-1] == name
            and git_in(root, "rev-parse", f"{commit}^1").stdout.strip() == baseline
        ):
            return ref, commit
    return None


def _changes(diff: str | None) -> dict:
    """path -> its added and removed lines, from a git diff (DVC's bookkeeping in LEFT_OUT left out); None: no
    diff recorded."""
    changes: dict[str, list[str]] = {}
    path: str | None = None
    for line in (diff or "").splitlines():
        header = re.match(r"diff --git a/(.*) b/(.*)$", line)
        if header:
            path = header.group(2)
            changes[path] = []
        elif path and line[:1] in "+-" and not line.startswith(("+++ ", "--- ")):
            changes[path].append(line)
    return {p: tuple(lines) for p, lines in changes.items() if p not in LEFT_OUT}


def choose(run: dict, root: Path, log) -> dict:
    """The run, its diff and dvc.lock taken from the experiment's commit when this clone has it; one line saying
    which code the re-run takes."""
    tags, baseline = run["tags"], run["tags"].get("git.commit", "")
    name = tags.get("dvc.exp_name")
    if not name:
        return run
    found = shared_commit(root, tags)
    if found is None:
        log(
            f"rerun: experiment {name!r} is not in this clone (`dvc exp pull REMOTE {name}` fetches it if it was "
            f"pushed): re-running its baseline {baseline[:12]} plus the run record's diff"
        )
        return run
    ref, commit = found
    diff = git_in(root, "diff", "--no-color", "--no-ext-diff", baseline, commit).stdout
    lock = git_in(root, "show", f"{commit}:dvc.lock")
    log(
        f"rerun: experiment {name!r} is in this clone ({ref}, commit {commit[:12]}): re-running its baseline "
        f"{baseline[:12]} plus the experiment commit's changes (from git, not the run record's diff)"
    )
    differing = sorted(set(_changes(diff).items()) ^ set(_changes(run.get("git_diff")).items()))
    if differing:
        paths = sorted({path for path, _ in differing})
        log(f"rerun: the run record's diff differs from the experiment's commit in {', '.join(paths[:5])}")
    recorded_lock = lock.stdout if lock.returncode == 0 else run.get("dvc_lock")
    return {
        **run,
        "git_diff": diff,
        "dvc_lock": recorded_lock,
        "diff_source": f"`git diff {baseline[:12]} {commit[:12]}`",
    }
