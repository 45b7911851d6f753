"""The crash sweep's instants follow the machine's pace (issue 49): session 20's `dvc exp run` sweep timed its
reference at a load of 12 (111.5 s), the load fell, and 49 of its 70 kills came after the run had ended. A run that
ends before its kill now gives the duration, and the same fraction is tried again at it. Stand-in runs here (a
function of the instant), so the pacing is checked without starting any stage."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("crash_sweep_pacing", ROOT / "scripts" / "crash_sweep.py")
sweep = importlib.util.module_from_spec(_spec)
sys.modules["crash_sweep_pacing"] = sweep
_spec.loader.exec_module(sweep)


def test_a_run_that_ends_first_resets_the_pace_and_the_fraction_is_tried_again():
    asked = []

    def run_of_40_seconds(t: float) -> tuple:  # the machine now takes 40 s where the reference took 100
        asked.append(t)
        return (t < 40.0), [], min(t, 40.0)

    kills = list(sweep.paced([25.0, 50.0, 75.0], 100.0, run_of_40_seconds))
    # 25 s of 100 lands; 50 s ends first (40 s), so 0.5 of 40 = 20 s; 75 s of the new pace 40 = 30 s lands
    assert asked == [25.0, 50.0, 20.0, 30.0]
    assert [killed for _, killed, _ in kills] == [True, False, True, True]


def test_a_fraction_is_tried_at_most_twice():
    asked = []

    def always_ends_first(t: float) -> tuple:
        asked.append(t)
        return False, [], 10.0

    assert [t for t, _, _ in sweep.paced([5.0], 10.0, always_ends_first)] == [5.0, 5.0]
    assert asked == [5.0, 5.0]
