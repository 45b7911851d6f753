"""The suite itself (issue 49): its tests never touch the user's project, and a test goes red when its claim
breaks.

- The tests that run a stage's command line expecting a refusal run in a project of their own (conftest's
  `scratch_root`), so in a workspace where `dvc exp apply` changed params.yaml, a case that is wrongly not
  refused trains there, not into the user's mlflow.db, models/ and metrics/. Shown on a copy of this checkout
  with such a workspace: those tests pass in it and leave it byte for byte as it was.
- The session guard (conftest's `pytest_sessionstart`/`pytest_sessionfinish`) names what changed in the
  checkout.
- The docs runner fails a block on the failures bash lets pass (a command before `&&`, one inside `$(...)`).
"""

from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import checkout_snapshot, snapshot_changes
from docs_runner import new_session, run_block, top_level_commands

ROOT = Path(__file__).resolve().parents[1]
GIT_ID = [
    "-c",
    "user.name=tfpipe tests",
    "-c",
    "user.email=tests@tfpipe.invalid",
    "-c",
    "commit.gpgsign=false",
]

# The tests that ran a stage's command line with the checkout as its project (issue 49), run inside the copy.
STAGE_CLI_TESTS = [
    "tests/test_bad_input_cli.py",
    "tests/test_bad_data_cli.py",
    "tests/test_hydra_flags.py",
    "tests/test_data_symlinks.py::test_prepare_stage_exits_2_with_one_line_naming_the_link",
    "tests/test_data_report.py::test_leakage_fail_stops_prepare_in_one_line_and_writes_nothing",
    "tests/test_data_report.py::test_bad_policy_or_threshold_is_refused_before_anything_is_read",
    "tests/test_data_report.py::test_drift_fail_stops_prepare_in_one_line",
    "tests/test_data_report.py::test_a_missing_or_foreign_reference_is_refused_before_anything_is_read",
]


def _git(*args, cwd: Path) -> str:
    proc = subprocess.run(["git", *GIT_ID, *args], cwd=cwd, capture_output=True, text=True, check=True)
    return proc.stdout


