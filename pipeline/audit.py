"""Audit a recorded MLflow run: `python -m pipeline.audit RUN_ID [--rerun] [--tolerance X] [--against RUN]
[--tracking-uri URI]`.

Check (default): recorded code, data, config and environment against the project in the current
directory; a table of match/differs; with --against RUN, also the 'data report' rows compare prints for the
two runs (how the data this run trained on differs from RUN's; informational, not in the exit code). --rerun: re-create the run at its commit in a temporary git
worktree and compare weight hashes and metrics (REPRODUCED / WITHIN TOLERANCE / DIFFERS), recorded
on the run as tags audit.verdict, audit.time and an audit/ report artifact.
Exit codes: 0 all match / reproduced (or within tolerance), 1 differs, 2 bad input.
"""

import sys

from tfpipe.commands.audit import audit_main as main

__all__ = ["main"]

if __name__ == "__main__":
    sys.exit(main())
