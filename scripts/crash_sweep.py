"""Crash sweep: kill -9 a stage at many instants, run the same command again, check nothing was lost (issue 49).

    python scripts/crash_sweep.py [--stages prepare,train,evaluate,dvc] [--instants 60] [--keep DIR]

As storage systems test themselves: for each stage, one uninterrupted run of a tiny project is the reference; it
also times the stage and notes the instants at which a file or the store changed. Then, for each kill instant
(evenly spaced through the reference's duration, plus just after each write it saw; a run that ends before its
kill, the machine having become faster than when the reference was timed, becomes the reference's duration and
that instant is tried once more at the same fraction of it), a fresh copy of the
stage's starting state runs the command, gets SIGKILL (its whole process group) at that instant, and the same
command runs again, followed by the stages after it. The invariants, each against the reference:

- every command after the kill exits 0;
- the trained weights (weights.sha256), the prepared data's manifest and the test metrics are identical;
- the store holds exactly one FINISHED run per training, holding its served model once and one checkpoint model
  per kept checkpoint (the work directory's state file names them, the same as the reference's), each once and
  READY, and each step's metrics once;
- every registry version's model exists;
- no temporary file is left (`.<name>.tmp-*`, `*_temp*`) outside DVC's and git's own folders;
- for `dvc`: `dvc status` is clean.

Stages: `prepare`, `train` and `evaluate` are the stage commands (`python -m pipeline.<stage>`); `dvc` is
`dvc exp run` around all three. Prints one line per kill and a summary (violations, instants, seconds, CPU).
tests/test_crash_sweep.py runs the CI subset: kills at the writes where a half-done attempt is hardest to
recognise (the model's digest in the store, the export, the logged models), through the same functions.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator, Optional, Union

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

# A project that trains in seconds: the smoke preset, a small CNN, one epoch with a few checkpoints.
TINY = [
    "experiment=smoke",
    "data.source=directory",
    "model.filters=[8,8]",
    "model.dense_units=16",
    "train.batch_size_per_replica=4",
    "train.epochs=2",
    "train.log_every_steps=1",
    "train.checkpoint_every_steps=2",
]
PY = sys.executable
COMMANDS = {
    "prepare": [PY, "-m", "pipeline.prepare"],
    "train": [PY, "-m", "pipeline.train"],
    "evaluate": [PY, "-m", "pipeline.evaluate"],
    "dvc": [
        PY,
        "-m",
        "dvc",
        "exp",
        "run",
        *(a for o in TINY for a in ("-S", o)),
    ],  # DVC composes conf/ itself
}
AFTER = {"prepare": ["train", "evaluate"], "train": ["evaluate"], "evaluate": [], "dvc": []}
START = {
    "prepare": "raw",
    "train": "prepared",
    "evaluate": "trained",
    "dvc": "raw",
}  # the state each starts in
WATCHED = ("models", "data/prepared", "metrics", "plots", "run.json", "mlflow.db", "mlartifacts", ".tfpipe")
TEMPORARY = (".*.tmp-*", "*_temp", "*_temp/*", ".*.old-*")
SKIP_DIRS = (".git", ".dvc")  # git's and DVC's own temporary files are theirs


# ----------------------------------------------------------------------------- the project and its states


def environment(project: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "DVC_", "TF_CONFIG"))}
    env.update(PYTHONPATH=str(project / "src"), TF_CPP_MIN_LOG_LEVEL="2", DVC_NO_ANALYTICS="1")
    return env


def run(cmd: list, project: Path, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run(
        cmd, cwd=project, env=environment(project), capture_output=True, text=True, timeout=timeout
    )


def _must(cmd: list, project: Path) -> str:
    proc = run(cmd, project)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(map(str, cmd))} failed ({proc.returncode}): {proc.stderr[-2000:]}")
    return proc.stdout + proc.stderr


def make_states(work: Path) -> dict:
    """{state: project folder}: `raw` (a committed project with its raw data), `prepared`, `trained`."""
    from conftest import write_image_tree
    from dvc.utils.hydra import compose_and_dump
    from test_pipeline_e2e import copy_project

    raw = copy_project(work / "raw")
    write_image_tree(raw / "data" / "raw" / "cifar10")
    compose_and_dump(raw / "params.yaml", str(raw / "conf"), None, "config", str(raw), TINY)
    git = ["git", "-c", "user.name=s", "-c", "user.email=s@s"]
    _must(["git", "init", "-q", "-b", "main"], raw)
    _must([*git, "add", "-A"], raw)
    _must([*git, "commit", "-qm", "tiny project"], raw)
    prepared = clone_state(raw, work / "prepared")
    _must(COMMANDS["prepare"], prepared)
    trained = clone_state(prepared, work / "trained")
    _must(COMMANDS["train"], trained)
    return {"raw": raw, "prepared": prepared, "trained": trained}


def clone_state(source: Path, target: Path) -> Path:
    if target.exists():
        shutil.rmtree(target)
    shutil.copytree(source, target, symlinks=True)
    return target


# ----------------------------------------------------------------------------- killing


def _signature(project: Path) -> tuple:
    out = []
    for name in WATCHED:
        path = project / name
        items = [path] if path.is_file() else (_walk(path) if path.is_dir() else [])
        for p in items:
            try:
                st = p.stat()
            except OSError:
                continue
            out.append((str(p.relative_to(project)), st.st_size, st.st_mtime_ns))
    return tuple(sorted(out))


def _walk(folder: Path) -> list:
    """Everything under `folder`, read while a stage writes it: a folder that vanishes mid-walk (a temporary
    export renamed into place) is passed over, not an error (os.walk ignores it; Path.rglob raised)."""
    return [Path(root) / name for root, dirs, files in os.walk(folder) for name in (*dirs, *files)]


Trigger = Union[float, Callable[[Path], bool]]  # seconds after the start, or a condition on the project


@dataclass
class Attempt:
    killed: bool
    seconds: float
    writes: list = field(default_factory=list)  # seconds at which the watched files changed


def start_and_kill(cmd: list, project: Path, trigger: Optional[Trigger], timeout: float = 600) -> Attempt:
    """Run `cmd`; SIGKILL its process group when `trigger` fires (None: let it finish, noting its writes)."""
    proc = subprocess.Popen(
        cmd,
        cwd=project,
        env=environment(project),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    err: list = []
    reader = threading.Thread(target=lambda: err.append(proc.stderr.read()), daemon=True)
    reader.start()
    start, last, writes = time.monotonic(), _signature(project), []
    while proc.poll() is None:
        now = time.monotonic() - start
        if now > timeout:
            os.killpg(proc.pid, signal.SIGKILL)
            raise SystemExit(f"{' '.join(map(str, cmd))}: no end after {timeout} s")
        fired = trigger is not None and (now >= trigger if isinstance(trigger, float) else trigger(project))
        if fired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            return Attempt(True, now)
        if trigger is None:
            sig = _signature(project)
            if sig != last:
                writes.append(now)
                last = sig
        time.sleep(0.005 if trigger is not None else 0.02)
    reader.join(5)
    if trigger is None and proc.returncode != 0:
        raise SystemExit(f"{' '.join(map(str, cmd))} failed ({proc.returncode}): {b''.join(err)[-2000:]!r}")
    return Attempt(False, time.monotonic() - start, writes)


def digest_in_store(project: Path) -> bool:
    """The model's digest has reached the store (the run may not have logged the model yet)."""
    return _query(project, "select count(*) from params where key = 'tfpipe.saved_model_sha256'") > 0


