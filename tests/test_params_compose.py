"""Issue 52, "One override keeps the rest": a stage given overrides starts from params.yaml (what `dvc repro` reads
and `dvc exp run -S` writes) and applies them on top, in `--cfg job` and in every stage; before, one override
composed conf/ afresh and silently dropped every value params.yaml held.

Each test works in a project of its own (conf/ copied, a params.yaml whose learning rate and epochs are not
conf/'s), through `tfpipe.commands.entry.cli` in-process with a `run` that records the Config it is given, or the
real console script once. Expected values are written by the test or read from conf/, never computed with the
code under test.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tfpipe.commands import entry

ROOT = Path(__file__).resolve().parents[1]
LR, EPOCHS = 0.003, 2  # params.yaml's; conf/'s are 0.001 and 3
STAGES = ("prepare", "train", "evaluate", "run_all")


def committed_text(name: str) -> str:
    """`name` as committed at HEAD (after `dvc exp apply` the workspace's params.yaml is an experiment's); the
    workspace's file where there is no git."""
    proc = subprocess.run(
        ["git", "--no-optional-locks", "show", f"HEAD:{name}"], cwd=ROOT, capture_output=True, text=True
    )
    return proc.stdout if proc.returncode == 0 else (ROOT / name).read_text(encoding="utf-8")


def _params(**changes) -> dict:
    """The committed params.yaml (conf/ composed with no overrides) with `changes` ({"train.epochs": 2})."""
    params = yaml.safe_load(committed_text("params.yaml"))
    for dotted, value in changes.items():
        *parents, last = dotted.split(".")
        node = params
        for part in parents:
            node = node[part]
        node[last] = value
    return params


@pytest.fixture
def project(tmp_path, monkeypatch) -> Path:
    """conf/ and a params.yaml as `dvc exp run -S train.epochs=2 -S train.optimizer.learning_rate=0.003`
    leaves it; tracking in the project's own store."""
    for name in ("MLFLOW_TRACKING_URI", "MLFLOW_RUN_ID", "MLFLOW_EXPERIMENT_NAME", "MLFLOW_EXPERIMENT_ID"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("TFPIPE_DEBUG", raising=False)
    shutil.copytree(ROOT / "conf", tmp_path / "conf", ignore=shutil.ignore_patterns("__pycache__"))
    params = _params(**{"train.epochs": EPOCHS, "train.optimizer.learning_rate": LR})
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False), encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _cli(capsys, root: Path, argv, stage="train", run=None):
    """(exit code, stdout, stderr lines, the Config the stage was given or None)."""
    reached = []
    capsys.readouterr()
    code = entry.cli(
        stage, run or (lambda cfg, root: reached.append(cfg)), "test", argv, root, configure_logging=False
    )
    out, err = capsys.readouterr()
    return code, out, [line for line in err.splitlines() if line.strip()], (reached or [None])[0]


def _conf_option(group: str, option: str) -> dict:
    return yaml.safe_load((ROOT / "conf" / group / f"{option}.yaml").read_text())


def test_cfg_job_prints_params_yaml_with_the_one_override(capsys, project):
    """The issue's command: every value is params.yaml's but the one overridden."""
    code, out, err, ran = _cli(
        capsys, project, ["--cfg", "job", "--resolve", "train.batch_size_per_replica=32"]
    )
    assert (code, err, ran) == (0, [], None)
    printed = yaml.safe_load(out)
    assert printed["train"]["optimizer"]["learning_rate"] == LR and printed["train"]["epochs"] == EPOCHS
    assert printed["train"]["batch_size_per_replica"] == 32
    expected = yaml.safe_load((project / "params.yaml").read_text())
    expected["train"]["batch_size_per_replica"] = 32
    assert printed == expected  # nothing else moved


