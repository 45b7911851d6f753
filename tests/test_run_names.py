"""Runs can be told apart (issue 33 item 6): names that say what differs, paths that name the project and not a
DVC temporary copy, a run file that reads the same in every copy, and experiments MLflow 3's UI opens as model
training. A real SQLite MLflow store in tmp_path, no mocks of mlflow."""

from __future__ import annotations

import dataclasses
import json
import logging
import shutil
import sys
from pathlib import Path

import pytest
import test_tracking
import yaml
from conftest import ROOT, default_policy

CONTEXT_ENV = (
    "DVC_EXP_NAME",
    "DVC_ROOT",
    "DVC_EXP_BASELINE_REV",
    "TFPIPE_TUNE_TRIAL_NUMBER",
    "TFPIPE_PARENT_RUN_ID",
)
KIND = "mlflow.experimentKind"
clean_mlflow = test_tracking.clean_mlflow  # MLFLOW_* unset, MLflow's global state reset afterwards


@pytest.fixture
def clean_env(clean_mlflow, monkeypatch):
    """clean_mlflow, and none of the variables that say where a run sits (DVC experiment, trial, sweep)."""
    for name in CONTEXT_ENV:
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def project(tmp_path, db_template, clean_env) -> Path:
    """A project root whose default store (sqlite:///<root>/mlflow.db) is a fresh copy of the template."""
    root = tmp_path / "project"
    root.mkdir()
    shutil.copy(db_template, root / "mlflow.db")
    return root


@pytest.fixture
def cfg(make_config):
    return make_config("experiment=smoke")


BASE = "cifar10-cnn-one_device-"  # + the precision the default config trains in on this host


def _base() -> str:
    return BASE + default_policy()


def _client(db: Path):
    from mlflow import MlflowClient

    return MlflowClient(tracking_uri=f"sqlite:///{db}")


def _train(cfg, root: Path, **kwargs):
    """A train stage's run, opened and closed; its MLflow record."""
    from tfpipe import tracking

    with tracking.start_run(cfg, root, stage="train", **kwargs) as run:
        pass
    return _client(root / "mlflow.db").get_run(run.run_id)


def _run_file(root: Path) -> dict:
    return json.loads((root / "run.json").read_text())


# ----------------------------------------------------------------------------- names


def test_two_runs_of_one_config_get_different_names_that_start_with_the_base_name(cfg, project):
    first = _train(cfg, project)
    recorded = _run_file(project)
    second = _train(cfg, project)

    assert first.info.run_name == f"{_base()}-{first.info.run_id[:6]}"
    assert second.info.run_name == f"{_base()}-{second.info.run_id[:6]}"
    assert first.info.run_name != second.info.run_name
    assert first.data.tags["mlflow.runName"] == first.info.run_name
    assert (
        recorded["run_name"] == first.info.run_name and _run_file(project)["run_name"] == second.info.run_name
    )
    assert len(second.info.run_name) <= 60  # one MLflow UI column


def test_a_dvc_experiment_run_carries_the_experiment_name(cfg, project, monkeypatch):
    monkeypatch.setenv("DVC_EXP_NAME", "lumpy-bike")
    run = _train(cfg, project)
    assert run.info.run_name == f"lumpy-bike cifar10-cnn-{run.info.run_id[:6]}"  # nothing else differs
    assert run.data.tags["dvc.exp_name"] == "lumpy-bike"
    assert _run_file(project)["run_name"] == run.info.run_name


def test_a_tuning_trial_carries_its_number(cfg, project, monkeypatch):
    monkeypatch.setenv("TFPIPE_TUNE_TRIAL_NUMBER", "3")
    run = _train(cfg, project)
    assert run.info.run_name == f"trial3 cifar10-cnn-{run.info.run_id[:6]}"


def _in_a_hydra_job(overrides: list, run):
    """`run()` inside a Hydra job with these overrides (what `pipeline.sweep` runs in-process: HydraConfig holds
    the job's config while it runs)."""
    from hydra import compose, initialize_config_dir
    from hydra.core.hydra_config import HydraConfig

    with initialize_config_dir(str(ROOT / "conf"), version_base=None):
        job = compose("config", overrides=overrides, return_hydra_config=True)
    HydraConfig.instance().set_config(job)
    try:
        return run()
    finally:
        HydraConfig.instance().cfg = None  # as Hydra leaves it after a job


