"""What every stage entry point shares: argument parsing, config loading, error mapping."""

from __future__ import annotations

import argparse
import logging
import os
import shlex
import sys
from pathlib import Path
from typing import Callable

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # keep TF's C++ start-up chatter out of stage logs

EXIT_BAD_INPUT = 2


def main(stage: str, run: Callable, description: str) -> None:
    """Parse `[--params FILE] [--debug] [OVERRIDE ...]`, load the config, call `run(cfg, root)`."""
    parser = argparse.ArgumentParser(prog=f"python -m pipeline.{stage}", description=description)
    parser.add_argument(
        "overrides",
        nargs="*",
        help="Hydra overrides (e.g. dataset=imdb train.epochs=1). Given: compose conf/ with them. "
        "None: read --params (what `dvc repro` does).",
    )
    parser.add_argument("--params", default="params.yaml", help="composed config to read when no overrides are given")
    parser.add_argument("--debug", action="store_true", help="show Python tracebacks for bad input")
    args = parser.parse_args()
    # `mlflow run -P overrides="a=1 b=2"` hands all overrides over as one quoted argument.
    overrides = [part for arg in args.overrides for part in shlex.split(arg)]

    logging.basicConfig(level=logging.INFO, format=f"%(asctime)s {stage} %(levelname)s %(message)s", datefmt="%H:%M:%S")
    for noisy in ("tensorflow", "absl", "h5py"):  # their INFO lines drown the stage's own
        logging.getLogger(noisy).setLevel(logging.WARNING)
    root = Path.cwd()
    sys.exit(_run_guarded(stage, run, overrides, args.params, root, args.debug))


def _run_guarded(stage, run, overrides, params_path, root, debug) -> int:
    from tfpipe.errors import USER_ERRORS

    from tfpipe import interrupts

    try:
        from tfpipe import config

        cfg = config.compose(overrides, config_dir=root / config.CONF_DIR) if overrides else config.load_params(root / params_path)
        with interrupts.graceful_stop():  # SIGTERM/SIGINT: checkpoint, end the MLflow run KILLED, exit 128+N
            run(cfg, root)
    except USER_ERRORS as exc:
        if debug:
            raise
        print(f"{stage}: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt as exc:
        signum = getattr(exc, "signum", 2)  # a plain KeyboardInterrupt is SIGINT
        print(f"{stage}: interrupted ({exc or 'SIGINT'}); run it again to resume from the last checkpoint", file=sys.stderr)
        return 128 + signum
    return 0
