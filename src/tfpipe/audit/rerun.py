"""`rerun`: re-create a recorded run in a temporary git worktree at its commit and judge the outcome."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Optional

from tfpipe.audit import experiment, record_values, review, sandbox, scratch, trust, verdict
from tfpipe.audit import warmstart as warm
from tfpipe.audit.common import UserError, git_in, load_recorded, tracking_uri_for
from tfpipe.audit.prepared import PREPARED_AGAIN, dvc_config_local, lock_recorded_prepare, restore_prepared
from tfpipe.audit.verdict import RerunResult, format_rerun, judge  # noqa: F401 - also read as rerun.*


def _copy_tree_linked(src: Path, dst: Path) -> None:
    def link(s, d):
        try:
            os.link(s, d)
        except OSError:
            shutil.copy2(s, d)

    shutil.copytree(src, dst, copy_function=link, symlinks=True)


def _recorded_run(run_id: str, root: Path, uri: str, tolerance: float) -> dict:
    """The run to re-create, refused in one line when it lacks what a re-run needs."""
    run = load_recorded(run_id, uri)
    commit = run["tags"].get("git.commit")
    if not commit:
        raise UserError(f"run {run_id}: no git.commit tag recorded; cannot re-create it")
    if run.get("config") is None:
        raise UserError(f"run {run_id}: no config/resolved.yaml artifact; cannot re-create it")
    if git_in(root, "cat-file", "-e", f"{commit}^{{commit}}").returncode != 0:
        raise UserError(f"run {run_id}: commit {commit[:12]} is not reachable in {root}")
    if tolerance < 0:
        raise UserError(f"--tolerance={tolerance}: must be >= 0")
    return run


def _make_worktree(
    root: Path, run: dict, tmp: Path, log, uri: str = "", allow_diff_code: bool = False
) -> Path:
    """A git worktree at the run's commit (plus its recorded diff), its params.yaml (the record's values, none
    naming code the commit's conf/ does not name at the same key: `record_values`), raw data, DVC cache and
    warm-start weights."""
    import yaml

    commit = run["tags"]["git.commit"]
    wt = tmp / "worktree"
    proc = git_in(root, "worktree", "add", "--detach", "-q", str(wt), commit)
    if proc.returncode != 0:
        raise UserError(f"git worktree add at {commit[:12]} failed: {proc.stderr.strip()[:300]}")
    trusted = record_values.named_in(wt)  # the commit's own conf/ and params.yaml, before any recorded diff
    patch = None
    if run.get("git_diff"):  # allowed by trust.gate: made from a dirty tree, --apply-diff DIGEST its digest
        patch = tmp / "recorded.patch"
        patch.write_bytes(review.raw(run["git_diff"]))  # the bytes as recorded: the ones reviewed
        trust.apply_diff(wt, patch, commit)
        if allow_diff_code:  # the auditor read the diff and lets its code run: its conf/ names code too
            trusted = record_values.named_in(wt, trusted)
    trust.print_plan(wt, commit, patch, log)
    values = record_values.overrides(record_values.recorded_config(run, log), trusted)
    cfg = trust.reroot(record_values.nested(values), root, wt)
    trust.check_named_code(cfg, wt)
    # The re-run tracks into its own temporary store only: never the recorded server or artifact folder.
    cfg.setdefault("tracking", {}).update(uri=None, artifact_location=None)
    init = warm.recorded_source(run.get("run_id", "?"), run["tags"], root, uri, tmp, log)
    if init:  # the re-run's store is a new one: it starts from the verified copy, not the recorded URI
        cfg["train"]["init_from"] = str(init)
    trust.write_inside(wt, "params.yaml", yaml.safe_dump(cfg, sort_keys=False))
    lock_recorded_prepare(wt, run.get("dvc_lock"))
    raw = root / "data" / "raw"
    if raw.is_dir():  # git-ignored raw data (a DVC stage dependency): hard-linked in
        for child in raw.iterdir():
            target = wt / "data" / "raw" / child.name
            if child.is_dir() and not target.exists():
                _copy_tree_linked(child, target)
    if (root / ".dvc").is_dir():  # the auditor's remote settings; a committed symlink there is refused
        if not (wt / ".dvc").is_symlink():
            (wt / ".dvc").mkdir(exist_ok=True)
        trust.write_inside(wt, ".dvc/config.local", dvc_config_local(root))
    return wt


def _run_stages(wt: Path, store: str, log, pass_env: tuple = (), sandboxed: bool = False, root=None) -> str:
    """dvc repro of the three stages in the worktree, tracking into `store`, credentials stripped; sandboxed:
    under bubblewrap (`tfpipe.audit.sandbox`)."""
    from tfpipe.provenance import environ_snapshot

    env = trust.stage_env(environ_snapshot(), pass_env)
    env.update(
        MLFLOW_TRACKING_URI=store,
        PYTHONPATH=os.pathsep.join([str(wt / "src"), env.get("PYTHONPATH", "")]),
        DVC_NO_ANALYTICS="1",
        TF_CPP_MIN_LOG_LEVEL="2",
    )
    source = restore_prepared(wt, env, log)
    dvc = [sys.executable, "-m", "dvc", "repro"]
    if sandboxed:
        trust.write_inside(wt, ".dvc/config.local", sandbox.dvc_config(wt.parent))
        dvc = sandbox.wrap(dvc, wt.parent, Path(root))  # root: the folder handed over to uid 65534
        env = sandbox.environment(env, pass_env, wt.parent)  # the whole environment inside: an allowlist
    steps = [("train", ["-f", "-s", "train"]), ("evaluate", ["-f", "-s", "evaluate"])]
    if source == PREPARED_AGAIN:
        steps.insert(0, ("prepare from the auditor's raw data", ["prepare"]))
    for step, args in steps:
        log(f"rerun: {step} ...")
        proc = _run_group([*dvc, *args], wt, env)
        if proc.returncode != 0:
            tail = (proc.stdout + proc.stderr).strip().splitlines()[-5:]
            shown = " ".join(["dvc", "repro", *args])
            raise UserError(f"rerun: `{shown}` failed in the worktree: {' | '.join(tail)[:800]}")
    return source


def _run_group(cmd: list, cwd: Path, env: dict) -> subprocess.CompletedProcess:
    """`cmd` in a process group of its own (dvc and the stage it starts); when the audit is stopped (Ctrl-C, a
    timeout's SIGTERM: `interrupts.graceful_stop` raises here) the whole group is stopped before the worktree goes."""
    proc = subprocess.Popen(
        cmd,
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate()
    except BaseException:
        _stop_group(proc)
        raise
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def _stop_group(proc: subprocess.Popen, grace: float = 30.0) -> None:
    """SIGTERM to the group (the stages checkpoint and end their MLflow runs KILLED), SIGKILL after `grace`."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        try:
            proc.communicate(timeout=grace)
            break
        except subprocess.TimeoutExpired:
            continue
    with contextlib.suppress(ProcessLookupError):  # stragglers of a leader that exited first
        os.killpg(proc.pid, signal.SIGKILL)


def rerun(
    run_id: str,
    root,
    uri: Optional[str] = None,
    *,
    tolerance: float = 0.0,
    keep: bool = False,
    log=print,
    apply_diff: Optional[str] = None,
    trusted_ref: Optional[str] = None,
    pass_env: tuple = (),
    allow_diff_code: bool = False,
    sandbox_mode: str = "auto",
) -> RerunResult:
    """Re-create run `run_id` in a temporary git worktree at its commit and compare the outcome (`verdict`).
    `apply_diff`: the digest of the dirty run's recorded diff, as printed without it (`review`)."""
    import yaml

    from tfpipe.tracking import reading

    root = Path(root).resolve()
    uri = tracking_uri_for(root, uri)
    run = experiment.choose(_recorded_run(run_id, root, uri, tolerance), root, log)
    trust.gate(run_id, run, root, apply_diff, trusted_ref, allow_diff_code, log=log)
    sandboxed = sandbox.decide(sandbox_mode, log)
    recorded = verdict.recorded(run, reading.sealed_weights(uri, run_id))  # what nobody can rewrite
    tmp = scratch.folder(log)  # the leftovers of killed audits removed first
    wt = tmp / "worktree"
    try:
        wt = _make_worktree(root, run, tmp, log, uri, allow_diff_code)
        store = f"sqlite:///{tmp / 'mlflow.db'}"
        prepared = _run_stages(wt, store, log, tuple(pass_env), sandboxed, root)
        params = yaml.safe_load((wt / "params.yaml").read_text())  # the record's values, re-rooted in wt
        new_id = json.loads((wt / (params["tracking"].get("run_file") or "run.json")).read_text())["run_id"]
        new = reading.load_run(store, new_id)
        again = verdict.rerun_side(new, reading.sealed_weights(store, new_id), recorded)
    finally:
        scratch.remove(root, wt, tmp, keep, log)
    word, diffs, n = verdict.judge(recorded, again, tolerance)
    report = verdict.report(run_id, run, prepared, word, (diffs, n), (recorded, again), tolerance)
    now, who = report["time"], report["auditor"]
    refused = reading.record_audit(
        uri,
        run_id,
        {"audit.verdict": word, "audit.time": now, "audit.by": who["mlflow_user"] or who["user"] or "?"},
        report,
        f"rerun-{now.replace(':', '')}.json",
    )
    if refused:
        log(refused)
    notes = verdict.notes(recorded, again, word)
    return RerunResult(word, recorded.weights, again.weights, diffs, n, new_id, report, notes)
