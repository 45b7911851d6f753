"""data.source=auto, the default: a dataset whose folder exists under data/raw/<name> (data.path) is read from it,
offline, without `data.source=directory` being repeated in every `-S` of a queue; elsewhere TFDS."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import committed_text

from tfpipe.errors import ConfigError
from tfpipe.layout import rooted

ROOT = Path(__file__).resolve().parents[1]


def test_auto_is_the_default_in_conf_and_params():
    conf = yaml.safe_load((ROOT / "conf" / "data" / "default.yaml").read_text())
    params = yaml.safe_load(committed_text("params.yaml"))  # as committed: not an applied experiment's
    assert conf["source"] == "auto" == params["data"]["source"]


def test_auto_reads_the_folder_where_it_exists_and_tfds_elsewhere(tmp_path, make_config):
    cfg = make_config()  # cifar10, data.path=data/raw/cifar10
    assert cfg.data.source == "auto"
    assert rooted(cfg, tmp_path).data.source == "tfds"
    (tmp_path / "data" / "raw" / "cifar10").mkdir(parents=True)
    decided = rooted(cfg, tmp_path).data
    assert decided.source == "directory" and decided.path == str(tmp_path / "data" / "raw" / "cifar10")
    assert rooted(make_config("data.source=tfds"), tmp_path).data.source == "tfds"  # a given source stays


def test_auto_without_a_folder_or_a_tfds_builder_is_one_line(tmp_path, make_config):
    cfg = make_config("dataset=images", "dataset.name=pets", "data.source=auto")
    with pytest.raises(ConfigError) as caught:
        rooted(cfg, tmp_path)
    assert str(caught.value) == (
        "data.source=auto: data.path=data/raw/pets is not a folder and dataset 'pets' has no TFDS builder "
        "(dataset.tfds_name); put its split folders there or set data.path"
    )


@pytest.mark.slow  # starts processes
def test_prepare_with_no_source_given_reads_data_raw_offline(tmp_path, image_dir):
    """`python -m pipeline.prepare experiment=smoke` in a project holding data/raw/cifar10: read from the folder
    (TFDS cannot download here), the manifest says so."""
    project = tmp_path / "project"
    shutil.copytree(ROOT / "conf", project / "conf")
    shutil.copytree(image_dir, project / "data" / "raw" / "cifar10")
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), str(ROOT)])
    cmd = [sys.executable, "-m", "pipeline.prepare", "experiment=smoke"]
    proc = subprocess.run(cmd, cwd=project, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    manifest = json.loads((project / "data" / "prepared" / "cifar10" / "manifest.json").read_text())
    assert manifest["source"]["type"] == "directory", manifest["source"]
    assert "from directory" in proc.stderr


def test_a_folder_the_experiment_copy_lacks_is_refused_naming_dvc_add(tmp_path, make_config, monkeypatch):
    """Inside a DVC experiment's copy (DVC_ROOT names the project, not this folder) a data folder the project
    holds but the copy lacks was never tracked: one line naming `dvc add`, not TFDS (a download, or offline an
    error pointing into the copy). Outside a copy, or when the project lacks it too, auto still means TFDS."""
    project, copy = tmp_path / "project", tmp_path / "project" / ".dvc" / "tmp" / "exps" / "tmpab12"
    (project / "data" / "raw" / "cifar10").mkdir(parents=True)
    copy.mkdir(parents=True)
    cfg = make_config()
    monkeypatch.setenv("DVC_ROOT", str(project))
    with pytest.raises(ConfigError) as caught:
        rooted(cfg, copy)
    assert str(caught.value) == (
        f"data.source=auto: data/raw/cifar10 is a folder in the project ({project}) but not in this DVC "
        "experiment's copy, which holds only what git and DVC track (queued and --temp experiments): dvc add "
        "data/raw/cifar10, git add data/raw/cifar10.dvc, commit, then run the experiment again"
    )
    assert rooted(make_config("dataset=imdb"), copy).data.source == "tfds"  # the project has no data/raw/imdb
    assert rooted(cfg, project).data.source == "directory"  # DVC's workspace run: DVC_ROOT is the project


@pytest.mark.slow
def test_a_temp_experiment_on_an_untracked_data_folder_says_dvc_add(tmp_path, image_dir):
    """The real `dvc exp run --temp` in a git + DVC project whose data/raw/cifar10 is git-ignored and never
    `dvc add`ed: prepare stops in one line naming `dvc add` (exit 2 from the stage), before reading anything."""
    from test_pipeline_e2e import copy_project

    project = copy_project(tmp_path / "project")
    shutil.copytree(image_dir, project / "data" / "raw" / "cifar10")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "DVC_"))}
    env.update(PYTHONPATH=str(project / "src"), DVC_NO_ANALYTICS="1", TF_CPP_MIN_LOG_LEVEL="2")
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t"]
    for cmd in (["git", "init", "-q", "-b", "main"], [*git, "add", "-A"], [*git, "commit", "-qm", "init"]):
        subprocess.run(cmd, cwd=project, env=env, check=True, capture_output=True)
    assert (
        subprocess.run(["git", "ls-files", "data/raw/cifar10"], cwd=project, capture_output=True).stdout
        == b""
    )
    cmd = [sys.executable, "-m", "dvc", "exp", "run", "--temp", "-S", "experiment=smoke"]
    proc = subprocess.run(cmd, cwd=project, env=env, capture_output=True, text=True, timeout=600)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out[-2000:]
    assert "prepare: error: data.source=auto: data/raw/cifar10 is a folder in the project" in out, out[-2000:]
    assert "dvc add data/raw/cifar10, git add data/raw/cifar10.dvc, commit" in out, out[-2000:]
