"""Bad data through the stage command lines: a truncated, altered or missing TFRecord shard stops `train`
before training (and before an MLflow run is opened) with the shard's name; a corrupt image or undecodable
text in a `directory` source stops `prepare` with its path, or is skipped and counted (the count logged)."""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pipeline import _cli
from tfpipe import data

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def prepared_copy(prepared_image, tmp_path) -> Path:
    shutil.copytree(prepared_image.prepared_dir, tmp_path / "prepared")
    return tmp_path / "prepared"


@pytest.fixture
def project(tmp_path, monkeypatch) -> Path:
    """A project root with conf/ (the stages compose from it) and its own MLflow store."""
    import mlflow

    shutil.copytree(ROOT / "conf", tmp_path / "project" / "conf")
    for name in ("MLFLOW_TRACKING_URI", "MLFLOW_RUN_ID", "TF_CONFIG", "TFPIPE_DEBUG"):
        monkeypatch.delenv(name, raising=False)
    yield tmp_path / "project"
    mlflow.set_tracking_uri(None)


def _shard(prepared: Path, split: str = "train", index: int = 1) -> Path:
    return prepared / data.load_manifest(prepared)["splits"][split]["shards"][index]["file"]


def _truncate(shard: Path) -> str:
    shard.write_bytes(shard.read_bytes()[:-100])
    return "truncated or altered"


def _alter(shard: Path) -> str:
    raw = bytearray(shard.read_bytes())
    raw[len(raw) // 2] ^= 0x01  # one bit: same size, other sha256
    shard.write_bytes(bytes(raw))
    return "sha256 does not match the manifest"


def _remove(shard: Path) -> str:
    shard.unlink()
    return "is missing"


def _stage(capsys, stage, run, argv, root):
    """(exit code, stderr lines without the progress bar that prepare draws on a terminal's stderr)."""
    capsys.readouterr()
    code = _cli.cli(stage, run, "test", argv, root, configure_logging=False)
    err = capsys.readouterr().err
    lines = [line.split("\r")[-1] for line in err.splitlines()]
    return code, [line for line in lines if line.strip() and not line.startswith(f"{stage} ")]


@pytest.mark.parametrize("damage", [_truncate, _alter, _remove], ids=["truncated", "altered", "missing"])
def test_train_stops_on_a_damaged_shard_naming_it(capsys, project, prepared_copy, damage):
    from tfpipe.stages import run_train

    shard = _shard(prepared_copy)
    expected = damage(shard)
    code, lines = _stage(
        capsys, "train", run_train, ["experiment=smoke", f"data.output_dir={prepared_copy}"], project
    )
    assert code == 2
    assert lines == [lines[0]] and lines[0].startswith(f"train: error: {shard}: "), lines
    assert expected in lines[0] and "run the prepare stage again" in lines[0]
    # stopped before training: no MLflow run, no checkpoints, no metrics
    assert not (project / "run.json").exists() and not (project / "models").exists()
    assert not (project / "metrics").exists()


@pytest.mark.slow
def test_train_process_stops_on_an_altered_shard(project, prepared_copy):
    """The same through a real `python -m pipeline.train` (as `dvc repro` runs it)."""
    shard = _shard(prepared_copy, "test", 0)
    _alter(shard)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)])}
    for name in ("MLFLOW_TRACKING_URI", "MLFLOW_RUN_ID", "TF_CONFIG", "TFPIPE_DEBUG"):
        env.pop(name, None)
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "pipeline.train", "experiment=smoke", f"data.output_dir={prepared_copy}"],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("train: error:")]
    assert errors == [
        f"train: error: {shard}: sha256 does not match the manifest (altered); run the prepare stage again"
    ]
    assert proc.stderr.rstrip().endswith(errors[0])  # the last word, after TensorFlow's start-up lines
    assert not (project / "run.json").exists() and not (project / "models").exists()
    assert time.monotonic() - started < 120


