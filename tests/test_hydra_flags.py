"""Hydra's standard flags on the stage entry points (issue 33, item 4): `--cfg job` prints the config a stage
would run with and runs nothing, `--help`/`--info` list conf/'s config groups, the flags with no meaning for a
stage answer in one line, and `tfpipe sweep` is the Hydra app of `python -m pipeline.sweep`.

The real entry points run as subprocesses where the command line itself matters; the rest runs in-process
through `tfpipe.commands.entry.cli` with a `run` that records whether the stage was reached. Expected values
are read from conf/ and params.yaml directly, never computed with the code under test. Both run in a project
of their own (conftest's `scratch_root`: conf/ and the committed params.yaml), never in this checkout: a flag
that wrongly let a stage run would train there.
"""

from __future__ import annotations

import re
import shutil
import sys
from pathlib import Path

import pytest
import yaml
from conftest import run_in_project

from tfpipe.commands import entry

ROOT = Path(__file__).resolve().parents[1]


def _run(args, project: Path):
    return run_in_project(args, project, timeout=120)


@pytest.fixture
def project(scratch_root) -> Path:
    """The project folder every command here runs in (conftest's `scratch_root`), never this checkout."""
    return scratch_root


def _cli(capsys, project: Path, argv, stage="train"):
    """The stage's command line in-process in `project`: (exit code, stdout, stderr lines, whether the stage
    ran)."""
    reached = []
    capsys.readouterr()
    code = entry.cli(
        stage, lambda cfg, root: reached.append(cfg), "test", argv, project, configure_logging=False
    )
    out, err = capsys.readouterr()
    return code, out, [line for line in err.splitlines() if line.strip()], bool(reached)


def _stage_groups() -> dict:
    """conf/'s config groups a stage picks from (named in conf/config.yaml's defaults) -> their options."""
    defaults = yaml.safe_load((ROOT / "conf" / "config.yaml").read_text())["defaults"]
    named = [next(iter(item)) for item in defaults if isinstance(item, dict)]
    return {group: sorted(p.stem for p in (ROOT / "conf" / group).glob("*.yaml")) for group in named}


def _imported(importtime_stderr: str) -> set:
    """Top-level package names from `python -X importtime` lines ('import time: self | cumulative | name')."""
    names = set()
    for line in importtime_stderr.splitlines():
        if line.startswith("import time:") and "|" in line:
            names.add(line.rsplit("|", 1)[1].strip().split(".")[0])
    return names


