"""The directory source stays inside its root (issue 22, item 4): symlinks are followed only to targets inside
the resolved data root, each real file is one example, link loops end, and files over the size caps are refused
before decoding, named in the one-line error (on_bad_file=fail) or the manifest's skipped list (skip)."""

from __future__ import annotations

import os
import shutil
import signal
import struct
import zlib
from pathlib import Path

import pytest

from tfpipe import data
from tfpipe.data import DataError

ROOT = Path(__file__).resolve().parents[1]
SECRET = b"TOP-SECRET-OUTSIDE-THE-ROOT token"


@pytest.fixture
def text_copy(text_dir, tmp_path) -> Path:
    shutil.copytree(text_dir, tmp_path / "src")
    return tmp_path / "src"


@pytest.fixture
def image_copy(image_dir, tmp_path) -> Path:
    shutil.copytree(image_dir, tmp_path / "src")
    return tmp_path / "src"


@pytest.fixture
def alarm():
    """Turns an endless walk into a test failure after 60 s (the walk is Python, so SIGALRM interrupts it)."""

    def _timeout(signum, frame):
        raise TimeoutError("prepare did not finish in 60 s (a symlink loop walked without end?)")

    previous = signal.signal(signal.SIGALRM, _timeout)
    signal.alarm(60)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, previous)


def _cfg(make_config, source: Path, *overrides: str):
    return make_config(
        "data.source=directory",
        "dataset=imdb",
        f"data.path={source}",
        f"data.output_dir={source.parent / 'out'}",
        "data.examples_per_shard=8",
        *overrides,
    )


def _records(cfg, manifest: dict) -> list:
    """Every (text bytes, label) stored in the shards, read back with TensorFlow."""
    import tensorflow as tf

    out = Path(cfg.data.output_dir)
    files = [str(out / s["file"]) for split in manifest["splits"].values() for s in split["shards"]]
    found = []
    for raw in tf.data.TFRecordDataset(files).as_numpy_iterator():
        example = tf.train.Example.FromString(raw)
        feature = example.features.feature
        found.append((feature["text"].bytes_list.value[0], feature["label"].int64_list.value[0]))
    return found


def _total(manifest: dict) -> int:
    return sum(info["num_examples"] for info in manifest["splits"].values())


def _fails(cfg, *expected: str) -> str:
    with pytest.raises(DataError) as info:
        data.prepare(cfg, progress=False)
    message = str(info.value)
    assert "\n" not in message
    for part in expected:
        assert part in message, message
    assert not Path(cfg.data.output_dir).exists()
    return message


def test_class_folders_linking_to_parent_terminate_and_read_each_file_once(text_copy, make_config, alarm):
    (text_copy / "train" / "urls_pos.txt").unlink()  # a loose .txt in train/, else reached through the links
    for cls in ("neg", "pos"):
        os.symlink(
            "..", text_copy / "train" / cls / "up"
        )  # train/neg/up -> train: a loop through both classes
    cfg = _cfg(make_config, text_copy)
    manifest = data.prepare(cfg, progress=False)
    assert _total(manifest) == 60  # 20 + 20 train (incl. carved validation) + 10 + 10 test: each file once
    texts = [text for text, _ in _records(cfg, manifest)]
    assert len(texts) == len(set(texts)) == 60
    assert manifest["skipped_files"]["count"] == 0


def test_link_to_a_file_outside_the_root_fails_naming_link_and_target(text_copy, make_config):
    outside = text_copy.parent / "secret.txt"
    outside.write_bytes(SECRET)
    link = text_copy / "train" / "pos" / "leak.txt"
    os.symlink(outside, link)
    (text_copy / "train" / "neg" / "0_latin1.txt").write_bytes(
        b"caf\xe9"
    )  # would fail if anything were decoded
    message = _fails(_cfg(make_config, text_copy), str(link), str(outside), "outside the data root")
    assert "data.on_bad_file=skip" in message
    assert sorted(p.name for p in text_copy.parent.iterdir()) == [
        "secret.txt",
        "src",
    ]  # no temp folder either


