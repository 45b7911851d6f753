"""The page of what a run records (docs/reference/records.md, issue 36), checked both ways against a real run: the
train and evaluate stages record a run into a real SQLite MLflow store (no mocks), then every param (but the
config keys, one row), metric, tag (but MLflow's own `mlflow.*`, one row) and top-level artifact path the run
holds has its row on the page, and every name a row says is recorded **always** was recorded.

The page's tables are read here (first cell: the names as code spans, `<...>` a varying part; last cell: when);
nothing is generated from the code: the page is written by hand, and this test is what keeps it true."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "reference" / "records.md"
SECTIONS = ("Params", "Metrics", "Tags", "Artifacts")


def rows(section: str) -> list:
    """(names, when) of each row of the page's table under `## section`."""
    text = PAGE.read_text().split(f"\n## {section}\n", 1)[1].split("\n## ", 1)[0]
    out = []
    for line in text.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if line.startswith("| `"):
            out.append((re.findall(r"`([^`]+)`", cells[0]), cells[-1]))
    assert out, f"{section}: no rows on {PAGE.name}"
    return out


def _pattern(name: str) -> re.Pattern:
    """A row's name as a pattern: `<...>` any text, `mlflow.*` any MLflow tag, a path/ anything under it."""
    parts = re.split(r"(<[^>]+>|\*)", name.rstrip("/"))
    body = "".join(".+" if p.startswith("<") or p == "*" else re.escape(p) for p in parts)
    return re.compile(body + ("(/.*)?" if name.endswith("/") else ""))


def listed(section: str, name: str) -> bool:
    return any(_pattern(n).fullmatch(name) for names, _ in rows(section) for n in names)


def always(section: str) -> list:
    """The names (without a varying part) of the rows whose *When* says always."""
    return [n for names, when in rows(section) if when.startswith("always") for n in names if "<" not in n]


@pytest.fixture(scope="module")
def recorded(prepared_image, tmp_path_factory):
    """A real run: train (one epoch of two steps of a tiny CNN) and evaluate, the project's SQLite store, read
    back with MlflowClient: (run, top-level artifact paths, {folder: its artifact paths}, config keys)."""
    from conftest import seed_store, stages_in_process
    from mlflow import MlflowClient

    from tfpipe import config

    root = tmp_path_factory.mktemp("records")
    seed_store(root)  # a migrated empty store: the claim is not about creating one
    cfg = config.compose(
        [
            "data.source=directory",
            f"data.output_dir={prepared_image.prepared_dir}",
            "model.filters=[8,8]",
            "model.dense_units=16",
            "train.batch_size_per_replica=4",
            "train.epochs=1",
            "train.steps_per_epoch=2",
        ],
        config_dir=ROOT / "conf",
    )
    with pytest.MonkeyPatch.context() as monkeypatch:
        run_id = stages_in_process(cfg, root, monkeypatch, "train", "evaluate")
    client = MlflowClient(tracking_uri=f"sqlite:///{root / 'mlflow.db'}")
    top = [a.path for a in client.list_artifacts(run_id)]
    inside = {a: [b.path for b in client.list_artifacts(run_id, a)] for a in top}
    return client.get_run(run_id), top, inside, set(cfg.flat())


def test_the_page_is_read_as_its_tables():
    """The reading above finds the rows (an empty parse would make the tests below pass vacuously)."""
    assert {"train_loss", "test_accuracy"} <= set(always("Metrics"))
    assert "weights.sha256" in always("Tags") and "git.commit" not in always("Tags")
    assert (
        listed("Tags", "mlflow.runName") and listed("Tags", "dvc.lock.train") and not listed("Tags", "nope")
    )
    assert listed("Artifacts", "checkpoints/ckpt-1.index") and listed("Params", "train.epochs")


@pytest.mark.slow  # trains a model (one epoch) and evaluates it in-process
def test_everything_the_run_recorded_is_on_the_page(recorded):
    run, top, _, config_keys = recorded
    assert len(config_keys) > 80 and len(run.data.params) > len(config_keys) - 5  # the config was logged
    missing = {
        "params": [k for k in run.data.params if k not in config_keys and not listed("Params", k)],
        "metrics": [k for k in run.data.metrics if not listed("Metrics", k)],
        "tags": [k for k in run.data.tags if not k.startswith("mlflow.") and not listed("Tags", k)],
        "artifacts": [
            p for p in top if p not in {n.split("/")[0] for names, _ in rows("Artifacts") for n in names}
        ],
    }
    assert not any(missing.values()), f"recorded but not on {PAGE.name}: {missing}"
    assert any(k.startswith("mlflow.") for k in run.data.tags)  # the one row of MLflow's own tags


@pytest.mark.slow  # trains a model (one epoch) and evaluates it in-process
def test_every_name_the_page_says_is_always_recorded_was(recorded):
    run, top, inside, _ = recorded
    found = {
        "Params": set(run.data.params),
        "Metrics": set(run.data.metrics),
        "Tags": set(run.data.tags),
        "Artifacts": {*(f"{p}/" for p in top), *(p for paths in inside.values() for p in paths)},
    }
    for section in SECTIONS:
        names = [n for n in always(section) if n != "mlflow.*"]
        assert len(names) >= (1 if section == "Params" else 5), (section, names)
        missing = [n for n in names if n not in found[section]]
        assert not missing, f"{PAGE.name} says always, the run did not record: {section} {missing}"
