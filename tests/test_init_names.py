"""`tfpipe init` with names YAML would read as something else (issue 50, item 8): a folder `null`, `on`, `1e3`
or `yes`, a model `--model yes`, names the generated project's YAML files as the exact string, read back by
each reader the project meets: PyYAML (YAML 1.1: MLflow's MLproject), OmegaConf (Hydra's conf/, which also
reads `1e3` as a float) and ruamel.yaml (YAML 1.2: DVC's dvc.yaml and params.yaml)."""

from __future__ import annotations

import re

import pytest
import yaml

from tfpipe import config, scaffold

# YAML 1.1 booleans and null, a 1.2/OmegaConf float, a 1.1 boolean that 1.2 reads as a string
TRICKY = [
    "null",
    "on",
    "1e3",
    "yes",
    "true",
    "off",
    "no",
    "false",
    "y",
    "nan",
    "inf",
    "0x1f",
    "1_000",
    "2024-01-01",
]


def _readers(path) -> dict:
    """The file as each YAML reader the project meets loads it."""
    from omegaconf import OmegaConf
    from ruamel.yaml import YAML

    text = path.read_text()
    return {
        "pyyaml": yaml.safe_load(text),
        "omegaconf": OmegaConf.to_container(OmegaConf.load(path), resolve=False),
        "ruamel": YAML(typ="safe", pure=True).load(text),
    }


@pytest.mark.parametrize("name", TRICKY)
def test_a_yaml_typed_folder_name_is_written_as_the_exact_string(tmp_path, monkeypatch, name):
    folder = tmp_path / name
    scaffold.write(folder)
    package = scaffold.package_name(folder)
    for reader, conf in _readers(folder / "conf" / "config.yaml").items():
        tracking = conf["tracking"]
        assert tracking["experiment_name"] == name and type(tracking["experiment_name"]) is str, reader
        assert tracking["registered_model_name"] == f"{name}-${{dataset.name}}", reader
    for reader, mlproject in _readers(folder / "MLproject").items():
        assert mlproject["name"] == name and type(mlproject["name"]) is str, reader
    for reader, dvc in _readers(folder / "dvc.yaml").items():
        deps = dvc["stages"]["train"]["deps"]
        assert package in deps and all(type(d) is str for d in deps), (reader, deps)
    for reader, params in _readers(folder / "params.yaml").items():
        assert params["tracking"]["experiment_name"] == name, reader
    monkeypatch.chdir(folder)
    cfg = config.compose()
    assert cfg.tracking.experiment_name == name and cfg.tracking.registered_model_name == f"{name}-cifar10"
    assert config.load_params("params.yaml") == cfg


@pytest.mark.parametrize("model", ["null", "on", "yes", "true", "off", "no", "false", "y", "n", "nan", "inf"])
def test_a_yaml_typed_model_name_is_written_as_the_exact_string(tmp_path, monkeypatch, model):
    folder = tmp_path / "proj"
    scaffold.write(folder, model=model)
    for reader, conf in _readers(folder / "conf" / "model" / f"{model}.yaml").items():
        assert conf["name"] == model and type(conf["name"]) is str, reader
    for reader, conf in _readers(folder / "conf" / "config.yaml").items():
        assert {"override model": model} in conf["defaults"], (reader, conf["defaults"])
    monkeypatch.chdir(folder)
    cfg = config.compose()
    assert cfg.model.name == model and cfg.model.builder == "proj.model:build"


def test_a_folder_named_tilde_is_refused_in_one_line(tmp_path, capsys):
    folder = tmp_path / "~"
    assert scaffold.main([str(folder)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and re.search(r"the folder's name names the project", err), err
    assert not folder.exists()