@pytest.mark.parametrize("stage", STAGES)
def test_every_stage_runs_with_params_yaml_and_the_override(capsys, project, stage, monkeypatch):
    from tfpipe import preflight

    monkeypatch.setattr(
        preflight, "check", lambda cfg, stage, root: None
    )  # the host's checks: not this test's
    code, _, err, cfg = _cli(capsys, project, ["train.batch_size_per_replica=32"], stage=stage)
    assert (code, err) == (0, [])
    assert cfg.train.optimizer.learning_rate == LR and cfg.train.epochs == EPOCHS
    assert cfg.train.batch_size_per_replica == 32
    code, out, _, _ = _cli(
        capsys, project, ["--cfg", "job", "-p", "train.epochs", "train.seed=7"], stage=stage
    )
    assert (code, out) == (0, f"{EPOCHS}\n")


def test_no_override_reads_params_yaml_as_dvc_repro_does(capsys, project):
    code, _, err, cfg = _cli(capsys, project, [])
    assert (code, err) == (0, [])
    assert cfg.train.optimizer.learning_rate == LR and cfg.train.epochs == EPOCHS


@pytest.mark.skipif(
    shutil.which("tfpipe") is None, reason="the console script is installed by pip install -e ."
)
def test_the_real_console_script(project):
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    env.pop("TFPIPE_DEBUG", None)
    proc = subprocess.run(
        ["tfpipe", "train", "--cfg", "job", "train.batch_size_per_replica=32"],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr[-2000:]
    train = yaml.safe_load(proc.stdout)["train"]
    assert (train["optimizer"]["learning_rate"], train["epochs"], train["batch_size_per_replica"]) == (
        LR,
        EPOCHS,
        32,
    )


def test_a_group_that_writes_its_own_section_switches_only_that_section(capsys, project):
    """model=resnet: the model section is conf/'s resnet, every other value params.yaml's."""
    code, out, err, _ = _cli(
        capsys, project, ["--cfg", "job", "--resolve", "model=resnet", "model.dropout=0.25"]
    )
    assert (code, err) == (0, [])
    printed = yaml.safe_load(out)
    assert printed["model"] == {**_conf_option("model", "resnet"), "dropout": 0.25}
    params = yaml.safe_load((project / "params.yaml").read_text())
    assert {k: v for k, v in printed.items() if k != "model"} == {
        k: v for k, v in params.items() if k != "model"
    }
    code, _, err, cfg = _cli(capsys, project, ["strategy=mirrored"])  # the stage itself, too
    assert (code, err) == (0, [])
    assert cfg.strategy.name == "mirrored" and cfg.train.optimizer.learning_rate == LR


def test_a_group_that_reaches_other_sections_composes_conf_and_says_what_it_drops(capsys, project):
    """experiment=smoke (`@package _global_`) cannot go on top of resolved values: params.yaml does not record
    the choices behind them. conf/ is composed fresh, and one stderr line names what of params.yaml's is lost."""
    smoke = _conf_option("experiment", "smoke")
    defaults = yaml.safe_load((ROOT / "conf" / "train" / "default.yaml").read_text())
    code, out, err, _ = _cli(capsys, project, ["--cfg", "job", "--resolve", "experiment=smoke"])
    assert code == 0 and len(err) == 1, err
    assert err[0].startswith("train: warning: params.yaml not used: experiment=smoke")
    assert f"train.optimizer.learning_rate={LR}" in err[0] and "as overrides" in err[0]
    train = yaml.safe_load(out)["train"]
    assert train["epochs"] == smoke["train"]["epochs"]
    assert train["optimizer"]["learning_rate"] == defaults["optimizer"]["learning_rate"]
    code, _, stage_err, cfg = _cli(capsys, project, ["experiment=smoke"])  # the stage: the same line, once
    assert code == 0 and stage_err == err and cfg.train.epochs == smoke["train"]["epochs"]


def test_a_group_override_loses_nothing_says_nothing(capsys, project):
    """params.yaml as conf/ composes it (the committed one): a preset drops nothing of it, so no line."""
    (project / "params.yaml").write_text(committed_text("params.yaml"), encoding="utf-8")
    code, out, err, _ = _cli(capsys, project, ["--cfg", "job", "-p", "dataset.name", "dataset=imdb"])
    assert (code, out, err) == (0, "imdb\n", [])


def test_an_unknown_key_is_still_refused_in_one_line(capsys, project):
    for argv in (["train.epohcs=1"], ["--cfg", "job", "train.epohcs=1"]):
        code, out, err, cfg = _cli(capsys, project, argv)
        assert (code, out, cfg) == (2, "", None) and len(err) == 1, err
        assert err[0].startswith(
            "train: error: train.epohcs=1: unknown config key (did you mean 'train.epochs'?)"
        )


def test_params_names_the_file_the_overrides_go_on(capsys, project):
    other = _params(**{"train.optimizer.learning_rate": 0.01})
    (project / "other.yaml").write_text(yaml.safe_dump(other), encoding="utf-8")
    code, _, err, cfg = _cli(capsys, project, ["--params", "other.yaml", "train.epochs=5"])
    assert (code, err) == (0, [])
    assert (cfg.train.optimizer.learning_rate, cfg.train.epochs) == (0.01, 5)
    # a file named with --params must exist: never conf/ in its place
    code, _, err, cfg = _cli(capsys, project, ["--params", "nope.yaml", "train.epochs=5"])
    assert code == 2 and cfg is None and len(err) == 1 and "nope.yaml: config file not found" in err[0]


def test_a_project_without_params_yaml_composes_conf(capsys, project):
    (project / "params.yaml").unlink()
    code, _, err, cfg = _cli(capsys, project, ["train.batch_size_per_replica=32"])
    train = yaml.safe_load((ROOT / "conf" / "train" / "default.yaml").read_text())
    assert (code, err) == (0, [])
    assert (cfg.train.epochs, cfg.train.batch_size_per_replica) == (train["epochs"], 32)


def test_a_value_derived_by_conf_follows_its_source(capsys, project):
    """params.yaml holds data.output_dir resolved (conf/: data/prepared/${dataset.name}): dataset.name=x moves
    it, as composing conf/ would; a value set by hand in params.yaml stays."""
    code, _, _, cfg = _cli(capsys, project, ["dataset.name=flowers"], stage="prepare")
    assert (
        code == 0 and cfg.data.output_dir == "data/prepared/flowers" and cfg.data.path == "data/raw/flowers"
    )
    hand = _params(**{"data.output_dir": "/scratch/prepared", "train.epochs": EPOCHS})
    (project / "params.yaml").write_text(yaml.safe_dump(hand), encoding="utf-8")
    code, _, _, cfg = _cli(capsys, project, ["dataset.name=flowers"], stage="prepare")
    assert code == 0 and cfg.data.output_dir == "/scratch/prepared" and cfg.data.path == "data/raw/flowers"


def test_the_launcher_composes_as_the_stage_did(capsys, project):
    """A stage that starts processes (the local launcher) hands on --params and the overrides."""
    handed = []

    def run(cfg, root, train_args=()):
        handed.append(list(train_args))

    _cli(capsys, project, ["--params", "params.yaml", "train.epochs=1"], run=run)
    _cli(capsys, project, ["train.epochs=1"], run=run)
    assert handed == [["--params", "params.yaml", "train.epochs=1"], ["train.epochs=1"]]


def test_help_says_what_is_composed():
    proc = subprocess.run(
        [sys.executable, "-m", "pipeline.train", "--help"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    text = " ".join(proc.stdout.split())
    assert proc.returncode == 0 and "applied on top of --params" in text and "one override keeps" in text


def test_dvc_runs_the_stages_without_overrides():
    """`dvc repro` / `dvc exp run -S` run the stage commands of dvc.yaml, which pass no override: the stages read
    params.yaml as DVC composed it, as before."""
    stages = yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"]
    assert {name: spec["cmd"] for name, spec in stages.items()} == {
        name: f"python -m pipeline.{name}" for name in ("prepare", "train", "evaluate")
    }
