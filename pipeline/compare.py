"""Compare two recorded runs: `python -m pipeline.compare RUN_A RUN_B [--tracking-uri URI]`.

Prints what differs in config (params), code (git), data (manifest digest, dvc.lock), environment
(versions, CPU), training setup (strategy, determinism, weight hash) and metrics (timing metrics
excluded), side by side. Exit codes: 0 no differences, 1 differences, 2 bad input.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pipeline.compare", description=__doc__.splitlines()[0])
    parser.add_argument("run_a")
    parser.add_argument("run_b")
    parser.add_argument(
        "--tracking-uri", default=None, help="MLflow store (default: MLFLOW_TRACKING_URI or params.yaml)"
    )
    args = parser.parse_args(argv)

    from tfpipe import audit
    from tfpipe.errors import USER_ERRORS

    try:
        uri = audit.tracking_uri_for(Path.cwd(), args.tracking_uri)
        rows = audit.compare(args.run_a, args.run_b, uri)
    except USER_ERRORS as exc:
        print(f"compare: error: {exc}", file=sys.stderr)
        return 2
    print(audit.format_compare(rows, args.run_a, args.run_b), end="")
    return 1 if rows else 0


if __name__ == "__main__":
    sys.exit(main())
