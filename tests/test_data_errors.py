"""Bad inputs give a one-line DataError naming the path, and never leave a complete-looking output behind;
verify_shards catches truncated, altered and missing shards."""

from __future__ import annotations

import io
import shutil
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from tfpipe import data
from tfpipe.data import DataError


@pytest.fixture
def image_copy(image_dir, tmp_path) -> Path:
    shutil.copytree(image_dir, tmp_path / "src")
    return tmp_path / "src"


@pytest.fixture
def text_copy(text_dir, tmp_path) -> Path:
    shutil.copytree(text_dir, tmp_path / "src")
    return tmp_path / "src"


def _cfg(make_config, source: Path, *overrides: str):
    out = source.parent / "out"
    return make_config(
        "data.source=directory",
        f"data.path={source}",
        f"data.output_dir={out}",
        "data.examples_per_shard=8",
        *overrides,
    )


def _fails(cfg, *expected: str) -> str:
    """prepare raises a one-line DataError containing `expected`, and leaves nothing in the output's folder."""
    out = Path(cfg.data.output_dir)
    before = sorted(p.name for p in out.parent.iterdir())
    with pytest.raises(DataError) as info:
        data.prepare(cfg, progress=False)
    message = str(info.value)
    assert "\n" not in message
    for part in expected:
        assert part in message, message
    assert not out.exists()
    assert sorted(p.name for p in out.parent.iterdir()) == before  # no temp folder left either
    return message


def test_missing_and_empty_data_directory(tmp_path, make_config):
    _fails(
        _cfg(make_config, tmp_path / "nowhere"),
        str(tmp_path / "nowhere"),
        "not found",
        "one folder per split",
    )
    (tmp_path / "empty").mkdir()
    _fails(_cfg(make_config, tmp_path / "empty"), str(tmp_path / "empty"), "empty")


def test_missing_split_folder(image_copy, make_config):
    shutil.rmtree(image_copy / "test")
    _fails(_cfg(make_config, image_copy), str(image_copy / "test"), "split folder not found")


def test_no_class_folders(tmp_path, make_config):
    (tmp_path / "src" / "train").mkdir(parents=True)
    (tmp_path / "src" / "test").mkdir()
    (tmp_path / "src" / "train" / "loose.png").write_bytes(b"")
    _fails(_cfg(make_config, tmp_path / "src"), str(tmp_path / "src" / "train"), "no class folders")


def test_one_class_folder(image_copy, make_config):
    for split in ("train", "test"):
        for name in ("green", "red"):
            shutil.rmtree(image_copy / split / name)
    _fails(
        _cfg(make_config, image_copy),
        str(image_copy / "train"),
        "only one class folder (blue)",
        "at least two",
    )


def test_empty_class_folder(image_copy, make_config):
    for f in (image_copy / "test" / "green").iterdir():
        f.unlink()
    (image_copy / "test" / "green" / "notes.md").write_text("not an image")
    _fails(_cfg(make_config, image_copy), str(image_copy / "test" / "green"), "empty class folder")


def test_test_classes_must_match_train_classes(image_copy, make_config):
    (image_copy / "test" / "red").rename(image_copy / "test" / "crimson")
    message = _fails(
        _cfg(make_config, image_copy), str(image_copy / "test"), "missing red", "unexpected crimson"
    )
    assert "blue, green, red" in message


def test_layout_is_checked_before_any_file_is_decoded(image_copy, make_config):
    (image_copy / "train" / "red" / "0000.png").write_bytes(b"garbage")
    shutil.rmtree(image_copy / "test" / "blue")
    _fails(_cfg(make_config, image_copy), str(image_copy / "test"), "missing blue")  # not the corrupt file


