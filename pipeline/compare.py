"""Compare two recorded runs: `python -m pipeline.compare RUN_A RUN_B [--tracking-uri URI]`.

Prints what differs in config (params), code (git), data (manifest digest, dvc.lock, the data report's
headline figures), the data report (per-split class shares, pixel statistics, OOV rate, lengths: the runs'
data/report.json), environment (versions, CPU), training setup (strategy, determinism, weight hash) and
metrics (timing metrics excluded), side by side. Exit codes: 0 no differences, 1 differences, 2 bad input.
"""

import sys

from tfpipe.commands.audit import compare_main as main

__all__ = ["main"]

if __name__ == "__main__":
    sys.exit(main())
