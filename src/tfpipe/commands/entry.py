"""What every entry point shares (`python -m pipeline.<stage>` and `tfpipe <stage>`): argument parsing, config
loading, preflight, error mapping.

Bad input (`tfpipe.errors.UserError`: a config key, a data file, the tracking backend) ends the stage
with ONE line on stderr, `<stage>: error: <message>`, and exit code 2; `--debug` (or env
TFPIPE_DEBUG=1, for `dvc repro` whose commands are fixed) shows the Python traceback instead.
The config is the params file (params.yaml, what `dvc repro` reads) with the overrides, if any, on top
(`tfpipe.config.overlay`). The order is: parse arguments -> load + validate the config (no TensorFlow, no
data) -> preflight checks of the host (`tfpipe.preflight`: devices, TF_CONFIG, tracking backend) -> `run(cfg, root)`.
Hydra's standard flags (`--cfg job`, `--info`, `-m`, ...) are answered by `tfpipe.commands.hydra_flags` before
anything runs.
"""

from __future__ import annotations

import argparse
import functools
import inspect
import logging
import os
import re
import shlex
import sys
from pathlib import Path
from typing import Callable, Sequence

from tfpipe.commands import environment, hydra_flags
from tfpipe.errors import USER_ERRORS, one_line
from tfpipe.exits import EXIT_BAD_INPUT, EXIT_OK, signal_exit  # EXIT_BAD_INPUT: also imported from here

DEBUG_ENV = "TFPIPE_DEBUG"


class OneLineParser(argparse.ArgumentParser):
    """argparse, but a usage error is one line too (the usage is in --help); `flags` holds every option string it
    takes, without dashes (argparse keeps no public list of them), its groups' included."""

    def __init__(self, *args, **kwargs):
        self.flags: set = set()  # before argparse adds -h/--help
        super().__init__(*args, **kwargs)

    def add_argument(self, *names, **kwargs):
        action = super().add_argument(*names, **kwargs)
        self.flags.update(o.lstrip("-") for o in action.option_strings)
        return action

    def add_argument_group(self, *args, **kwargs):
        group = super().add_argument_group(*args, **kwargs)
        add = group.add_argument

        def noted(*names, **options):
            action = add(*names, **options)
            self.flags.update(o.lstrip("-") for o in action.option_strings)
            return action

        group.add_argument = noted  # type: ignore[method-assign]
        return group

    def error(self, message):  # noqa: D401 - argparse API
        self.exit(EXIT_BAD_INPUT, f"{self.prog}: error: {message} (see --help)\n")


def main(
    stage: str, run: Callable, description: str, argv: Sequence[str] | None = None, prog: str = ""
) -> None:
    """`python -m pipeline.<stage> [--params FILE] [--debug] [OVERRIDE ...]`: exits with the stage's code, timed as
    the phase `<stage> stage` when env TFPIPE_PHASES is set, without the interpreter's teardown
    (`tfpipe.commands.process_exit`)."""
    from tfpipe import phases
    from tfpipe.commands import process_exit

    argv = sys.argv[1:] if argv is None else argv
    with phases.phase(f"{stage} stage"):
        code = cli(stage, run, description, argv, Path.cwd(), prog=prog)
    process_exit.exit(code)


def cli(
    stage: str,
    run: Callable,
    description: str,
    argv: Sequence[str],
    root: Path,
    *,
    configure_logging: bool = True,
    prog: str = "",
) -> int:
    """The whole command line of one stage, in-process; returns the exit code (tests call this)."""
    environment.set_defaults()
    parser = _parser(stage, description, root, prog)
    argv, from_mlflow = _mlflow_params(parser, list(argv))
    args = parser.parse_args(argv)
    # `mlflow run -P overrides="a=1 b=2"` hands all overrides over as one quoted argument.
    try:
        overrides = [part for arg in args.overrides for part in shlex.split(arg)]
    except ValueError as exc:  # an unbalanced quote
        return hydra_flags.refuse(
            stage, f"overrides {' '.join(args.overrides)!r}: {exc}; quote each KEY=VALUE once"
        )
    debug = args.debug or os.environ.get(DEBUG_ENV, "").strip().lower() in ("1", "true", "yes")
    if (refused := _check_mlflow_keys(stage, from_mlflow)) is not None:
        return refused
    answer = hydra_flags.answer(stage, parser.prog, args, overrides, Path(root), debug)
    if answer is not None:
        return answer

    if configure_logging:
        _configure_logging(stage, args.verbose)
    return _run_guarded(
        stage,
        _with_args(run, overrides, args.params),
        overrides,
        args.params,
        Path(root),
        debug,
        quiet_start=configure_logging,
    )


def _parser(stage: str, description: str, root: Path, prog: str) -> OneLineParser:
    """A stage's arguments: its overrides, --params, --debug, -v and Hydra's standard flags."""
    parser = OneLineParser(
        prog=prog or f"python -m pipeline.{stage}",
        description=description,
        epilog=hydra_flags.groups_help(Path(root)),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "overrides",
        nargs="*",
        help="Hydra overrides (e.g. train.epochs=1 model=resnet), applied on top of --params: one override keeps "
        "every other value. A group choice that sets other sections' values (dataset=, experiment=) composes "
        "conf/ afresh instead, and says so. None: --params as it is (what `dvc repro` runs).",
    )
    parser.add_argument(
        "--params",
        metavar="FILE",
        help="the composed config the stage starts from (default: params.yaml, as DVC writes it; "
        "conf/ where there is none)",
    )
    parser.add_argument(
        "--debug", action="store_true", help=f"show Python tracebacks for bad input (also: env {DEBUG_ENV}=1)"
    )
    parser.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        help="also the details: precision policy, strategy, TensorFlow's and MLflow's INFO lines",
    )
    hydra_flags.add_flags(parser)
    return parser


