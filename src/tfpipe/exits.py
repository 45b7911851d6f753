"""The exit codes tfpipe chooses, for every `tfpipe` command and `python -m pipeline.*` stage: one named constant
each, the comment above it saying when it happens (docs/hooks/exits.py reads those comments for the page
reference/exit-codes.md), and the signal rule, 128 + N after a stop by signal N, as a shell reports it. It
imports nothing.

What it does not know: codes tfpipe hands on unchanged, from a process it started (a launcher's task, the server
of `tfpipe serve`) or from the tool that ended (an uncaught error is Python's 1, with its traceback; DVC's own
errors, e.g. a typo in `dvc exp run -S`, are 255; Hydra's refusals in `tfpipe sweep` are 1)."""

from __future__ import annotations

# done: the stage ran; audit ALL MATCH, REPRODUCED or WITHIN TOLERANCE; compare found no difference; promote
# moved the alias (or it was there already); a --help, --cfg job or --info answer
EXIT_OK = 0
# audit: an item DIFFERS, or the re-run DIFFERS; compare: the two runs differ (the table says what)
EXIT_DIFFERS = 1
# the work failed: tune completed no trial; Ray Train gave up after strategy.max_restarts; a task of the
# launcher or the tuner whose parent died before the task was tied to it (it stops at once)
EXIT_FAILED = 1
# bad input, refused before any work, in one line `<prog>: error: <message>`: config, arguments, data, tracking
# backend, a model that fails its checks, a worse model to promote, a folder `tfpipe init` cannot use
EXIT_BAD_INPUT = 2
# stopped by signal N: exit 128 + N (`signal_exit`), after a checkpoint, with the MLflow run ended KILLED
SIGNAL_BASE = 128
# stopped by Ctrl-C (SIGINT, 128 + 2); also the local launcher's code when a signal stops it
EXIT_SIGINT = 130
# stopped by SIGTERM (128 + 15): a cluster manager's stop or a preemption (multi_worker_mirrored: every worker
# at one agreed step)
EXIT_SIGTERM = 143

STOP_CODES = (EXIT_SIGINT, EXIT_SIGTERM)  # a task that checkpointed and stopped on a signal


def signal_exit(signum: int) -> int:
    """The exit code after a stop by signal `signum`: 128 + N (130 for SIGINT, 143 for SIGTERM)."""
    return SIGNAL_BASE + int(signum)
