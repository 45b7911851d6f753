"""Promotion: `python -m pipeline.promote RUN_ID --alias champion [--force] [--metric M] [--mode max|min]`.

Points the alias of the run's registered model at the run's version. A run with no registered version yet
(the default: evaluate registers only with tracking.register_model=true) gets one first: its logged model,
under the name the run was made with (tracking.registered_model_name, else tfpipe-<dataset.name>). It never
moves the alias to a model whose metric (tracking.promote_metric / promote_mode in params.yaml, or --metric /
--mode) is worse than that of the alias's current model, unless --force; a refused promotion registers
nothing.
Exit codes: 0 promoted (or already there), 2 bad input or refused (one line on stderr).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from tfpipe.commands.hydra_flags import CommandParser
from tfpipe.exits import EXIT_BAD_INPUT, EXIT_OK

os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")

DOC = "Point a registry alias (e.g. champion) at a run's model version (registering the model if need be)."


def _tracking_defaults(root: Path):
    from tfpipe import config

    params = root / "params.yaml"
    return config.load_params(params).tracking if params.is_file() else config.TrackingConfig()


def main(argv=None, prog: str = "python -m pipeline.promote") -> int:
    parser = CommandParser(prog=prog, description=DOC, does="moves a registry alias to a run's model")
    parser.add_argument("run_id", help="the run's id, or a unique prefix of it (at least 8 characters)")
    parser.add_argument("--alias", default="champion", help="registry alias to move (default: champion)")
    parser.add_argument("--force", action="store_true", help="move it even to a worse model")
    parser.add_argument(
        "--metric", default=None, help="run metric to compare (default: tracking.promote_metric)"
    )
    parser.add_argument(
        "--mode", default=None, help="max or min: which is better (default: tracking.promote_mode)"
    )
    parser.add_argument(
        "--tracking-uri", default=None, help="MLflow store (default: MLFLOW_TRACKING_URI or params.yaml)"
    )
    args = parser.parse_args(argv)

    from tfpipe.audit import tracking_uri_for
    from tfpipe.errors import USER_ERRORS
    from tfpipe.tracking import registry
    from tfpipe.tracking.runids import resolve_run_id

    root = Path.cwd()
    try:
        defaults = _tracking_defaults(root)
        uri = tracking_uri_for(root, args.tracking_uri)
        result = registry.promote(
            uri,
            resolve_run_id(uri, args.run_id),
            args.alias,
            metric=args.metric or defaults.promote_metric,
            mode=args.mode or defaults.promote_mode,
            force=args.force,
        )
    except USER_ERRORS as exc:
        print(f"promote: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    if result.get("registered"):
        print(f"registered the run's model as {result['name']} version {result['version']}")
    was = "unchanged" if result["previous"] == result["version"] else f"was {result['previous'] or 'unset'}"
    print(f"{result['name']} version {result['version']} is {result['alias']!r} ({was})")
    return EXIT_OK
