"""`tfpipe.commands.process_exit.exit`: a stage process ends without the interpreter's teardown (issue 52: 2 s
per stage process with TensorFlow and MLflow loaded), yet as `sys.exit` would for everything that matters: its
exit code, its atexit handlers (logging, MLflow's run, the phases' exit record), its threads' shutdown
(an executor's idle worker told to stop, a non-daemon thread's work finished), stdout flushed.

Each case runs a fresh interpreter. The teardown's mark is an object of `__main__` whose `__del__` writes a
file: Python's teardown frees it (the `sys.exit` control case shows the mark is real), `exit` never does.
The stage entry (`tfpipe.commands.entry.main`, what every `python -m pipeline.<stage>` runs) ends through it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tfpipe.exits import EXIT_BAD_INPUT, EXIT_OK

ROOT = Path(__file__).resolve().parents[1]

# An object freed by the interpreter's teardown writes `finalized`; `open` is bound early (builtins go first).
PRELUDE = """
import atexit, sys, threading, time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
marks = Path(sys.argv[1])
class Teardown:
    def __init__(self, write):
        self.write = write
    def __del__(self):
        self.write("finalized")
teardown = Teardown(lambda text, _open=open: _open(marks / text, "w").close())
"""


def _run(body: str, tmp_path: Path, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)])}
    code = PRELUDE + textwrap.dedent(body)
    return subprocess.run(
        [sys.executable, "-c", code, str(tmp_path)],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def _marks(tmp_path: Path) -> set:
    return {p.name for p in tmp_path.iterdir()}


@pytest.mark.slow
def test_sys_exit_runs_the_teardown_the_control_case(tmp_path):
    proc = _run("sys.exit(3)\n", tmp_path)
    assert proc.returncode == 3
    assert _marks(tmp_path) == {"finalized"}, "the teardown mark is not real: the other cases prove nothing"


@pytest.mark.slow
def test_exit_keeps_the_code_atexit_threads_and_output_and_skips_the_teardown(tmp_path):
    body = f"""
    from tfpipe.commands import process_exit
    atexit.register(lambda: (marks / "atexit").touch())
    pool = ThreadPoolExecutor(max_workers=1)
    pool.submit(lambda: None).result()  # an idle non-daemon worker: joined only once told to stop
    def work():
        time.sleep(0.3)
        (marks / "thread").touch()
    threading.Thread(target=work).start()
    print("unflushed output", end="")
    process_exit.exit({EXIT_BAD_INPUT})
    """
    proc = _run(body, tmp_path)
    assert proc.returncode == EXIT_BAD_INPUT, proc.stderr
    assert proc.stdout == "unflushed output"
    assert _marks(tmp_path) == {"atexit", "thread"}  # no "finalized": the teardown was skipped


@pytest.mark.slow
def test_a_stage_entry_ends_through_process_exit(tmp_path):
    """`--cfg job` (the composed config printed; no TensorFlow) goes through the whole entry: config, answer, exit."""
    body = """
    from tfpipe.commands.entry import main
    main("train", lambda cfg, root: None, "a stage", ["--cfg", "job"])
    """
    proc = _run(body, tmp_path)
    assert proc.returncode == EXIT_OK, proc.stderr
    assert "model:" in proc.stdout
    assert "finalized" not in _marks(tmp_path), "the stage entry paid for the interpreter's teardown"
