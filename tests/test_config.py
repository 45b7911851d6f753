"""The config tree, params.yaml and the typed schema."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from conftest import committed_text

from tfpipe import config
from tfpipe.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]


def test_params_yaml_equals_default_composition(tmp_path):
    """DVC composes conf/ only on `dvc exp run`; `dvc repro` reads params.yaml as committed. The committed
    file is the one checked (`committed_text`): after `dvc exp apply` the workspace's params.yaml is an
    experiment's, rightly not conf/'s defaults. A workspace params.yaml that already equals the composition
    also passes: conf/ edited and params.yaml regenerated, not yet committed."""
    from dvc.utils.hydra import compose_and_dump

    expected = tmp_path / "params.yaml"
    compose_and_dump(expected, str(ROOT / "conf"), None, "config", str(ROOT), [])
    composed = yaml.safe_load(expected.read_text())
    committed = yaml.safe_load(committed_text("params.yaml"))
    regenerated = yaml.safe_load((ROOT / "params.yaml").read_text()) == composed
    assert committed == composed or regenerated, (
        "params.yaml (as committed, and in the workspace) differs from composing conf/: regenerate it with "
        "`python -c \"from tfpipe.config import compose_yaml; open('params.yaml','w').write(compose_yaml())\"`"
        " and commit it"
    )


def test_compose_matches_what_dvc_writes(tmp_path):
    """`dvc exp run -S` and `mlflow run -P overrides=` resolve the same overrides to the same config."""
    from dvc.utils.hydra import compose_and_dump

    overrides = [
        "dataset=imdb",
        "precision=mixed_bfloat16",
        "train.epochs=1",
        "train.optimizer.learning_rate=0.01",
    ]
    dvc_params = tmp_path / "params.yaml"
    compose_and_dump(dvc_params, str(ROOT / "conf"), None, "config", str(ROOT), overrides)
    from_dvc = config.load_params(dvc_params)
    from_mlflow = config.compose(overrides, config_dir=ROOT / "conf")
    assert from_dvc == from_mlflow
    assert from_mlflow.dataset.name == "imdb" and from_mlflow.model.name == "embedding_gap"
    assert from_mlflow.data.output_dir == "data/prepared/imdb"


@pytest.mark.parametrize(
    "overrides, expected",
    [
        ([], ("cifar10", "cnn")),
        (["dataset=imdb"], ("imdb", "embedding_gap")),
        (["experiment=imdb"], ("imdb", "embedding_gap")),
        (["experiment=smoke", "dataset=imdb"], ("imdb", "embedding_gap")),
    ],
)
def test_dataset_picks_its_default_model(make_config, overrides, expected):
    cfg = make_config(*overrides)
    assert (cfg.dataset.name, cfg.model.name) == expected


def test_flat_params_use_dotted_keys(make_config):
    flat = make_config().flat()
    assert flat["train.optimizer.learning_rate"] == 0.001
    assert flat["dataset.name"] == "cifar10"
    assert not any(isinstance(v, dict) for v in flat.values())


# A corpus of bad configs: each is refused with one line naming the key and what is allowed.
BAD_OVERRIDES = [
    (["dataset=mnist"], "dataset"),
    (["model=resnet9000"], "model"),
    (["strategy=tpu_pod"], "strategy"),
    (["precision=fp8"], "precision"),
    (["train.batch_size_per_replica=0"], "train.batch_size_per_replica"),
    (["train.batch_size_per_replica=-8"], "train.batch_size_per_replica"),
    (["train.epochs=0"], "train.epochs"),
    (["train.epochs=abc"], "train.epochs"),
    (["train.optimizer.name=adamax"], "train.optimizer.name"),
    (["train.optimizer.learning_rate=0"], "train.optimizer.learning_rate"),
    (["train.lr_schedule.name=step"], "train.lr_schedule.name"),
    (["train.lr_schedule.warmup_epochs=99"], "train.lr_schedule.warmup_epochs"),
    (["train.label_smoothing=1.5"], "train.label_smoothing"),
    (["train.cache=maybe"], "train.cache"),
    (["+train.epoch=3"], "train.epoch"),
    (["data.source=s3"], "data.source"),
    (["data.on_bad_file=ignore"], "data.on_bad_file"),
    (["data.validation_fraction=1.0"], "data.validation_fraction"),
    (["data.examples_per_shard=0"], "data.examples_per_shard"),
    (["data.max_examples_per_split=-1"], "data.max_examples_per_split"),
    (["dataset=imdb", "model=cnn"], "model.name"),
    (["model=embedding_gap"], "model.name"),
    (["model.dropout=1.0"], "model.dropout"),
    (["model.filters=[]"], "model.filters"),
    (["dataset.channels=2"], "dataset.channels"),
    (["tracking.experiment_name="], "tracking.experiment_name"),
    (["tracking.auto_promote_alias=latest"], "tracking.auto_promote_alias"),
    (["tracking.auto_promote_alias=v2"], "tracking.auto_promote_alias"),
    (["tracking.promote_mode=up"], "tracking.promote_mode"),
    (["tracking.registered_model_name=a/b"], "tracking.registered_model_name"),
]


@pytest.mark.parametrize("overrides, key", BAD_OVERRIDES, ids=[" ".join(o) for o, _ in BAD_OVERRIDES])
def test_bad_config_is_refused_with_one_line(make_config, overrides, key):
    with pytest.raises(ConfigError) as info:
        make_config(*overrides)
    message = str(info.value)
    assert "\n" not in message
    assert key in message, message  # the full key, not only its section


def test_unknown_key_suggests_the_close_one():
    with pytest.raises(ConfigError, match=r"did you mean 'train.epochs'"):
        config.from_dict({"train": {"epochz": 3}})


def test_params_file_with_unknown_section(tmp_path):
    params = tmp_path / "params.yaml"
    params.write_text(committed_text("params.yaml") + "trian:\n  epochs: 1\n")
    with pytest.raises(ConfigError, match=r"trian: unknown config key \(did you mean 'train'\?\)"):
        config.load_params(params)


@pytest.mark.parametrize(
    "added, key, redo",
    [
        ("train:\n  epohcs: 2\n", "train.epohcs=2 ", "or `dvc exp run -S train.epochs=2`;"),
        (
            "train:\n  optimizer:\n    lr: 0.1\n",
            "train.optimizer.lr=0.1 ",
            "train.optimizer.learning_rate=0.1",
        ),
        (
            "train:\n  zzz: 1\n",
            "train.zzz=1: unknown config key, in",
            "or `dvc exp run -S` with the right key;",
        ),
    ],
)
def test_an_unknown_key_in_the_params_file_says_where_it_came_from_and_how_to_undo(
    tmp_path, monkeypatch, added, key, redo
):
    """What `dvc exp run -S +KEY=VALUE` writes into params.yaml: the line names the file (as the user would
    type it, relative to the working folder), how the key got there and how to undo it; one line."""
    monkeypatch.chdir(tmp_path)
    raw = yaml.safe_load(committed_text("params.yaml"))
    for section, values in yaml.safe_load(added).items():
        _merge(raw[section], values)
    Path("params.yaml").write_text(yaml.safe_dump(raw))
    with pytest.raises(ConfigError) as info:
        config.load_params("params.yaml")
    message = str(info.value)
    assert message.startswith(key.rstrip()) and "\n" not in message, message
    assert "in params.yaml: `dvc exp run -S +" in message and "undo: `git checkout params.yaml`" in message
    assert redo in message and "; allowed keys under 'train" in message


def _merge(into: dict, values: dict) -> None:
    for name, value in values.items():
        if isinstance(value, dict):
            _merge(into[name], value)
        else:
            into[name] = value


def test_an_unknown_key_typed_now_does_not_name_the_params_file():
    with pytest.raises(ConfigError) as info:
        config.compose(["+train.epohcs=2"], config_dir=ROOT / "conf")
    assert "params.yaml" not in str(info.value) and "did you mean 'train.epochs'" in str(info.value)


def test_missing_params_file(tmp_path):
    with pytest.raises(ConfigError, match="config file not found"):
        config.load_params(tmp_path / "nope.yaml")


@pytest.mark.parametrize("stage", ["prepare", "train", "evaluate"])
def test_stage_refuses_bad_config_fast_without_traceback(stage, scratch_root):
    """A bad override exits 2 with one line on stderr, before TensorFlow is even imported. The process runs
    in a scratch project (conftest's `scratch_root`), this checkout's code on PYTHONPATH, never in the
    checkout."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(ROOT / "src"), str(ROOT), *filter(None, [env.get("PYTHONPATH")])]
    )
    start = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", f"pipeline.{stage}", "train.batch_size_per_replica=0"],
        cwd=scratch_root,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    elapsed = time.monotonic() - start
    assert proc.returncode == 2, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert lines == [f"{stage}: error: train.batch_size_per_replica=0: must be > 0"]
    assert "Traceback" not in proc.stderr
    assert elapsed < 20


