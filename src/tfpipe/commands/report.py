"""The report command line: `tfpipe report BASE [RUN ...] [--only-named] [--out DIR] [--metric NAME] [--log] [--tracking-uri URI]`.

A comparison for a pull request, read from the MLflow store alone (no TensorFlow): the runs named, each with the
other FINISHED runs of its group (tag `tfpipe.group`: the seeds of its configuration; --only-named: those named
alone), grouped as seeds of their configurations (BASE's group is the base), the parameters that differ between groups, the headline metrics
per group (mean ± standard deviation, 95% confidence interval, best/min/max, the difference from the base), per
group whether its difference in --metric (default test_accuracy) is beyond the noise between seeds (Welch's
t-test), the learning curves, the confusion matrices and audit verdicts (`tfpipe.report`). Written as report.md
(its pictures beside it) and one self-contained report.html into --out (default reports/<BASE's first 8
characters>/), whole or not at all; --log also logs the folder into BASE's artifacts under report/. Runs are named
by their ids or unique prefixes of at least 8 characters; the store is --tracking-uri, else MLFLOW_TRACKING_URI,
else params.yaml's tracking.uri.
Exit codes: 0 the report written, 2 bad input (an unknown or ambiguous run id, a --metric no run logged, a store
that is not there, an --out folder holding other files: one line on stderr, nothing written).
"""

from __future__ import annotations

import sys
from pathlib import Path

from tfpipe.commands import environment
from tfpipe.commands.hydra_flags import CommandParser
from tfpipe.exits import EXIT_BAD_INPUT, EXIT_OK

DOC = "A report comparing runs, as seeds of their configurations, for a pull request (Markdown and HTML)."
REPORTS = "reports"  # the default --out is reports/<BASE's short id>
LOGGED_AS = "report"  # --log: the artifact folder in BASE's run


def _parser(prog: str) -> CommandParser:
    parser = CommandParser(prog=prog, description=DOC, does="reports on recorded runs")
    parser.add_argument(
        "base", metavar="BASE", help="the base run: its id, or a unique prefix of it (at least 8 characters)"
    )
    parser.add_argument(
        "runs", nargs="*", metavar="RUN", help="the runs to compare with it (ids or prefixes)"
    )
    parser.add_argument(
        "--only-named",
        action="store_true",
        help="only the runs named (default: each with the other finished runs of its group, its seeds)",
    )
    parser.add_argument(
        "--out", default=None, help="the report's folder (default: reports/<BASE's short id>)"
    )
    parser.add_argument(
        "--metric", default=None, help="the metric the decision tests (default: test_accuracy, when logged)"
    )
    parser.add_argument(
        "--log", action="store_true", help="also log the report into BASE's artifacts (report/)"
    )
    parser.add_argument(
        "--tracking-uri", default=None, help="MLflow store (default: MLFLOW_TRACKING_URI or params.yaml)"
    )
    return parser


def _read(args) -> tuple:
    """(store URI, the runs: BASE first, each once): every id resolved and every run read before any write."""
    from tfpipe.audit import tracking_uri_for
    from tfpipe.report.figures import CONFUSION_CSV
    from tfpipe.tracking import group_runs, history
    from tfpipe.tracking.runids import resolve_run_id

    uri = tracking_uri_for(Path.cwd(), args.tracking_uri)
    client = history.open_store(uri)
    ids = list(dict.fromkeys(resolve_run_id(uri, r, client) for r in [args.base, *args.runs]))
    if not args.only_named:  # each run named brings its seeds: `report CHAMPION CANDIDATE` weighs groups
        ids = group_runs.with_mates(client, uri, ids)
    return uri, history.read_runs(client, uri, ids, artifacts=(CONFUSION_CSV,))


def _check_metric(runs: list, metric: str) -> None:
    from tfpipe.errors import UserError

    if not any(metric in r.metrics for r in runs):
        logged = sorted({m for r in runs for m in r.metrics})
        shown = ", ".join(logged[:20]) + (", ..." if len(logged) > 20 else "") or "none"
        raise UserError(f"--metric {metric}: no run named logged it (their metrics: {shown})")


def main(argv=None, prog: str = "tfpipe report") -> int:
    environment.set_defaults()
    args = _parser(prog).parse_args(argv)

    from tfpipe import report
    from tfpipe.errors import USER_ERRORS
    from tfpipe.report import document, group
    from tfpipe.tracking import history
    from tfpipe.tracking.redact import redact_url

    try:
        uri, runs = _read(args)
        if args.metric:  # named: some run must have logged it; the default is left out when none did
            _check_metric(runs, args.metric)
        out = Path(args.out) if args.out else Path(REPORTS) / runs[0].run_id[: document.SHORT]
        report.check_target(out)
        groups = group.group_runs(runs)
        title, blocks = document.build(groups, args.metric or document.DECISION_METRIC, redact_url(uri))
        report.write_folder(out, report.files(title, blocks))
        if args.log:
            history.log_folder(uri, runs[0].run_id, out, LOGGED_AS)
    except USER_ERRORS as exc:
        print(f"report: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    logged = f", logged into run {runs[0].run_id}'s artifacts {LOGGED_AS}/" if args.log else ""
    print(
        f"report: {out / report.MARKDOWN} and {out / report.HTML} "
        f"({len(runs)} runs in {len(groups)} groups){logged}"
    )
    return EXIT_OK
