"""One home for what a training's run records (issue 53): `tfpipe.records`.

- The train stage writes nothing to its run itself: it calls `records.opened` and `records.finished`, once each,
  and `run_tags` is called in `records` alone (read from the source with ast). `run_tags` at open plus
  `strategy_tags` at the end are, name for name, what `run_tags` called again at the end wrote before.
- Everything `records` writes has its row on docs/reference/records.md, with every condition on: a real training
  (two epochs of a tiny CNN, early stopping on) into a real SQLite MLflow store, then its record written on a
  fresh run as a resumed, warm-started, multi-worker training without a logged model would write it (the
  conditions the default run of tests/test_docs_records.py does not meet). A new logged value without its row
  fails here. Written twice on the same run (a stage resumed after a kill inside `finished`), the record stands.
"""

from __future__ import annotations

import ast
import dataclasses
import json
from pathlib import Path

import pytest
from test_docs_records import listed

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "tfpipe"
CLUSTER = {
    "cluster": {"chief": ["host-a:2222"], "worker": ["host-b:2222"]},
    "task": {"type": "chief", "index": 0},
}


def _calls(path: Path) -> list:
    """(dotted callee, line) of every call in `path` whose callee is a name or a dotted name."""

    def dotted(node) -> str:
        if isinstance(node, ast.Name):
            return node.id
        if isinstance(node, ast.Attribute):
            return f"{dotted(node.value)}.{node.attr}"
        return "?"

    tree = ast.parse(path.read_text())
    return [(dotted(n.func), n.lineno) for n in ast.walk(tree) if isinstance(n, ast.Call)]


def test_the_train_stage_records_through_records_alone():
    calls = _calls(SRC / "stages.py")
    on_run = [(name, line) for name, line in calls if name.startswith("run.")]
    assert not on_run, f"stages.py writes to the run itself (records.py is the home): {on_run}"
    tracking = sorted({name for name, _ in calls if name.startswith("tracking.")})
    assert tracking == ["tracking.start_run", "tracking.store_root", "tracking.where"], tracking
    homes = [name for name, _ in calls if name.startswith("records.") and name != "records.Training"]
    assert sorted(homes) == ["records.finished", "records.opened"], homes  # once each


def test_run_tags_is_called_once_in_src_and_there_in_records():
    where = [
        (path.relative_to(SRC).as_posix(), line)
        for path in sorted(SRC.rglob("*.py"))
        for name, line in _calls(path)
        if name.rpartition(".")[2] == "run_tags"
    ]
    assert [path for path, _ in where] == ["records.py"], where


@pytest.mark.parametrize("strategy", ["one_device", "mirrored", "multi_worker_mirrored"])
def test_run_tags_at_open_and_the_strategy_tags_at_the_end_are_what_run_tags_at_the_end_was(
    make_config, strategy
):
    """`finished` tags only the strategy's part of `run_tags` (the rest went in at open): with training's report
    of the strategy, the two together are `run_tags` with that report, each name and value."""
    from tfpipe import provenance
    from tfpipe.tracking.tags import run_tags, strategy_tags

    cfg = make_config("experiment=smoke", f"strategy={strategy}")
    report = {
        "name": "MirroredStrategy",
        "num_replicas_in_sync": 2,
        "devices": ["/cpu:0", "/cpu:1"],
        "extra": {},
    }
    prov = provenance.collect(ROOT)
    for info in (report, {"name": "OneDeviceStrategy", "device": "/cpu:0"}, {}):
        assert {**run_tags(cfg, None, "d" * 64, prov), **strategy_tags(cfg, info)} == run_tags(
            cfg, info, "d" * 64, prov
        )
    assert strategy_tags(cfg, report)["replicas"] == "2" and "strategy.extra" not in strategy_tags(
        cfg, report
    )