def model_logged(project: Path) -> bool:
    return _query(project, "select count(*) from logged_models") > 0


CHECKPOINT_MODELS = "select count(*) from logged_models where name like 'checkpoint-step-%'"


def checkpoint_model_begun(project: Path) -> bool:
    """A checkpoint model exists, PENDING or READY (tfpipe.tracking.checkpoint_models)."""
    return _query(project, CHECKPOINT_MODELS) > 0


def checkpoint_model_ready(project: Path) -> bool:
    return _query(project, CHECKPOINT_MODELS + " and status = 2") > 0  # 2: READY


def export_sealed(project: Path) -> bool:
    return (project / "models" / "cifar10" / "saved_model" / "tfpipe_digest.json").is_file()


def run_file_written(project: Path) -> bool:
    return (project / "run.json").is_file()


def _query(project: Path, sql: str) -> int:
    try:
        with sqlite3.connect(f"file:{project / 'mlflow.db'}?mode=ro", uri=True, timeout=0.05) as db:
            return int(db.execute(sql).fetchone()[0])
    except sqlite3.Error:  # not created yet, or locked by the writer this instant
        return 0


# ----------------------------------------------------------------------------- what must hold


def outcome(project: Path) -> dict:
    """What a finished pipeline left, for comparing against the reference."""
    prepared = project / "data" / "prepared" / "cifar10"
    evaluation = json.loads((project / "metrics" / "eval.json").read_text())
    return {
        "weights": (project / "models" / "cifar10" / "weights.sha256").read_text().strip(),
        "manifest": hashlib.sha256((prepared / "manifest.json").read_bytes()).hexdigest(),
        "test": {k: v for k, v in evaluation.items() if "second" not in k and "per_sec" not in k},
        "checkpoints": kept_checkpoints(project),
    }


