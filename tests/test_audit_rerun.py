"""`audit --rerun` end to end on one real run, recorded once by `dvc repro` (the slow part, shared by both tests
through the module fixture `dirty_run`).

The run is a dirty experiment made in clone A against a team store (a SQLite tracking store and an artifact
root outside every clone), with precision=auto. A audits its own run: the check passes while A's tree still
holds the run's diff (DVC's dvc.lock/.gitignore are not code changes), then, the tree clean again, `--rerun
--apply-diff DIGEST` (the digest of the diff as recorded) from A's own DVC cache is REPRODUCED with the policy
the run resolved to, the verdict recorded, the metrics untouched, no worktree left.

- The verdicts and exit codes: that rerun is REPRODUCED (exit 0) only because it applies the recorded diff;
  the run's test_accuracy then rewritten in the store -> DIFFERS (exit 1) even with a --tolerance above the
  change: the verdict compares the run's immutable record (param tfpipe.metric.test_accuracy) and names the
  rewritten metric as tampered.
- A teammate audits the run: clone B (another folder, its own empty DVC cache) re-runs it, first with its own
  copy of the raw data and no reachable remote (prepared again, and the report says so), then without raw
  data but with the team's DVC remote (the prepared data pulled by hash). Both verdicts are REPRODUCED and
  nothing in A changes: every path the record holds is re-rooted into B's worktree.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from test_pipeline_e2e import _make_project, _run

from tfpipe.audit.review import digest

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow
GIT = ["git", "-c", "user.name=t", "-c", "user.email=t@t"]
DVC = [sys.executable, "-m", "dvc"]

# A dirty experiment: the learning rate doubled in code, not in the config. The rerun reproduces the run only
# if it applies the recorded diff (without it every learning_rate and loss metric differs).
DIRTY_FILE = "src/tfpipe/training/optim.py"
DIRTY_FROM = "peak = train_cfg.optimizer.learning_rate * scale\n"
DIRTY_TO = "peak = train_cfg.optimizer.learning_rate * scale * 2  # dirty experiment: twice the rate\n"


@dataclasses.dataclass
class Recorded:
    """The run clone A recorded and what A's own audit of it returned (asserted by the tests, not here)."""

    alice: Path  # clone A, committed after its own audit (dvc.lock, .gitignore), its prepared data pushed
    run_id: str
    uri: str  # the team's tracking store
    artifacts: Path  # the team store's artifact root
    remote: Path  # the team's DVC remote
    env: dict  # A's audit environment: the team store as MLFLOW_TRACKING_URI, A's code on the path
    before: dict  # the run as recorded (tfpipe.tracking.reading.load_run), before any audit
    check: subprocess.CompletedProcess  # `audit RUN_ID`, A's tree still holding the run's diff
    rerun: subprocess.CompletedProcess  # `audit RUN_ID --rerun --apply-diff DIGEST`, A's tree clean
    after: dict  # the run right after that rerun
    worktrees: str  # `git worktree list` in A right after it
    reviewed: str  # the recorded diff's digest, as `--rerun` without --apply-diff prints it


def _audit(project: Path, env: dict, run_id: str, *flags: str) -> subprocess.CompletedProcess:
    """`python -m pipeline.audit RUN_ID *flags` in `project`, the tracking store from env's MLFLOW_TRACKING_URI."""
    cmd = [sys.executable, "-m", "pipeline.audit", run_id, *flags]
    return subprocess.run(cmd, cwd=project, env=env, capture_output=True, text=True, timeout=900)


@pytest.fixture(scope="module")
def dirty_run(tmp_path_factory, image_dir, text_dir) -> Recorded:
    """One dirty run recorded by `dvc repro` in clone A against the team store, A's own audit of it (check,
    then the first real --rerun, whose output the verdict test judges too), A committed and pushed.

    tracking.log_model=false (as the verdict test always ran): the run's weights.sha256 tag is what a rerun
    compares, and the artifact root still holds the run's own artifacts (config, provenance, saved_model/)."""
    from tfpipe.tracking import reading

    tmp = tmp_path_factory.mktemp("rerun")
    store = tmp / "team-store"
    store.mkdir()
    uri = f"sqlite:///{store / 'mlflow.db'}"
    artifacts = store / "mlartifacts"  # the team store's artifact root, outside every clone
    # precision=auto: a re-run must use the policy the run resolved to, whatever the auditor's host would pick.
    overrides = ("tracking.log_model=false", f"tracking.artifact_location={artifacts}", "precision=auto")
    alice, env = _make_project(tmp / "alice", image_dir, text_dir, *overrides)
    env = {**env, "MLFLOW_TRACKING_URI": uri}
    audit_env = {**env, "PYTHONPATH": os.pathsep.join([str(ROOT), str(alice / "src")])}
    source = alice / DIRTY_FILE
    clean = source.read_text()
    assert clean.count(DIRTY_FROM) == 1
    source.write_text(clean.replace(DIRTY_FROM, DIRTY_TO))
    _run([*DVC, "repro"], alice, env)
    run_id = json.loads((alice / "run.json").read_text())["run_id"]
    before = reading.load_run(uri, run_id)
    # The check runs while A's tree still holds the run's diff, before committing what dvc repro changed
    # (dvc.lock, .gitignore): only the DVC bookkeeping differs from the recorded code.
    check = _audit(alice, audit_env, run_id)
    source.write_text(clean)  # the auditor's tree is clean: only the recorded diff carries the change
    reviewed = digest(before["git_diff"])[:16]
    rerun = _audit(alice, audit_env, run_id, "--rerun", "--apply-diff", reviewed, "--allow-diff-code")
    after = reading.load_run(uri, run_id)
    worktrees = subprocess.run(["git", "worktree", "list"], cwd=alice, capture_output=True, text=True).stdout
    _run([*GIT, "add", "-A"], alice, env)
    _run([*GIT, "commit", "-qm", "results"], alice, env)
    remote = tmp / "team-dvc-remote"  # the team's DVC remote, set per clone as the .dvc/config comment says
    _run([*DVC, "remote", "modify", "--local", "team", "url", str(remote)], alice, env)
    _run([*DVC, "push", "prepare"], alice, env)
    return Recorded(
        alice, run_id, uri, artifacts, remote, audit_env, before, check, rerun, after, worktrees, reviewed
    )


