"""Issue 51 (A), an audit that never cries wolf: the check of a run on the untouched project it came from says
ALL MATCH (exit 0) whichever entry point made the run, and a real change still DIFFERS (exit 1).

The config item makes the config again the way the run's was made (tag `tfpipe.config.origin`: params.yaml
with the command line's overrides on top, or conf/ with a sweep job's) and compares like with like: `auto`
resolved on both sides (data.source as the run decided it, precision.policy as tag precision.resolved), paths
project-relative, secrets redacted. The first tests take recorded configs as `tfpipe.layout.rooted` writes
them (what the train stage logs) against real projects' conf/ and params.yaml; the rest run the real entry
points (`dvc repro`, the train stage's command line with an override, a Hydra sweep) in a real git + DVC
project on tiny generated images with `data.source: auto` (the default, which the issue's `data.source:
'directory' -> 'auto'` came from), read the runs from its SQLite MLflow store and audit them with the real
command."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from test_pipeline_e2e import TINY, _run, copy_project

from tfpipe import audit, config
from tfpipe.config import origin
from tfpipe.hardware import resolve_policy
from tfpipe.layout import rooted

ROOT = Path(__file__).resolve().parents[1]
# the e2e project's tiny config with data.source left at its default, auto (the e2e tests pin it to directory)
TINY_AUTO = [o for o in TINY if not o.startswith("data.source")] + [
    "data.examples_per_shard=8",
    "tracking.log_model=false",
]


# ----------------------------------------------------------------------------- the config item


@pytest.fixture
def project(tmp_path):
    """A project with conf/, a params.yaml composed from it with data.source=auto and a data folder that auto
    decides for (data/raw/cifar10)."""
    project = tmp_path / "project"
    shutil.copytree(ROOT / "conf", project / "conf")
    (project / "data" / "raw" / "cifar10").mkdir(parents=True)
    (project / "params.yaml").write_text(config.compose_yaml([], config_dir=project / "conf"))
    return project


def _recorded(cfg, project: Path, **tags) -> dict:
    """A run record as the train stage writes it: the config `rooted` (data paths absolute, data.source=auto
    decided) and the tags the audit reads."""
    record = json.loads(json.dumps(rooted(cfg, project).to_dict()))
    base = {"tfpipe.project": str(project), "precision.resolved": resolve_policy(cfg.precision.policy)}
    return {"config": record, "tags": {**base, **tags}}


def _config_item(run: dict, root: Path):
    from tfpipe.audit.configs import check_config, present_config

    return check_config(run, root, present_config(run, root))


def test_auto_values_compare_resolved_not_raw(project):
    cfg = config.load_params(project / "params.yaml")
    assert cfg.data.source == "auto" and cfg.precision.policy == "auto"
    run = _recorded(cfg, project)
    assert run["config"]["data"]["source"] == "directory"  # what the run recorded
    item = _config_item(run, project)
    assert item.status == audit.MATCH, item
    # a run that ran in another policy than auto picks here: the resolved values differ, and say so
    other = "float32" if resolve_policy("auto") != "float32" else "mixed_bfloat16"
    item = _config_item({**run, "tags": {**run["tags"], "precision.resolved": other}}, project)
    assert item.status == audit.DIFFERS and f"'auto, ran as {other}' -> 'auto, here " in item.detail, item
    # data.source: a recorded `directory` against a project whose data folder is gone (auto decides tfds now)
    shutil.rmtree(project / "data" / "raw" / "cifar10")
    item = _config_item(run, project)
    assert item.status == audit.DIFFERS and "data.source: 'directory' -> 'tfds'" in item.detail, item


def test_a_moved_project_and_a_dvc_copys_paths_are_the_same_paths(project, tmp_path):
    """The recorded data paths are absolute in the run's project (tag tfpipe.project: for a DVC temporary
    copy, the project it came from); a clone elsewhere with the same config matches."""
    cfg = config.load_params(project / "params.yaml")
    run = _recorded(cfg, project)
    clone = tmp_path / "clone"
    shutil.copytree(project, clone)
    assert _config_item(run, clone).status == audit.MATCH
    assert run["config"]["data"]["path"] == str(project / "data" / "raw" / "cifar10")


def test_a_run_made_with_overrides_is_made_again_with_them(project):
    overrides = ["train.optimizer.learning_rate=0.002", "model.dense_units=16"]
    made = origin.from_params(None, overrides)
    cfg = origin.make(made, project)
    run = _recorded(cfg, project, **{origin.TAG: json.dumps(made)})
    item = _config_item(run, project)
    assert item.status == audit.MATCH and item.present == "params.yaml + overrides", item
    assert "overrides: train.optimizer.learning_rate=0.002 model.dense_units=16" in item.detail
    # the same record without the tag: against params.yaml alone, the overrides are differences
    untagged = {**run, "tags": {k: v for k, v in run["tags"].items() if k != origin.TAG}}
    item = _config_item(untagged, project)
    assert item.status == audit.DIFFERS and "train.optimizer.learning_rate: 0.002 -> 0.001" in item.detail
    # a sweep's job: conf/ with its overrides, not params.yaml (which says another learning rate now)
    job = origin.from_conf(["train.optimizer.learning_rate=0.01", "hydra.sweep.dir=multirun/x"])
    assert job["overrides"] == ["train.optimizer.learning_rate=0.01"]  # Hydra's own keys are not the config
    run = _recorded(origin.make(job, project), project, **{origin.TAG: json.dumps(job)})
    (project / "params.yaml").write_text(
        (project / "params.yaml").read_text().replace("learning_rate: 0.001", "learning_rate: 0.005")
    )
    assert _config_item(run, project).status == audit.MATCH
    # a conf/ value edited since: a real difference
    train_conf = project / "conf" / "train" / "default.yaml"
    train_conf.write_text(train_conf.read_text().replace("epochs: 3", "epochs: 4"))
    item = _config_item(run, project)
    assert item.status == audit.DIFFERS and "train.epochs: 3 -> 4" in item.detail, item


def test_secrets_compare_redacted_on_both_sides(project):
    """The logged config holds secret-looking values as '***' and URL passwords hidden: the present one is
    redacted the same way before the two are compared."""
    text = (project / "params.yaml").read_text()
    secret_uri = "https://alice:s3cr3t-pass@mlflow.example.com"
    (project / "params.yaml").write_text(text.replace("  uri: null", f"  uri: {secret_uri}"))
    cfg = config.load_params(project / "params.yaml")
    run = _recorded(cfg, project)
    from tfpipe.tracking.redact import redact_tree

    run["config"] = redact_tree(run["config"])
    assert "s3cr3t-pass" not in json.dumps(run["config"])
    assert _config_item(run, project).status == audit.MATCH


def test_the_origin_tag_holds_no_secret_and_a_cut_one_is_said(project, monkeypatch):
    from tfpipe.tracking.naming import context_tags

    made = origin.from_params("params.yaml", ["train.epochs=1", "+db.password=hunter2-hunter2"])
    previous = origin.declare(made)
    try:
        tag = context_tags()[origin.TAG]
    finally:
        origin.restore(previous)
    assert "hunter2" not in tag and json.loads(tag)["overrides"] == ["train.epochs=1", "+db.password=***"]
    run = _recorded(config.load_params(project / "params.yaml"), project, **{origin.TAG: tag[:30]})
    item = _config_item(run, project)
    assert item.status == audit.DIFFERS and origin.TAG in item.detail and "cut" in item.detail, item


# ----------------------------------------------------------------------------- the real entry points


def _env(project: Path) -> dict:
    import os

    env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "DVC_", origin.ENV))}
    env.update(PYTHONPATH=str(project / "src"), TF_CPP_MIN_LOG_LEVEL="2", DVC_NO_ANALYTICS="1")
    return env


@pytest.fixture(scope="module")
def repro(tmp_path_factory, image_dir):
    """A git + DVC project (the e2e one: conf/, pipeline/, src/, dvc.yaml) on tiny generated images in
    data/raw/cifar10, params.yaml composed by DVC with the tiny config and data.source=auto, after `dvc
    repro`: (project, env, the run's id)."""
    from dvc.utils.hydra import compose_and_dump

    project = copy_project(tmp_path_factory.mktemp("entry_points") / "project")
    shutil.copytree(image_dir, project / "data" / "raw" / "cifar10")
    env = _env(project)
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t"]
    _run(["git", "init", "-q", "-b", "main"], project, env)
    compose_and_dump(project / "params.yaml", str(project / "conf"), None, "config", str(project), TINY_AUTO)
    _run([*git, "add", "-A"], project, env)
    _run([*git, "commit", "-qm", "tiny project, data.source auto"], project, env)
    _run([sys.executable, "-m", "dvc", "repro"], project, env)
    return project, env, _run_id(project)


def _run_id(project: Path) -> str:
    return json.loads((project / "run.json").read_text())["run_id"]


def _audit(project: Path, env: dict, run_id: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "pipeline.audit", run_id], cwd=project, env=env, capture_output=True, text=True
    )


