"""`tfpipe init`'s CI (issue 51, item 7): the project it makes holds `.github/workflows/tfpipe.yml` and
`.gitlab-ci.yml`, which on a pull/merge request run `ci/pr_report.sh BASE CHANGE` (train the base commit and the
change on `experiment=smoke`, each in a git worktree of its own, into one MLflow store; `tfpipe report` them) and
post the Markdown it writes. Checked here: both files are valid against the official schemas (SchemaStore's, as
check-jsonschema vendors them), pinned and least-privileged; the commands the script runs are ones the project
accepts; and, slow, each CI file's own train-and-report step run in a made project, offline (its data pulled by
DVC from a local remote), writes a comment that names the base's run and the change's."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tfpipe import scaffold

GITHUB, GITLAB, SCRIPT = ".github/workflows/tfpipe.yml", ".gitlab-ci.yml", "ci/pr_report.sh"
SCHEMAS = {GITHUB: "vendor.github-workflows", GITLAB: "vendor.gitlab-ci"}  # check-jsonschema --builtin-schema
SHA_PIN = re.compile(r"^[\w.-]+/[\w.-]+@[0-9a-f]{40}$")
GIT_ID = dict(GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@t", GIT_COMMITTER_NAME="t", GIT_COMMITTER_EMAIL="t@t")


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    """A project as `tfpipe init` writes it (git and DVC initialised, files staged); tests only read it."""
    folder = tmp_path_factory.mktemp("init") / "vision"
    assert scaffold.main([str(folder)]) == 0
    return folder


def _load(path: Path) -> dict:
    return yaml.safe_load(path.read_text())


def test_init_writes_both_ci_files_and_the_script_they_run(project):
    staged = subprocess.run(["git", "ls-files"], cwd=project, capture_output=True, text=True, check=True)
    assert {GITHUB, GITLAB, SCRIPT, "requirements.in"} <= set(staged.stdout.split())
    for ci in (GITHUB, GITLAB):
        assert f"bash {SCRIPT} " in (project / ci).read_text(), ci
    pinned = (project / "requirements.in").read_text().splitlines()[-1]
    assert re.fullmatch(r"tfpipe==\d+\.\d+\.\d+\S*", pinned), pinned  # what the CI's lock is compiled from
    wanted = [line.split("#")[0].strip() for line in (project / "requirements.in").read_text().splitlines()]
    assert "pytest" in wanted  # the README's `python -m pytest tests` runs from what the lock installs
    ignored = (project / ".gitignore").read_text().splitlines()
    assert {"/reports", "/.tfpipe-ci"} <= set(ignored)  # the script's outputs never dirty the checkout


@pytest.mark.parametrize("ci", [GITHUB, GITLAB])
def test_each_ci_file_is_valid_against_its_official_schema(project, ci):
    check = [sys.executable, "-m", "check_jsonschema", "--builtin-schema", SCHEMAS[ci], str(project / ci)]
    proc = subprocess.run(check, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_the_github_workflow_is_pinned_least_privileged_and_never_runs_a_fork_with_write(project):
    workflow = _load(project / GITHUB)
    triggers = workflow[True]  # PyYAML (YAML 1.1) reads the key `on` as True
    # not pull_request_target: a fork's code never runs with a token that can write
    assert set(triggers) == {"pull_request"}
    assert workflow["permissions"] == {"contents": "read", "pull-requests": "write"}
    (job,) = workflow["jobs"].values()
    assert "permissions" not in job
    uses = [step["uses"] for step in job["steps"] if "uses" in step]
    assert uses and all(SHA_PIN.match(u) for u in uses), uses
    for line in (project / GITHUB).read_text().splitlines():  # each pin names its tag beside it
        assert "uses:" not in line or re.search(r"@[0-9a-f]{40}\s+# v\d+\.\d+\.\d+$", line), line
    post = [s for s in job["steps"] if "gh pr comment" in s.get("run", "")]
    assert len(post) == 1 and "--body-file reports/pr-comment.md" in post[0]["run"]
    assert post[0]["if"] == "github.event.pull_request.head.repo.full_name == github.repository"


def test_the_gitlab_job_runs_on_merge_requests_and_posts_through_the_notes_api(project):
    (job,) = [v for k, v in _load(project / GITLAB).items() if isinstance(v, dict) and "script" in v]
    assert job["rules"] == [{"if": '$CI_PIPELINE_SOURCE == "merge_request_event"'}]
    assert job["variables"]["GIT_DEPTH"] == "0"  # the base commit is fetched too
    post = "\n".join(job["script"])
    assert "merge_requests/$CI_MERGE_REQUEST_IID/notes" in post
    assert "PRIVATE-TOKEN: $TFPIPE_GITLAB_TOKEN" in post
    assert "body@reports/pr-comment.md" in post
    assert job["artifacts"]["paths"] == ["reports/"]


def _script_line(project: Path, command: str) -> list:
    """The words of the one line of ci/pr_report.sh that runs `command`."""
    (line,) = [ln for ln in (project / SCRIPT).read_text().splitlines() if ln.strip().startswith(command)]
    return shlex.split(line)[len(command.split()) :]


def test_the_scripts_report_command_parses_with_tfpipe_reports_own_parser(project):
    from tfpipe.commands import report

    words = _script_line(project, "python -m tfpipe report")
    ids = {"${base_runs[@]}": "a" * 32, "${change_runs[@]}": "b" * 32}  # bash arrays: one run a side
    args = report._parser("tfpipe report").parse_args([ids.get(w, w) for w in words])
    assert (args.base, args.runs, args.out, args.log) == ("a" * 32, ["b" * 32], "reports/pr", True)


def test_the_small_preset_is_a_config_the_project_accepts_as_run_all_loads_it(project, monkeypatch):
    from tfpipe.commands.entry import load_config

    (default,) = re.findall(r"TFPIPE_CI_OVERRIDES:-([^}]*)\}", (project / SCRIPT).read_text())
    words = _script_line(project, "python -m tfpipe run-all")
    assert words[0] == "$overrides" and words[2] == "${extra[@]}", words
    monkeypatch.chdir(project)
    monkeypatch.syspath_prepend(str(project))
    artifacts = words[1].replace("$work", str(project / ".tfpipe-ci"))
    cfg = load_config([*default.split(), artifacts, "train.seed=3"], None, project, stage="run_all")
    assert (cfg.train.epochs, cfg.data.max_examples_per_split, cfg.train.seed) == (1, 256, 3)
    assert cfg.model.name == "my_model"  # the project's own model, trained small


def test_the_script_refuses_a_commit_it_does_not_have_in_one_line_before_any_work(tmp_path):
    project = tmp_path / "vision"
    assert scaffold.main([str(project)]) == 0
    commit = ["git", "commit", "-qm", "tfpipe init"]
    subprocess.run(commit, cwd=project, env={**os.environ, **GIT_ID}, check=True)
    for args, named in ((["0" * 40, "HEAD"], "0" * 40), (["HEAD", "no-such-branch"], "no-such-branch")):
        proc = subprocess.run(["bash", SCRIPT, *args], cwd=project, capture_output=True, text=True)
        assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
        assert f"{named}: not a commit here" in proc.stderr
        assert not (project / ".tfpipe-ci").exists() and not (project / "reports").exists()


# ----------------------------------------------------------------------------- the CI's own step, run here


def _tiny_cifar(root: Path) -> None:
    """Class-per-folder PNGs, cifar10's shape: two classes, 40 train and 10 test images each (a full batch of
    experiment=smoke's 32 after validation is carved off)."""
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(0)
    for split, n in (("train", 40), ("test", 10)):
        for c, name in enumerate(("cat", "dog")):
            folder = root / split / name
            folder.mkdir(parents=True)
            for i in range(n):
                pixels = (rng.integers(0, 128, (32, 32, 3)) + 100 * c).clip(0, 255).astype(np.uint8)
                Image.fromarray(pixels).save(folder / f"{i}.png")