@pytest.mark.slow  # trains a model for epochs
def test_a_sweep_job_carries_its_swept_overrides(make_config, project, monkeypatch):
    sweep = [
        "experiment=smoke",
        "precision=float32,mixed_bfloat16",
        "train.epochs=2",
        "train.optimizer.name=sgd,adam",
    ]
    monkeypatch.setattr(sys, "argv", ["pipeline/sweep.py", "--multirun", *sweep])  # the sweep's command line
    job = ["experiment=smoke", "precision=float32", "train.epochs=2", "train.optimizer.name=sgd"]
    run = _in_a_hydra_job(job, lambda: _train(make_config(*job), project))
    assert run.info.run_name == f"precision=float32,optimizer=sgd cifar10-cnn-{run.info.run_id[:6]}"


def test_a_hydra_job_without_a_known_sweep_carries_all_its_overrides(make_config, project, monkeypatch):
    monkeypatch.setattr(sys, "argv", ["embedding-tool"])
    job = ["experiment=smoke", "precision=float32", "train.epochs=2", "train.optimizer.name=sgd"]
    run = _in_a_hydra_job(job, lambda: _train(make_config(*job), project))
    # as many whole overrides as fit in the 40 characters of the UI's name column
    assert run.info.run_name == f"experiment=smoke,precision=float32 cifar10-cnn-{run.info.run_id[:6]}"
    after = _train(make_config(*job), project)  # the job is over: no overrides known
    assert after.info.run_name == f"{BASE}float32-{after.info.run_id[:6]}"


def test_tracking_run_name_when_the_config_has_it_is_used_as_is(cfg, project, monkeypatch):
    monkeypatch.setenv("DVC_EXP_NAME", "lumpy-bike")
    cfg.tracking.run_name = "my-baseline"  # a key the schema may grow; set on the instance here
    assert _train(cfg, project).info.run_name == "my-baseline"


def test_a_resumed_run_keeps_its_name(cfg, project, monkeypatch):
    from tfpipe import tracking

    with pytest.raises(KeyboardInterrupt):
        with tracking.start_run(cfg, project, stage="train") as first:
            raise KeyboardInterrupt  # the interrupted training
    name = _client(project / "mlflow.db").get_run(first.run_id).info.run_name
    assert name == f"{_base()}-{first.run_id[:6]}"

    monkeypatch.setenv("DVC_EXP_NAME", "other-exp")  # would name a new run differently
    resumed = _train(cfg, project, resume_run_id=first.run_id)
    assert resumed.info.run_id == first.run_id and resumed.data.tags["tfpipe.resumes"] == "1"
    assert resumed.info.run_name == name and _run_file(project)["run_name"] == name


# ----------------------------------------------------------------------------- a DVC temporary copy


def test_a_dvc_temporary_copy_records_the_project_not_the_copy(
    cfg, tmp_path, db_template, clean_env, monkeypatch
):
    """`dvc exp run --temp` / a queue: the stages run in <repo>/.dvc/tmp/exps/<tmp>, deleted afterwards; DVC sets
    DVC_ROOT to <repo> and DVC_EXP_NAME."""
    from tfpipe import tracking

    repo = tmp_path / "repo"
    copy = repo / ".dvc" / "tmp" / "exps" / "tmpk3x9"
    (copy / "pipeline").mkdir(parents=True)
    (copy / "pipeline" / "train.py").write_text("")
    shutil.copy(db_template, repo / "mlflow.db")
    monkeypatch.setenv("DVC_ROOT", str(repo))
    monkeypatch.setenv("DVC_EXP_NAME", "queued-exp")
    monkeypatch.chdir(copy)
    monkeypatch.setattr(sys, "argv", [str(copy / "pipeline" / "train.py")])  # `python -m pipeline.train`
    prepared = copy / "data" / "prepared" / "cifar10"
    prepared.mkdir(parents=True)
    manifest = {"dataset": "cifar10", "modality": "image", "splits": {"train": {"num_examples": 3}}}

    params = {
        "data.path": str(copy / "data" / "raw"),
        "data.tfds_data_dir": "/srv/tfds",
        "strategy.device": "/cpu:0",
    }

    with tracking.start_run(cfg, copy, stage="train") as run:
        run.log_dataset(manifest, "d" * 64, prepared, context="train")
        run.log_params(params)
        run.log_config({"data": {"output_dir": str(prepared), "splits": [str(copy / "a"), "b"]}})

    got = _client(repo / "mlflow.db").get_run(run.run_id)  # the store is the project's
    assert got.info.run_name == f"queued-exp cifar10-cnn-{run.run_id[:6]}"
    assert got.data.tags["mlflow.source.name"] == str(repo.resolve() / "pipeline" / "train.py")
    assert got.data.tags["tfpipe.project"] == str(repo.resolve())
    (dataset,) = [d.dataset for d in got.inputs.dataset_inputs]
    assert json.loads(dataset.source) == {"uri": str(repo.resolve() / "data" / "prepared" / "cifar10")}
    assert got.data.params == {**params, "data.path": str(repo.resolve() / "data" / "raw")}
    config = (Path(got.info.artifact_uri.removeprefix("file://")) / "config" / "resolved.yaml").read_text()
    assert yaml.safe_load(config) == {
        "data": {
            "output_dir": str(repo.resolve() / "data/prepared/cifar10"),
            "splits": [str(repo.resolve() / "a"), "b"],
        }
    }
    leaked = {k: v for k, v in got.data.tags.items() if str(copy.resolve()) in v or "tmpk3x9" in v}
    assert not leaked, leaked
    assert got.info.artifact_uri.startswith((repo.resolve() / "mlartifacts").as_uri())
    assert json.loads((copy / "run.json").read_text())["tracking_uri"] == "sqlite:///mlflow.db"


