"""Where a small DVC experiment's seconds go, phase by phase (issue 52).

    python benchmarks/experiment_phases.py [--forms first,workspace,temp,queue] [--examples 1000] [--epochs 1]

In a fresh copy of the project (tests/test_pipeline_e2e.py's `copy_project`) with a real CIFAR-10 subset
(`--per-class` train and test JPEGs per class from ../shared/datasets/cifar10-images.tar.gz, `dvc add`ed as the
sweeps how-to says), runs `dvc exp run -S data.max_examples_per_split=N -S train.epochs=E` in each form, each
with its own learning rate (so DVC runs it afresh), env TFPIPE_PHASES set (`tfpipe.phases`):
first: the workspace, prepare runs; workspace: the workspace, prepare cached; temp: `--temp`; queue: `--queue`,
then `dvc exp run --run-all` (its queue worker, started there, inherits TFPIPE_PHASES). Prints one table, a
column per form: DVC's own work (its wall minus the stage processes' walls: status, hashing, copies, and
whatever a stage process does after its atexit: nothing since `tfpipe.commands.process_exit`), then each stage process's phases (start and imports: process start to its
`<stage> stage` phase; setup: config, TensorFlow's import, preflight, data checks, up to its first inner phase),
the epochs (metrics/train.json `train_seconds`), and the CPU model, flags and load average.
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
sys.path.insert(0, str(ROOT / "src"))
FORMS = {"first": [], "workspace": [], "temp": ["--temp"], "queue": ["--queue"]}
STAGES = ("prepare", "train", "evaluate")


def cpu() -> str:
    from tfpipe import hardware, provenance

    load = " ".join(f"{x:.1f}" for x in os.getloadavg())
    return f"{provenance.cpu_model() or '?'}; {os.cpu_count()} cores; {hardware.cpu_kernels()}; load {load}"


def make_project(work: Path, per_class: int) -> tuple[Path, dict]:
    """A fresh project copy with `per_class` train and test CIFAR-10 JPEGs per class, dvc-added and committed."""
    from test_pipeline_e2e import copy_project  # the e2e tests' project copy, kept in one place

    project = copy_project(work / "project")
    raw = project / "data" / "raw" / "cifar10"
    counts: dict = {}
    with tarfile.open(ARCHIVE) as tar:
        for member in tar:
            parts = Path(member.name).parts  # cifar10-images/<split>/<class>/NNNN.jpg
            if member.isfile() and len(parts) == 4 and counts.get(parts[1:3], 0) < per_class:
                counts[parts[1:3]] = counts.get(parts[1:3], 0) + 1
                target = raw.joinpath(*parts[1:])
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(tar.extractfile(member).read())
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "DVC_", "TFPIPE_"))}
    env.update(PYTHONPATH=str(project / "src"), TF_CPP_MIN_LOG_LEVEL="2", DVC_NO_ANALYTICS="1")
    git = ["git", "-c", "user.name=b", "-c", "user.email=b@b"]
    run(["git", "init", "-q", "-b", "main"], project, env)
    run([sys.executable, "-m", "dvc", "add", "-q", "data/raw/cifar10"], project, env)
    run([*git, "add", "-A"], project, env)
    run([*git, "commit", "-qm", "init"], project, env)
    return project, env


def run(cmd: list, cwd: Path, env: dict) -> str:
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(
            f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
        )
    return proc.stdout + proc.stderr


def experiment(project: Path, env: dict, form: str, sets: list, phases_file: Path) -> float:
    """The wall seconds of one experiment in `form` (queue: enqueue plus `--run-all`), its phases in the file."""
    env = {**env, "TFPIPE_PHASES": str(phases_file)}
    dvc = [sys.executable, "-m", "dvc", "exp", "run"]
    args = [a for s in sets for a in ("-S", s)]
    t0 = time.time()
    run([*dvc, *FORMS[form], *args], project, env)
    if form == "queue":
        run([*dvc, "--run-all"], project, env)
    return time.time() - t0


def train_seconds(project: Path, env: dict) -> float:
    """The newest experiment's metrics/train.json `train_seconds`: the epochs alone."""
    shown = json.loads(run([sys.executable, "-m", "dvc", "exp", "show", "--json"], project, env))
    newest = max(
        (e for commit in shown for e in (commit.get("experiments") or [])),
        key=lambda e: e["revs"][0]["data"]["timestamp"],
    )
    return float(newest["revs"][0]["data"]["metrics"]["metrics/train.json"]["data"]["train_seconds"])


