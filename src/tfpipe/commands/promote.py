"""Promotion: `python -m pipeline.promote RUN_ID --alias champion [--force] [--metric M] [--mode max|min]
[--min-delta D] [--min-relative R]`.

Points the alias of the run's registered model at the run's version. A run with no registered version yet
(the default: evaluate registers only with tracking.register_model=true) gets one first: its logged model,
under the name the run was made with (tracking.registered_model_name, else tfpipe-<dataset.name>). It moves the
alias only when the run's group of seeds (tag tfpipe.group) beats the group of the alias's current model past
the threshold (tracking.promote_min_delta / promote_min_relative, or --min-delta / --min-relative; 0: off) in
the metric (tracking.promote_metric / promote_mode in params.yaml, or --metric / --mode), read from each run's
immutable record; it prints the test it used (`tracking.group_compare`). --force moves it regardless; a refused
promotion registers nothing.
Exit codes: 0 promoted (or already there), 2 bad input or refused (one line on stderr).
"""

from __future__ import annotations

import sys
from pathlib import Path

from tfpipe.commands import environment
from tfpipe.commands.hydra_flags import CommandParser
from tfpipe.exits import EXIT_BAD_INPUT, EXIT_OK

DOC = "Point a registry alias (e.g. champion) at a run's model version (registering the model if need be)."


def _tracking_defaults(root: Path):
    from tfpipe import config

    params = root / "params.yaml"
    return config.load_params(params).tracking if params.is_file() else config.TrackingConfig()


def _threshold(args, defaults):
    """The threshold of the flags given, else of params.yaml (tracking.promote_min_*), each named as it came."""
    from tfpipe.tracking.group_compare import Threshold

    values: list[float] = []
    names: list[str] = []
    for flag, key in (("--min-delta", "promote_min_delta"), ("--min-relative", "promote_min_relative")):
        given = getattr(args, key[len("promote_") :])
        values.append(getattr(defaults, key) if given is None else given)
        names.append(f"tracking.{key}" if given is None else flag)
    min_delta, min_relative = values
    return Threshold.checked(min_delta, min_relative, tuple(names))


def _parser(prog: str) -> CommandParser:
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
        "--min-delta",
        type=float,
        default=None,
        help="the group must be better by more than this (default: tracking.promote_min_delta; 0: off)",
    )
    parser.add_argument(
        "--min-relative",
        type=float,
        default=None,
        help="... and by this fraction of the champion's mean (default: tracking.promote_min_relative; 0: off)",
    )
    parser.add_argument(
        "--tracking-uri", default=None, help="MLflow store (default: MLFLOW_TRACKING_URI or params.yaml)"
    )
    return parser


def main(argv=None, prog: str = "python -m pipeline.promote") -> int:
    environment.set_defaults()
    args = _parser(prog).parse_args(argv)

    from tfpipe.audit import tracking_uri_for
    from tfpipe.errors import USER_ERRORS
    from tfpipe.tracking import registry
    from tfpipe.tracking.runids import resolve_run_id

    root = Path.cwd()
    try:
        defaults = _tracking_defaults(root)
        threshold = _threshold(args, defaults)
        uri = tracking_uri_for(root, args.tracking_uri)
        result = registry.promote(
            uri,
            resolve_run_id(uri, args.run_id),
            args.alias,
            metric=args.metric or defaults.promote_metric,
            mode=args.mode or defaults.promote_mode,
            force=args.force,
            threshold=threshold,
        )
    except USER_ERRORS as exc:
        for line in getattr(exc, "lines", ()):  # a refusal: what was compared, and how
            print(line)
        print(f"promote: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    for line in result["test"]:
        print(line)
    if result.get("registered"):
        print(f"registered the run's model as {result['name']} version {result['version']}")
    was = "unchanged" if result["previous"] == result["version"] else f"was {result['previous'] or 'unset'}"
    print(f"{result['name']} version {result['version']} is {result['alias']!r} ({was})")
    return EXIT_OK