def test_split_or_class_folder_linking_out_of_the_root_is_a_layout_error(text_copy, make_config):
    elsewhere = text_copy.parent / "elsewhere_pos"
    shutil.move(text_copy / "test" / "pos", elsewhere)
    os.symlink(elsewhere, text_copy / "test" / "pos")
    cfg = _cfg(
        make_config, text_copy, "data.on_bad_file=skip"
    )  # not a bad file: the layout itself leaves the root
    _fails(
        cfg, f"{text_copy}/test/pos: symlink target {os.path.realpath(elsewhere)} is outside the data root"
    )


def test_prepare_stage_exits_2_with_one_line_naming_the_link(capsys, text_copy, scratch_root):
    from pipeline import _cli
    from tfpipe.stages import run_prepare

    outside = text_copy.parent / "outside.txt"
    outside.write_text("not part of the data")
    os.symlink(outside, text_copy / "test" / "neg" / "host.txt")
    real_root, real_target = os.path.realpath(text_copy), os.path.realpath(outside)
    argv = [
        "dataset=imdb",
        "data.source=directory",
        f"data.path={text_copy}",
        f"data.output_dir={text_copy.parent / 'out'}",
    ]
    capsys.readouterr()
    code = _cli.cli("prepare", run_prepare, "test", argv, scratch_root, configure_logging=False)
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("prepare: error:")]
    assert code == 2
    assert lines == [
        f"prepare: error: {text_copy}/test/neg/host.txt: symlink target {real_target} is outside the data root "
        f"{real_root}; only links resolving inside it are followed; fix or remove the file, or set "
        "data.on_bad_file=skip"
    ]
    assert not (text_copy.parent / "out").exists()


def test_link_out_of_the_root_is_skipped_named_and_never_read(text_copy, make_config):
    outside = text_copy.parent / "secret.txt"
    outside.write_bytes(SECRET)
    (text_copy.parent / "elsewhere").mkdir()
    (text_copy.parent / "elsewhere" / "more.txt").write_bytes(SECRET + b" 2")
    os.symlink(outside, text_copy / "train" / "pos" / "leak.txt")
    os.symlink(text_copy.parent / "elsewhere", text_copy / "test" / "neg" / "linked_folder")
    cfg = _cfg(make_config, text_copy, "data.on_bad_file=skip")
    manifest = data.prepare(cfg, progress=False)
    assert manifest["skipped_files"] == {
        "count": 2,
        "examples": ["train/pos/leak.txt", "test/neg/linked_folder"],
    }
    assert _total(manifest) == 60
    out = Path(cfg.data.output_dir)
    assert all(SECRET not in path.read_bytes() for path in out.iterdir())  # shards, manifest, vocab
    assert all(SECRET not in text for text, _ in _records(cfg, manifest))


def test_link_inside_the_root_is_followed_but_the_real_file_is_one_example(text_copy, make_config):
    target = text_copy / "train" / "pos" / "zz_new.txt"
    target.write_bytes(b"a unique review, reachable twice")
    os.symlink(target, text_copy / "train" / "neg" / "aaa_link.txt")  # listed before pos/zz_new.txt
    os.symlink(
        text_copy / "train" / "neg", text_copy / "test" / "neg" / "train_copy"
    )  # train files into test
    new = (
        text_copy / "extra" / "new.txt"
    )  # inside the root, outside the split folders: reached only by a link
    new.parent.mkdir()
    new.write_bytes(b"a review kept elsewhere in the root")
    os.symlink(new, text_copy / "test" / "pos" / "new_link.txt")
    cfg = _cfg(make_config, text_copy)
    manifest = data.prepare(cfg, progress=False)
    records = _records(cfg, manifest)
    assert (
        _total(manifest) == 62 and len(records) == 62
    )  # the 61 real files of the classes once, plus new.txt
    assert [label for text, label in records if text == target.read_bytes()] == [1]  # pos, where it really is
    assert [label for text, label in records if text == new.read_bytes()] == [1]
    assert len({text for text, _ in records}) == 62


