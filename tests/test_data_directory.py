"""The directory source: class-per-folder images and texts -> TFRecord shards, manifest.json, vocab.txt."""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import string
from collections import Counter
from pathlib import Path

import numpy as np
from conftest import write_text_tree
from PIL import Image

from tfpipe import data


def _prepare(make_config, source: Path, output: Path, *overrides: str) -> dict:
    cfg = make_config(
        "data.source=directory",
        f"data.path={source}",
        f"data.output_dir={output}",
        "data.examples_per_shard=8",
        *overrides,
    )
    return data.prepare(cfg, progress=False)


def _read_split(prepared_dir: Path, split: str):
    """All (features, labels) of a split, in file order, as numpy arrays."""
    feats, labels = [], []
    for x, y in data.make_dataset(prepared_dir, split, batch_size=64, training=False, seed=0, cache=False):
        feats.append(x.numpy())
        labels.append(y.numpy())
    if not feats:
        return np.zeros((0,)), np.zeros((0,), np.int64)
    return np.concatenate(feats), np.concatenate(labels)


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# ----------------------------------------------------------------------------- images


def test_image_manifest_counts_classes_and_shards(prepared_image):
    cfg, prepared_dir = prepared_image
    manifest = data.load_manifest(prepared_dir)
    assert manifest["format_version"] == 1
    assert manifest["dataset"] == "cifar10" and manifest["modality"] == "image"
    assert manifest["source"] == {
        "type": "directory",
        "path": manifest["source"]["path"],
        "tfds_name": None,
        "version": None,
        "digest": manifest["source"][
            "digest"
        ],  # DVC's md5 of the folder (tests/test_queue_without_dvc_add.py)
    }
    assert Path(manifest["source"]["path"]).name == Path(cfg.data.path).name
    assert manifest["class_names"] == ["blue", "green", "red"] and manifest["num_classes"] == 3
    assert manifest["feature_spec"] == {
        "image": {"dtype": "uint8", "shape": [32, 32, 3], "encoding": "raw"},
        "label": {"dtype": "int64", "shape": []},
    }
    counts = {split: info["num_examples"] for split, info in manifest["splits"].items()}
    assert counts == {"train": 21, "validation": 3, "test": 9}  # 8/class train, 1/class carved, 3/class test
    assert manifest["vocab_file"] is None and manifest["vocab_size"] is None
    assert manifest["skipped_files"] == {"count": 0, "examples": []}
    assert manifest["config"]["data"]["source"] == "directory"
    assert manifest["config"]["dataset"]["image_size"] == [32, 32]

    on_disk = sorted(p.name for p in prepared_dir.glob("*.tfrecord"))
    listed = []
    for split, info in manifest["splits"].items():
        shards = info["shards"]
        assert sum(s["num_examples"] for s in shards) == info["num_examples"]
        assert all(s["num_examples"] <= 8 for s in shards)
        for i, shard in enumerate(shards):
            assert shard["file"] == f"{split}-{i:05d}-of-{len(shards):05d}.tfrecord"
            path = prepared_dir / shard["file"]
            assert shard["bytes"] == path.stat().st_size
            assert shard["sha256"] == _sha256(path)
            listed.append(shard["file"])
    assert sorted(listed) == on_disk
    assert len(manifest["splits"]["train"]["shards"]) == 3
    assert sorted(p.name for p in prepared_dir.iterdir()) == sorted(
        [*on_disk, "manifest.json", "report.json"]
    )
    assert data.manifest_digest(prepared_dir) == _sha256(prepared_dir / "manifest.json")
    data.verify_shards(prepared_dir)


def test_images_keep_their_class_colour_and_labels(prepared_image):
    _, prepared_dir = prepared_image
    for split, per_class in (("train", 7), ("test", 3)):
        images, labels = _read_split(prepared_dir, split)
        assert images.shape == (per_class * 3, 32, 32, 3) and images.dtype == np.uint8
        assert sorted(Counter(labels.tolist()).values()) == [per_class] * 3
        dominant = images.reshape(len(images), -1, 3).mean(axis=1).argmax(axis=1)
        np.testing.assert_array_equal(dominant, labels)  # blue->0, green->1, red->2 survive resize + JPEG