def _line(out: str, item: str) -> str:
    return next(line for line in out.splitlines() if line.startswith(item + " "))


def _matches(project: Path, env: dict, run_id: str, present: str) -> None:
    proc = _audit(project, env, run_id)
    assert proc.returncode == 0 and proc.stdout.rstrip().endswith("ALL MATCH"), proc.stdout + proc.stderr
    config_line = _line(proc.stdout, "config")
    assert " match " in config_line and f"  {present}  " in config_line, config_line


@pytest.mark.slow
def test_a_dvc_repro_run_on_the_untouched_project_matches(repro):
    project, env, run_id = repro
    from mlflow import MlflowClient

    run = MlflowClient(f"sqlite:///{project / 'mlflow.db'}").get_run(run_id)
    assert run.data.params["data.source"] == "directory"  # `auto`, decided when the run ran
    assert json.loads(run.data.tags[origin.TAG]) == origin.from_params(None)
    assert config.load_params(project / "params.yaml").data.source == "auto"
    _matches(project, env, run_id, "params.yaml")


@pytest.mark.slow
def test_a_stage_command_run_with_an_override_matches_and_a_real_change_differs(repro):
    """`python -m pipeline.train KEY=VALUE`: params.yaml with the override on top; audited the same way. Then
    params.yaml edited: both runs' config differs, and names the key."""
    project, env, repro_id = repro
    _run([sys.executable, "-m", "pipeline.train", "train.optimizer.learning_rate=0.002"], project, env)
    run_id = _run_id(project)
    assert run_id != repro_id
    _matches(project, env, run_id, "params.yaml + overrides")
    params = project / "params.yaml"
    original = params.read_text()
    assert "dense_units: 16" in original
    try:
        params.write_text(original.replace("dense_units: 16", "dense_units: 17"))
        for audited in (run_id, repro_id):
            proc = _audit(project, env, audited)
            assert proc.returncode == 1 and "DIFFERS" in proc.stdout, proc.stdout + proc.stderr
            config_line = _line(proc.stdout, "config")
            assert " differs " in config_line and "model.dense_units: 16 -> 17" in config_line, config_line
    finally:
        params.write_text(original)
    _matches(project, env, run_id, "params.yaml + overrides")


@pytest.mark.slow
def test_a_sweep_jobs_run_matches(repro):
    """`python -m pipeline.sweep --multirun`: conf/ composed with the job's overrides (not params.yaml, whose
    learning rate is another); the same data, so prepare is skipped."""
    project, env, _ = repro
    sweep = [*TINY_AUTO, "train.optimizer.learning_rate=0.004"]
    _run([sys.executable, "-m", "pipeline.sweep", "--multirun", *sweep], project, env)
    run_id = _run_id(project)
    from mlflow import MlflowClient

    tags = MlflowClient(f"sqlite:///{project / 'mlflow.db'}").get_run(run_id).data.tags
    assert json.loads(tags[origin.TAG])["from"] == "conf" and "mlflow.parentRunId" in tags
    _matches(project, env, run_id, "conf/ + overrides")