def test_cfg_job_prints_the_composed_config_without_tensorflow(project):
    """The real `python -m pipeline.train --cfg job train.epochs=3`: YAML with the override, exit 0, no TF."""
    proc = _run(
        [sys.executable, "-X", "importtime", "-m", "pipeline.train", "--cfg", "job", "train.epochs=3"],
        project,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    printed = yaml.safe_load(proc.stdout)
    assert printed["train"]["epochs"] == 3
    assert set(printed) == set(yaml.safe_load((project / "params.yaml").read_text()))  # the job config, whole
    imported = _imported(proc.stderr)
    assert {"omegaconf", "hydra"} <= imported  # -X importtime did list the imports
    assert "tensorflow" not in imported and "keras" not in imported
    other = [line for line in proc.stderr.splitlines() if not line.startswith("import time:")]
    logged = [line for line in other if " train " in line or "error" in line.lower()]
    assert not logged, logged  # no stage log line: nothing started


def test_cfg_job_runs_nothing_and_reads_the_same_source_as_the_stage(project, capsys):
    code, out, err, ran = _cli(capsys, project, ["--cfg", "job"])
    assert (code, err, ran) == (0, [], False)
    assert yaml.safe_load(out) == yaml.safe_load(
        (project / "params.yaml").read_text()
    )  # no overrides: params

    code, out, err, ran = _cli(capsys, project, ["-c", "job", "-p", "train.epochs", "train.epochs=3"])
    assert (code, out, err, ran) == (0, "3\n", [], False)

    code, out, _, ran = _cli(capsys, project, ["--cfg", "job", "--package", "train", "train.epochs=3"])
    assert code == 0 and not ran and out.startswith("# @package train\n")
    assert yaml.safe_load(out)["epochs"] == 3


def test_cfg_job_keeps_interpolations_unless_resolve(project, capsys):
    raw_path = yaml.safe_load((ROOT / "conf" / "data" / "default.yaml").read_text())["path"]
    assert "${dataset.name}" in raw_path  # what the test relies on
    _, out, _, _ = _cli(capsys, project, ["--cfg", "job", "-p", "data", "dataset=imdb"])
    assert yaml.safe_load(out)["path"] == raw_path
    _, out, _, _ = _cli(capsys, project, ["--cfg", "job", "--resolve", "-p", "data", "dataset=imdb"])
    assert yaml.safe_load(out)["path"] == raw_path.replace("${dataset.name}", "imdb")


def test_cfg_hydra_and_all_say_what_the_stage_uses(project, capsys):
    code, out, err, ran = _cli(capsys, project, ["--cfg", "hydra"])
    assert (code, err, ran) == (0, [], False)
    assert len(out.splitlines()) == 1 and "--cfg job" in out and "tfpipe sweep --cfg hydra" in out
    code, out, _, ran = _cli(capsys, project, ["--cfg", "all", "train.epochs=3"])
    assert code == 0 and not ran
    assert yaml.safe_load(out)["train"]["epochs"] == 3  # the one-line answer is a YAML comment


def test_cfg_job_with_a_misspelt_key_is_the_stages_did_you_mean_line(project, capsys):
    proc = _run([sys.executable, "-m", "pipeline.train", "--cfg", "job", "train.epohcs=3"], project)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    assert "did you mean 'train.epochs'" in lines[0] and proc.stdout == ""
    code, _, stage_err, ran = _cli(capsys, project, ["train.epohcs=3"])  # the same overrides, without --cfg
    assert code == 2 and not ran and stage_err == lines

    code, out, err, _ = _cli(capsys, project, ["--cfg", "job", "-p", "trian"])
    assert code == 2 and out == "" and len(err) == 1 and "did you mean 'train'" in err[0]


def test_help_lists_the_config_groups_and_their_options(project):
    proc = _run([sys.executable, "-m", "tfpipe.cli", "train", "--help"], project)
    assert proc.returncode == 0, proc.stderr
    groups = _stage_groups()
    assert {"cnn", "resnet"} <= set(groups["model"])
    for group, options in groups.items():
        assert f"  {group}: {', '.join(options)}\n" in proc.stdout, group
    for flag in ("--cfg", "--info", "--hydra-help", "--multirun"):
        assert flag in proc.stdout


def test_info_names_config_dir_groups_and_overrides(project, capsys):
    code, out, err, ran = _cli(
        capsys, project, ["train.epochs=3", "--info"]
    )  # --info [MODE]: a mode may follow
    assert (code, err, ran) == (0, [], False)
    assert str(project / "conf") in out and "overrides: train.epochs=3" in out
    for group, options in _stage_groups().items():
        assert f"{group}: {', '.join(options)}" in out


def test_multirun_answers_one_line_naming_tfpipe_sweep(project):
    for args in (["-m", "pipeline.train"], ["-m", "tfpipe.cli", "train"]):
        proc = _run([sys.executable, *args, "-m", "train.epochs=1,2"], project)
        lines = proc.stderr.strip().splitlines()
        assert proc.returncode == 2 and len(lines) == 1, proc.stderr
        assert (
            "tfpipe sweep --multirun train.epochs=1,2" in lines[0] and "python -m pipeline.sweep" in lines[0]
        )


@pytest.mark.parametrize(
    "argv, names",
    [
        (["-sc", "install=bash"], "--shell-completion/-sc"),
        (["--shell-completion"], "--help and --info"),
        (["-cn", "other"], "experiment=NAME"),
        (["--config-path", "x"], "--params"),
        (["-cd", "x"], "--config-dir/-cd"),
        (["--experimental-rerun", "x.pickle"], "tfpipe audit RUN_ID --rerun"),
        (["--cfg", "yaml"], "invalid choice"),
    ],
)
def test_flags_with_no_meaning_for_a_stage_answer_in_one_line(project, capsys, argv, names):
    try:
        code, out, err, ran = _cli(capsys, project, argv)
    except SystemExit as exc:  # argparse's own usage errors exit from the parser
        code, out, err, ran = exc.code, "", capsys.readouterr().err.strip().splitlines(), False
    assert (code, out, ran) == (2, "", False)
    assert len(err) == 1 and names in err[0], err


def _command_mains():
    """Every `tfpipe` subcommand that is not a stage, as (name, main(argv))."""
    from tfpipe import scaffold, tuning
    from tfpipe.commands import audit, predict, promote, serve

    return {
        "audit": audit.audit_main,
        "compare": audit.compare_main,
        "promote": promote.main,
        "predict": predict.main,
        "serve": serve.main,
        "init": scaffold.main,
        "tune": tuning.main,
    }


@pytest.mark.parametrize(
    "command, argv",
    [
        ("serve", ["models:/tfpipe-cifar10@champion", "--cfg", "job"]),
        ("serve", ["runs:/abc/model", "train.epochs=3"]),
        ("promote", ["RUN", "--cfg=job"]),
        ("audit", ["RUN", "--info"]),
        ("compare", ["A", "B", "-m"]),
        ("predict", ["models:/m/1", "images", "+train.seed=3"]),
        ("init", ["team-project", "--hydra-help"]),
        ("tune", ["team", "--cfg", "job"]),
    ],
)
def test_commands_that_are_not_stages_answer_hydra_habits_in_one_line(capsys, command, argv):
    """Issue 33, item 4: `tfpipe serve URI --cfg job` and the like answer one line naming the command that prints
    a config (argparse said "unrecognized arguments"); nothing runs."""
    token = next(t for t in argv if t.startswith("-") or "=" in t)
    with pytest.raises(SystemExit) as exit_:
        _command_mains()[command](argv)
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert exit_.value.code == 2 and len(err) == 1, err
    assert f": error: {token}: " in err[0] and "tfpipe train --cfg job" in err[0]


def test_tune_still_takes_overrides_and_uris_are_not_overrides(capsys):
    """The check leaves each command's own arguments alone: tune's overrides, a model URI with '@'."""
    for command, argv in (
        ("tune", ["team", "train.epochs=1", "--help"]),
        ("serve", ["models:/m@a", "--help"]),
    ):
        with pytest.raises(SystemExit) as exit_:
            _command_mains()[command](argv)
        assert exit_.value.code == 0
        assert "usage:" in capsys.readouterr().out


def test_hydra_help_run_and_version(project, capsys):
    code, out, err, ran = _cli(capsys, project, ["--hydra-help"])
    assert (code, err, ran) == (0, [], False)
    assert "--cfg job" in out and "--info" in out and "hydra.cc/docs" in out
    code, out, _, ran = _cli(capsys, project, ["--version"])
    assert code == 0 and not ran and out.startswith("tfpipe ") and "Hydra 1." in out
    code, out, _, ran = _cli(
        capsys, project, ["-r", "--cfg", "job", "train.epochs=3"]
    )  # Hydra's default mode: accepted
    assert code == 0 and not ran and yaml.safe_load(out)["train"]["epochs"] == 3


@pytest.mark.slow  # starts processes
def test_tfpipe_sweep_is_the_sweep_app(project):
    by_script = _run([sys.executable, "-m", "tfpipe.cli", "sweep", "--help"], project)
    assert by_script.returncode == 0, by_script.stderr
    assert (
        by_script.stdout.startswith("sweep is powered by Hydra.")
        and "== Configuration groups ==" in by_script.stdout
    )
    by_module = _run([sys.executable, "-m", "pipeline.sweep", "--help"], project)
    assert by_script.stdout == by_module.stdout

    printed = _run([sys.executable, "-m", "tfpipe.cli", "sweep", "--cfg", "job", "train.epochs=3"], project)
    assert printed.returncode == 0 and yaml.safe_load(printed.stdout)["train"]["epochs"] == 3


@pytest.mark.skipif(
    shutil.which("tfpipe") is None, reason="the console script is installed by pip install -e ."
)
@pytest.mark.slow  # starts processes
def test_installed_console_script_takes_hydra_flags(project):
    proc = _run(["tfpipe", "train", "--cfg", "job", "train.epochs=3"], project)
    assert proc.returncode == 0 and yaml.safe_load(proc.stdout)["train"]["epochs"] == 3, proc.stderr
    sweep = _run(["tfpipe", "sweep", "--help"], project)
    assert sweep.returncode == 0 and "powered by Hydra" in sweep.stdout


# ----------------------------------------------------------------------------- mlflow run -P KEY=VALUE


def test_mlflow_run_undeclared_param_is_an_override(project, capsys):
    """`mlflow run . -e train -P train.epochs=3` appends `--train.epochs 3` (a param the MLproject does not
    declare); the stage takes it as the override train.epochs=3, also as `--KEY=VALUE` and beside others."""
    code, out, err, ran = _cli(capsys, project, ["model=resnet", "--train.epochs", "3", "--cfg", "job"])
    assert code == 0 and not ran, err
    printed = yaml.safe_load(out)
    assert printed["train"]["epochs"] == 3 and printed["model"]["name"] == "resnet"
    code, out, err, _ = _cli(
        capsys, project, ["--train.batch_size_per_replica=16", "--dataset", "imdb", "--cfg", "job"]
    )
    assert code == 0, err
    printed = yaml.safe_load(out)
    assert printed["train"]["batch_size_per_replica"] == 16 and printed["dataset"]["name"] == "imdb"


def test_mlflow_run_short_names_listed_in_mlproject_set_their_keys(project, capsys):
    """Each short name MLproject's comment lists (`-P epochs=N  train.epochs`) sets that key: read from
    MLproject's text, given as mlflow run hands an undeclared parameter over (`--epochs 7`)."""
    listed = re.findall(r"^#\s+-P (\w+)=\S+\s+([\w.]+)\s*$", (ROOT / "MLproject").read_text(), re.M)
    assert {name for name, _ in listed} >= {"epochs", "learning_rate", "batch_size"}, listed
    for name, key in listed:
        code, out, err, ran = _cli(capsys, project, [f"--{name}", "7", "--cfg", "job"])
        assert code == 0 and not ran, err
        value = yaml.safe_load(out)
        for part in key.split("."):
            value = value[part]
        assert value == 7, (name, key, value)


def test_mlflow_run_unknown_param_names_the_key_and_p_overrides(project, capsys):
    """`-P epoch=3` (no such key) arrives as `--epoch 3`: one line naming the key, a did-you-mean and
    `-P overrides=`, exit 2, before the stage runs."""
    code, out, err, ran = _cli(capsys, project, ["--epoch", "3"])
    assert code == 2 and not ran and len(err) == 1, err
    assert "-P epoch=3" in err[0] and "train.epochs" in err[0] and "-P overrides=" in err[0]
    with pytest.raises(SystemExit) as exited:  # a misspelt flag with no value stays argparse's usage error
        _cli(capsys, project, ["--debg"])
    assert exited.value.code == 2 and "unrecognized arguments: --debg" in capsys.readouterr().err


def test_a_flag_of_the_stage_or_of_its_hydra_group_is_never_taken_for_an_mlflow_param(tmp_path):
    """`mlflow run -P epochs=2` arrives as `--epochs 2` and becomes train.epochs=2; the stage's own flags, those
    added through argparse groups (Hydra's) included, stay flags (OneLineParser.flags, issue 53: no argparse
    private)."""
    from tfpipe.commands import entry

    parser = entry._parser("train", "d", ROOT, "")
    assert {
        "params",
        "debug",
        "v",
        "verbose",
        "h",
        "help",
        "cfg",
        "c",
        "package",
        "p",
        "multirun",
    } <= parser.flags
    argv = ["--cfg", "job", "-p", "train", "--epochs", "2", "--train.seed=3", "--params", "x.yaml"]
    out, turned = entry._mlflow_params(parser, argv)
    assert out == ["--cfg", "job", "-p", "train", "train.epochs=2", "train.seed=3", "--params", "x.yaml"]
    assert turned == [("train.epochs", "2"), ("train.seed", "3")]