def kept_checkpoints(project: Path) -> list:
    """The steps of the checkpoints the work directory keeps, oldest first (TensorFlow's state file)."""
    state = project / "models" / "cifar10" / "checkpoints" / "checkpoint"
    text = state.read_text() if state.is_file() else ""
    return [int(n) for n in re.findall(r'all_model_checkpoint_paths: "[^"]*ckpt-(\d+)"', text)]


def violations(project: Path, reference: dict, dvc: bool = False) -> list:
    """Each invariant that does not hold, in one line."""
    out = []
    try:
        got = outcome(project)
    except (OSError, ValueError, KeyError) as exc:
        return [f"outputs missing: {exc}"]
    out += [f"{k} differs from the reference" for k in got if got[k] != reference[k]]
    out += store_violations(project)
    left = [
        str(p.relative_to(project))
        for pattern in TEMPORARY
        for p in project.rglob(pattern)
        if p.relative_to(project).parts[0] not in SKIP_DIRS
    ]
    if left:
        out.append(f"temporary files left: {sorted(set(left))[:5]}")
    if dvc:
        status = run([PY, "-m", "dvc", "status", "--json"], project)
        if status.returncode != 0 or json.loads(status.stdout or "{}"):
            out.append(f"dvc status not clean: {status.stdout.strip()[:300]}")
    return out


def store_violations(project: Path) -> list:
    from mlflow import MlflowClient
    from mlflow.entities import ViewType

    client = MlflowClient(tracking_uri=f"sqlite:///{project / 'mlflow.db'}")
    experiments = [e.experiment_id for e in client.search_experiments(view_type=ViewType.ALL)]
    runs = client.search_runs(experiments, run_view_type=ViewType.ALL) if experiments else []
    finished = [r for r in runs if r.info.status == "FINISHED"]
    out = [] if len(finished) == 1 else [f"{len(finished)} FINISHED runs, not 1"]
    for r in finished:
        models = client.search_logged_models(experiments, filter_string=f"source_run_id = '{r.info.run_id}'")
        out += model_violations(r.info.run_id, models, kept_checkpoints(project))
        if "train_loss" not in r.data.metrics:
            out.append(f"run {r.info.run_id}: no train_loss")
        for key in r.data.metrics:
            steps = [m.step for m in client.get_metric_history(r.info.run_id, key)]
            if len(steps) != len(set(steps)):
                out.append(f"run {r.info.run_id}: {key} logged twice at a step ({sorted(steps)[:8]}...)")
    for version in client.search_model_versions():
        try:
            client.get_logged_model(version.source.removeprefix("models:/"))
        except Exception as exc:  # noqa: BLE001 - any failure to find it is the violation
            out.append(
                f"registry {version.name} v{version.version}: its model is missing ({type(exc).__name__})"
            )
    return out


def model_violations(run_id: str, models: list, kept: list) -> list:
    """The run holds its served model `model` once and the model `checkpoint-step-<N>` of each kept checkpoint
    once, all READY, and no other."""
    names = sorted(m.name for m in models)
    expected = sorted(["model", *(f"checkpoint-step-{n}" for n in kept)])
    out = [] if names == expected else [f"run {run_id}: logged models {names}, not {expected}"]
    not_ready = [(m.name, str(m.status)) for m in models if m.status.to_proto() != 2]  # 2: READY
    return out + ([f"run {run_id}: logged models not READY: {not_ready}"] if not_ready else [])