def _expand(value: str, known: dict) -> str:
    """A GitHub expression `${{ ... }}` as the job would see it: the known ones, secrets and variables unset."""

    def one(match):
        name = match.group(1).strip()
        if name in known:
            return known[name]
        assert name.startswith(("secrets.", "vars.")), f"an expression this test does not know: {name}"
        return ""

    return re.sub(r"\$\{\{(.*?)\}\}", one, str(value))


def _ci_step(project: Path, ci: str, base: str, change: str) -> tuple:
    """(the shell text of `ci`'s train-and-report step, the environment the CI gives it)."""
    if ci == GITHUB:
        (job,) = _load(project / GITHUB)["jobs"].values()
        (step,) = [s for s in job["steps"] if SCRIPT in s.get("run", "")]
        known = {"github.event.pull_request.base.sha": base, "github.sha": change}
        env = {k: _expand(v, known) for k, v in {**job.get("env", {}), **step.get("env", {})}.items()}
        return step["run"], env
    (job,) = [v for v in _load(project / GITLAB).values() if isinstance(v, dict) and "script" in v]
    (line,) = [s for s in job["script"] if SCRIPT in s]
    env = {"CI_PROJECT_DIR": str(project), "CI_MERGE_REQUEST_DIFF_BASE_SHA": base, "CI_COMMIT_SHA": change}
    given = {k: re.sub(r"\$(\w+)", lambda m: env[m.group(1)], str(v)) for k, v in job["variables"].items()}
    return line, {**given, **env}


