"""The data report's source images (issue 21, item 1): width, height and aspect-ratio spread and the count
per colour mode of the files as decoded, per split, with a grayscale and an RGBA file planted among RGB
ones; the drift check that names a mode the reference did not have; the TFDS source's decoded shapes.
Every expected figure is written out by hand from the planted sizes (conftest._IMAGE_SIZES)."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
from conftest import prepare_tree, write_image_tree

from tfpipe.data.report import REPORT_FILE, headline, load_report

VAL = ("data.validation_split=val",)
FROM_FILES = "file headers, before conversion and resize"


def _tree(root: Path) -> Path:
    """write_image_tree with 5 train / 3 test files per class, file 0004 of every class moved to val/: train
    holds conftest sizes 0-3 (h x w: 32x32, 40x28, 17x23, 64x48), val size 4 (31x33), test sizes 0-2."""
    write_image_tree(root, train_per_class=5, test_per_class=3)
    for class_dir in sorted((root / "train").iterdir()):
        (root / "val" / class_dir.name).mkdir(parents=True)
        shutil.move(class_dir / "0004.jpg", root / "val" / class_dir.name / "0004.jpg")
    return root


def _plant(root: Path) -> None:
    """A grayscale 50x20 (w x h) PNG in train, an RGBA 10x30 PNG in test."""
    from PIL import Image

    rng = np.random.default_rng(3)
    grey = rng.integers(0, 255, size=(20, 50)).astype(np.uint8)
    Image.fromarray(grey, "L").save(root / "train" / "blue" / "grey.png")
    rgba = rng.integers(0, 255, size=(30, 10, 4)).astype(np.uint8)
    Image.fromarray(rgba, "RGBA").save(root / "test" / "red" / "alpha.png")


@pytest.fixture(scope="module")
def reports(tmp_path_factory):
    base = tmp_path_factory.mktemp("source_images")
    clean = _tree(base / "clean")
    planted = base / "planted"
    shutil.copytree(clean, planted)
    _plant(planted)
    out = base / "out"
    return prepare_tree(clean, out / "clean", *VAL), prepare_tree(planted, out / "planted", *VAL)


def _spread(lo, median, p95, hi) -> dict:
    return {"min": lo, "median": median, "p95": p95, "max": hi}


# By hand (numpy's linear percentile): train widths 23x3 28x3 32x3 48x3 50 -> p95 at rank 11.4 of 0..12,
# 48 + 0.4 * (50 - 48) = 48.8; aspect (w/h) 0.7x3 0.75x3 1.0x3 1.353x3 2.5 -> 1.353 + 0.4 * 1.147 = 1.812.
# test widths 10 23x3 28x3 32x3 (median (28 + 28) / 2), heights 17x3 30 32x3 40x3, aspect 0.333 0.7x3 1.0x3 1.353x3.
PLANTED = {
    "train": {
        "read_from": FROM_FILES,
        "width": _spread(23, 32.0, 48.8, 50),
        "height": _spread(17, 32.0, 64.0, 64),
        "aspect_ratio": _spread(0.7, 1.0, 1.812, 2.5),
        "modes": {"RGB": 12, "L": 1},
    },
    "validation": {
        "read_from": FROM_FILES,
        "width": _spread(33, 33.0, 33.0, 33),
        "height": _spread(31, 31.0, 31.0, 31),
        "aspect_ratio": _spread(1.065, 1.065, 1.065, 1.065),
        "modes": {"RGB": 3},
    },
    "test": {
        "read_from": FROM_FILES,
        "width": _spread(10, 28.0, 32.0, 32),
        "height": _spread(17, 32.0, 40.0, 40),
        "aspect_ratio": _spread(0.333, 1.0, 1.353, 1.353),
        "modes": {"RGB": 9, "RGBA": 1},
    },
}


def test_source_image_sizes_and_modes_per_split_are_those_planted(reports):
    report = load_report(reports[1].prepared_dir)
    assert {s: report["splits"][s]["source_images"] for s in PLANTED} == PLANTED
    assert headline(report)["image_modes"] == "RGB:24 L:1 RGBA:1"
    clean = load_report(reports[0].prepared_dir)
    assert [clean["splits"][s]["source_images"]["modes"] for s in PLANTED] == [
        {"RGB": 12},
        {"RGB": 3},
        {"RGB": 9},
    ]
    assert clean["splits"]["train"]["source_images"]["width"] == _spread(23, 30.0, 48.0, 48)
    assert headline(clean)["image_modes"] == "RGB:24"


def test_drift_names_the_modes_the_reference_did_not_have(reports, tmp_path):
    reference = reports[0].prepared_dir / REPORT_FILE
    planted = load_report(reports[1].prepared_dir)
    from omegaconf import OmegaConf

    from tfpipe.data import drift

    settings = OmegaConf.create({"max_share_shift": 0.1, "max_oov_increase": 0.02})
    assert drift.compare(load_report(reports[0].prepared_dir), planted, settings) == [
        "train: source images of mode 'L': reference 0, now 1",
        "test: source images of mode 'RGBA': reference 0, now 1",
    ]
    assert drift.compare(planted, load_report(reports[0].prepared_dir), settings) == []  # a mode gone: fine
    source = reports[1].cfg.data.path
    out = prepare_tree(source, tmp_path / "out", *VAL, f"data.validation.reference={reference}")
    assert load_report(out.prepared_dir)["drift"]["anomalies"] == [
        "train: source images of mode 'L': reference 0, now 1",
        "test: source images of mode 'RGBA': reference 0, now 1",
    ]


def test_tfds_source_images_are_the_decoded_examples(tmp_path, make_config):
    import tensorflow_datasets as tfds

    from tfpipe import data

    cfg = make_config(
        "data.source=tfds",
        f"data.tfds_data_dir={tmp_path / 'tfds'}",
        f"data.output_dir={tmp_path / 'out'}",
        "data.validation_split=null",
        "data.validation_fraction=0.25",
    )
    with tfds.testing.mock_data(num_examples=24):
        manifest = data.prepare(cfg, progress=False)
    report = load_report(tmp_path / "out")
    for split in ("train", "validation", "test"):
        n = manifest["splits"][split]["num_examples"]
        assert report["splits"][split]["source_images"] == {
            "read_from": "decoded tfds examples, before conversion and resize",
            "width": _spread(32, 32.0, 32.0, 32),  # cifar10's fixed 32x32x3
            "height": _spread(32, 32.0, 32.0, 32),
            "aspect_ratio": _spread(1.0, 1.0, 1.0, 1.0),
            "modes": {"RGB": n},
        }