def test_rerun_verdicts_and_exit_codes_of_a_dirty_run(dirty_run):
    """`audit --rerun` end to end, two real reruns from A of its dirty run: its diff applied -> REPRODUCED (exit
    0; the fixture's rerun), compared with the sealed model's weights and the params the stages logged; its
    test_accuracy then rewritten in the store -> DIFFERS (exit 1) even with a --tolerance above the change,
    the rewritten metric named as tampered (the verdict compares its immutable record, which the re-run
    matches). The recorded value is put back afterwards."""
    from mlflow import MlflowClient

    project, run_id = dirty_run.alice, dirty_run.run_id
    client = MlflowClient(dirty_run.uri)
    run = client.get_run(run_id).data
    assert run.tags["git.dirty"] == "true"
    rates = {m.value for m in client.get_metric_history(run_id, "learning_rate")}
    assert len(rates) == 1 and rates.pop() == pytest.approx(0.002), rates  # the dirty code ran: 2 x 0.001
    weights = run.tags["weights.sha256"][:13] + "..."
    weights_line = f"weights.sha256  recorded {weights}  rerun {weights}"
    sources = (
        "recorded figures: weights from the SavedModel whose files match param tfpipe.saved_model_sha256; "
        "metrics from params tfpipe.metric.*"
    )

    def judged(proc):
        lines = proc.stdout.splitlines()
        assert len(lines) >= 5 and lines[0] == weights_line, proc.stdout + proc.stderr[-3000:]
        assert re.fullmatch(r"metrics compared: \d+ \(timing metrics excluded\)", lines[1]), lines[1]
        assert lines[-2] == "prepared data: restored from the DVC cache", proc.stdout
        assert sources in lines, proc.stdout
        differences = [line for line in lines[2:-2] if line.startswith("  ")]
        return (
            proc,
            differences,
            [line for line in lines[2:-2] if line not in differences and line != sources],
        )

    proc, differences, notes = judged(dirty_run.rerun)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    assert proc.stdout.splitlines()[-1] == "REPRODUCED" and differences == notes == [], proc.stdout
    log = proc.stderr.splitlines()
    stat = log[log.index("rerun: with the recorded diff:") + 1 :][:2]
    assert re.fullmatch(rf" {re.escape(DIRTY_FILE)} \| +2 \+-", stat[0]), log
    assert stat[1] == " 1 file changed, 1 insertion(+), 1 deletion(-)", log

    accuracy = client.get_metric_history(run_id, "test_accuracy")
    assert len(accuracy) == 1, accuracy
    rerun_value, step, stamp = accuracy[0].value, accuracy[0].step, accuracy[0].timestamp
    assert run.params["tfpipe.metric.test_accuracy"] == repr(rerun_value)
    recorded = rerun_value - 0.25 if rerun_value >= 0.5 else rerun_value + 0.25
    # The rewrite is undone in `finally` (a newer point with the original value): the other test's audits,
    # before or after this one, compare against the run as recorded, so neither depends on the test order.
    client.log_metric(run_id, "test_accuracy", recorded, timestamp=stamp + 1, step=step)
    try:
        assert client.get_run(run_id).data.metrics["test_accuracy"] == recorded  # the latest value
        flags = ("--rerun", "--apply-diff", dirty_run.reviewed, "--allow-diff-code", "--tolerance", "0.3")
        proc, differences, notes = judged(_audit(project, dirty_run.env, run_id, *flags))
        assert proc.returncode == 1, proc.stdout + proc.stderr[-3000:]
        assert proc.stdout.splitlines()[-1] == "DIFFERS" and differences == [], proc.stdout
        assert notes == [
            f"tampered: metric test_accuracy shows {recorded!r}, its record (param) is {rerun_value!r}; "
            "not trusted"
        ], proc.stdout
        assert client.get_run(run_id).data.tags["audit.verdict"] == "DIFFERS"
    finally:
        client.log_metric(run_id, "test_accuracy", rerun_value, timestamp=stamp + 2, step=step)
    assert client.get_run(run_id).data.metrics["test_accuracy"] == rerun_value


