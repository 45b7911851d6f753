"""data/prepared/<name> as a symlink (to a bigger disk) or a mount point (a volume) (issue 23, item 3): prepare
writes through the link and replaces the contents of the mount, never the folder itself, and a failed or
killed prepare leaves no folder that looks complete."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from PIL import Image

from tfpipe import data
from tfpipe.data import DataError


def _cfg(make_config, source: Path, out: Path):
    return make_config(
        "data.source=directory", f"data.path={source}", f"data.output_dir={out}", "data.examples_per_shard=8"
    )


def _whole(folder: Path) -> None:
    """The folder holds one complete prepare: a manifest whose every shard is there and matches, nothing else
    of ours (no temp folder, no shard of an older prepare)."""
    manifest = data.load_manifest(folder)
    data.verify_shards(folder, manifest)
    listed = {s["file"] for split in manifest["splits"].values() for s in split["shards"]}
    extra = {p.name for p in folder.iterdir()} - listed - {"manifest.json", "report.json", "vocab.txt"}
    assert not extra, extra


def test_prepare_writes_through_a_symlinked_output_folder(image_dir, tmp_path, make_config):
    """The link stays a link; the data ends up in its target, replacing what a previous prepare left; a
    stale temp folder of a killed prepare inside it is removed; a failed prepare keeps the old data."""
    target = tmp_path / "bigger-disk" / "cifar10"
    target.mkdir(parents=True)
    (target / "train-00099-of-00100.tfrecord").write_bytes(b"an older prepare's shard")
    (target / ".prepare.tmp-999999999").mkdir()  # a killed prepare's (no such pid)
    out = tmp_path / "data" / "prepared" / "cifar10"
    out.parent.mkdir(parents=True)
    out.symlink_to(target, target_is_directory=True)
    source = tmp_path / "src"
    shutil.copytree(image_dir, source)
    cfg = _cfg(make_config, source, out)
    data.prepare(cfg, progress=False)
    assert out.is_symlink() and os.readlink(out) == str(target)
    _whole(target)
    digest = data.manifest_digest(out)
    Image.new("RGB", (8, 8)).save(source / "train" / "red" / "extra.png")  # a changed source: a new prepare
    data.prepare(cfg, progress=False)
    assert out.is_symlink() and data.manifest_digest(out) != digest
    _whole(target)
    digest = data.manifest_digest(out)
    (source / "train" / "red" / "bad.png").write_bytes(b"not an image")
    with pytest.raises(DataError):
        data.prepare(cfg, progress=False)
    assert out.is_symlink() and data.manifest_digest(out) == digest  # the old data, whole
    _whole(target)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bigger-disk", "data", "src"]


def test_prepare_replaces_the_contents_of_a_mounted_output_folder(
    image_dir, tmp_path, make_config, mount_tmpfs
):
    """A real tmpfs mounted at data/prepared/cifar10 (rename of a mount point fails: Device or resource
    busy): prepare replaces what is inside it, the mount stays."""
    out = mount_tmpfs(tmp_path / "data" / "prepared" / "cifar10")
    (out / "old.tfrecord").write_bytes(b"an older prepare's shard")
    (out / "manifest.json").write_text("{}")
    cfg = _cfg(make_config, image_dir, out)
    data.prepare(cfg, progress=False)
    assert os.path.ismount(out)
    _whole(out)
    data.prepare(cfg, progress=False)  # again, over its own output
    assert os.path.ismount(out)
    _whole(out)
    assert sorted(p.name for p in out.parent.iterdir()) == ["cifar10"]


def test_a_prepare_stopped_while_moving_its_files_in_leaves_no_manifest(
    image_dir, tmp_path, make_config, monkeypatch
):
    """The one window where a symlinked or mounted folder's old data is already gone: the files being moved
    in. Stopped there (a KeyboardInterrupt on the third move), the folder has no manifest, so train and
    evaluate refuse it in one line; the next prepare completes."""
    target = tmp_path / "disk" / "cifar10"
    target.mkdir(parents=True)
    out = tmp_path / "cifar10"
    out.symlink_to(target, target_is_directory=True)
    cfg = _cfg(make_config, image_dir, out)
    data.prepare(cfg, progress=False)
    real_replace, moved = os.replace, []

    def replace(src, dst):
        if Path(src).parent.name.startswith(".prepare.tmp-") and Path(dst).parent == out:  # a move in
            moved.append(Path(src).name)
            if len(moved) == 3:
                raise KeyboardInterrupt
        return real_replace(src, dst)

    monkeypatch.setattr(os, "replace", replace)
    with pytest.raises(KeyboardInterrupt):
        data.prepare(cfg, progress=False)
    monkeypatch.undo()
    assert "manifest.json" not in moved and not (target / "manifest.json").exists()
    with pytest.raises(DataError):
        data.load_manifest(out)
    data.prepare(cfg, progress=False)
    assert out.is_symlink()
    _whole(target)
