"""What a --rerun refuses in a recorded diff (mode change, rename, copy, binary patch, a path outside the
tree, a protected file however the patch spells its name), where it refuses to re-root or write, the plan it
prints before executing, and --pass-env through the command line. Real git repos in tmp_path, no training."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tfpipe.audit.review import digest
from tfpipe.audit.trust import gate, print_plan, reroot, stage_env, write_inside
from tfpipe.errors import UserError
from tfpipe.provenance import recorded_diff

ROOT = Path(__file__).resolve().parents[1]
STAGES = "stages:\n  prepare:\n    cmd: env > {out}\n"


def _sh(cwd, *cmd) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "DVC_NO_ANALYTICS": "1"}
    env.update(GIT_COMMITTER_NAME="t", GIT_COMMITTER_EMAIL="t@t")
    return subprocess.run(cmd, cwd=cwd, env=env, check=True, capture_output=True, text=True).stdout


@pytest.fixture
def repo(tmp_path):
    """A git repo with a stage file, a text file, a binary file and a subfolder, committed."""
    repo = tmp_path / "repo"
    (repo / "sub").mkdir(parents=True)
    _sh(repo, "git", "init", "-q", "-b", "main")
    (repo / "dvc.yaml").write_text(STAGES.format(out=tmp_path / "env.txt"))
    (repo / "notes.txt").write_text("old\n")
    (repo / "blob.bin").write_bytes(b"\x00\x01bin")
    (repo / "sub" / "keep.txt").write_text("k\n")
    _sh(repo, "git", "add", "-A")
    _sh(repo, "git", "commit", "-qm", "init")
    return repo


def _recorded(repo, change, *git_diff) -> str:
    """The diff a run records for `change` (provenance.recorded_diff, or `git diff HEAD *git_diff`)."""
    change(repo)
    _sh(repo, "git", "add", "-A")  # a rename or copy is seen only once the new file is tracked
    text = _sh(repo, "git", "diff", "HEAD", *git_diff) if git_diff else recorded_diff(repo)[0]
    _sh(repo, "git", "reset", "-q", "--hard")
    return text


def _refusal(repo, diff, root=None) -> str:
    run = {"tags": {"git.commit": "0" * 40, "git.dirty": "true"}, "git_diff": diff}
    with pytest.raises(UserError) as caught:
        gate("RUN", run, root or repo, digest(diff), None)
    message = str(caught.value)
    assert "\n" not in message and message.startswith("rerun: ") and message.endswith("; refused")
    return message


def _copy(r):
    (r / "copy.txt").write_text((r / "notes.txt").read_text())


CASES = {
    "mode change": (lambda r: (r / "notes.txt").chmod(0o755), (), "changes the mode of 'notes.txt'"),
    "rename": (lambda r: (r / "notes.txt").rename(r / "moved.txt"), (), "'notes.txt' to 'moved.txt'"),
    "copy": (_copy, ("-C", "-C"), "renames or copies 'notes.txt' to 'copy.txt'"),
    "binary": (lambda r: (r / "blob.bin").write_bytes(b"\x00\x02"), (), "binary patch for 'blob.bin'"),
    "git binary patch": (
        lambda r: (r / "blob.bin").write_bytes(b"\x00\x02"),
        ("--binary",),
        "binary patch for 'blob.bin'",
    ),
}


@pytest.mark.parametrize("case", CASES)
def test_a_recorded_diff_is_refused_in_one_line_naming_file_and_rule(repo, case):
    change, git_diff, expected = CASES[case]
    diff = _recorded(repo, change, *git_diff)
    assert expected in _refusal(repo, diff), diff


def _hunk(old: str, new: str, header: str = "") -> str:
    return f"{header}--- {old}\n+++ {new}\n@@ -1 +1 @@\n-old\n+new\n"


OUTSIDE = {
    "absolute": _hunk("a/notes.txt", "b//tmp/x.txt", "diff --git a//tmp/x.txt b//tmp/x.txt\n"),
    "absolute, no header": _hunk("a/notes.txt", "b//tmp/x.txt"),
    "dotdot": _hunk("a/../x.txt", "b/../x.txt", "diff --git a/../x.txt b/../x.txt\n"),
    "dotdot, quoted": _hunk('"a/../x.txt"', '"b/../x.txt"', 'diff --git "a/../x.txt" "b/../x.txt"\n'),
}


@pytest.mark.parametrize("case", OUTSIDE)
def test_a_recorded_diff_touching_a_path_outside_the_tree_is_refused(repo, case):
    message = _refusal(repo, OUTSIDE[case])
    assert "outside the tree" in message
    assert ("'/tmp/x.txt'" if case.startswith("absolute") else "'../x.txt'") in message


EDIT = "stages:\n  prepare:\n    cmd: touch PWNED\n"
PROTECTED_SPELLINGS = {
    "quoted names": 'diff --git "a/dvc.yaml" "b/dvc.yaml"\n--- "a/dvc.yaml"\n+++ "b/dvc.yaml"\n',
    "other prefixes": "--- x/dvc.yaml\n+++ y/dvc.yaml\n",
}


@pytest.mark.parametrize("case", PROTECTED_SPELLINGS)
def test_a_stage_edit_is_refused_however_the_patch_spells_the_name(repo, tmp_path, case):
    """`git apply` unquotes names and strips any first folder: both spellings do edit dvc.yaml."""
    body = (repo / "dvc.yaml").read_text().splitlines()
    hunk = f"@@ -1,3 +1,3 @@\n {body[0]}\n {body[1]}\n-{body[2]}\n+{EDIT.splitlines()[2]}\n"
    patch = tmp_path / "p.patch"
    patch.write_text(PROTECTED_SPELLINGS[case] + hunk)
    _sh(repo, "git", "apply", "--check", str(patch))  # git would apply it
    for root in (repo, repo / "sub"):  # from a subfolder git apply skips (and hides) the paths outside it
        assert "edits 'dvc.yaml', which decides what runs" in _refusal(repo, patch.read_text(), root)


def test_a_new_file_with_a_quoted_name_in_a_protected_folder_is_refused(repo):
    diff = _recorded(repo, lambda r: (r / "pipeline").mkdir() or (r / "pipeline" / "ü.py").write_text("x\n"))
    assert diff.startswith('diff --git "a/pipeline/')  # git quotes a non-ASCII name
    assert "edits 'pipeline/ü.py', which decides what runs" in _refusal(repo, diff)


def test_a_plain_edit_passes_the_gate(repo):
    diff = _recorded(repo, lambda r: (r / "notes.txt").write_text("new\n"))
    commit = _sh(repo, "git", "rev-parse", "HEAD").strip()
    run = {"tags": {"git.commit": commit, "git.dirty": "true"}, "git_diff": diff}
    gate("RUN", run, repo, digest(diff), None)


def test_a_dvc_exp_run_diff_is_applied_with_its_dvc_lock_left_out(repo, tmp_path):
    """`dvc exp run -S ...` leaves params.yaml and dvc.lock in every run's diff: the gate lets it through, the
    worktree gets the rest of the diff, dvc.lock stays the commit's (the rerun writes its own) and the plan
    says so in one line."""
    from tfpipe.audit.trust import apply_diff

    (repo / "dvc.lock").write_text("schema: '2.0'\nstages: {}\n")
    (repo / "params.yaml").write_text("seed: 1\n")
    _sh(repo, "git", "add", "-A")
    _sh(repo, "git", "commit", "-qm", "a committed run")
    commit = _sh(repo, "git", "rev-parse", "HEAD").strip()

    def exp_run(r):
        (r / "dvc.lock").write_text(
            "schema: '2.0'\nstages:\n  prepare:\n    cmd: python -m pipeline.prepare\n"
        )
        (r / "params.yaml").write_text("seed: 2\n")
        (r / "notes.txt").write_text("new\n")

    diff = _recorded(repo, exp_run)
    assert "b/dvc.lock" in diff and "b/params.yaml" in diff
    gate(
        "RUN",
        {"tags": {"git.commit": commit, "git.dirty": "true"}, "git_diff": diff},
        repo,
        digest(diff),
        None,
    )
    wt = tmp_path / "wt"
    _sh(repo, "git", "worktree", "add", "--detach", "-q", str(wt), commit)
    patch = tmp_path / "recorded.patch"
    patch.write_text(diff)
    apply_diff(wt, patch, commit)
    assert (wt / "notes.txt").read_text() == "new\n" and (wt / "params.yaml").read_text() == "seed: 2\n"
    assert (wt / "dvc.lock").read_text() == "schema: '2.0'\nstages: {}\n"
    lines: list = []
    print_plan(wt, commit, patch, lines.append)
    assert "dvc.lock" not in lines[1] and "params.yaml" in lines[1]
    assert lines[3] == "rerun: the diff's dvc.lock left out: DVC's record of the outputs, written anew"


@pytest.mark.parametrize(
    "path", ["src/pkg/model.py", "sitecustomize.py", "lib/x.pth", "pyproject.toml", "requirements-team.txt"]
)
def test_a_diff_editing_code_needs_allow_diff_code(repo, path):
    """A diff that edits what the rerun executes (Python, its start-up hooks, packaging) is refused with
    --apply-diff DIGEST alone, naming the file and the second flag; with it, it passes. Data and notes need
    neither."""
    commit = _sh(repo, "git", "rev-parse", "HEAD").strip()

    def edit(r):
        (r / path).parent.mkdir(parents=True, exist_ok=True)
        (r / path).write_text("import os\n")
        (r / "notes.txt").write_text("new\n")

    run = {"tags": {"git.commit": commit, "git.dirty": "true"}, "git_diff": _recorded(repo, edit)}
    reviewed = digest(run["git_diff"])
    with pytest.raises(UserError) as refused:
        gate("RUN", run, repo, reviewed, None)
    assert str(refused.value) == (
        f"run RUN: its recorded diff edits code the rerun would execute ({path}); "
        "read it (the run's provenance/git_diff.patch), then add --allow-diff-code to run it"
    )
    gate("RUN", run, repo, reviewed, None, allow_code=True)
    notes = _recorded(repo, lambda r: (r / "notes.txt").write_text("new\n"))
    gate("RUN", {**run, "git_diff": notes}, repo, digest(notes), None)


def test_reroot_refuses_a_path_it_cannot_move_into_the_worktree(tmp_path):
    root, wt = tmp_path / "project", tmp_path / "wt"
    wt.mkdir()
    cfg = {
        "data": {"path": "/shared/raw", "output_dir": "/other/clone/data/prepared"},
        "strategy": {"device": "/cpu:0"},
        "train": {"checkpoint_dir": str(root / "checkpoints" / "a")},
    }
    assert reroot(cfg, root, wt) == {
        "data": {"path": "/shared/raw", "output_dir": "data/prepared"},
        "strategy": {"device": "/cpu:0"},
        "train": {"checkpoint_dir": "checkpoints/a"},
    }
    for key, value in (("checkpoint_dir", "/elsewhere/ckpt"), ("run_file", "/x/data/../../../etc/run.json")):
        with pytest.raises(UserError) as caught:
            reroot({"train": {key: value}}, root, wt)
        expected = f"rerun: recorded train.{key}={value} cannot be re-rooted into the worktree; refused"
        assert str(caught.value) == expected


def test_write_inside_refuses_a_write_outside_the_worktree(tmp_path):
    wt, outside = tmp_path / "wt", tmp_path / "outside"
    wt.mkdir()
    outside.mkdir()
    (outside / "params.yaml").write_text("theirs\n")
    (wt / "params.yaml").symlink_to(outside / "params.yaml")
    (wt / "linked").symlink_to(outside)
    for rel in ("params.yaml", "../escape.txt", "linked/new.txt"):
        with pytest.raises(UserError) as caught:
            write_inside(wt, rel, "ours\n")
        assert str(caught.value) == f"rerun: {rel} in the worktree points outside it; refused"
    assert sorted(p.name for p in outside.iterdir()) == ["params.yaml"]
    assert (outside / "params.yaml").read_text() == "theirs\n" and not (tmp_path / "escape.txt").exists()
    write_inside(wt, "dvc.lock", "ours\n")
    assert (wt / "dvc.lock").read_text() == "ours\n"


def test_the_plan_prints_commit_diff_stat_and_commands(repo, tmp_path):
    commit = _sh(repo, "git", "rev-parse", "HEAD").strip()
    patch = tmp_path / "recorded.patch"
    patch.write_text(_recorded(repo, lambda r: (r / "notes.txt").write_text("new\nmore\n")))
    lines: list = []
    print_plan(repo, commit, patch, lines.append)
    assert lines[0] == f"rerun: executes commit {commit}"
    stat = lines[1].splitlines()
    assert stat[0] == "rerun: with the recorded diff:"
    assert stat[1].split() == ["notes.txt", "|", "3", "++-"]
    assert stat[2].strip() == "1 file changed, 2 insertions(+), 1 deletion(-)"
    assert lines[2] == "rerun: the recorded diff in full:\n" + patch.read_text().rstrip()
    stage = f'rerun: stage prepare: "env > {tmp_path / "env.txt"}"'
    assert lines[3:] == [stage]
    lines.clear()
    print_plan(repo, commit, None, lines.append)  # a clean run: no diff line
    assert lines == [f"rerun: executes commit {commit}", stage]


def _forge(tmp_path, commit, diff) -> str:
    import mlflow

    client = mlflow.MlflowClient(f"sqlite:///{tmp_path / 'store.db'}")
    exp = client.create_experiment("forged", artifact_location=(tmp_path / "art").as_uri())
    run_id = client.create_run(exp).info.run_id
    client.set_tag(run_id, "git.commit", commit)
    client.set_tag(run_id, "git.dirty", "true")
    client.log_text(run_id, "seed: 1\n", "config/resolved.yaml")
    client.log_param(run_id, "seed", "1")  # the param that vouches for it (tfpipe.tracking.reading)
    client.log_text(run_id, diff, "provenance/git_diff.patch")
    return run_id


@pytest.mark.slow
def test_pass_env_on_the_command_line_reaches_the_stages_and_nothing_else(repo, tmp_path):
    """The forged run has no train stage: the rerun stops after prepare, whose `env` output is read."""
    _sh(repo, sys.executable, "-m", "dvc", "init", "-q")
    _sh(repo, "git", "commit", "-qm", "dvc")
    commit = _sh(repo, "git", "rev-parse", "HEAD").strip()
    diff = _recorded(repo, lambda r: (r / "notes.txt").write_text("new\n"))
    run_id = _forge(tmp_path, commit, diff)
    env = {k: v for k, v in os.environ.items() if not k.startswith("I22_")}
    env.update(I22_PASSED_TOKEN="p1", I22_PASSED="p2", I22_OTHER_TOKEN="u1", I22_OTHER="u2")
    env.update(AWS_SECRET_ACCESS_KEY="u3", PYTHONPATH=os.pathsep.join([str(ROOT / "src"), str(ROOT)]))
    uri = f"sqlite:///{tmp_path / 'store.db'}"
    cmd = [sys.executable, "-m", "pipeline.audit", run_id, "--rerun", "--tracking-uri", uri]
    cmd += ["--apply-diff", digest(diff)]
    cmd += [
        "--pass-env",
        "I22_PASSED_TOKEN",
        "--pass-env",
        "I22_PASSED",
        "--sandbox",
        "off",
    ]  # env.txt is outside
    proc = subprocess.run(cmd, cwd=repo, env=env, capture_output=True, text=True, timeout=300)
    seen = dict(line.split("=", 1) for line in (tmp_path / "env.txt").read_text().splitlines() if "=" in line)
    # every other name is on the allowlist, or set by the rerun, DVC or the shell
    added = {
        "MLFLOW_TRACKING_URI",
        "DVC_NO_ANALYTICS",
        "DVC_ROOT",
        "DVC_STAGE",
        "PWD",
        "SHLVL",
        "OLDPWD",
        "_",
    }
    stray = {k: v for k, v in seen.items() if k not in added and not stage_env({k: v})}
    assert stray == {"I22_PASSED_TOKEN": "p1", "I22_PASSED": "p2"}, proc.stderr
    plan = proc.stderr[: proc.stderr.index("rerun: prepare from the auditor's raw data")]
    assert f"rerun: executes commit {commit}" in plan and "rerun: stage prepare" in plan
    assert "\n notes.txt |    2 +-\n 1 file changed, 1 insertion(+), 1 deletion(-)\n" in plan


def test_a_committed_symlink_at_dvc_config_local_is_refused_not_followed(repo, tmp_path):
    """The re-run writes the auditor's DVC settings (remote URL, credentials) to the worktree's
    .dvc/config.local: a commit holding a symlink there must not redirect that write outside the worktree."""
    from tfpipe.audit.rerun import _make_worktree

    victim = tmp_path / "victim.txt"
    victim.write_text("theirs\n")
    (repo / ".dvc").mkdir()
    (repo / ".dvc" / "config").write_text("[core]\n    remote = team\n")
    (repo / ".dvc" / "config.local").symlink_to(victim)
    _sh(repo, "git", "add", "-A")
    _sh(repo, "git", "commit", "-qm", "a symlink at .dvc/config.local")
    commit = _sh(repo, "git", "rev-parse", "HEAD").strip()
    (repo / ".dvc" / "config.local").unlink()  # the auditor's own clone: a plain tree
    run = {"tags": {"git.commit": commit}, "config": {}}
    (tmp_path / "audit").mkdir()
    with pytest.raises(UserError) as caught:
        _make_worktree(repo, run, tmp_path / "audit", lambda line: None)
    assert str(caught.value) == "rerun: .dvc/config.local in the worktree points outside it; refused"
    assert victim.read_text() == "theirs\n"
