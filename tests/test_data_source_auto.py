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

from tfpipe.errors import ConfigError
from tfpipe.layout import rooted

ROOT = Path(__file__).resolve().parents[1]


def test_auto_is_the_default_in_conf_and_params():
    conf = yaml.safe_load((ROOT / "conf" / "data" / "default.yaml").read_text())
    params = yaml.safe_load((ROOT / "params.yaml").read_text())
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
