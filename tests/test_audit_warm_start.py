"""`audit --rerun` of a warm-started run: the re-run starts from the weights the run started from, fetched again
from the recorded store (the registered version it resolved, not where the alias points now) or path, and only
when their digest is the recorded `init.sha256`. Fast: the source check on its own; slow: a real re-run."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml
from test_pipeline_e2e import _make_project, _run

from tfpipe.errors import UserError

GIT = ["git", "-c", "user.name=t", "-c", "user.email=t@t"]


def _weights(seed: int) -> dict:
    rng = np.random.default_rng(seed)
    return {
        "conv0/kernel": rng.normal(size=(3, 3, 3, 4)).astype("float32"),
        "conv0/bias": np.zeros(4, "float32"),
    }


def _source(tmp_path: Path, seed: int = 0) -> tuple[Path, str]:
    """A local warm-start source (a .npz of by-path weights) under a project root, and its sha256 tag as the
    train stage records it."""
    from tfpipe.models import warmstart

    root = tmp_path / "project"
    root.mkdir(exist_ok=True)
    with open(root / "seed.npz", "wb") as fh:
        np.savez(fh, **_weights(seed))
    return root, warmstart.digest(_weights(seed))


def test_a_run_trained_from_scratch_needs_no_source(tmp_path):
    from tfpipe.audit.warmstart import recorded_source

    assert recorded_source("r1", {"git.commit": "abc"}, tmp_path, "sqlite:///x.db", tmp_path, print) is None


def test_the_recorded_source_is_copied_for_the_rerun_when_its_digest_matches(tmp_path):
    from tfpipe.audit.warmstart import recorded_source

    root, digest = _source(tmp_path)
    said = []
    tags = {"init.from": "seed.npz", "init.sha256": digest}  # a path as given: relative to the project
    path = recorded_source("r1", tags, root, "sqlite:///x.db", tmp_path, said.append)
    with np.load(path, allow_pickle=False) as copied:
        assert sorted(copied.files) == ["conv0/bias", "conv0/kernel"]
        assert np.array_equal(copied["conv0/kernel"], _weights(0)["conv0/kernel"])
    assert path.parent == tmp_path and said == [
        f"warm start: seed.npz checked against the recorded init.sha256 {digest[:12]}...: the re-run starts from it"
    ]


@pytest.mark.parametrize(
    "tags, message",
    [
        (
            {"init.from": "seed.npz"},
            "warm-started from seed.npz without an init.sha256 tag; cannot re-create it",
        ),
        ({"init.from": "gone.npz", "init.sha256": "0" * 64}, "train.init_from='gone.npz': not found"),
    ],
)
def test_a_source_without_digest_or_file_is_refused_in_one_line(tmp_path, tags, message):
    from tfpipe.audit.warmstart import recorded_source

    root, _ = _source(tmp_path)
    with pytest.raises(UserError, match=message) as exc:
        recorded_source("r1", tags, root, "sqlite:///x.db", tmp_path, print)
    assert "\n" not in str(exc.value)


def test_a_source_that_changed_since_the_run_is_refused(tmp_path):
    """The file at the recorded path now holds other weights (the store and files are untrusted input)."""
    from tfpipe.audit.warmstart import recorded_source

    _, recorded = _source(tmp_path, seed=0)
    root, _ = _source(tmp_path, seed=1)  # the same path, overwritten
    with pytest.raises(UserError, match=r"its warm-start source seed.npz now holds other weights") as exc:
        recorded_source(
            "r1", {"init.from": "seed.npz", "init.sha256": recorded}, root, "sqlite:///x", tmp_path, print
        )
    assert f"the run started from {recorded[:12]}..." in str(exc.value)
    assert not (tmp_path / "init_weights.npz").exists()


@pytest.mark.slow
def test_a_warm_started_run_reruns_to_reproduced(tmp_path, image_dir, text_dir):
    """Run A by `dvc repro`; run B warm-started from `runs:/A/model` at its own commit; `audit B --rerun` from
    the same clone starts from A's model fetched from the store and is REPRODUCED."""
    project, env = _make_project(tmp_path, image_dir, text_dir)
    _run([sys.executable, "-m", "dvc", "repro"], project, env)
    source_run = json.loads((project / "run.json").read_text())["run_id"]
    params = yaml.safe_load((project / "params.yaml").read_text())
    params["train"]["init_from"] = f"runs:/{source_run}/model"
    (project / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    _run([*GIT, "add", "-A"], project, env)
    _run([*GIT, "commit", "-qm", "warm start from run A"], project, env)
    _run([sys.executable, "-m", "dvc", "repro"], project, env)
    warm_run = json.loads((project / "run.json").read_text())["run_id"]
    assert warm_run != source_run

    out = _run([sys.executable, "-m", "pipeline.audit", warm_run, "--rerun"], project, env, timeout=900)
    assert "\nREPRODUCED\n" in out, out[-3000:]
    assert f"warm start: runs:/{source_run}/model checked against the recorded init.sha256 " in out, out[
        -3000:
    ]
