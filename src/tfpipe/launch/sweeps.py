"""The job of a Hydra multirun sweep (`python -m pipeline.sweep --multirun ...`): each combination runs the whole
pipeline as one MLflow run, all nested under one parent run `sweep-<time>` (tag `tfpipe.sweep=parent`)."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from tfpipe.exits import EXIT_BAD_INPUT, EXIT_OK

_parent = None  # the sweep's parent run, created by the first job of a multirun


def run_job(composed) -> None:
    """One combination: Hydra composed conf/ with its overrides; check it as every stage does, then run."""
    global _parent
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    from tfpipe import config, stages, tracking
    from tfpipe.config import origin
    from tfpipe.config.compose import plain
    from tfpipe.errors import USER_ERRORS

    root = Path.cwd()  # version_base 1.3: Hydra does not change the working directory
    # the job's config is conf/ with its overrides: its run records them (`tfpipe audit RUN` composes again)
    previous = origin.declare(origin.from_conf(HydraConfig.get().overrides.task or ()))
    try:
        cfg = config.from_dict(plain(composed), origin="conf/ (sweep job)")
        if _parent is None and HydraConfig.get().mode == RunMode.MULTIRUN:
            args = " ".join(a for a in sys.argv[1:] if a not in ("-m", "--multirun"))
            name = f"sweep-{time.strftime('%Y%m%d-%H%M%S')}"
            _parent = tracking.ParentRun(
                cfg, root, name, {"sweep.overrides": args, "sweep.dir": HydraConfig.get().sweep.dir}
            )
        stages.run_all(cfg, root)
    except USER_ERRORS as exc:
        print(f"sweep: error: {exc}", file=sys.stderr)
        raise SystemExit(EXIT_BAD_INPUT) from None
    finally:
        origin.restore(previous)


def run_sweep(app) -> None:
    """Run the Hydra app, then end the parent run FINISHED or FAILED."""
    status = "FAILED"
    try:
        app()
        status = "FINISHED"
    except SystemExit as exc:
        status = "FINISHED" if exc.code in (EXIT_OK, None) else "FAILED"
        raise
    finally:
        if _parent is not None:
            _parent.close(status)