def _tree_digest(folder: Path) -> dict:
    """sha256 of every file under `folder` (git's objects and index included), by relative path."""
    out = {}
    for path in sorted(folder.rglob("*")):
        if path.is_file() and not path.is_symlink():
            out[str(path.relative_to(folder))] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


def test_an_audit_from_another_clone_reproduces_and_leaves_the_first_clone_untouched(dirty_run, tmp_path):
    """A's own audit (check, then --rerun from its own DVC cache; run by the fixture), then two reruns from
    clone B: prepared again from B's raw data, then pulled from the team's DVC remote; A untouched."""
    alice, run_id, uri, env = dirty_run.alice, dirty_run.run_id, dirty_run.uri, dirty_run.env
    _assert_own_audit(dirty_run)

    bob = tmp_path / "bob" / "project"
    _run(["git", "clone", "-q", str(alice), str(bob)], tmp_path, env)
    raw = bob / "data" / "raw"
    shutil.copytree(alice / "data" / "raw", raw, dirs_exist_ok=True)  # the team's shared source
    before = _tree_digest(alice)
    bob_env = {**env, "PYTHONPATH": os.pathsep.join([str(bob), str(bob / "src")])}

    out = _reproduced(
        bob, run_id, bob_env, dirty_run.reviewed
    )  # the committed remote URL leads nowhere from B
    assert "prepared data: prepared again from the auditor's raw data" in out.splitlines(), out
    shutil.rmtree(raw)
    # an unsandboxed re-run leaves its re-prepared data in B's DVC cache; a sandboxed one writes only in its own folder
    shutil.rmtree(bob / ".dvc" / "cache", ignore_errors=True)
    _run([*DVC, "remote", "modify", "--local", "team", "url", str(dirty_run.remote)], bob, env)
    out = _reproduced(bob, run_id, bob_env, dirty_run.reviewed)  # no raw data: only the remote's copy
    assert "prepared data: pulled from the DVC remote" in out.splitlines(), out
    assert not (bob / "data" / "prepared").exists()  # restored into the worktree, not into B's own tree
    after = _tree_digest(alice)
    changed = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
    assert not changed, changed  # nothing of A was read-write: not its data, models, run file or git
    from mlflow import MlflowClient

    assert MlflowClient(tracking_uri=uri).get_run(run_id).data.tags["audit.verdict"] == "REPRODUCED"
    runs = {
        p.parent.name
        for p in dirty_run.artifacts.rglob("artifacts")
        if re.fullmatch(r"[0-9a-f]{32}", p.parent.name)
    }
    assert runs == {run_id}, runs  # every re-run's own run went to its temporary store, not the team's


def _assert_own_audit(recorded: Recorded) -> None:
    """The clone that made the run audited it: the check passed, the --rerun from its own DVC cache with the
    precision policy the run resolved to was REPRODUCED, recorded on the run without touching its metrics."""
    before, after = recorded.before, recorded.after
    resolved = before["tags"]["precision.resolved"]
    assert before["params"]["precision.policy"] == "auto" and resolved in ("float32", "mixed_bfloat16")
    check, proc = recorded.check, recorded.rerun
    assert check.returncode == 0, (
        check.stdout + check.stderr
    )  # DVC's dvc.lock/.gitignore are not code changes
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    assert proc.stdout.strip().splitlines()[-1] == "REPRODUCED", proc.stdout
    assert "prepared data: restored from the DVC cache" in proc.stdout.splitlines()
    assert f"precision.policy=auto ran as {resolved}: the re-run uses {resolved}" in proc.stderr
    assert after["tags"]["audit.verdict"] == "REPRODUCED" and after["tags"]["audit.time"]
    assert after["metrics"] == before["metrics"]  # the verdict never alters the run's metrics
    assert "worktree" not in recorded.worktrees.split("\n", 1)[-1]


def _reproduced(project: Path, run_id: str, env: dict, reviewed: str) -> str:
    """stdout of a --rerun (the run is dirty: --apply-diff DIGEST) that must exit 0 with REPRODUCED."""
    proc = _audit(project, env, run_id, "--rerun", "--apply-diff", reviewed, "--allow-diff-code")
    assert proc.returncode == 0, proc.stdout + proc.stderr[-4000:]
    assert proc.stdout.strip().splitlines()[-1] == "REPRODUCED", proc.stdout
    return proc.stdout