def test_outside_a_dvc_copy_the_source_is_mlflows(cfg, project, monkeypatch):
    monkeypatch.setattr(sys, "argv", ["/opt/venv/bin/tfpipe", "train"])
    run = _train(cfg, project)
    assert run.data.tags["mlflow.source.name"] == "/opt/venv/bin/tfpipe"
    assert run.data.tags["tfpipe.project"] == str(project.resolve())


@pytest.mark.parametrize(
    "recorded, repaired",
    [
        ("/elsewhere/file:{project}", "file://{project}"),  # `mlflow run file://{project}` from /elsewhere
        ("file://{project}", None),  # `mlflow run {project}` / `mlflow run .` in it: kept
        ("/elsewhere/file-store/train.py", None),
    ],
)
def test_mlflow_runs_source_of_a_file_uri_names_the_project(cfg, project, monkeypatch, recorded, repaired):
    """Issue 33 item 5: MLflow 3 records `mlflow run file:///path`'s source as the current folder joined to the
    URI; the train stage names the project instead. The real `mlflow run`: test_pipeline_e2e."""
    client = _client(project / "mlflow.db")
    recorded = recorded.format(project=project.resolve())
    created = client.create_run(
        client.create_experiment("by-mlflow-run"),
        tags={"mlflow.source.name": recorded, "mlflow.source.type": "PROJECT"},
    )
    monkeypatch.setenv("MLFLOW_RUN_ID", created.info.run_id)
    run = _train(cfg, project)
    assert run.data.tags["mlflow.source.name"] == (repaired or recorded).format(project=project.resolve())


# ----------------------------------------------------------------------------- the run file


def test_run_file_holds_the_store_relative_to_the_project_and_evaluate_reads_it_back(cfg, project, caplog):
    from tfpipe import tracking

    with tracking.start_run(cfg, project, stage="train") as run:
        run.log_metrics({"train_loss": 1.0}, step=1)
    assert _run_file(project)["tracking_uri"] == "sqlite:///mlflow.db"
    assert tracking.read_run_file(project / "run.json", project)["tracking_uri"] == (
        f"sqlite:///{project.resolve()}/mlflow.db"
    )

    moved = (
        project.parent / "moved"
    )  # the same project elsewhere (a clone, another host): the same file works
    shutil.copytree(project, moved)
    assert (
        tracking.read_run_file(moved / "run.json", moved)["tracking_uri"]
        == f"sqlite:///{moved.resolve()}/mlflow.db"
    )
    with caplog.at_level(logging.WARNING, logger="tfpipe.tracking.naming"):
        with tracking.resume_run(cfg, moved, stage="evaluate") as again:
            again.log_metrics({"test_accuracy": 0.5}, step=0)
    assert again.run_id == run.run_id and not caplog.records
    assert _client(moved / "mlflow.db").get_run(run.run_id).data.metrics == {
        "train_loss": 1.0,
        "test_accuracy": 0.5,
    }


