"""Hyperparameter search: `python -m pipeline.tune NAME [--storage URL] [--study NAME] [OVERRIDE ...]`.

conf/tune/NAME.yaml (see `tfpipe.tuning.space`) says what to search; every trial is one whole pipeline run in
a subprocess (`tfpipe.tuning.study`), reporting its epochs to the study for pruning (`tfpipe.tuning.hook`).
OVERRIDE: Hydra overrides added to the spec's `overrides` for every trial (e.g. data.path=...).
The study's MLflow parent run holds the space (tune/space.yaml, params tune.*), the best value (metric
best_<metric>, tags tune.best_trial, tune.complete, tune.pruned, tune.failed) and the best trial's config as
best/overrides.txt (`python -m pipeline.run_all $(cat overrides.txt)`, on the same params.yaml) and best/params.yaml
(`--params`). Every trial, like every stage, starts from params.yaml and applies the overrides on top.
Bad input: one line `tune: error: ...`, exit 2, before any trial.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path

from tfpipe.commands.entry import DEBUG_ENV
from tfpipe.commands.hydra_flags import CommandParser
from tfpipe.errors import one_line
from tfpipe.exits import EXIT_BAD_INPUT, EXIT_FAILED, EXIT_OK


class _Parser(CommandParser):
    def error(self, message):  # noqa: D401 - argparse API
        self.exit(EXIT_BAD_INPUT, f"{self.prog}: error: {message} (see --help)\n")


def _parse(argv, prog: str):
    parser = _Parser(
        prog=prog,
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        does="runs a study of whole pipeline runs",
        takes_overrides=True,
    )
    parser.add_argument("name", help="the spec conf/tune/NAME.yaml")
    parser.add_argument("overrides", nargs="*", help="Hydra overrides for every trial")
    parser.add_argument("--storage", help="Optuna storage URL (default: see tfpipe.tuning.study)")
    parser.add_argument("--study", help="study name (default: tune-NAME)")
    parser.add_argument("--debug", action="store_true", help="tracebacks for bad input")
    return parser.parse_args(list(argv))


def main(argv=None, prog: str = "python -m pipeline.tune") -> int:
    from tfpipe.commands import environment
    from tfpipe.errors import USER_ERRORS

    environment.set_defaults()

    args = _parse(sys.argv[1:] if argv is None else argv, prog)
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s tune %(levelname)s %(message)s", datefmt="%H:%M:%S"
    )
    try:
        return tune(args, Path.cwd())
    except USER_ERRORS as exc:
        if args.debug or os.environ.get(DEBUG_ENV, "").strip().lower() in ("1", "true", "yes"):
            raise
        print(f"tune: error: {one_line(exc)}", file=sys.stderr)
        return EXIT_BAD_INPUT


def tune(args, root: Path) -> int:
    """Check everything, open the study and its parent run, run the trials, record the best."""
    import yaml

    from tfpipe import config
    from tfpipe.config import overlay
    from tfpipe.tracking import study as tracked
    from tfpipe.tuning import checks, space, study

    conf_dir = root / config.CONF_DIR
    spec = checks.load_spec(args.name, conf_dir)
    base = [*spec.overrides, *args.overrides]
    # as each trial's `tfpipe run-all BASE...` composes it: params.yaml with the overrides on top
    cfg, note = overlay.load(base, root / config.PARAMS_FILE, conf_dir)
    if note:
        print(f"tune: warning: {note}", file=sys.stderr)
    space.check_against_config(spec, conf_dir, base)
    url = study.storage_url(spec, cfg, root, args.storage)
    opened = study.open_study(spec, url, args.study or f"tune-{args.name}")
    tags = {"tune.study": opened.study_name, "tune.storage": url, "tune.spec": args.name}
    parent = tracked.open_parent(cfg, root, opened.study_name, opened.user_attrs.get(study.PARENT_ATTR), tags)
    opened.set_user_attr(study.PARENT_ATTR, parent.run_id)
    params = {"tune.metric": spec.metric, "tune.direction": spec.direction, "tune.n_trials": spec.n_trials}
    tracked.record_space(parent, params, yaml.safe_dump({"base": base, **vars(spec)}, sort_keys=False))
    status = "FAILED"
    try:
        study.run_study(opened, study.Objective(spec, base, root, url, parent, cfg), spec.n_trials)
        status = _record_best(opened, spec, base, conf_dir, parent)
    finally:
        parent.close(status)
    return EXIT_OK if status == "FINISHED" else EXIT_FAILED


def _record_best(opened, spec, base: list, conf_dir: Path, parent) -> str:
    from tfpipe import config
    from tfpipe.config import overlay
    from tfpipe.tracking import study as tracked
    from tfpipe.tuning.space import as_overrides

    states = [t.state.name for t in opened.get_trials(deepcopy=False)]
    counts = {s.lower(): states.count(s) for s in ("COMPLETE", "PRUNED", "FAIL")}
    if not counts["complete"]:
        print(f"tune: no trial completed ({counts})", file=sys.stderr)
        return "FAILED"
    best = opened.best_trial
    overrides = [*base, *as_overrides(best.params)]
    tags = {"tune.best_trial": best.number, **{f"tune.{k}": v for k, v in counts.items()}}
    metrics = {f"best_{spec.metric}": best.value, **{f"trials_{k}": v for k, v in counts.items()}}
    composed = overlay.compose_yaml(overrides, conf_dir.parent / config.PARAMS_FILE, conf_dir)
    tracked.record_best(parent, metrics, tags, overrides, composed)
    print(f"best trial {best.number}: {spec.metric}={best.value:.6g} with: {' '.join(overrides)}")
    return "FINISHED"
