"""Benchmark: the same model and data under every strategy and precision, in one go.

    python benchmarks/strategies.py [--per-class 400] [--epochs 3] [--batch 64] [--out docs/benchmarks.md]

Builds a throw-away project (a copy of conf/, a generated 3-class 32x32 image tree, prepared TFRecords),
then runs `python -m pipeline.train` once per configuration in a fresh process (logical CPUs and TF_CONFIG
need one), with MLflow in a local SQLite file. Throughput is the median `epoch_examples_per_sec` of the
epochs after the first (which pays for tracing). The table (examples/s and speed relative to one_device
float32) replaces the 'Strategies and precisions' section of the output file.

Threads: every process gets TF_NUM_INTRAOP_THREADS = cores // processes-that-compute (stated in the table),
so 1 vs 2 multi_worker_mirrored workers compare the same CPU budget (scaling efficiency on one host).
"""

from __future__ import annotations

import argparse
import csv
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SECTION = "## Strategies and precisions"

# (label, overrides, computing processes)
RUNS = [
    ("one_device float32", ["strategy=one_device", "precision=float32"], 1),
    ("one_device mixed_bfloat16", ["strategy=one_device", "precision=mixed_bfloat16"], 1),
    ("one_device mixed_float16", ["strategy=one_device", "precision=mixed_float16"], 1),
    ("mirrored (2 logical CPUs) float32", ["strategy=mirrored", "precision=float32"], 1),
    ("mirrored (2 logical CPUs) mixed_bfloat16", ["strategy=mirrored", "precision=mixed_bfloat16"], 1),
    ("central_storage (2 logical CPUs) float32", ["strategy=central_storage", "precision=float32"], 1),
    (
        "multi_worker_mirrored 1 worker float32",
        ["strategy=multi_worker_mirrored", "strategy.num_workers=1"],
        1,
    ),
    (
        "multi_worker_mirrored 2 workers float32",
        ["strategy=multi_worker_mirrored", "strategy.num_workers=2"],
        2,
    ),
    (
        "multi_worker_mirrored 2 workers mixed_bfloat16",
        ["strategy=multi_worker_mirrored", "strategy.num_workers=2", "precision=mixed_bfloat16"],
        2,
    ),
    ("parameter_server 2 workers + 1 ps float32", ["strategy=parameter_server", "strategy.num_workers=2"], 2),
]


def _prepare(project: Path, per_class: int) -> Path:
    sys.path.insert(0, str(ROOT / "tests"))
    sys.path.insert(0, str(ROOT / "src"))
    from conftest import prepare_tree, write_image_tree

    tree = write_image_tree(
        project / "raw", train_per_class=per_class, test_per_class=max(per_class // 10, 3)
    )
    return prepare_tree(tree, project / "prepared", "data.examples_per_shard=256").prepared_dir


def _throughput(history: Path) -> float:
    with history.open() as fh:
        rows = list(csv.DictReader(fh))
    rates = [float(r["epoch_examples_per_sec"]) for r in rows[1:]] or [
        float(rows[0]["epoch_examples_per_sec"])
    ]
    return statistics.median(rates)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--per-class", type=int, default=400, help="train images per class (3 classes)")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch", type=int, default=64, help="batch per replica")
    parser.add_argument("--only", default="", help="comma-separated substrings: run only matching labels")
    parser.add_argument("--timeout", type=float, default=600, help="seconds per configuration")
    parser.add_argument("--out", default=str(ROOT / "docs" / "benchmarks.md"))
    args = parser.parse_args()
    cores = os.cpu_count() or 1
    project = Path(tempfile.mkdtemp(prefix="tfpipe-bench-"))
    try:
        shutil.copytree(ROOT / "conf", project / "conf")
        prepared = _prepare(project, args.per_class)
        rows = []
        for label, overrides, procs in RUNS:
            if args.only and not any(s in label for s in args.only.split(",")):
                continue
            threads = max(cores // procs, 1)
            # inter-op threads stay at TF's default: parameter_server hung with TF_NUM_INTEROP_THREADS=1
            env = dict(
                os.environ,
                TF_NUM_INTRAOP_THREADS=str(threads),
                PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / "src")]),
                TF_CPP_MIN_LOG_LEVEL="2",
            )
            env.pop("TF_CONFIG", None)
            for leftover in ("models", "plots", "metrics"):
                shutil.rmtree(project / leftover, ignore_errors=True)
            cmd = [
                sys.executable,
                "-m",
                "pipeline.train",
                *overrides,
                f"data.output_dir={prepared}",
                f"train.epochs={args.epochs}",
                f"train.batch_size_per_replica={args.batch}",
                f"tracking.uri=sqlite:///{project / 'mlflow.db'}",
                "tracking.log_model=false",
                "train.log_every_steps=1000",
            ]
            t0 = time.perf_counter()
            try:
                proc = subprocess.run(
                    cmd, cwd=project, env=env, capture_output=True, text=True, timeout=args.timeout
                )
            except subprocess.TimeoutExpired as exc:  # the launcher's SIGTERM handling stops its processes
                proc = subprocess.CompletedProcess(cmd, 124, exc.stdout or "", "timed out")
            wall = time.perf_counter() - t0
            if proc.returncode != 0:
                print(f"{label}: FAILED\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}", file=sys.stderr)
                rows.append((label, threads, None, wall))
                continue
            rate = _throughput(project / "plots" / "history.csv")
            print(
                f"{label}: {rate:.0f} examples/s ({threads} threads/process, {wall:.0f} s wall)", flush=True
            )
            rows.append((label, threads, rate, wall))
        base = next((r[2] for r in rows if r[0] == "one_device float32" and r[2]), None)
        _write(Path(args.out), rows, base, args, cores)
    finally:
        shutil.rmtree(project, ignore_errors=True)
    return 0