@pytest.fixture(scope="module")
def trained(prepared_image, tmp_path_factory):
    """A real training (two epochs, early stopping on) by the train stage into the project's SQLite store:
    (cfg rooted in the project, project root, its TrainResult)."""
    from conftest import seed_store

    from tfpipe import config, stages
    from tfpipe.layout import rooted

    root = tmp_path_factory.mktemp("records-home")
    seed_store(root)
    cfg = config.compose(
        [
            "data.source=directory",
            f"data.output_dir={prepared_image.prepared_dir}",
            "model.filters=[8,8]",
            "model.dense_units=16",
            "train.batch_size_per_replica=4",
            "train.epochs=2",
            "train.steps_per_epoch=2",
            "train.early_stopping.monitor=val_loss",
            "tracking.log_model=false",  # the SavedModel as saved_model/ artifacts (the default: docs_records')
        ],
        config_dir=ROOT / "conf",
    )
    with pytest.MonkeyPatch.context() as monkeypatch:
        for name in (
            "MLFLOW_TRACKING_URI",
            "MLFLOW_RUN_ID",
            "MLFLOW_EXPERIMENT_ID",
            "MLFLOW_EXPERIMENT_NAME",
        ):
            monkeypatch.delenv(name, raising=False)
        result = stages.run_train(cfg, root)
    return rooted(cfg, root), root, result


def _record(cfg, root: Path):
    """records.Training as the train stage makes it, a warm start's init.* tags included."""
    from tfpipe import data, provenance, records
    from tfpipe.layout import model_dir
    from tfpipe.workdir import WorkDir

    prepared = Path(cfg.data.output_dir)
    init = {
        "init.from": "models:/m@a",
        "init.source_run": "r",
        "init.source_model": "m",
        "init.sha256": "0" * 64,
    }
    return records.Training(
        cfg=cfg,
        root=root,
        prepared=prepared,
        manifest=data.load_manifest(prepared),
        digest=data.manifest_digest(prepared),
        provenance=provenance.collect(root),
        init_tags=init,
        workdir=WorkDir(model_dir(cfg, root)),
    )


@pytest.mark.slow  # trains a model (two epochs of two steps)
def test_everything_records_writes_with_every_condition_on_is_on_the_page(trained, monkeypatch):
    import mlflow
    from mlflow import MlflowClient

    from tfpipe import records, tracking

    cfg, root, result = trained
    result = dataclasses.replace(
        result, resumed=True, resumed_at_step=2, warm_start={"loaded": ["conv_0"], "fresh": ["head"]}
    )
    record = _record(cfg, root)
    assert result.early_stopping and record.init_tags  # the conditions this test is for
    client, run_id, seen = MlflowClient(tracking_uri=f"sqlite:///{root / 'mlflow.db'}"), None, []
    try:
        for _ in range(2):  # the second: the stage resumed after a kill inside `finished` re-opens the run
            with tracking.start_run(cfg, root, stage="train", resume_run_id=run_id) as run:
                records.opened(run, record)
                with monkeypatch.context() as env:
                    env.setenv("TF_CONFIG", json.dumps(CLUSTER))  # a multi-worker strategy's chief
                    records.finished(run, record, result)
            run_id = run.run_id
            seen.append(client.get_run(run_id).data)
    finally:
        while mlflow.active_run() is not None:
            mlflow.end_run()
        mlflow.set_tracking_uri(None)
    first, got = seen
    assert got.params == first.params and got.metrics == first.metrics and "tfpipe.resumes" in got.tags
    assert {k: v for k, v in got.tags.items() if k != "tfpipe.resumes"} == first.tags
    paths = _artifacts(client, run_id)
    conditional = ["cluster_spec", "tfpipe.resumed_at_step", "init.layers_loaded", "init.layers_fresh"]
    assert set(conditional) <= set(got.tags) and "data.examples_test" in got.tags, sorted(got.tags)
    assert "early_stopping_best_epoch" in got.metrics, sorted(got.metrics)
    assert {"saved_model/saved_model.pb", "data/report.json", "metrics/train.json"} <= set(paths), paths
    missing = {
        "params": [k for k in got.params if k not in cfg.flat() and not listed("Params", k)],
        "metrics": [k for k in got.metrics if not listed("Metrics", k)],
        "tags": [k for k in got.tags if not k.startswith("mlflow.") and not listed("Tags", k)],
        "artifacts": [p for p in paths if not listed("Artifacts", p)],
    }
    assert not any(missing.values()), f"records wrote what docs/reference/records.md does not list: {missing}"


def _artifacts(client, run_id: str, folder=None) -> list:
    """Every artifact file of the run, its path from the run's root."""
    out = []
    for item in client.list_artifacts(run_id, folder):
        out += _artifacts(client, run_id, item.path) if item.is_dir else [item.path]
    return out
