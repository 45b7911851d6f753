"""Files written whole (`tfpipe.files.atomic_open`), and a kill mid-write leaves nothing behind once the same
write runs again: the crash sweep found `plots/.confusion_matrix.png.tmp-<pid>` after a killed evaluate."""

from __future__ import annotations

import os
import subprocess
import sys

from tfpipe import files


def test_a_killed_writers_temporary_file_is_removed_by_the_next_write(tmp_path):
    target = tmp_path / "plots" / "confusion_matrix.png"
    code = (
        "import os, sys, signal; from tfpipe import files\n"
        "with files.atomic_open(sys.argv[1], 'wb') as fh:\n"
        "    fh.write(b'half'); fh.flush(); os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    killed = subprocess.run([sys.executable, "-c", code, str(target)], capture_output=True, timeout=120)
    assert killed.returncode == -9
    (left,) = target.parent.glob(".confusion_matrix.png.tmp-*")  # what a kill -9 leaves
    files.write_text(target, "whole")
    assert target.read_text() == "whole"
    assert sorted(p.name for p in target.parent.iterdir()) == ["confusion_matrix.png"], left


def test_a_live_writers_temporary_file_is_kept(tmp_path):
    target = tmp_path / "eval.json"
    writer = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        busy = tmp_path / f".eval.json.tmp-{writer.pid}"
        busy.write_text("being written")
        files.write_json(target, {"accuracy": 1.0})
        assert busy.is_file() and target.is_file()
    finally:
        writer.kill()
        writer.wait()
    mine = tmp_path / f".eval.json.tmp-{os.getpid()}"
    assert not mine.exists()


def test_within_is_the_one_containment_check(tmp_path):
    """files.within (issue 53: one helper per job): a sibling sharing a prefix is outside, `..` is folded, and with
    resolve a symlink is judged by where it leads."""
    from tfpipe.files import within

    data, data2 = tmp_path / "data", tmp_path / "data2"
    data.mkdir()
    data2.mkdir()
    assert within(data, data) and within(data / "a" / "b.png", data)
    assert not within(data2 / "x", data)  # a string prefix would take it to be inside
    assert not within(data / ".." / "data2" / "x", data)
    (data / "out").symlink_to(data2)
    assert within(data / "out" / "x", data)  # as written
    assert not within(data / "out" / "x", data, resolve=True)  # where the OS opens it


def test_dead_staging_folders_of_an_export_are_removed_and_a_live_one_kept(tmp_path):
    """An export killed between its rename and its clean-up leaves `.saved_model.tmp-<pid>` (its staging, with
    assets_src/) and maybe `.saved_model.old-<pid>` (the export it replaced): the next attempt removes those of
    processes that are gone, and a live process's stay (the crash sweep's "the export sealed" kill found them)."""
    import subprocess

    from tfpipe.models.export import remove_dead_staging

    gone = subprocess.Popen(["true"])
    gone.wait()
    export = tmp_path / "saved_model"
    export.mkdir()
    dead = [tmp_path / f".saved_model.tmp-{gone.pid}", tmp_path / f".saved_model.old-{gone.pid}"]
    for folder in dead:
        (folder / "assets_src").mkdir(parents=True)
        (folder / "assets_src" / "class_names.txt").write_text("a\n")
    live = tmp_path / f".saved_model.tmp-{os.getppid()}"
    live.mkdir()
    other = tmp_path / f".other.tmp-{gone.pid}"  # another file's: not this export's
    other.mkdir()
    remove_dead_staging(export)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([export.name, live.name, other.name])