def copy_of_the_checkout(dest: Path) -> Path:
    """This checkout's files as they are now (tracked and untracked, not ignored), in a git repository of its
    own with one commit holding them all: a user's clone with nothing run yet."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout
    for name in sorted({n for n in listed.decode().split("\0") if n}):
        source = ROOT / name
        if not os.path.lexists(source) or (source.is_dir() and not source.is_symlink()):
            continue  # deleted in the workspace, or a submodule
        (dest / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, dest / name, follow_symlinks=False)
    _git("init", "-q", cwd=dest)
    _git("add", "-A", cwd=dest)
    _git("commit", "-qm", "a copy of the checkout", cwd=dest)
    return dest


def apply_an_experiment(params: Path) -> str:
    """params.yaml changed as `dvc exp apply` leaves it: other values for train.epochs and the learning
    rate."""
    text = params.read_text(encoding="utf-8")
    text, epochs = re.subn(r"^(  epochs: )(\d+)$", lambda m: f"{m[1]}{int(m[2]) + 4}", text, flags=re.M)
    text, rates = re.subn(
        r"^(    learning_rate: )(\S+)$", lambda m: f"{m[1]}{float(m[2]) * 10:g}", text, flags=re.M
    )
    assert (epochs, rates) == (1, 1), "params.yaml's train.epochs or learning_rate moved: update this test"
    params.write_text(text, encoding="utf-8")
    return text


def _files(folder: Path) -> dict:
    return {
        p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()
    }


def _user_outputs(project: Path) -> dict:
    """What a user's trained workspace holds, read whole: the MLflow store's bytes, models/, metrics/."""
    return {
        "mlflow.db": (project / "mlflow.db").read_bytes(),
        "models": _files(project / "models"),
        "metrics": _files(project / "metrics"),
        "run.json": (project / "run.json").read_bytes(),
    }


def _inner_env(copy: Path) -> dict:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("MLFLOW_", "PYTEST_", "TF_CONFIG", "TFPIPE_"))
    }
    env.update(
        PYTHONPATH=os.pathsep.join([str(copy / "src"), str(copy)]),  # before the editable install of ROOT/src
        TF_CPP_MIN_LOG_LEVEL="2",
        DVC_NO_ANALYTICS="1",
    )
    return env


@pytest.mark.slow  # starts a pytest session on a copy of the checkout: about a minute
def test_the_stage_cli_tests_leave_a_workspace_with_an_applied_experiment_alone(tmp_path, db_template):
    copy = copy_of_the_checkout(tmp_path / "checkout")
    applied = apply_an_experiment(copy / "params.yaml")
    shutil.copy(db_template, copy / "mlflow.db")  # a real store, as training leaves it
    (copy / "models" / "cifar10").mkdir(parents=True)
    (copy / "models" / "cifar10" / "MARKER").write_text("the user's trained model\n")
    (copy / "metrics").mkdir()
    (copy / "metrics" / "train.json").write_text('{"accuracy": 0.5}\n')
    (copy / "run.json").write_text('{"run_id": "0123456789abcdef0123456789abcdef"}\n')
    env = _inner_env(copy)
    where = subprocess.run(
        [
            sys.executable,
            "-c",
            "import tfpipe, pipeline, conftest; print(tfpipe.__file__, pipeline.__file__)",
        ],
        cwd=copy,
        env={**env, "PYTHONPATH": env["PYTHONPATH"] + os.pathsep + str(copy / "tests")},
        capture_output=True,
        text=True,
    )
    assert where.returncode == 0 and where.stdout.count(str(copy)) == 2, where  # the copy's code, not ROOT's
    status = _git("status", "--porcelain", cwd=copy)
    assert status.splitlines() == [" M params.yaml"], status  # the outputs are ignored, as in a clone
    snapshot, outputs = checkout_snapshot(copy), _user_outputs(copy)

    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", "-p", "no:randomly", "-n", "0"]
        + STAGE_CLI_TESTS,
        cwd=copy,
        env=env,
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert " passed" in proc.stdout.splitlines()[-1], proc.stdout[-2000:]
    assert _git("status", "--porcelain", cwd=copy) == status
    assert (copy / "params.yaml").read_text(encoding="utf-8") == applied
    assert _user_outputs(copy) == outputs, "the tests wrote into the user's mlflow.db, models/ or metrics/"
    assert snapshot_changes(snapshot, checkout_snapshot(copy)) == []


def test_no_test_runs_a_stage_command_line_with_the_checkout_as_its_project():
    """`cli(stage, run, description, argv, root)` in-process, with root=ROOT: the checkout would be the
    stage's project (its params.yaml read, its mlflow.db and models/ written). Such tests take conftest's
    `scratch_root`."""
    found = []
    for path in sorted((ROOT / "tests").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.Call):
                continue
            name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            root = node.args[4] if len(node.args) > 4 else None
            root = next((k.value for k in node.keywords if k.arg == "root"), root)
            if name == "cli" and isinstance(root, ast.Name) and root.id == "ROOT":
                found.append(f"{path.name}:{node.lineno}")
    assert not found, f"stage command lines run with the checkout as their project: {found}"


# ----------------------------------------------------------------------------- the session guard


def test_the_session_guard_names_each_change_and_nothing_else(tmp_path):
    project = tmp_path / "project"
    (project / "models").mkdir(parents=True)
    (project / "models" / "model.keras").write_bytes(b"weights")
    (project / "params.yaml").write_text("train:\n  epochs: 3\n")
    (project / "notes.txt").write_text("tracked\n")
    (project / ".gitignore").write_text("/models\n/metrics\n")
    _git("init", "-q", cwd=project)
    _git("add", ".gitignore", "notes.txt", "params.yaml", cwd=project)
    _git("commit", "-qm", "start", cwd=project)
    before = checkout_snapshot(project)
    assert set(before) == {"models", "params.yaml", "git status"}
    assert snapshot_changes(before, checkout_snapshot(project)) == []  # reading changes nothing

    stat = os.stat(project / "models" / "model.keras")
    (project / "models" / "model.keras").write_bytes(b"WEIGHTS")  # the same size: the mtime tells
    os.utime(project / "models" / "model.keras", ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))
    (project / "metrics").mkdir()
    (project / "metrics" / "train.json").write_text("{}")
    (project / "notes.txt").write_text("changed\n")
    changes = snapshot_changes(before, checkout_snapshot(project))
    assert changes == [
        "git status (+M notes.txt)",
        "metrics (made)",
        "models (models/model.keras)",
    ], changes


# ----------------------------------------------------------------------------- the docs runner


@pytest.fixture
def block(tmp_path):
    """block(body, lang="bash") -> (exit status, output): one `run` block through the docs runner's own
    code."""
    start = tmp_path / "start"
    start.mkdir()
    state = tmp_path / "state"
    new_session(state, start)
    env = dict(os.environ)

    def _run(body: str, lang: str = "bash") -> tuple:
        return run_block(body, lang, state, start, env)

    return _run


@pytest.mark.parametrize(
    "body",
    [
        "false && echo hi\necho after\n",
        'echo "$(false)"\necho after\n',
        "x=$(false)\necho after\n",
        'export X="$(false; echo late)"\necho after\n',
        "echo start\n! true\necho after\n",
        "cat <(false)\necho after\n",
        "for f in a; do\n  false && echo hi\ndone\necho after\n",
    ],
    ids=[
        "before &&",
        "in $() as an argument",
        "in $() assigned",
        "in $() exported",
        "! pipeline",
        "in <()",
        "loop",
    ],
)
def test_a_failure_bash_would_let_pass_fails_the_block(block, body):
    status, printed = block(body)
    assert status != 0, printed
    assert not {"hi", "after"} & set(printed.splitlines()), printed
    if not body.startswith("x="):  # bash's own errexit stops that one; the others, the runner, saying why
        assert printed.splitlines()[-1].startswith("docs-test: "), printed


@pytest.mark.parametrize(
    "body",
    [
        "false || true\necho after\n",
        "if false; then :; fi\necho after\n",
        "out=$(false) || echo recovered\necho after\n",
        'if [ -n "$(false || true)" ]; then echo never; fi\necho after\n',
        "while false; do :; done\necho after\n",
        "true && echo hi\necho after\n",
        "cat <<EOF\nhi $(echo inside)\n  && not a command\nEOF\necho after\n",
        "f() {\n  false || return 0\n}\nf\necho 'after' # it's\n",
        "set +e\nfalse && echo hi\necho after\n",
    ],
    ids=["|| true", "if", "$() ||", "$() in if", "while", "&& passing", "here-doc", "function", "set +e"],
)
def test_what_a_reader_writes_to_allow_a_failure_still_passes(block, body):
    status, printed = block(body)
    assert status == 0, printed
    assert printed.rstrip().endswith("after"), printed


def test_a_block_still_carries_its_folder_and_exports_to_the_next(block):
    assert block("mkdir sub && cd sub\nexport GREETING=hello\n")[0] == 0
    status, printed = block('echo "$GREETING from $(basename "$PWD")"\n')
    assert (status, printed) == (0, "hello from sub\n")


def test_python_blocks_fail_on_their_exit_status(block):
    assert block("print('ok')\n", "python") == (0, "ok\n")
    assert block("import sys\nsys.exit(3)\n", "python")[0] == 3


def test_top_level_commands_follow_bash_s_own_grammar():
    lines = ["if true; then", "  echo in", "fi", "cat <<'EOF'", "x && y", "EOF", 'echo "a', 'b"', "echo done"]
    assert top_level_commands(lines) == [lines[0:3], lines[3:6], lines[6:8], lines[8:9]]