def test_an_old_run_file_with_an_absolute_store_still_reads(cfg, project, caplog):
    from tfpipe import tracking

    run = _train(cfg, project)
    old = {**_run_file(project), "tracking_uri": f"sqlite:///{project.resolve()}/mlflow.db"}
    (project / "run.json").write_text(json.dumps(old))  # what earlier versions wrote
    assert tracking.read_run_file(project / "run.json", project)["tracking_uri"] == old["tracking_uri"]
    assert tracking.read_run_file(project / "run.json")["tracking_uri"] == old["tracking_uri"]
    with caplog.at_level(logging.WARNING, logger="tfpipe.tracking.naming"):
        with tracking.resume_run(cfg, project, stage="evaluate") as again:
            pass
    assert again.run_id == run.info.run_id and not caplog.records


@pytest.mark.parametrize(
    "uri, recorded, db",
    [
        ("sqlite:///stores/x.db", "sqlite:///stores/x.db", "{project}/stores/x.db"),  # relative in the config
        (
            "sqlite:///{project}/stores/x.db",
            "sqlite:///stores/x.db",
            "{project}/stores/x.db",
        ),  # inside, absolute
        (
            "sqlite:///{shared}/x.db",
            "sqlite:///{shared}/x.db",
            "{shared}/x.db",
        ),  # outside the project: as it is
    ],
    ids=["relative", "inside", "outside"],
)
def test_run_file_store_forms(cfg, project, db_template, uri, recorded, db):
    from tfpipe import tracking

    shared = project.parent / "shared"
    for folder in (project / "stores", shared):
        folder.mkdir()
        shutil.copy(db_template, folder / "x.db")
    fill = {"project": project.resolve(), "shared": shared.resolve()}
    cfg = dataclasses.replace(cfg, tracking=dataclasses.replace(cfg.tracking, uri=uri.format(**fill)))
    with tracking.start_run(cfg, project, stage="train") as run:
        pass
    assert _run_file(project)["tracking_uri"] == recorded.format(**fill)
    db = Path(db.format(**fill))
    assert _client(db).get_run(run.run_id).info.status == "FINISHED"
    assert tracking.read_run_file(project / "run.json", project)["tracking_uri"] == f"sqlite:///{db}"
    with tracking.resume_run(cfg, project, stage="evaluate") as again:
        assert again.run_id == run.run_id


def test_remote_store_is_kept_as_given(cfg, project):
    from tfpipe.tracking.runfile import portable_uri

    assert portable_uri("http://tracking.example:5000", project) == "http://tracking.example:5000"
    assert portable_uri("databricks", project) == "databricks"
    assert portable_uri("sqlite:///:memory:", project) == "sqlite:///:memory:"


# ----------------------------------------------------------------------------- the experiment's kind


def test_the_experiment_is_declared_model_training(cfg, project):
    run = _train(cfg, project)
    experiment = _client(project / "mlflow.db").get_experiment(run.info.experiment_id)
    assert experiment.name == "tfpipe" and experiment.tags[KIND] == "custom_model_development"


def test_an_existing_experiment_is_declared_on_first_use_and_a_set_kind_is_kept(
    cfg, project, monkeypatch, caplog
):
    client = _client(project / "mlflow.db")
    older = client.create_experiment("tfpipe")  # made by an earlier tfpipe: no kind
    _train(cfg, project)
    assert client.get_experiment(older).tags[KIND] == "custom_model_development"

    mine = client.create_experiment("genai-too", tags={KIND: "genai_development"})
    _train(
        dataclasses.replace(cfg, tracking=dataclasses.replace(cfg.tracking, experiment_name="genai-too")),
        project,
    )
    assert client.get_experiment(mine).tags[KIND] == "genai_development"

    by_mlflow_run = client.create_experiment("made-by-mlflow-run")  # `mlflow run` hands the run over
    monkeypatch.setenv("MLFLOW_RUN_ID", client.create_run(by_mlflow_run).info.run_id)
    with caplog.at_level(logging.WARNING, logger="tfpipe.tracking.naming"):
        run = _train(cfg, project)
    assert "mlflow run . --experiment-name tfpipe" in caplog.text  # it kept the run, and says where to aim
    assert client.get_experiment(by_mlflow_run).tags[KIND] == "custom_model_development"
    assert run.info.run_name == f"{_base()}-{run.info.run_id[:6]}"


# ----------------------------------------------------------------------------- what differs leads