def rows(records: list, wall: float, epochs: float) -> dict:
    """{row label: seconds} of one experiment's phase records."""
    by_pid: dict = {}
    for r in records:
        by_pid.setdefault(r["pid"], []).append(r)
    out = {"DVC's own work (its wall minus the stage processes')": wall}
    for recs in by_pid.values():
        stage = next((r for r in recs if r["phase"].endswith(" stage")), None)
        proc = next((r for r in recs if r["phase"] == "process"), None)
        if stage is None or proc is None:
            continue
        name = stage["phase"].split()[0]
        out["DVC's own work (its wall minus the stage processes')"] -= proc["end"] - proc["start"]
        out.update(stage_rows(name, recs, stage, proc, epochs))
    out["total wall"] = wall
    out["outside the epochs"] = wall - epochs
    return out


def stage_rows(name: str, recs: list, stage: dict, proc: dict, epochs: float) -> dict:
    """One stage process's rows: start and imports, setup, each top-level phase (nested ones beneath), the rest."""
    inner = sorted((r for r in recs if r is not stage and r is not proc), key=lambda r: r["start"])
    top = [
        r
        for r in inner
        if not any(o is not r and o["start"] <= r["start"] and r["end"] <= o["end"] for o in inner)
    ]
    out = {f"{name}: process start and imports": stage["start"] - proc["start"]}
    out[f"{name}: setup (config, TF import, preflight, checks)"] = (
        top[0]["start"] if top else stage["end"]
    ) - stage["start"]
    for r in top:
        out[f"{name}: {r['phase']}"] = out.get(f"{name}: {r['phase']}", 0.0) + r["end"] - r["start"]
        if r["phase"] == "training":
            out[f"{name}:   of which the epochs (train_seconds)"] = epochs
        for n in inner:
            if n is not r and r["start"] <= n["start"] and n["end"] <= r["end"]:
                out[f"{name}:   of which {n['phase']}"] = n["end"] - n["start"]
    if not top:  # a stage without inner phases (prepare): its setup row is the whole stage
        return {**out, f"{name}: exit (stage end to atexit)": proc["end"] - stage["end"]}
    between = sum(b["start"] - a["end"] for a, b in zip(top, top[1:]))
    out[f"{name}: between phases"] = between
    out[f"{name}: after the last phase (run closed, reports)"] = stage["end"] - (
        top[-1]["end"] if top else stage["end"]
    )
    out[f"{name}: exit (stage end to atexit)"] = proc["end"] - stage["end"]
    return out


def table(results: dict) -> str:
    forms = list(results)
    labels = list(dict.fromkeys(label for res in results.values() for label in res))
    labels.sort(key=lambda k: (k.startswith(("total", "outside")), _stage_order(k)))
    lines = [f"| phase | {' | '.join(forms)} |", "|---|" + "---:|" * len(forms)]
    for label in labels:
        cells = [f"{results[f][label]:.2f}" if label in results[f] else "-" for f in forms]
        lines.append(f"| {label} | {' | '.join(cells)} |")
    return "\n".join(lines)


def _stage_order(label: str) -> int:
    return next((i + 1 for i, s in enumerate(STAGES) if label.startswith(f"{s}:")), 0)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--forms", default="first,workspace,temp,queue", help=f"comma-separated: {', '.join(FORMS)}"
    )
    parser.add_argument("--examples", type=int, default=1000, help="data.max_examples_per_split")
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--per-class", type=int, default=150, help="train and test JPEGs per class extracted")
    args = parser.parse_args()
    if not ARCHIVE.is_file():
        raise SystemExit(f"{ARCHIVE} not found (see ../shared/datasets/README.md)")
    print(f"CPU: {cpu()}", flush=True)
    work = Path(tempfile.mkdtemp(prefix="tfpipe-phases-bench-"))
    results: dict = {}
    try:
        project, env = make_project(work, args.per_class)
        for k, form in enumerate(args.forms.split(",")):
            sets = [f"data.max_examples_per_split={args.examples}", f"train.epochs={args.epochs}"]
            sets.append(f"train.optimizer.learning_rate={0.001 + 0.0001 * k:.4f}")  # a new experiment each
            phases_file = work / f"phases-{k}-{form}.jsonl"
            wall = experiment(project, env, form, sets, phases_file)
            from tfpipe import phases

            results[form] = rows(phases.read(phases_file), wall, train_seconds(project, env))
            print(f"{form}: {wall:.1f} s wall (load {os.getloadavg()[0]:.1f})", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"\nCPU: {cpu()}\n`dvc exp run -S {' -S '.join(sets[:2])}`, seconds:\n\n{table(results)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
