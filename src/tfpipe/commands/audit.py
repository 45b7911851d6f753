"""The audit and compare command lines (`python -m pipeline.audit|compare`, `tfpipe audit|compare`).

audit: Audit a recorded MLflow run: `python -m pipeline.audit RUN_ID [--rerun] [--tolerance X] [--against RUN]
[--tracking-uri URI]`.

Check (default): recorded code, data, config and environment against the project in the current
directory; a table of match/differs; with --against RUN, also the 'data report' rows compare prints for the
two runs (how the data this run trained on differs from RUN's; informational, not in the exit code). --rerun: re-create the run at its commit in a temporary git
worktree and compare weight hashes and metrics (REPRODUCED / WITHIN TOLERANCE / DIFFERS; what each side is
read from: `tfpipe.audit.verdict`), recorded on the run as tags audit.verdict, audit.time, audit.by and an
audit/ report artifact. A dirty run's recorded diff is shown with its digest, and applied only by a second
command, --apply-diff DIGEST (`tfpipe.audit.review`).
Exit codes: 0 all match / reproduced (or within tolerance), 1 differs, 2 bad input.

compare: Compare two recorded runs: `python -m pipeline.compare RUN_A RUN_B [--tracking-uri URI]`.

Prints what differs in config (params), code (git), data (manifest digest, dvc.lock, the data report's
headline figures), the data report (per-split class shares, pixel statistics, OOV rate, lengths: the runs'
data/report.json), environment (versions, CPU), training setup (strategy, determinism, weight hash) and
metrics (timing metrics excluded), side by side. Exit codes: 0 no differences, 1 differences, 2 bad input.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from tfpipe.commands import environment
from tfpipe.commands.hydra_flags import CommandParser
from tfpipe.exits import EXIT_BAD_INPUT, EXIT_DIFFERS, EXIT_OK, signal_exit

AUDIT_DOC = "Audit a recorded MLflow run: check it against this project, or --rerun it."
COMPARE_DOC = "Compare two recorded runs."


def main(name: str, argv) -> int:
    if name == "audit":
        return audit_main(argv, prog="tfpipe audit")
    return compare_main(argv, prog="tfpipe compare")


def _audit_parser(prog: str) -> argparse.ArgumentParser:
    from tfpipe.audit import sandbox

    parser = CommandParser(prog=prog, description=AUDIT_DOC, does="checks or re-runs a recorded run")
    parser.add_argument("run_id", help="the run's id, or a unique prefix of it (at least 8 characters)")
    parser.add_argument("--rerun", action="store_true", help="re-execute the run and compare outcomes")
    parser.add_argument(
        "--tolerance",
        type=float,
        default=0.0,
        help="largest |metric difference| still WITHIN TOLERANCE (default 0: exact)",
    )
    parser.add_argument(
        "--tracking-uri", default=None, help="MLflow store (default: MLFLOW_TRACKING_URI or params.yaml)"
    )
    parser.add_argument(
        "--against",
        default=None,
        metavar="RUN_ID",
        help="also list how the run's data report differs from this run's (compare's 'data report' rows)",
    )
    parser.add_argument(
        "--apply-diff",
        nargs="?",
        const="",
        default=None,
        metavar="DIGEST",
        help="apply a dirty run's recorded git diff whose sha256 starts with DIGEST (at least 12 hex "
        "characters): --rerun without it shows the diff, control characters made visible, and its digest",
    )
    parser.add_argument(
        "--allow-diff-code",
        action="store_true",
        help="with --apply-diff DIGEST: also apply a diff that edits code the rerun executes (.py, packaging "
        "files)",
    )
    parser.add_argument(
        "--trusted-ref",
        default=None,
        help="re-run only a commit this git ref holds (default: the clone's default branch, origin/HEAD)",
    )
    parser.add_argument(
        "--pass-env",
        action="append",
        default=[],
        metavar="NAME",
        help="pass this environment variable to the re-execution (repeatable; others are stripped)",
    )
    parser.add_argument(
        "--sandbox",
        choices=sandbox.MODES,
        default="auto",
        help="--rerun's stages under bubblewrap, never as root: no home, no network, no other process, writes "
        "only in the re-run's folder (auto, on: the same, refused where bwrap does not work; off: unsandboxed)",
    )
    parser.add_argument("--debug", action="store_true", help="show tracebacks for bad input")
    return parser


def _check(args, root: Path) -> int:
    """The check: the table, the registry line, the data report against --against, the verdict line."""
    from tfpipe import audit

    section = ""  # first: an unknown --against run stops the audit before it prints anything
    if args.against:
        uri = audit.tracking_uri_for(root, args.tracking_uri)
        section = audit.data_report_section(args.run_id, args.against, uri)
    items = audit.check(args.run_id, root, args.tracking_uri)
    print(audit.format_table(items) + audit.registry_line(args.run_id, root, args.tracking_uri))
    print(section, end="")
    differs = sum(i.status == audit.DIFFERS for i in items)
    print(
        audit.warm_start_line(args.run_id, root, args.tracking_uri)
        + ("ALL MATCH" if audit.ok(items) else f"DIFFERS: {differs} item(s)")
    )
    return EXIT_OK if audit.ok(items) else EXIT_DIFFERS


def _whole_ids(args, root: Path) -> None:
    """RUN_ID and --against given as unique prefixes (at least 8 hex characters) made whole ids, in place."""
    from tfpipe import audit
    from tfpipe.tracking.runids import resolve_run_id

    uri = audit.tracking_uri_for(root, args.tracking_uri)
    args.run_id = resolve_run_id(uri, args.run_id)
    if args.against:
        args.against = resolve_run_id(uri, args.against)


def audit_main(argv=None, prog: str = "python -m pipeline.audit") -> int:
    environment.set_defaults()
    args = _audit_parser(prog).parse_args(argv)
    if args.apply_diff == "":  # the flag alone: the form before a review's digest was asked for
        print(
            "audit: error: --apply-diff takes the digest of the diff you reviewed: run `--rerun` without it "
            "to see the diff and its digest, then --rerun --apply-diff DIGEST",
            file=sys.stderr,
        )
        return EXIT_BAD_INPUT
    if args.rerun and args.against:
        print(
            "audit: error: --against works with the check, not with --rerun; drop one of them",
            file=sys.stderr,
        )
        return EXIT_BAD_INPUT

    from tfpipe import audit, interrupts
    from tfpipe.errors import USER_ERRORS

    root = Path.cwd()
    try:
        _whole_ids(args, root)
        if not args.rerun:
            return _check(args, root)
        with interrupts.graceful_stop():  # SIGTERM too: the re-run's processes and worktree are removed
            result = audit.rerun(
                args.run_id,
                root,
                args.tracking_uri,
                tolerance=args.tolerance,
                apply_diff=args.apply_diff,
                trusted_ref=args.trusted_ref,
                pass_env=tuple(args.pass_env),
                allow_diff_code=args.allow_diff_code,
                sandbox_mode=args.sandbox,
                log=lambda m: print(m, file=sys.stderr),
            )
        print(audit.format_rerun(result), end="")
        return EXIT_DIFFERS if result.verdict == audit.DIFFERS_VERDICT else EXIT_OK
    except USER_ERRORS as exc:
        if args.debug:
            raise
        print(f"audit: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt as exc:
        signum = getattr(exc, "signum", 2)
        print(
            f"audit: stopped ({exc or 'SIGINT'}); the re-run's processes and worktree are removed",
            file=sys.stderr,
        )
        return signal_exit(signum)


def compare_main(argv=None, prog: str = "python -m pipeline.compare") -> int:
    environment.set_defaults()
    parser = CommandParser(prog=prog, description=COMPARE_DOC, does="compares two recorded runs")
    parser.add_argument("run_a", help="a run's id, or a unique prefix of it (at least 8 characters)")
    parser.add_argument("run_b", help="the other run's id, or a unique prefix of it")
    parser.add_argument(
        "--tracking-uri", default=None, help="MLflow store (default: MLFLOW_TRACKING_URI or params.yaml)"
    )
    args = parser.parse_args(argv)

    from tfpipe import audit
    from tfpipe.errors import USER_ERRORS
    from tfpipe.tracking.runids import resolve_run_id

    try:
        uri = audit.tracking_uri_for(Path.cwd(), args.tracking_uri)
        args.run_a, args.run_b = (resolve_run_id(uri, r) for r in (args.run_a, args.run_b))
        rows = audit.compare(args.run_a, args.run_b, uri)
    except USER_ERRORS as exc:
        print(f"compare: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    print(audit.format_compare(rows, args.run_a, args.run_b), end="")
    return EXIT_DIFFERS if rows else EXIT_OK
