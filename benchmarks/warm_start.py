"""Warm start against training from scratch on a small subset of real CIFAR-10 (issue 16, item 2).

    python benchmarks/warm_start.py [--classes cat,dog] [--per-class 250] [--epochs 10] [--seeds 0,1,2]

A source model is trained on the OTHER eight CIFAR-10 classes (all their train images), under the dataset name
`cifar8`. The target is the two `--classes` with `--per-class` train images each (the first ones of each
folder) and their whole test split (1,000 images each). Each seed trains the target twice with the same
config and epochs: from scratch, and from the source (`train.init_from=runs:/<source>/model`: every layer but
the 8-class head). Prints the accuracies per seed and their medians, and the CPU model.
Reads ../shared/datasets/cifar10-images.tar.gz; works in a temporary copy of the project.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ARCHIVE = ROOT.parent / "shared" / "datasets" / "cifar10-images.tar.gz"
sys.path.insert(0, str(ROOT / "tests"))


def _cpu() -> str:
    from tfpipe import hardware, provenance

    return f"{provenance.cpu_model() or '?'} ({hardware.cpu_kernels()})"


def _folders(raw: Path, target: list, per_class: int, work: Path) -> tuple[Path, Path]:
    """work/cifar8/{train,test}/<8 classes> (all images) and work/pair/{train,test}/<target> (per_class
    train images each, the whole test split), copied from the extracted archive."""
    source, pair = work / "cifar8", work / "pair"
    for split in ("train", "test"):
        for folder in sorted((raw / split).iterdir()):
            if folder.name in target:
                files = sorted(folder.iterdir())
                keep = files[:per_class] if split == "train" else files
                (pair / split / folder.name).mkdir(parents=True)
                for f in keep:
                    shutil.copy2(f, pair / split / folder.name / f.name)
            else:
                shutil.copytree(folder, source / split / folder.name)
    return source, pair


def _run(project: Path, *overrides: str) -> dict:
    cmd = [sys.executable, "-m", "pipeline.run_all", *overrides]
    env = {"PYTHONPATH": str(project / "src"), "TF_CPP_MIN_LOG_LEVEL": "2"}
    proc = subprocess.run(cmd, cwd=project, env={**_base_env(), **env}, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{proc.stderr[-3000:]}")
    return {
        "run_id": json.loads((project / "run.json").read_text())["run_id"],
        "accuracy": json.loads((project / "metrics" / "eval.json").read_text())["accuracy"],
    }


def _base_env() -> dict:
    import os

    return {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "DVC_"))}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--classes", default="cat,dog")
    parser.add_argument("--per-class", type=int, default=250)
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--source-epochs", type=int, default=5)
    parser.add_argument("--seeds", default="0,1,2")
    args = parser.parse_args()
    target = args.classes.split(",")
    if not ARCHIVE.is_file():
        raise SystemExit(f"{ARCHIVE}: not found (see ../shared/datasets/README.md)")
    from test_pipeline_e2e import copy_project

    work = Path(tempfile.mkdtemp(prefix="tfpipe-warm-"))
    try:
        with tarfile.open(ARCHIVE) as tar:
            tar.extractall(work / "raw", filter="data")
        source_dir, pair_dir = _folders(work / "raw" / "cifar10-images", target, args.per_class, work)
        project = copy_project(work / "project")
        common = ["dataset=images", "dataset.image_size=[32,32]", "train.tensorboard=false"]
        started = time.monotonic()
        source = _run(
            project,
            *common,
            "dataset.name=cifar8",
            f"data.path={source_dir}",
            f"train.epochs={args.source_epochs}",
        )
        print(
            f"source: 8 classes, {args.source_epochs} epochs: test accuracy {source['accuracy']:.4f} "
            f"({time.monotonic() - started:.0f} s)",
            flush=True,
        )
        results = {"scratch": [], "warm": []}
        for seed in [int(s) for s in args.seeds.split(",")]:
            pair = [
                *common,
                "dataset.name=pair",
                f"data.path={pair_dir}",
                f"train.epochs={args.epochs}",
                f"train.seed={seed}",
            ]
            results["scratch"].append(_run(project, *pair)["accuracy"])
            results["warm"].append(
                _run(project, *pair, f"train.init_from=runs:/{source['run_id']}/model")["accuracy"]
            )
            print(
                f"seed {seed}: scratch {results['scratch'][-1]:.4f}, warm start {results['warm'][-1]:.4f}",
                flush=True,
            )
        print(
            f"median of {len(results['warm'])} seeds: scratch {statistics.median(results['scratch']):.4f}, "
            f"warm start {statistics.median(results['warm']):.4f}; {args.classes}, {args.per_class} train "
            f"images per class, {args.epochs} epochs, cnn; CPU: {_cpu()}"
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