def _git(project: Path, *args: str) -> str:
    proc = subprocess.run(["git", *args], cwd=project, capture_output=True, text=True, check=True)
    return proc.stdout.strip()


@pytest.mark.slow
@pytest.mark.parametrize("ci", [GITHUB, GITLAB])
def test_the_ci_step_trains_base_and_change_and_writes_a_comment_naming_both_runs(tmp_path, ci):
    from mlflow.tracking import MlflowClient

    project = tmp_path / "vision"
    assert scaffold.main([str(project)]) == 0
    _tiny_cifar(project / "data" / "raw" / "cifar10")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "TFPIPE_", "PYTHONPATH"))}
    env.update(GIT_ID, DVC_NO_ANALYTICS="1", TF_CPP_MIN_LOG_LEVEL="2")
    for cmd in (
        ["dvc", "add", "-q", "data/raw/cifar10"],  # the data as a team shares it: DVC, a remote
        ["dvc", "remote", "add", "-q", "-d", "shelf", str(tmp_path / "remote")],
        ["dvc", "push", "-q"],
    ):
        subprocess.run([sys.executable, "-m", *cmd], cwd=project, env=env, check=True, capture_output=True)
    subprocess.run(["git", "add", "-A"], cwd=project, env=env, check=True)
    subprocess.run(["git", "commit", "-qm", "tfpipe init"], cwd=project, env=env, check=True)
    model = project / "vision" / "model.py"  # a change of code alone: the same params on both sides
    model.write_text(model.read_text().replace("Conv2D(width, 3,", "Conv2D(width, 5,"))
    subprocess.run(["git", "commit", "-qam", "a wider kernel"], cwd=project, env=env, check=True)
    base, change = _git(project, "rev-parse", "HEAD~1"), _git(project, "rev-parse", "HEAD")

    run, ci_env = _ci_step(project, ci, base, change)
    proc = subprocess.run(
        ["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", run],  # as both CIs run a step
        cwd=project,
        env={**env, **ci_env},
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, f"{run}\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}"

    comment = (project / "reports" / "pr-comment.md").read_text()
    client = MlflowClient(f"sqlite:///{project / '.tfpipe-ci' / 'mlflow.db'}")
    runs = client.search_runs([e.experiment_id for e in client.search_experiments()])
    by_commit = {r.data.tags["git.commit"]: r.info.run_id for r in runs}
    assert set(by_commit) == {base, change} and len(runs) == 2, by_commit
    assert f"base `{base[:8]}` (group A) against this change `{change[:8]}` (group B)" in comment
    for commit, label in ((base, "A (base)"), (change, "B")):
        row = rf"^\| {re.escape(label)} \| \w+ \| {by_commit[commit][:8]} "  # the Groups table names the run
        assert re.search(row, comment, re.M), comment
    assert "2 runs from the MLflow store" in comment and "in 2 groups" in comment
    assert "](curves.png)" not in comment  # pictures are artifacts, not broken links in the comment
    logged = {a.path for a in client.list_artifacts(by_commit[base], "report")}
    assert "report/report.md" in logged and "report/report.html" in logged  # --log: kept with the base run
    assert _git(project, "status", "--porcelain") == ""  # the checkout as CI found it
