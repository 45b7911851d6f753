"""`dvc exp show` in a project made from this one, after `dvc exp run` of two tiny experiments: the test split's
headline metrics lead (accuracy is the first metric column), the data report's counts are not DVC metrics, and
the stages still re-run on any key they read, shown on the first screen or not.

What DVC 3.67 decides (dvc/repo/experiments/show.py, dvc/commands/experiments/show.py, dvc/ui/table.py): the
columns are Experiment and Created, then the metrics (files in dvc.yaml's order, keys in each file's order), then
every key of params.yaml (DVC always adds the whole default params file; Hydra writes the full config there),
then one column per file dependency (its hash). `dvc exp show` hands the table (up to 1,024 wide) to `less -S`
(in a terminal; piped, it prints it), so a 120-column terminal shows its first 120 characters; `--no-pager`
squeezes it into the terminal instead, collapsing columns right to left.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import yaml
from test_pipeline_e2e import TINY, _make_project, _run

pytestmark = pytest.mark.slow  # two tiny experiments: a few minutes on two cores

TEST_METRICS = [
    "accuracy",
    "loss",
    "macro_precision",
    "macro_recall",
    "macro_f1",
]  # metrics/eval.json's order
DATA_REPORT = [
    "examples_train",
    "examples_test",
    "exact_test_in_train",
    "near_test_in_train",
    "skipped_files",
]
WIDTH = 120
RATES = {"lr-fast": "0.01", "lr-slow": "0.0001"}


@pytest.fixture(scope="module")
def experiments(tmp_path_factory, image_dir, text_dir):
    """A project with two experiments on the tiny config that differ in their learning rate."""
    project, env = _make_project(tmp_path_factory.mktemp("exp_show"), image_dir, text_dir)
    dvc = [sys.executable, "-m", "dvc"]
    tiny = [arg for o in TINY for arg in ("-S", o)]
    for name, rate in RATES.items():
        _run(
            [*dvc, "exp", "run", "-n", name, *tiny, "-S", f"train.optimizer.learning_rate={rate}"],
            project,
            env,
        )
    return project, env


def _show(project, env, *args, columns=WIDTH) -> str:
    cmd = [sys.executable, "-m", "dvc", "exp", "show", *args]
    return _run(cmd, project, {**env, "COLUMNS": str(columns)})


def _metric_columns(project, env) -> list:
    """The metric columns of `dvc exp show`, in order (from its --csv header: after the fixed ones, before the
    first param)."""
    header = _show(project, env, "--csv").splitlines()[0].split(",")
    first_param = next(i for i, name in enumerate(header) if "." in name)  # params are dotted keys
    return [
        name for name in header[:first_param] if name not in ("Experiment", "rev", "typ", "Created", "parent")
    ]


def _accuracy_cell(lines: list, name: str) -> str:
    """The accuracy cell of experiment `name`'s row: metrics are right-aligned under their header."""
    end = lines[1].index(" accuracy ") + len(" accuracy")
    return next(line for line in lines if f"[{name}]" in line)[:end].split()[-1]


def _accuracies(project, env) -> dict:
    """Each experiment's test accuracy, as `dvc exp show --json` has it, formatted as the table shows it."""
    rows = json.loads(_show(project, env, "--json"))
    found = {}
    for baseline in rows:
        for exp in baseline.get("experiments") or []:
            rev = exp["revs"][0]
            value = rev["data"]["metrics"]["metrics/eval.json"]["data"]["accuracy"]
            found[rev["name"]] = f"{value:.5g}"
    return found


def test_the_test_metrics_lead_and_the_data_report_is_no_column(experiments):
    project, env = experiments
    columns = _metric_columns(project, env)
    assert columns[:5] == TEST_METRICS, columns  # test accuracy first, then the other headline figures
    assert "val_accuracy" in columns and not set(DATA_REPORT) & set(columns), columns


def test_a_120_column_terminal_shows_each_experiments_test_metrics_first(experiments):
    """The default invocation: what `less -S` shows of the table in a 120-column terminal is its first 120
    characters of each line: the experiment, when, and the five test metrics."""
    project, env = experiments
    lines = _show(project, env).splitlines()
    screen = [line[:WIDTH] for line in lines]
    header = screen[1].split()
    assert header[:2] == ["Experiment", "Created"] and header[2:7] == TEST_METRICS, screen[1]
    for name, accuracy in _accuracies(project, env).items():
        assert _accuracy_cell(screen, name) == accuracy, (name, "\n".join(screen))


def test_no_pager_without_params_and_code_columns_fits_120_and_shows_the_test_metrics(experiments):
    """compare.md's command for a narrow terminal without the pager: DVC fits the table into COLUMNS by
    collapsing columns right to left, and every param (dotted) and code hash (a path) would come first."""
    project, env = experiments
    lines = _show(project, env, "--no-pager", "--drop", ".*[./]").splitlines()
    assert max(len(line) for line in lines) <= WIDTH, "\n".join(lines)
    assert lines[1].split()[2:7] == TEST_METRICS, "\n".join(lines)
    for name, accuracy in _accuracies(project, env).items():
        assert _accuracy_cell(lines, name) == accuracy, "\n".join(lines)


@pytest.mark.parametrize(
    "key, value, stage",
    [
        ("train.steps_per_execution", 5, "train"),  # a training key far right of the first screen
        ("data.validation.near_empty_tokens", 4, "prepare"),  # a data report key, read by prepare alone
    ],
)
def test_a_key_off_the_screen_still_reruns_the_stage_that_reads_it(experiments, key, value, stage):
    project, env = experiments
    params = project / "params.yaml"
    original = params.read_text()
    config = yaml.safe_load(original)
    section, *path, leaf = key.split(".")
    node = config[section]
    for part in path:
        node = node[part]
    assert node[leaf] != value
    node[leaf] = value
    try:
        params.write_text(yaml.safe_dump(config, sort_keys=False))
        cmd = [sys.executable, "-m", "dvc", "status", "--json"]
        proc = subprocess.run(cmd, cwd=project, env=env, capture_output=True, text=True, check=True)
    finally:
        params.write_text(original)
    assert set(json.loads(proc.stdout)) == {stage}, proc.stdout  # the stages after it re-run on its outputs