def _configure_logging(stage: str, verbose: bool) -> None:
    """The stage's own lines at INFO (its details at DEBUG, shown with -v); the libraries' INFO lines only with -v."""
    logging.basicConfig(
        level=logging.INFO, format=f"%(asctime)s {stage} %(levelname)s %(message)s", datefmt="%H:%M:%S"
    )
    if verbose:  # before TensorFlow or MLflow is imported: both read these once
        os.environ.update(TF_CPP_MIN_LOG_LEVEL="0", MLFLOW_LOGGING_LEVEL="INFO")
        logging.getLogger("tfpipe").setLevel(logging.DEBUG)
        return
    for noisy in ("tensorflow", "absl", "h5py"):  # their INFO lines drown the stage's own
        logging.getLogger(noisy).setLevel(logging.WARNING)


# `mlflow run -P KEY=VALUE` with a KEY the MLproject does not declare appends `--KEY VALUE` to the command.
_MLFLOW_PARAM = re.compile(r"--([+~]?[A-Za-z_][\w]*(?:\.[\w]+)*)(?:=(.*))?$", re.DOTALL)
# The short names MLproject lists for the keys changed most (`-P epochs=3`). They stay undeclared there on
# purpose: mlflow run logs every declared parameter, its default too, so a declared `epochs` would show a
# blank or a stale value beside the run's real `train.epochs`; an undeclared one is logged only when given.
MLFLOW_SHORT_KEYS = {
    "epochs": "train.epochs",
    "learning_rate": "train.optimizer.learning_rate",
    "batch_size": "train.batch_size_per_replica",
}


def _mlflow_params(parser: OneLineParser, argv: list) -> tuple[list, list]:
    """argv with each `--KEY VALUE` (or `--KEY=VALUE`) that is not one of the parser's flags turned into the
    override `KEY=VALUE` (a short name as its key), and the (KEY, VALUE) pairs turned: how `mlflow run -P
    train.epochs=1` and `-P epochs=1` arrive."""
    flags = parser.flags
    out, turned, i = [], [], 0
    while i < len(argv):
        match = _MLFLOW_PARAM.match(argv[i])
        if match and match.group(1) not in flags:
            value = match.group(2)
            if value is None and i + 1 < len(argv) and not argv[i + 1].startswith("-"):
                i, value = i + 1, argv[i + 1]
            if value is not None:
                key = MLFLOW_SHORT_KEYS.get(match.group(1), match.group(1))
                out.append(f"{key}={value}")
                turned.append((key, value))
                i += 1
                continue
        out.append(argv[i])
        i += 1
    return out, turned


def _check_mlflow_keys(stage: str, turned: list) -> int | None:
    """A key handed over as `--KEY VALUE` that is no config key or group: one line naming `-P` (mlflow run's)."""
    from tfpipe.config import schema_key

    for key, value in turned:
        try:
            schema_key(key.lstrip("+~"))
        except USER_ERRORS as exc:
            return hydra_flags.refuse(
                stage,
                f"--{key} {value} (mlflow run's -P {key}={value}): {one_line(exc)}; "
                f"-P takes any config key (-P train.epochs=3), a short name ({', '.join(MLFLOW_SHORT_KEYS)}), "
                f'or several as -P overrides="KEY=VALUE ..."',
            )
    return None


def _with_args(run: Callable, overrides: list, params: str | None) -> Callable:
    """Stages that start other processes (the launcher) get the arguments to hand on, so they compose the same:
    those whose signature takes `train_args`."""
    if "train_args" in inspect.signature(run).parameters:
        return functools.partial(run, train_args=[*(["--params", params] if params else []), *overrides])
    return run


def load_config(overrides: Sequence[str], params_path: str | None, root: Path, *, stage: str = ""):
    """The validated Config: the `params_path` file (params.yaml when None: DVC's path) with `overrides` on top
    (`tfpipe.config.overlay`); where the overrides made it drop params.yaml's values, one line on stderr."""
    from tfpipe import config
    from tfpipe.config import overlay

    if not overrides:
        return config.load_params(root / (params_path or config.PARAMS_FILE))
    cfg, note = overlay.load(
        overrides, root / (params_path or config.PARAMS_FILE), root / config.CONF_DIR, named=bool(params_path)
    )
    if note:
        print(f"{stage or 'config'}: warning: {note}", file=sys.stderr)
    return cfg


def _run_guarded(stage, run, overrides, params_path, root, debug, quiet_start: bool = False) -> int:
    from tfpipe import interrupts
    from tfpipe.config import origin

    # how the config is made, for the run's tags (`tfpipe audit RUN` makes it again the same way)
    previous = origin.declare(origin.from_params(params_path, overrides))
    try:
        cfg = load_config(overrides, params_path, root, stage=stage)
        if quiet_start:  # a command's output (its config checked): without TensorFlow's start-up lines
            from tfpipe import tfstart

            tfstart.import_quietly()
        from tfpipe import preflight

        preflight.check(cfg, stage, root)
        with interrupts.graceful_stop():  # SIGTERM/SIGINT: checkpoint, end the MLflow run KILLED, exit 128+N
            run(cfg, root)
    except USER_ERRORS as exc:
        if debug:
            raise
        return hydra_flags.refuse(stage, one_line(exc))
    except KeyboardInterrupt as exc:
        signum = getattr(exc, "signum", 2)  # a plain KeyboardInterrupt is SIGINT
        print(
            f"{stage}: interrupted ({exc or 'SIGINT'}); run it again to resume from the last checkpoint",
            file=sys.stderr,
        )
        return signal_exit(signum)
    finally:
        origin.restore(previous)
    return EXIT_OK
