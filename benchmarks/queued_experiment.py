"""Seconds a queued DVC experiment spends outside training, on real CIFAR-10 (issues 33 and 52).

    python benchmarks/queued_experiment.py [--data untracked,dvc-add] [--cache-types links] [--epochs 1]
                                           [--per-class 500,100]

For each way of holding the data and each cache type, in a fresh copy of the project: extract CIFAR-10
(../shared/datasets/cifar10-images.tar.gz) into data/raw/cifar10, `--per-class TRAIN,TEST` images of each class
(0,0: all 60,000), commit, then queue and run two experiments (`dvc exp run --queue -S ...`, then
`dvc exp run --run-all`, timed together): a first one and a second with another learning rate. `untracked`:
the folder stays git-ignored and nobody `dvc add`s it, as the README says now: each experiment's copy reads the
project's folder and prepare runs in both (DVC's run-cache cannot vouch for a folder outside the copy).
`dvc-add`: `dvc add data/raw/cifar10` before the commit (the earlier way; the second experiment's prepare comes
from DVC's run-cache). Prints each one's wall seconds, the train stage's own training seconds
(metrics/train.json `train_seconds`), the difference (the seconds outside training), and the CPU. `copy` is
DVC's default cache type on a file system without reflinks; `links` is the project's `.dvc/config` setting.
"""

from __future__ import annotations

import argparse
import json
import os
import re
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
DATA = ("untracked", "dvc-add")
FLAGS = ("avx2", "avx512_bf16", "amx_bf16", "amx_tile")


def _cpu() -> str:
    text = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    model = re.search(r"^model name\s*:\s*(.*)$", text, re.M)
    flags = set((re.search(r"^flags\s*:\s*(.*)$", text, re.M) or [None, ""])[1].split())
    shown = ", ".join(f"{f} {'yes' if f in flags else 'no'}" for f in FLAGS)
    return f"{model.group(1) if model else '?'} ({shown}; {os.cpu_count()} cores)"


def _subset(folder: Path, train: int, test: int) -> int:
    """Keep the first `train` / `test` files (by name) of each class folder; 0 keeps all. The files kept."""
    kept = 0
    for split, keep in (("train", train), ("test", test)):
        for class_dir in sorted((folder / split).iterdir()):
            files = sorted(class_dir.iterdir())
            for extra in files[keep:] if keep else ():
                extra.unlink()
            kept += min(len(files), keep) if keep else len(files)
    return kept


def _project(work: Path, data: str, cache_type: str | None, per_class: tuple) -> tuple[Path, dict, int]:
    from test_pipeline_e2e import copy_project  # the e2e tests' project copy, kept in one place

    project = copy_project(work / "project")
    with tarfile.open(ARCHIVE) as tar:
        tar.extractall(work, filter="data")
    shutil.move(work / "cifar10-images", project / "data" / "raw" / "cifar10")
    images = _subset(project / "data" / "raw" / "cifar10", *per_class)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "DVC_"))}
    env.update(PYTHONPATH=str(project / "src"), TF_CPP_MIN_LOG_LEVEL="2", DVC_NO_ANALYTICS="1")
    git = ["git", "-c", "user.name=b", "-c", "user.email=b@b"]
    _run(["git", "init", "-q", "-b", "main"], project, env)
    if cache_type is not None:
        _run([sys.executable, "-m", "dvc", "config", "cache.type", cache_type], project, env)
    if data == "dvc-add":
        _run([sys.executable, "-m", "dvc", "add", "-q", "data/raw/cifar10"], project, env)
    _run([*git, "add", "-A"], project, env)
    _run([*git, "commit", "-qm", "init"], project, env)
    return project, env, images


def _run(cmd: list, cwd: Path, env: dict) -> str:
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(
            f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
        )
    return proc.stdout + proc.stderr


def _experiment(project: Path, env: dict, epochs: int, learning_rate: float) -> tuple[float, float]:
    """(wall seconds, training seconds) of one queued experiment: `--queue`, then `--run-all`."""
    overrides = [f"train.epochs={epochs}", f"train.optimizer.learning_rate={learning_rate}"]
    dvc = [sys.executable, "-m", "dvc", "exp", "run"]
    t0 = time.perf_counter()
    _run([*dvc, "--queue", *[a for o in overrides for a in ("-S", o)]], project, env)
    out = _run([*dvc, "--run-all"], project, env)  # exits 0 even when the experiment failed: read its metrics
    wall = time.perf_counter() - t0
    shown = json.loads(_run([sys.executable, "-m", "dvc", "exp", "show", "--json"], project, env))
    newest = max(
        (e for commit in shown for e in (commit.get("experiments") or [])),
        key=lambda e: e["revs"][0]["data"]["timestamp"],
    )
    metrics = (newest["revs"][0]["data"].get("metrics") or {}).get("metrics/train.json")
    if not metrics:
        raise SystemExit(f"the experiment failed:\n{out[-3000:]}")
    return wall, float(metrics["data"]["train_seconds"])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default="untracked,dvc-add", help="comma-separated: untracked, dvc-add")
    parser.add_argument("--cache-types", default="links", help="comma-separated: copy, links")
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--per-class", default="0,0", help="TRAIN,TEST images kept per class (0,0: all)")
    args = parser.parse_args()
    if not ARCHIVE.is_file():
        raise SystemExit(f"{ARCHIVE} not found (see ../shared/datasets/README.md)")
    per_class = tuple(int(n) for n in args.per_class.split(","))
    print(f"CPU: {_cpu()}", flush=True)
    print("\n| data | cache type | images | experiment | wall s | training s | outside training s |")
    print("|---|---|---|---|---|---|---|")
    for data in args.data.split(","):
        for name in args.cache_types.split(","):
            work = Path(tempfile.mkdtemp(prefix="tfpipe-queue-bench-"))
            try:
                project, env, images = _project(work, data, CACHE_TYPES[name], per_class)
                for label, lr in (("first", 0.001), ("second (another learning rate)", 0.002)):
                    wall, training = _experiment(project, env, args.epochs, lr)
                    row = f"| {data} | {name} | {images} | {label} | {wall:.0f} | {training:.0f} |"
                    print(f"{row} {wall - training:.0f} |", flush=True)
            finally:
                shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