def _old_section(text: str) -> list:
    rest = text.split(SECTION, 1)[1]
    nxt = rest.find("\n## ")
    body = rest if nxt < 0 else rest[:nxt]
    return [SECTION] + body.rstrip("\n").splitlines()[1:]


def _write(path: Path, rows, base, args, cores) -> None:
    cmd = (
        f"python benchmarks/strategies.py --per-class {args.per_class} --epochs {args.epochs} "
        f"--batch {args.batch}" + (f" --only {args.only}" if args.only else "")
    )
    lines = [
        SECTION,
        "",
        f"Command: `{cmd}` ({cores} CPU cores, no GPU; cnn model of conf/model/cnn.yaml, "
        f"{args.per_class * 3} generated 32x32 train images, batch {args.batch} per replica, "
        f"{args.epochs} epochs; median epoch throughput after the first epoch). Threads = "
        "TF_NUM_INTRAOP_THREADS per computing process (cores / processes). The machine is shared, timings are noisy.",
        "",
        "| strategy / precision | threads per process | examples/s | relative to one_device float32 | wall s |",
        "|---|---|---|---|---|",
    ]
    for label, threads, rate, wall in rows:
        rel = f"{rate / base:.2f}x" if rate and base else "-"
        lines.append(f"| {label} | {threads} | {f'{rate:.0f}' if rate else 'failed'} | {rel} | {wall:.0f} |")
    mw = {r[0]: r[2] for r in rows}
    one, two = (
        mw.get("multi_worker_mirrored 1 worker float32"),
        mw.get("multi_worker_mirrored 2 workers float32"),
    )
    if one and two:
        lines += [
            "",
            f"Scaling efficiency, multi_worker_mirrored 1 -> 2 workers on one host (same {cores} cores): "
            f"{two / one:.2f}x throughput, {two / (2 * one):.0%} efficiency.",
        ]
    text = path.read_text(encoding="utf-8") if path.is_file() else "# Benchmarks\n"
    if args.only and SECTION in text:  # a partial re-run: add its rows and command under the full table
        lines = (
            _old_section(text)
            + ["", f"Re-run: `{cmd}`:", ""]
            + [l for l in lines if l.startswith("| ") and not l.startswith("| strategy")]
        )
    section = "\n".join(lines) + "\n"
    if SECTION in text:
        head, rest = text.split(SECTION, 1)
        nxt = rest.find("\n## ")
        text = head + section + (rest[nxt + 1 :] if nxt >= 0 else "")
    else:
        text = text.rstrip("\n") + "\n\n" + section
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)
    print(f"wrote {path}")


if __name__ == "__main__":
    raise SystemExit(main())