def test_odd_sizes_and_modes_are_resized_and_converted(tmp_path, make_config):
    src = tmp_path / "src"
    colours = {"a": (10, 200, 30), "b": (220, 40, 90)}
    for split in ("train", "test"):
        for cls, rgb in colours.items():
            (src / split / cls).mkdir(parents=True)
            Image.new("RGB", (61, 17), rgb).save(src / split / cls / "wide.png")  # 17x61 (h x w)
            Image.new("RGBA", (9, 40), (*rgb, 255)).save(src / split / cls / "rgba.png")
            Image.new("L", (33, 33), 128).save(src / split / cls / "grey.png")
    manifest = _prepare(
        make_config, src, tmp_path / "out", "dataset.image_size=[12,20]", "data.validation_fraction=0.2"
    )
    assert manifest["feature_spec"]["image"]["shape"] == [12, 20, 3]
    images, labels = _read_split(tmp_path / "out", "test")
    assert images.shape == (6, 12, 20, 3)
    for image, label in zip(images, labels):
        rgb = np.array(colours["ab"[label]])
        pixels = image.reshape(-1, 3).astype(int)
        grey = (pixels == 128).all()
        assert grey or (np.abs(pixels - rgb) <= 1).all(), (label, pixels[:2])
    assert sum((img == 128).all() for img in images) == 2  # L -> RGB replicates the grey level

    manifest = _prepare(make_config, src, tmp_path / "out1", "dataset.image_size=[5,5]", "dataset.channels=1")
    assert manifest["feature_spec"]["image"]["shape"] == [5, 5, 1]
    images, _ = _read_split(tmp_path / "out1", "test")
    assert images.shape == (6, 5, 5, 1)


def test_preparing_twice_gives_identical_shards(image_dir, tmp_path, make_config):
    first = _prepare(make_config, image_dir, tmp_path / "one")
    second = _prepare(make_config, image_dir, tmp_path / "two")
    assert first["splits"] == second["splits"]  # names, counts, bytes and sha256 of every shard
    for info in first["splits"].values():
        for shard in info["shards"]:
            assert (tmp_path / "one" / shard["file"]).read_bytes() == (
                tmp_path / "two" / shard["file"]
            ).read_bytes()
    first["config"]["data"].pop("output_dir"), second["config"]["data"].pop("output_dir")
    assert first == second


def test_reprepare_replaces_the_output_and_is_up_to_date(image_dir, tmp_path, make_config):
    out = tmp_path / "prepared"
    cfg = make_config(
        "data.source=directory",
        f"data.path={image_dir}",
        f"data.output_dir={out}",
        "data.examples_per_shard=4",
    )
    assert not data.is_up_to_date(cfg)
    data.prepare(cfg, progress=False)
    (out / "stray.txt").write_text("left over")
    assert data.is_up_to_date(cfg)
    data.prepare(cfg, progress=False)  # a second run replaces the whole folder
    assert not (out / "stray.txt").exists()
    assert data.is_up_to_date(cfg)
    assert not data.is_up_to_date(
        make_config(
            "data.source=directory",
            f"data.path={image_dir}",
            f"data.output_dir={out}",
            "data.examples_per_shard=5",
        )
    )
    assert [p.name for p in tmp_path.iterdir()] == ["prepared"]  # no temp or old siblings left
    shard = out / data.load_manifest(out)["splits"]["train"]["shards"][0]["file"]
    shard.write_bytes(shard.read_bytes()[:-1])
    assert not data.is_up_to_date(cfg)


def test_max_examples_per_split_is_class_balanced_and_seeded(image_dir, tmp_path, make_config):
    manifest = _prepare(make_config, image_dir, tmp_path / "a", "data.max_examples_per_split=5")
    counts = {split: info["num_examples"] for split, info in manifest["splits"].items()}
    assert counts == {"train": 5, "validation": 3, "test": 5}
    _, labels = _read_split(tmp_path / "a", "train")
    assert sorted(Counter(labels.tolist()).values()) == [1, 2, 2]
    again = _prepare(make_config, image_dir, tmp_path / "b", "data.max_examples_per_split=5")
    assert again["splits"] == manifest["splits"]


# ----------------------------------------------------------------------------- text


def _standardize(text: str) -> list[str]:
    """TextVectorization's default: lower_and_strip_punctuation, then whitespace split."""
    text = re.sub(f"[{re.escape(string.punctuation)}]", "", text.lower())
    return text.split()


