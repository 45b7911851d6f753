"""The environment every tfpipe command sets before TensorFlow or MLflow start: one table of defaults, each set
only where the user has not set it (`os.environ.setdefault`), by `set_defaults()` as a command's main begins.

    from tfpipe.commands import environment
    environment.set_defaults()          # the first line of a command's main

What it does not decide: what importing tfpipe does (nothing here; `tfpipe.tracking` alone switches MLflow's
telemetry off, as it is imported, for library use too), or `-v` (`commands.entry` turns the libraries' INFO lines
back on over these). A process-wide setting a step needs for itself (the ps task's GRPC_FAIL_FAST, MLflow's HTTP
retries while a run opens) stays with that step.
"""

from __future__ import annotations

import os
from typing import MutableMapping

DEFAULTS = {
    # TensorFlow's C++ start-up chatter (oneDNN, cpu_feature_guard) stays off a command's output
    "TF_CPP_MIN_LOG_LEVEL": "2",
    # MLflow's "Downloading artifacts" bars: not a command's progress (predict shows its files')
    "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR": "false",
    # MLflow's "View run ... at: URL" lines on a tracking server, twice per stage: each stage's last line names the run
    "MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT": "true",
    # MLflow's INFO lines (a new store's "Creating initial MLflow database tables"): its warnings and errors stay
    "MLFLOW_LOGGING_LEVEL": "WARNING",
}


def set_defaults(environ: MutableMapping[str, str] = os.environ) -> None:
    """Each of DEFAULTS into `environ` where it holds no value of that name."""
    for name, value in DEFAULTS.items():
        environ.setdefault(name, value)
