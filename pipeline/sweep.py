"""Hydra multirun over the whole pipeline (prepare, train, evaluate per combination).

    python -m pipeline.sweep --multirun precision=float32,mixed_bfloat16 train.optimizer.learning_rate=0.001,0.01

Every combination is one MLflow run (named and tagged like any other run), all nested under one
parent run `sweep-<time>` (tag `tfpipe.sweep=parent`). Each job gets conf/ composed by Hydra with
its overrides, validated like params.yaml, and runs the stages as `python -m pipeline.run_all`
would, in this process, in the project folder: outputs
under data/prepared and models/ are overwritten job after job (MLflow keeps every run's
artifacts); for DVC-tracked sweeps use `dvc exp run --queue` (see README, "Working as a team").
Hydra writes its per-job logs under multirun/<date>/<time>/.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import hydra  # noqa: E402
from hydra.core.hydra_config import HydraConfig  # noqa: E402
from hydra.types import RunMode  # noqa: E402

_parent = None


@hydra.main(config_path="../conf", config_name="config", version_base="1.3")
def job(_composed) -> None:
    global _parent
    from omegaconf import OmegaConf

    from tfpipe import config, stages, tracking
    from tfpipe.errors import USER_ERRORS

    root = Path.cwd()  # version_base 1.3: Hydra does not change the working directory
    try:
        # Hydra composed conf/ with this job's overrides; validate it as every stage does.
        cfg = config.from_dict(OmegaConf.to_container(_composed, resolve=True), origin="conf/ (sweep job)")
        if _parent is None and HydraConfig.get().mode == RunMode.MULTIRUN:
            args = " ".join(a for a in sys.argv[1:] if a not in ("-m", "--multirun"))
            _parent = tracking.ParentRun(
                cfg,
                root,
                f"sweep-{time.strftime('%Y%m%d-%H%M%S')}",
                {"sweep.overrides": args, "sweep.dir": HydraConfig.get().sweep.dir},
            )
        stages.run_all(cfg, root)
    except USER_ERRORS as exc:
        print(f"sweep: error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None


if __name__ == "__main__":
    status = "FAILED"
    try:
        job()
        status = "FINISHED"
    except SystemExit as exc:
        status = "FINISHED" if exc.code in (0, None) else "FAILED"
        raise
    finally:
        if _parent is not None:
            _parent.close(status)
