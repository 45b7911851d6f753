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


def _experiment_copy(tmp_path, monkeypatch) -> tuple:
    """(project holding data/raw/cifar10, an experiment copy of it as DVC makes one), DVC's variables set."""
    project = tmp_path / "project"
    copy = project / ".dvc" / "tmp" / "exps" / "tmpab12"
    (project / "data" / "raw" / "cifar10").mkdir(parents=True)
    (copy / "data" / "raw").mkdir(parents=True)
    monkeypatch.setenv("DVC_ROOT", str(project))
    monkeypatch.setenv("DVC_EXP_NAME", "exp-1")
    return project, copy


@pytest.mark.parametrize("source", ["auto", "directory"])
def test_an_experiment_copy_lacking_the_folder_reads_the_projects(tmp_path, make_config, monkeypatch, source):
    """Inside a DVC experiment's copy (DVC_ROOT names the project, the copy is under its .dvc/tmp/exps) a data
    folder the project holds but the copy lacks (never `dvc add`ed) is read from the project, in place; outside
    a copy, or when the project lacks it too, auto still means TFDS."""
    project, copy = _experiment_copy(tmp_path, monkeypatch)
    decided = rooted(make_config(f"data.source={source}"), copy).data
    assert decided.source == "directory" and decided.path == str(project.resolve() / "data/raw/cifar10")
    assert decided.output_dir == str(copy / "data" / "prepared" / "cifar10")  # outputs stay in the copy
    assert rooted(make_config("dataset=imdb"), copy).data.source == "tfds"  # the project has no data/raw/imdb
    assert rooted(make_config(), project).data.path == str(project / "data/raw/cifar10")  # the workspace run
    (copy / "data" / "raw" / "cifar10").mkdir()  # `dvc add`ed: DVC checked it out in the copy, which is read
    assert rooted(make_config(), copy).data.path == str(copy / "data/raw/cifar10")


def test_reading_the_projects_folder_is_refused_where_it_would_be_wrong(tmp_path, make_config, monkeypatch):
    """A folder DVC tracks (its .dvc file in the copy) whose files the copy lacks: the project's folder may hold
    another version than the experiment's commit names. A DVC_ROOT this folder is no experiment copy of."""
    project, copy = _experiment_copy(tmp_path, monkeypatch)
    (copy / "data" / "raw" / "cifar10.dvc").write_text("outs: []\n")
    with pytest.raises(ConfigError) as caught:
        rooted(make_config(), copy)
    assert str(caught.value) == (
        "data.path=data/raw/cifar10 is tracked by DVC (data/raw/cifar10.dvc) but its files are not in this "
        "experiment's copy (not in DVC's cache); the project's folder may hold another version: dvc pull "
        "data/raw/cifar10.dvc (or dvc commit it), then run the experiment again"
    )
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    with pytest.raises(ConfigError) as caught:
        rooted(make_config(), elsewhere)
    assert str(caught.value) == (
        f"data.path=data/raw/cifar10 is a folder in DVC_ROOT ({project}) but not in {elsewhere}, which is no "
        "DVC experiment copy of it (.dvc/tmp/exps); run the stage from the project or set data.path"
    )
