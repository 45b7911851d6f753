"""The environment tfpipe's commands set (issue 53: environment defaults set once, at the entry points, from one
table): importing the command modules sets none of `commands.environment.DEFAULTS`; a command's main sets each
where the user has not; a value the user set stays. In a fresh interpreter, so nothing this session imported or set
decides it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CHILD = """
import json, os, sys
import tfpipe.cli, tfpipe.commands.entry, tfpipe.commands.audit, tfpipe.commands.predict
import tfpipe.commands.promote, tfpipe.commands.report, tfpipe.commands.serve, tfpipe.tuning
from tfpipe.commands import environment, report
after_import = {k: os.environ.get(k) for k in environment.DEFAULTS}
code = report.main(["0123abcd", "--tracking-uri", "sqlite:////nonexistent-folder/mlflow.db"])
print(json.dumps({"import": after_import, "main": {k: os.environ.get(k) for k in environment.DEFAULTS},
                  "code": code, "defaults": environment.DEFAULTS}))
"""


def test_importing_sets_nothing_and_a_command_sets_the_defaults_the_user_has_not():
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "TF_"))}
    env["PYTHONPATH"] = str(ROOT / "src")
    env["TF_CPP_MIN_LOG_LEVEL"] = "0"  # the user's: kept
    proc = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-2000:]
    seen = json.loads(proc.stdout.strip().splitlines()[-1])
    assert seen["code"] == 2  # the store is not there: refused, after the defaults were set
    assert seen["import"] == {**dict.fromkeys(seen["defaults"]), "TF_CPP_MIN_LOG_LEVEL": "0"}
    assert seen["main"] == {
        "TF_CPP_MIN_LOG_LEVEL": "0",
        "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR": "false",
        "MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT": "true",
        "MLFLOW_LOGGING_LEVEL": "WARNING",
    }