def test_choice_names_and_registries_agree():
    """The names config accepts (tfpipe.choices, tfpipe.strategies) are exactly what the registries build."""
    from tfpipe import choices, models, strategies, textnorm
    from tfpipe.config import MODEL_SCHEMAS, schema
    from tfpipe.data import inputs

    assert all(callable(strategy.build) for strategy in strategies.REGISTRY.values())
    assert set(models.ENTRIES) == set(schema.BUILT_IN) == set(MODEL_SCHEMAS) - {schema.CUSTOM_MODEL}
    assert tuple(inputs.SHARD_POLICIES) == choices.SHARD_POLICIES
    assert tuple(textnorm.STANDARDIZERS) == choices.STANDARDIZERS
    assert {p.stem for p in (ROOT / "conf" / "model").glob("*.yaml")} == set(schema.BUILT_IN)
    assert {p.stem for p in (ROOT / "conf" / "strategy").glob("*.yaml")} == set(strategies.names())


def test_each_model_has_its_own_schema(make_config):
    """No model carries another model's fields (the padded union of every model's keys is gone)."""
    cnn, nbsvm = make_config().model, make_config("dataset=imdb", "model=nbsvm").model
    assert not hasattr(cnn, "ngrams") and not hasattr(nbsvm, "filters")
    assert "model.embedding_dim" not in make_config().flat()
    with pytest.raises(ConfigError, match="model.filters"):
        make_config("dataset=imdb", "model.filters=[8]")  # a key the selected model does not have
