"""`tfpipe.phases`: the opt-in phase timer (env TFPIPE_PHASES) behind benchmarks/experiment_phases.py.

In-process: the file's JSON lines, the decorator form, a raising block, nothing at all when the variable is unset.
A fresh interpreter: its exit record (process start to atexit). Real stage processes (slow): `python -m
pipeline.train` and `pipeline.evaluate` write the phase names the benchmark's table reads.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import CI_SUMMARY, stage_project
from test_stages import TINY_TRAIN

from tfpipe import phases

ROOT = Path(__file__).resolve().parents[1]


def test_a_phase_appends_one_json_line_of_pid_name_start_and_end(tmp_path, monkeypatch):
    out = tmp_path / "phases.jsonl"
    monkeypatch.setenv(phases.ENV, str(out))
    before = time.time()
    with phases.phase("export"):
        time.sleep(0.01)
    with pytest.raises(ValueError), phases.phase("refused"):  # a raising block is timed too, and re-raises
        raise ValueError("no")
    lines = out.read_text().splitlines()
    assert len(lines) == 2
    first = json.loads(lines[0])
    assert set(first) == {"pid", "phase", "start", "end"}
    assert first["pid"] == os.getpid() and first["phase"] == "export"
    assert before <= first["start"] and first["end"] - first["start"] >= 0.01 and first["end"] <= time.time()
    assert [r["phase"] for r in phases.read(out)] == ["export", "refused"]


def test_as_a_decorator_each_call_is_a_phase_and_the_function_is_unchanged(tmp_path, monkeypatch):
    out = tmp_path / "phases.jsonl"
    monkeypatch.setenv(phases.ENV, str(out))

    @phases.phase("registry")
    def register(x: int) -> int:
        """Doc."""
        with phases.phase("inner"):
            return x + 1

    assert register(1) == 2 and register(2) == 3
    assert register.__name__ == "register" and register.__doc__ == "Doc."
    records = phases.read(out)
    assert [r["phase"] for r in records] == ["inner", "registry", "inner", "registry"]
    assert records[0]["start"] >= records[1]["start"] and records[0]["end"] <= records[1]["end"]  # nested


def test_unset_nothing_is_written_and_a_phase_costs_microseconds(tmp_path, monkeypatch):
    monkeypatch.delenv(phases.ENV, raising=False)
    monkeypatch.chdir(tmp_path)
    started = time.perf_counter()
    for _ in range(10_000):
        with phases.phase("training"):
            pass
    assert time.perf_counter() - started < 1.0  # about 1 us each; 100 us would still pass on a loaded machine
    monkeypatch.setenv(phases.ENV, "")  # empty: unset
    with phases.phase("training"):
        pass
    assert list(tmp_path.iterdir()) == []


def test_a_process_records_its_start_and_exit_around_its_phases(tmp_path):
    out = tmp_path / "phases.jsonl"
    code = "import time\nfrom tfpipe import phases\nwith phases.phase('work'):\n    time.sleep(0.05)\n"
    env = {**os.environ, phases.ENV: str(out), "PYTHONPATH": str(ROOT / "src")}
    spawned = time.time()
    subprocess.run([sys.executable, "-c", code], env=env, check=True, timeout=120)
    done = time.time()
    work, process = phases.read(out)
    assert work["phase"] == "work" and process["phase"] == phases.PROCESS and work["pid"] == process["pid"]
    # /proc's start is in clock ticks (10 ms): allow 20 ms either side
    assert spawned - 0.02 <= process["start"] <= work["start"] <= work["end"] <= process["end"] <= done + 0.02


@pytest.mark.slow
def test_the_train_and_evaluate_stage_processes_write_the_benchmarks_phases(
    prepared_image, tmp_path, record_property
):
    project, env, stage = stage_project(
        tmp_path, prepared_image, *TINY_TRAIN, "tracking.log_model=true", "tracking.register_model=true"
    )
    out = tmp_path / "phases.jsonl"
    env[phases.ENV] = str(out)
    for name in ("train", "evaluate"):
        done = subprocess.run(stage(name), cwd=project, env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-3000:]
    by_pid: dict = {}
    for r in phases.read(out):
        by_pid.setdefault(r["pid"], []).append(r["phase"])
    train, evaluate = by_pid.values()
    assert set(train) == {
        "open_run",
        "training",
        "export",
        "input_example",
        "log_model",
        "log_training",
        "train stage",
        phases.PROCESS,
    }
    assert set(evaluate) == {"evaluate", "open_run", "registry", "evaluate stage", phases.PROCESS}
    assert train[-2:] == ["train stage", phases.PROCESS]  # the stage phase ends last, then the process exits
    record_property(CI_SUMMARY, _table(phases.read(out), project))  # where a stage process's seconds go


def _table(records: list, project: Path) -> str:
    """The benchmark's table of these two stage processes (their walls as the wall: no DVC here)."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from experiment_phases import rows, table

    wall = sum(r["end"] - r["start"] for r in records if r["phase"] == phases.PROCESS)
    epochs = json.loads((project / "metrics" / "train.json").read_text())["train_seconds"]
    found = rows(records, wall, epochs)
    assert abs(found.pop("DVC's own work (its wall minus the stage processes')")) < 1e-6
    assert found["train: training"] >= found["train:   of which the epochs (train_seconds)"]
    return table({"python -m pipeline.train, then .evaluate (s)": found})
