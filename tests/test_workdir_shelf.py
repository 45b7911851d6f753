"""The shelf of an unfinished training (`.tfpipe/resume/<fingerprint>/`, tfpipe.workdir): a mirror of the checkpoints
folder by hard links, what a re-run finds when DVC checked out another models/ over the interrupted one. Plain
files stand in for TensorFlow's (renamed into place, never edited, as TensorFlow writes them); the real thing is
tests/test_dvc_resume.py's `dvc exp run` Ctrl-C test."""

from __future__ import annotations

import os
import shutil

from tfpipe import files
from tfpipe.workdir import WorkDir

FP = "ab" * 32


def _save(checkpoints, step: int) -> None:
    """What a CheckpointManager save leaves: the step's files, then the state file naming it (renamed in)."""
    (checkpoints / f"ckpt-{step}.index").write_text(f"index {step}")
    (checkpoints / f"ckpt-{step}.data-00000-of-00001").write_text(f"weights {step}")
    files.write_text(checkpoints / "checkpoint", f'model_checkpoint_path: "ckpt-{step}"\n')


def test_the_shelf_mirrors_by_links_and_drops_what_the_folder_dropped(tmp_path):
    work = WorkDir(tmp_path / "models" / "cifar10", shelf_root=tmp_path / ".tfpipe" / "resume")
    assert work.prepare(FP) is None
    work.mark_started(FP, "run-1")
    _save(work.checkpoint_dir, 2)
    work._shelve()
    _save(work.checkpoint_dir, 4)
    (work.checkpoint_dir / "ckpt-2.index").unlink()  # rotated out (max_to_keep)
    (work.checkpoint_dir / "ckpt-2.data-00000-of-00001").unlink()
    work._shelve()
    shelf = tmp_path / ".tfpipe" / "resume" / FP[:32]
    names = sorted(p.name for p in shelf.iterdir())
    assert names == sorted(p.name for p in work.checkpoint_dir.iterdir())
    assert "ckpt-2.index" not in names
    assert os.path.samefile(shelf / "ckpt-4.index", work.checkpoint_dir / "ckpt-4.index")  # a link, no copy


def test_a_checked_out_models_folder_is_replaced_by_the_shelved_training(tmp_path):
    root = tmp_path / ".tfpipe" / "resume"
    work = WorkDir(tmp_path / "models" / "cifar10", shelf_root=root)
    work.prepare(FP)
    work.mark_started(FP, "run-1")
    _save(work.checkpoint_dir, 6)
    work._shelve()
    # DVC's checkout: the committed, finished run of another config replaces the folder.
    shutil.rmtree(work.path)
    (work.path / "checkpoints").mkdir(parents=True)
    (work.path / "training_state.json").write_text('{"complete": true}')
    (work.path / "checkpoints" / "fingerprint.txt").write_text("another\n")

    again = WorkDir(work.path, shelf_root=root)
    assert again.prepare(FP) == "run-1"  # the interrupted run resumes
    assert (again.checkpoint_dir / "ckpt-6.index").read_text() == "index 6"
    assert not (again.path / "training_state.json").exists()
    again.mark_started(FP, "run-1")
    again.mark_complete(FP, None)
    assert not (root / FP[:32]).exists(), "a finished training leaves no shelf"
    assert WorkDir(work.path, shelf_root=root).prepare("cd" * 32) is None  # another config: fresh


def test_without_a_shelf_root_nothing_is_shelved(tmp_path):
    work = WorkDir(tmp_path / "m")
    work.prepare(FP)
    work.mark_started(FP, "run-1")
    _save(work.checkpoint_dir, 2)
    work._shelve()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m"]


def _dead_pid() -> int:
    """The pid of a process that has exited (and been reaped)."""
    import subprocess
    import sys

    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_a_scratch_folder_of_a_process_that_is_gone_is_removed_by_the_next_one(tmp_path, monkeypatch):
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    dead = _dead_pid()
    stale = tmp_path / f"tfpipe-worker-{dead}-k1ll3d00"
    (stale / "checkpoints").mkdir(parents=True)
    (stale / "checkpoints" / "ckpt-1.index").write_text("a killed worker's scratch checkpoint")
    living = tmp_path / f"tfpipe-worker-{os.getppid()}-l1v1ng00"  # the process that started pytest
    other_prefix = tmp_path / f"tfpipe-preemption-{dead}-0th3r000"
    unnamed = tmp_path / "tfpipe-worker-nopid"
    for folder in (living, other_prefix, unnamed):
        folder.mkdir()

    made = files.scratch_folder("tfpipe-worker-")

    assert not stale.exists()
    assert living.is_dir() and other_prefix.is_dir() and unnamed.is_dir()
    assert made.is_dir() and made.parent == tmp_path and made.name.startswith(f"tfpipe-worker-{os.getpid()}-")
