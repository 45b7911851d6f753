"""A refused `prepare` changes nothing (issue 49): each way the prepare stage refuses (exit 2, one line) leaves the
project as a finished prepare left it: the source tree, data/prepared/cifar10/ (a previous prepare's shards,
manifest and report), metrics/data.json and every other file and folder. Most refusals come before anything is
read (the config, the source's layout, the reference report); the ones only the examples show (a corrupt image, a
leak, drift) come while prepare writes into a temporary folder beside data/prepared/cifar10/, which is removed:
the old data is replaced only once the new is whole. In-process: `python -m pipeline.prepare`'s command line
(`commands.entry.cli`), on tiny generated trees (conftest)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from conftest import ROOT, write_text_tree
from test_refusal_before_effect import _files

from pipeline import _cli


def _project(tmp_path: Path, image_dir: Path, prepared_image) -> Path:
    """conf/, the raw images where conf/ looks for them (data/raw/cifar10) and what a finished prepare left."""
    project = tmp_path / "project"
    shutil.copytree(ROOT / "conf", project / "conf")
    shutil.copytree(image_dir, project / "data" / "raw" / "cifar10")
    shutil.copytree(prepared_image.prepared_dir, project / "data" / "prepared" / "cifar10")
    (project / "metrics").mkdir()
    (project / "metrics" / "data.json").write_text('{"examples_train": 21}\n')
    return project


def _prepare(capsys, project: Path, *overrides: str) -> tuple:
    """(exit code, stderr lines but prepare's progress bar) of `python -m pipeline.prepare`, in-process."""
    from tfpipe.stages import run_prepare

    capsys.readouterr()
    argv = ["data.source=directory", "data.examples_per_shard=8", *overrides]
    code = _cli.cli("prepare", run_prepare, "test", argv, project, configure_logging=False)
    lines = [line.split("\r")[-1] for line in capsys.readouterr().err.splitlines()]
    return code, [line for line in lines if line.strip() and not line.startswith("prepare ")]


def _raw(project: Path) -> Path:
    return project / "data" / "raw" / "cifar10"


def _corrupt(project: Path, name: str = "train/green/0002.png") -> None:
    (_raw(project) / name).write_bytes(b"\x89PNG\r\n\x1a\n but not an image")


def _all_test_images_corrupt(project: Path) -> None:
    for path in (_raw(project) / "test").rglob("*.*"):
        path.write_bytes(b"not an image")


def _leak(project: Path) -> None:
    shutil.copy(_raw(project) / "train/red/0000.png", _raw(project) / "test/red/0099.png")


def _fewer_reds(project: Path) -> None:
    """Train keeps 2 of its 8 red images: red's share of train falls from 1/3 to 1/9 (linf 0.22 > 0.1)."""
    for path in sorted((_raw(project) / "train/red").iterdir())[2:]:
        path.unlink()


def _reference(project: Path, modality: str = "image") -> None:
    """The previous prepare's report pinned as the reference (as `reference=auto` pins it)."""
    report = json.loads((project / "data/prepared/cifar10/report.json").read_text())
    target = project / "data" / "reference" / "report.json"
    target.parent.mkdir(parents=True)
    target.write_text(json.dumps({**report, "modality": modality}))


def _link_out(project: Path) -> None:
    outside = project / "elsewhere.png"
    shutil.copy(_raw(project) / "train/red/0000.png", outside)
    os.symlink(outside, _raw(project) / "train/red/0100.png")


def _only_one_class(project: Path) -> None:
    for split in ("train", "test"):
        for name in ("green", "red"):
            shutil.rmtree(_raw(project) / split / name)


def _texts_with_a_bad_one(project: Path) -> None:
    raw = project / "data" / "raw" / "imdb"
    write_text_tree(raw, train_per_class=4, test_per_class=2)
    (raw / "train" / "pos" / "1_9.txt").write_bytes(b"\xff\xfe caf\xe9 great")


def _dangling_output(project: Path) -> None:
    """data/prepared/cifar10 a symlink to a folder not made yet (a fast disk's mount, a DVC cache)."""
    shutil.rmtree(project / "data/prepared/cifar10")
    os.symlink(project / "data" / "fast" / "cifar10", project / "data/prepared/cifar10")
    _corrupt(project)


def _nothing(project: Path) -> None:
    return None


REFUSALS = [  # (id, change to the project, overrides ({project}: its folder), what the one line says)
    ("a bad value", _nothing, ["data.examples_per_shard=0"], "data.examples_per_shard"),
    ("an unknown dataset", _nothing, ["dataset=cifar11"], "cifar11"),
    ("no source folder", _nothing, ["data.path=data/raw/nowhere"], "data directory not found"),
    ("a file as the source", _nothing, ["data.path=metrics/data.json"], "not a directory"),
    ("an empty source", lambda p: (p / "data/raw/empty").mkdir(), ["data.path=data/raw/empty"], "is empty"),
    ("a split not there", _nothing, ["data.test_split=testing"], "testing: split folder not found"),
    ("one class", _only_one_class, [], "only one class folder (blue)"),
    ("a class missing in test", lambda p: shutil.rmtree(_raw(p) / "test/red"), [], "missing red"),
    (
        "an empty class folder",
        lambda p: shutil.rmtree(_raw(p) / "test/blue") or (_raw(p) / "test/blue").mkdir(),
        [],
        "test/blue: empty class folder",
    ),
    ("a link out of the source", _link_out, [], "0100.png"),
    ("a corrupt image", _corrupt, [], "0002.png: unreadable or corrupt image"),
    (
        "an image over the pixel cap",
        _nothing,
        ["data.max_image_pixels=1000"],
        "over data.max_image_pixels=1000",
    ),
    (
        "no usable test example",
        _all_test_images_corrupt,
        ["data.on_bad_file=skip"],
        "no usable examples in the test",
    ),
    ("a leak", _leak, ["data.validation.leakage=fail"], "data.validation.leakage=fail: 1 test examples"),
    (
        "drift",
        lambda p: _reference(p) or _fewer_reds(p),
        ["data.validation.reference={project}/data/reference/report.json", "data.validation.drift=fail"],
        "data.validation.drift=fail: train: share of class 'blue'",
    ),
    (
        "no reference report",
        _nothing,
        ["data.validation.reference={project}/data/reference/none.json"],
        "file not found",
    ),
    (
        "a reference of texts",
        lambda p: _reference(p, "text"),
        ["data.validation.reference={project}/data/reference/report.json"],
        "a report of text data",
    ),
    (
        "an unknown TFDS builder",
        _nothing,
        ["data.source=tfds", "dataset.tfds_name=no_such_builder", "data.tfds_data_dir={project}/tfds"],
        "tfds builder 'no_such_builder'",
    ),
    ("an undecodable text", _texts_with_a_bad_one, ["dataset=imdb"], "1_9.txt: not a UTF-8 text file"),
    ("a dangling symlinked output", _dangling_output, [], "0002.png: unreadable or corrupt image"),
]


@pytest.mark.parametrize(
    "change, overrides, expected", [r[1:] for r in REFUSALS], ids=[r[0] for r in REFUSALS]
)
def test_a_refused_prepare_changes_nothing(
    capsys, image_dir, prepared_image, tmp_path, change, overrides, expected
):
    project = _project(tmp_path, image_dir, prepared_image)
    change(project)
    files = _files(project)
    code, lines = _prepare(capsys, project, *(o.format(project=project) for o in overrides))
    assert code == 2 and len(lines) == 1 and lines[0].startswith("prepare: error: "), lines
    assert expected in lines[0], lines[0]
    assert _files(project) == files  # the source, data/prepared/cifar10, metrics/data.json; no folder made
