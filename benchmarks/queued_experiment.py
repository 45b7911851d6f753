"""Seconds a DVC experiment spends outside training, on the whole real CIFAR-10 (issue 33, item 3).

    python benchmarks/queued_experiment.py [--cache-types copy,links] [--epochs 1]

For each cache type, in a fresh copy of the project: extract CIFAR-10 (60,000 JPEGs) into data/raw/cifar10 and
`dvc add` it, as the README's Sweeps section says, commit, then run two experiments in DVC's temporary
workspace (`dvc exp run --temp`, the executor `--queue` uses too): a first one (prepare runs) and a second with
another learning rate (prepare's inputs unchanged). Prints each one's wall seconds, the train stage's own
training seconds (metrics/train.json `train_seconds`) and the difference, the seconds outside training, and
the CPU model. `copy` is DVC's default cache type here (no reflinks on this file system: every file copied);
`links` is the project's `.dvc/config` setting. Reads ../shared/datasets/cifar10-images.tar.gz.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ARCHIVE = ROOT.parent / "shared" / "datasets" / "cifar10-images.tar.gz"
sys.path.insert(0, str(ROOT / "tests"))
CACHE_TYPES = {"copy": "copy", "links": None}  # None: keep the project's own .dvc/config setting


def _cpu() -> str:
    from tfpipe import hardware, provenance

    return f"{provenance.cpu_model() or '?'} ({hardware.cpu_kernels()})"


def _project(work: Path, cache_type: str | None) -> tuple[Path, dict]:
    from test_pipeline_e2e import copy_project  # the e2e tests' project copy, kept in one place

    project = copy_project(work / "project")
    with tarfile.open(ARCHIVE) as tar:
        tar.extractall(work, filter="data")
    shutil.move(work / "cifar10-images", project / "data" / "raw" / "cifar10")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "DVC_"))}
    env.update(PYTHONPATH=str(project / "src"), TF_CPP_MIN_LOG_LEVEL="2", DVC_NO_ANALYTICS="1")
    git = ["git", "-c", "user.name=b", "-c", "user.email=b@b"]
    _run(["git", "init", "-q", "-b", "main"], project, env)
    if cache_type is not None:
        _run([sys.executable, "-m", "dvc", "config", "cache.type", cache_type], project, env)
    _run([sys.executable, "-m", "dvc", "add", "-q", "data/raw/cifar10"], project, env)
    _run([*git, "add", "-A"], project, env)
    _run([*git, "commit", "-qm", "init"], project, env)
    return project, env


def _run(cmd: list, cwd: Path, env: dict) -> str:
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(
            f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
        )
    return proc.stdout + proc.stderr


def _experiment(project: Path, env: dict, epochs: int, learning_rate: float) -> tuple[float, float]:
    """(wall seconds, training seconds) of one `dvc exp run --temp`."""
    overrides = [f"train.epochs={epochs}", f"train.optimizer.learning_rate={learning_rate}"]
    t0 = time.perf_counter()
    _run(
        [sys.executable, "-m", "dvc", "exp", "run", "--temp", *[a for o in overrides for a in ("-S", o)]],
        project,
        env,
    )
    wall = time.perf_counter() - t0
    shown = json.loads(_run([sys.executable, "-m", "dvc", "exp", "show", "--json"], project, env))
    newest = max(
        (e for commit in shown for e in (commit.get("experiments") or [])),
        key=lambda e: e["revs"][0]["data"]["timestamp"],
    )
    metrics = newest["revs"][0]["data"]["metrics"]["metrics/train.json"]["data"]
    return wall, float(metrics["train_seconds"])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cache-types", default="copy,links", help="comma-separated: copy, links")
    parser.add_argument("--epochs", type=int, default=1)
    args = parser.parse_args()
    if not ARCHIVE.is_file():
        raise SystemExit(f"{ARCHIVE} not found (see ../shared/datasets/README.md)")
    print(f"CPU: {_cpu()}")
    print("\n| cache type | experiment | wall s | training s | outside training s |\n|---|---|---|---|---|")
    for name in args.cache_types.split(","):
        work = Path(tempfile.mkdtemp(prefix="tfpipe-queue-bench-"))
        try:
            project, env = _project(work, CACHE_TYPES[name])
            for label, lr in (("first (prepare runs)", 0.001), ("second (another learning rate)", 0.002)):
                wall, training = _experiment(project, env, args.epochs, lr)
                print(
                    f"| {name} | {label} | {wall:.0f} | {training:.0f} | {wall - training:.0f} |", flush=True
                )
        finally:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