def _commit_params(root: Path, cfg) -> str:
    """`cfg` as the project's committed params.yaml; the commit's sha."""
    import subprocess

    (root / "params.yaml").write_text(yaml.safe_dump(cfg.to_dict(), sort_keys=False))
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t"]
    for cmd in (
        ["git", "init", "-q", "-b", "main"],
        [*git, "add", "params.yaml"],
        [*git, "commit", "-qm", "p"],
    ):
        subprocess.run(cmd, cwd=root, check=True, capture_output=True)
    return subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True
    ).stdout.strip()


def _differs(name: str) -> set:
    return set(name.partition(" ")[0].split(","))


def test_a_dvc_experiment_leads_with_the_values_it_changed(make_config, project, monkeypatch):
    sha = _commit_params(project, make_config("experiment=smoke"))
    monkeypatch.setenv("DVC_EXP_BASELINE_REV", sha)
    monkeypatch.setenv("DVC_EXP_NAME", "lumpy-bike")  # in the tag; the values say more
    changed = make_config("experiment=smoke", "train.optimizer.learning_rate=0.01", "train.seed=7")
    run = _train(changed, project)
    assert run.info.run_name.endswith(f" cifar10-cnn-{run.info.run_id[:6]}"), run.info.run_name
    assert _differs(run.info.run_name) == {"learning_rate=0.01", "seed=7"}
    assert run.data.tags["dvc.exp_name"] == "lumpy-bike"


def test_a_switched_group_is_one_difference_not_its_keys(make_config, project, monkeypatch):
    sha = _commit_params(project, make_config("experiment=smoke"))
    monkeypatch.setenv("DVC_EXP_BASELINE_REV", sha)
    run = _train(make_config("experiment=smoke", "strategy=mirrored"), project)
    assert _differs(run.info.run_name) == {"strategy=mirrored"}, run.info.run_name


def test_a_stage_command_on_a_committed_project_names_its_overrides(make_config, project):
    _commit_params(project, make_config("experiment=smoke"))  # HEAD: the baseline outside DVC
    run = _train(make_config("experiment=smoke", "train.epochs=3"), project)
    assert run.info.run_name == f"epochs=3 cifar10-cnn-{run.info.run_id[:6]}"


def test_without_git_the_entry_points_overrides_lead(cfg, project):
    """`tfpipe train KEY=VALUE` or `mlflow run -P` where there is no git: the overrides the entry point declared."""
    from tfpipe.config import origin

    previous = origin.declare(origin.from_params(None, ["train.optimizer.learning_rate=0.03"]))
    try:
        run = _train(cfg, project)
    finally:
        origin.restore(previous)
    assert run.info.run_name == f"learning_rate=0.03 cifar10-cnn-{run.info.run_id[:6]}"


def test_a_project_folder_inside_another_repository_reads_no_baseline_from_it(make_config, tmp_path, project):
    """git looks upwards for a repository: the baseline is read only from the project's own."""
    _commit_params(
        tmp_path, make_config("experiment=smoke", "train.epochs=9")
    )  # the folder around the project
    run = _train(make_config("experiment=smoke"), project)
    assert run.info.run_name == f"{_base()}-{run.info.run_id[:6]}"


def test_in_a_ten_run_sweep_every_visible_name_differs(make_config, project, monkeypatch):
    """The UI's name column shows about 40 characters: those tell the ten runs apart."""
    sha = _commit_params(project, make_config("experiment=smoke"))
    monkeypatch.setenv("DVC_EXP_BASELINE_REV", sha)
    names = []
    for lr in ("0.001", "0.003", "0.01", "0.03", "0.1"):
        for seed in (1, 2):
            cfg = make_config("experiment=smoke", f"train.optimizer.learning_rate={lr}", f"train.seed={seed}")
            names.append(_train(cfg, project).info.run_name)
    assert len({name[:40] for name in names}) == 10, names


def test_a_stage_rooting_its_paths_in_the_project_changes_nothing(make_config, project):
    """The stages run their config with relative paths made absolute in the project: not a difference."""
    committed = make_config("experiment=smoke", "data.path=data/raw/cifar10")
    _commit_params(project, committed)
    rooted = make_config("experiment=smoke", f"data.path={project / 'data' / 'raw' / 'cifar10'}")
    run = _train(rooted, project)
    assert run.info.run_name == f"{_base()}-{run.info.run_id[:6]}"