def test_text_manifest_vocab_and_ignored_files(prepared_text, text_dir):
    cfg, prepared_dir = prepared_text
    manifest = data.load_manifest(prepared_dir)
    assert manifest["modality"] == "text" and manifest["dataset"] == "imdb"
    assert manifest["class_names"] == ["neg", "pos"] and manifest["num_classes"] == 2
    assert manifest["feature_spec"] == {
        "text": {"dtype": "string", "shape": []},
        "label": {"dtype": "int64", "shape": []},
    }
    counts = {split: info["num_examples"] for split, info in manifest["splits"].items()}
    assert counts == {"train": 36, "validation": 4, "test": 20}  # README, *.feat, urls_*.txt ignored
    assert manifest["vocab_file"] == "vocab.txt"
    vocab = (prepared_dir / "vocab.txt").read_text(encoding="utf-8").splitlines()
    assert vocab == data.read_vocab(prepared_dir)
    assert manifest["vocab_size"] == len(vocab) and len(set(vocab)) == len(vocab)
    assert "" not in vocab and "[UNK]" not in vocab

    texts, labels = _read_split(prepared_dir, "train")
    frequency = Counter(tok for t in texts for tok in _standardize(t.decode("utf-8")))
    assert set(vocab) == set(frequency)
    assert [frequency[t] for t in vocab] == sorted((frequency[t] for t in vocab), reverse=True)
    assert "wonderful" in vocab and "awful" in vocab and "br" in vocab
    source = {p.read_bytes() for p in (text_dir / "train").glob("*/*.txt")}
    assert set(texts) <= source  # the raw UTF-8 bytes, unchanged


def test_vocab_comes_from_train_only(tmp_path, make_config):
    src = tmp_path / "src"
    for split, n in (("train", 20), ("test", 5)):
        for cls in ("neg", "pos"):
            (src / split / cls).mkdir(parents=True)
            for i in range(n):
                (src / split / cls / f"{i}_5.txt").write_text(
                    f"{cls} review {split}{cls}{i}", encoding="utf-8"
                )
    (src / "train" / "unsup").mkdir()  # aclImdb's unlabelled folder: not a class
    (src / "train" / "unsup" / "0_0.txt").write_text("unsupword", encoding="utf-8")
    manifest = _prepare(make_config, src, tmp_path / "out", "dataset=imdb", "dataset.max_tokens=1000")
    assert manifest["class_names"] == ["neg", "pos"]
    vocab = set(data.read_vocab(tmp_path / "out"))
    train, _ = _read_split(tmp_path / "out", "train")
    validation, _ = _read_split(tmp_path / "out", "validation")
    assert len(train) == 36 and len(validation) == 4
    for text in train:
        assert text.decode().split()[-1] in vocab
    for text in validation:
        assert text.decode().split()[-1] not in vocab  # carved off before the vocabulary is built
    assert not any(tok.startswith("test") for tok in vocab)
    assert "unsupword" not in vocab


def test_validation_carve_is_deterministic_disjoint_and_seeded(tmp_path, make_config):
    src = write_text_tree(tmp_path / "src", train_per_class=30, test_per_class=2)
    ids = {}
    for name, seed in (("a", 1), ("b", 1), ("c", 2)):
        _prepare(
            make_config,
            src,
            tmp_path / name,
            "dataset=imdb",
            f"data.seed={seed}",
            "data.validation_fraction=0.2",
        )
        train, _ = _read_split(tmp_path / name, "train")
        validation, val_labels = _read_split(tmp_path / name, "validation")
        assert len(train) == 48 and len(validation) == 12
        assert sorted(Counter(val_labels.tolist()).values()) == [6, 6]  # 20% of each class
        assert not set(train) & set(validation)
        ids[name] = set(validation)
    all_train = {p.read_bytes() for p in (src / "train").glob("*/*.txt")}
    assert ids["a"] <= all_train
    assert ids["a"] == ids["b"]
    assert ids["a"] != ids["c"]


def test_explicit_validation_split_folder(image_dir, tmp_path, make_config):
    src = tmp_path / "src"
    shutil.copytree(image_dir, src)
    shutil.copytree(image_dir / "test", src / "val")
    manifest = _prepare(make_config, src, tmp_path / "out", "data.validation_split=val")
    counts = {split: info["num_examples"] for split, info in manifest["splits"].items()}
    assert counts == {"train": 24, "validation": 9, "test": 9}
    assert (
        json.loads((tmp_path / "out" / "manifest.json").read_text())["config"]["data"]["validation_split"]
        == "val"
    )


def test_vocab_tokens_with_unicode_line_separators_round_trip(tmp_path, make_config):
    """Real IMDb reviews hold U+0085 inside tokens: vocab.txt must still read back one token a line."""
    src = tmp_path / "src"
    for split in ("train", "test"):
        for cls in ("neg", "pos"):
            (src / split / cls).mkdir(parents=True)
            for i in range(6):
                (src / split / cls / f"{i}_5.txt").write_text(
                    f"{cls} odd\x85token line\u2028sep {i}", encoding="utf-8"
                )
    _prepare(make_config, src, tmp_path / "out", "dataset=imdb")
    vocab = data.read_vocab(tmp_path / "out")
    assert "" not in vocab and len(vocab) == len(set(vocab))
    assert "odd\x85token" in vocab
    from tfpipe.models import make_text_vectorizer

    make_text_vectorizer(vocab, 8)  # refuses repeated or empty terms