def test_train_process_without_a_tpu_stops_in_one_line(project, prepared_copy):
    """strategy=tpu on a host without one: the real `python -m pipeline.train` exits 2 with one line."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)])}
    for name in ("MLFLOW_TRACKING_URI", "MLFLOW_RUN_ID", "TF_CONFIG", "TFPIPE_DEBUG", "TPU_NAME"):
        env.pop(name, None)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pipeline.train",
            "experiment=smoke",
            "strategy=tpu",
            f"data.output_dir={prepared_copy}",
        ],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("train: error:")]
    assert errors == [
        "train: error: strategy.name='tpu' with strategy.tpu=null: no local TPU on this host (no /dev/accel*, "
        "/dev/vfio device or TPU_NAME); allowed: strategy.tpu=<TPU name or grpc://address>, or another strategy "
        "(one_device, mirrored, ...)"
    ], proc.stderr[-2000:]
    assert proc.stderr.rstrip().endswith(errors[0])
    assert not (project / "run.json").exists() and not (project / "models").exists()


# ----------------------------------------------------------------------------- the directory source


def _prepare_args(source: Path, out: Path, *extra: str) -> list:
    return [
        "data.source=directory",
        f"data.path={source}",
        f"data.output_dir={out}",
        "data.examples_per_shard=8",
        *extra,
    ]


def test_prepare_stops_on_a_corrupt_image_naming_it(capsys, image_dir, scratch_root, tmp_path):
    from tfpipe.stages import run_prepare

    source = tmp_path / "src"
    shutil.copytree(image_dir, source)
    bad = source / "train" / "green" / "0002.png"
    bad.write_bytes(b"\x89PNG\r\n\x1a\n but not an image")
    code, lines = _stage(
        capsys, "prepare", run_prepare, _prepare_args(source, tmp_path / "out"), scratch_root
    )
    assert code == 2 and len(lines) == 1, lines
    assert lines[0].startswith(f"prepare: error: {bad}: unreadable or corrupt image"), lines
    assert "data.on_bad_file=skip" in lines[0]  # what is allowed instead
    assert not (tmp_path / "out").exists()


def test_prepare_stops_on_undecodable_text_naming_it(capsys, text_dir, scratch_root, tmp_path):
    from tfpipe.stages import run_prepare

    source = tmp_path / "src"
    shutil.copytree(text_dir, source)
    bad = source / "train" / "pos" / "77_9.txt"
    bad.write_bytes(b"\xff\xfe caf\xe9 great")
    code, lines = _stage(
        capsys, "prepare", run_prepare, _prepare_args(source, tmp_path / "out", "dataset=imdb"), scratch_root
    )
    assert code == 2 and len(lines) == 1
    assert lines[0].startswith(f"prepare: error: {bad}: ") and "not a UTF-8 text file" in lines[0]


def test_skipped_bad_files_are_counted_and_the_count_logged(image_dir, tmp_path, make_config, caplog):
    source = tmp_path / "src"
    shutil.copytree(image_dir, source)
    bad = [source / "train" / "red" / "0001.jpg", source / "test" / "blue" / "0000.png"]
    for path in bad:
        path.write_bytes(b"not an image at all")
    cfg = make_config(*_prepare_args(source, tmp_path / "out", "data.on_bad_file=skip"))
    with caplog.at_level(logging.WARNING, logger="tfpipe"):
        manifest = data.prepare(cfg, progress=False)
    assert manifest["skipped_files"]["count"] == 2
    assert sorted(manifest["skipped_files"]["examples"]) == sorted(
        p.relative_to(source).as_posix() for p in bad
    )
    logged = [r.getMessage() for r in caplog.records if "skipped" in r.getMessage()]
    assert logged and "skipped 2 bad files (data.on_bad_file=skip)" in logged[0], logged
    data.verify_shards(cfg.data.output_dir)