# ----------------------------------------------------------------------------- the sweep


def reference_run(stage: str, states: dict, work: Path) -> tuple[dict, Attempt]:
    project = clone_state(states[START[stage]], work / f"reference-{stage}")
    attempt = start_and_kill(COMMANDS[stage], project, None)
    for later in AFTER[stage]:
        _must(COMMANDS[later], project)
    return outcome(project), attempt


def kill_and_recover(
    stage: str, states: dict, work: Path, trigger: Trigger, reference: dict, took: Optional[list] = None
) -> tuple:
    """One kill: (whether the kill landed before the end, the violations); `took` gets the killed (or ended)
    command's seconds."""
    project = clone_state(states[START[stage]], work / f"{stage}-kill")
    attempt = start_and_kill(COMMANDS[stage], project, trigger)
    if took is not None:
        took.append(attempt.seconds)
    for cmd in [COMMANDS[stage], *(COMMANDS[later] for later in AFTER[stage])]:
        proc = run(cmd, project)
        if proc.returncode != 0:
            return attempt.killed, [
                f"{' '.join(map(str, cmd[1:]))} exits {proc.returncode}: {proc.stderr[-300:]}"
            ]
    return attempt.killed, violations(project, reference, dvc=stage == "dvc")


def instants(reference: Attempt, count: int, writes: Optional[int] = None) -> list:
    """`count` instants evenly spaced through the reference run, and just after each write it saw (`writes`: at
    most that many of them, evenly chosen)."""
    even = [reference.seconds * (i + 0.5) / count for i in range(count)]
    seen = reference.writes
    if writes is not None and len(seen) > writes:
        seen = [seen[round(i * (len(seen) - 1) / max(writes - 1, 1))] for i in range(writes)]
    after_writes = [t + 0.01 for t in seen]
    return sorted({round(t, 3) for t in even + after_writes})


def paced(points: list, reference: float, attempt) -> Iterator[tuple]:
    """(instant, killed, violations) of each kill: `points` (seconds into a run of `reference` seconds) are kept
    as fractions of the run's duration; `attempt(t)` -> (killed, violations, the command's seconds). A run that
    ends before its kill (the load fell since the reference was timed) gives the duration now, and that fraction
    is tried once more at it."""
    scale = reference
    for fraction in [t / reference for t in points]:
        for again in (False, True):
            t = fraction * scale
            killed, found, seconds = attempt(t)
            yield t, killed, found
            if killed or again:
                break
            scale = seconds


def main(argv: Optional[list] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--stages", default="prepare,train,evaluate,dvc")
    parser.add_argument("--instants", type=int, default=60, help="evenly spaced kills per stage")
    parser.add_argument(
        "--writes", type=int, help="kills after at most this many of the writes seen (default: all)"
    )
    parser.add_argument(
        "--keep", type=Path, help="work in this folder and keep it (default: a temporary one)"
    )
    args = parser.parse_args(argv)
    from tfpipe import provenance

    work = args.keep or Path(tempfile.mkdtemp(prefix="tfpipe-sweep-"))
    work.mkdir(parents=True, exist_ok=True)
    begin = time.monotonic()
    states = make_states(work)
    total, bad = 0, 0
    for stage in args.stages.split(","):
        reference, timing = reference_run(stage, states, work)
        points = instants(timing, args.instants, args.writes)
        stage_start, landed = time.monotonic(), 0
        print(
            f"{stage}: reference {timing.seconds:.1f} s, {len(timing.writes)} writes seen, {len(points)} kills"
        )

        def attempt(t: float, stage: str = stage, reference: dict = reference) -> tuple:
            took: list = []
            killed, found = kill_and_recover(stage, states, work, t, reference, took)
            return killed, found, took[0]

        for t, killed, found in paced(points, timing.seconds, attempt):
            landed += killed
            total, bad = total + 1, bad + bool(found)
            print(
                f"  kill at {t:6.2f} s: {'killed' if killed else 'ended first'}: {'; '.join(found) or 'ok'}"
            )
        print(f"{stage}: {landed} kills landed, {time.monotonic() - stage_start:.0f} s")
    print(
        f"{bad} of {total} kills broke an invariant; {time.monotonic() - begin:.0f} s; "
        f"CPU: {provenance.cpu_model()}"
    )
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
