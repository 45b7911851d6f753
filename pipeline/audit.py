"""Audit a recorded MLflow run: `python -m pipeline.audit RUN_ID [--rerun] [--tolerance X] [--against RUN]
[--tracking-uri URI]`; exit codes 0 all match / reproduced (or within tolerance), 1 differs, 2 bad input. See
`tfpipe.commands.audit`."""

import sys

from tfpipe.commands.audit import audit_main as main

__all__ = ["main"]

if __name__ == "__main__":
    sys.exit(main())