def test_oversized_text_is_refused_before_reading(text_copy, make_config):
    big = text_copy / "test" / "pos" / "99_10.txt"
    big.write_bytes(b"great " * 50)  # 300 bytes; the generated reviews are under 150
    message = _fails(
        _cfg(make_config, text_copy, "data.max_text_bytes=200"), str(big), "data.max_text_bytes=200"
    )
    assert "300 bytes" in message
    cfg = _cfg(make_config, text_copy, "data.max_text_bytes=200", "data.on_bad_file=skip")
    manifest = data.prepare(cfg, progress=False)
    assert manifest["skipped_files"] == {"count": 1, "examples": ["test/pos/99_10.txt"]}
    assert manifest["splits"]["test"]["num_examples"] == 20


def _png_header_only(width: int, height: int) -> bytes:
    """A PNG signature + IHDR claiming width x height RGB, and a tiny IDAT: a few dozen bytes on disk."""

    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", ihdr)
        + chunk(b"IDAT", zlib.compress(b"\x00"))
        + chunk(b"IEND", b"")
    )


def _image_cfg(make_config, source: Path, *overrides: str):
    return make_config(
        "data.source=directory",
        f"data.path={source}",
        f"data.output_dir={source.parent / 'out'}",
        "data.examples_per_shard=8",
        *overrides,
    )


def test_image_whose_header_claims_too_many_pixels_is_refused_before_decoding(image_copy, make_config):
    bomb = image_copy / "train" / "red" / "9999.png"
    bomb.write_bytes(_png_header_only(8000, 8000))  # 64 megapixels claimed, ~60 bytes on disk
    message = _fails(
        _image_cfg(make_config, image_copy), str(bomb), "8000x8000", "data.max_image_pixels=40000000"
    )
    assert "refused before decoding" in message  # not "unreadable or corrupt image": no pixel was decoded


def test_real_image_over_a_lowered_pixel_cap_is_skipped_and_named(image_copy, make_config):
    cfg = _image_cfg(make_config, image_copy, "data.max_image_pixels=2000", "data.on_bad_file=skip")
    manifest = data.prepare(cfg, progress=False)
    # the generated sizes are 32x32, 40x28, 17x23, 64x48, 31x33: only 64x48 (3072 px) is over 2000
    expected = [f"train/{cls}/0003.png" for cls in ("blue", "green", "red")]  # i=3 of 0..7; test has 0..2
    assert manifest["skipped_files"]["count"] == 3
    assert sorted(manifest["skipped_files"]["examples"]) == expected


def test_git_ignores_raw_data_as_folders_files_or_symlinks_but_not_dvc_files(tmp_path, image_dir):
    """The .gitignore files keep raw data and outputs out of git however they got there (a symlink to an
    extracted archive once went into a commit under the old `/*/` rule, which matches folders only), while the
    .dvc file of `dvc add data/raw/<name>` stays committable."""
    import subprocess

    raw = tmp_path / "data" / "raw"
    raw.mkdir(parents=True)
    shutil.copy(ROOT / "data" / "raw" / ".gitignore", raw / ".gitignore")
    (raw / "linked").symlink_to(image_dir, target_is_directory=True)
    shutil.copytree(image_dir, raw / "copied")
    (raw / "archive.tar.gz").write_bytes(b"x")
    (raw / "pets.dvc").write_text("outs:\n- path: pets\n")
    shutil.copy(ROOT / ".gitignore", tmp_path / ".gitignore")  # outputs, symlinked to a big disk, too
    for output in ("data/prepared", "models", "mlruns"):
        (tmp_path / output).symlink_to(image_dir, target_is_directory=True)
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    out = subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=all"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    listed = sorted(line[3:] for line in out.stdout.splitlines())
    assert listed == [".gitignore", "data/raw/.gitignore", "data/raw/pets.dvc"]