def _corrupt(image_copy: Path) -> list[Path]:
    garbage = image_copy / "train" / "red" / "0003.png"
    garbage.write_bytes(b"\x89PNG not really")
    buf = io.BytesIO()
    Image.fromarray(np.full((40, 40, 3), 200, np.uint8)).save(buf, "JPEG")
    truncated = image_copy / "test" / "blue" / "0001.jpg"
    truncated.write_bytes(buf.getvalue()[: len(buf.getvalue()) // 2])
    empty = image_copy / "train" / "green" / "0005.jpeg"
    empty.write_bytes(b"")
    return [garbage, truncated, empty]


def test_corrupt_image_fails_naming_the_file(image_copy, make_config):
    bad = _corrupt(image_copy)
    message = _fails(_cfg(make_config, image_copy), "unreadable or corrupt image", "data.on_bad_file=skip")
    assert any(str(p) in message for p in bad), message


def test_corrupt_images_are_skipped_and_counted(image_copy, make_config):
    bad = _corrupt(image_copy)
    cfg = _cfg(make_config, image_copy, "data.on_bad_file=skip")
    manifest = data.prepare(cfg, progress=False)
    assert manifest["skipped_files"]["count"] == 3
    assert sorted(manifest["skipped_files"]["examples"]) == sorted(
        p.relative_to(image_copy).as_posix() for p in bad
    )
    counts = {split: info["num_examples"] for split, info in manifest["splits"].items()}
    assert counts["train"] + counts["validation"] == 22 and counts["test"] == 8
    data.verify_shards(cfg.data.output_dir)


def test_non_utf8_text_fails_or_is_skipped(text_copy, make_config):
    bad = text_copy / "test" / "neg" / "99_2.txt"  # an extra review, in Latin-1
    bad.write_bytes("caf\u00e9 terrible".encode("latin-1"))
    _fails(_cfg(make_config, text_copy, "dataset=imdb"), str(bad), "not a UTF-8 text file")
    manifest = data.prepare(
        _cfg(make_config, text_copy, "dataset=imdb", "data.on_bad_file=skip"), progress=False
    )
    assert manifest["skipped_files"] == {"count": 1, "examples": ["test/neg/99_2.txt"]}
    assert manifest["splits"]["test"]["num_examples"] == 20


def test_all_files_bad_is_an_error_even_when_skipping(tmp_path, make_config):
    for split in ("train", "test"):
        for cls in ("a", "b"):
            (tmp_path / "src" / split / cls).mkdir(parents=True)
            (tmp_path / "src" / split / cls / "x.png").write_bytes(b"nope")
    _fails(_cfg(make_config, tmp_path / "src", "data.on_bad_file=skip"), "no usable examples", "4 bad files")


def test_failed_prepare_keeps_the_previous_output(image_copy, make_config):
    cfg = _cfg(make_config, image_copy)
    data.prepare(cfg, progress=False)
    digest = data.manifest_digest(cfg.data.output_dir)
    _corrupt(image_copy)
    with pytest.raises(DataError):
        data.prepare(cfg, progress=False)
    assert data.manifest_digest(cfg.data.output_dir) == digest
    data.verify_shards(cfg.data.output_dir)
    assert sorted(p.name for p in image_copy.parent.iterdir()) == ["out", "src"]


def test_stale_temp_folder_of_a_dead_prepare_is_removed(image_dir, tmp_path, make_config):
    stale = tmp_path / "out.tmp-999999999"  # no such pid
    stale.mkdir()
    (stale / "train-00000.part").write_bytes(b"half")
    cfg = make_config(
        "data.source=directory", f"data.path={image_dir}", f"data.output_dir={tmp_path / 'out'}"
    )
    data.prepare(cfg, progress=False)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


# ----------------------------------------------------------------------------- verify_shards


@pytest.fixture
def prepared_copy(prepared_image, tmp_path) -> Path:
    shutil.copytree(prepared_image.prepared_dir, tmp_path / "prepared")
    return tmp_path / "prepared"


def _first_shard(prepared: Path) -> Path:
    return prepared / data.load_manifest(prepared)["splits"]["train"]["shards"][1]["file"]


def test_verify_shards_accepts_an_intact_copy(prepared_copy):
    data.verify_shards(prepared_copy)
    data.verify_shards(prepared_copy, data.load_manifest(prepared_copy))


def test_verify_shards_catches_a_truncated_shard(prepared_copy):
    shard = _first_shard(prepared_copy)
    shard.write_bytes(shard.read_bytes()[:-100])
    with pytest.raises(DataError, match="truncated or altered") as info:
        data.verify_shards(prepared_copy)
    assert str(shard) in str(info.value)


def test_verify_shards_catches_an_altered_shard(prepared_copy):
    shard = _first_shard(prepared_copy)
    raw = bytearray(shard.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    shard.write_bytes(bytes(raw))
    with pytest.raises(DataError, match="sha256") as info:
        data.verify_shards(prepared_copy)
    assert str(shard) in str(info.value)


def test_verify_shards_catches_a_missing_shard(prepared_copy):
    shard = _first_shard(prepared_copy)
    shard.unlink()
    with pytest.raises(DataError, match="missing") as info:
        data.verify_shards(prepared_copy)
    assert str(shard) in str(info.value)
    with pytest.raises(DataError, match="missing"):
        data.make_dataset(prepared_copy, "train", batch_size=4, training=False, seed=0)


def test_missing_or_broken_manifest(tmp_path, prepared_copy):
    with pytest.raises(DataError, match="manifest not found"):
        data.load_manifest(tmp_path / "nothing")
    with pytest.raises(DataError, match="manifest not found"):
        data.manifest_digest(tmp_path / "nothing")
    (prepared_copy / "manifest.json").write_text("{not json")
    with pytest.raises(DataError, match="unreadable manifest"):
        data.verify_shards(prepared_copy)


def test_an_image_of_another_format_named_png_is_a_bad_file_never_decoded(image_copy, make_config):
    """Only JPEG and PNG reach a decoder: a TIFF (or any of Pillow's other formats) named .png or .jpg is an
    unreadable image, whatever Pillow could have made of its content."""
    victims = []
    for name in ("disguised.png", "disguised.jpg"):
        target = sorted((image_copy / "train").iterdir())[0] / name
        buffer = io.BytesIO()
        Image.new("RGB", (8, 8), (200, 10, 10)).save(buffer, format="TIFF")
        target.write_bytes(buffer.getvalue())
        assert Image.open(target).format == "TIFF"  # Pillow, asked for any format, would decode it
        victims.append(target)
    message = _fails(_cfg(make_config, image_copy), "unreadable or corrupt image")
    assert any(str(p) in message for p in victims), message
