"""The `tfpipe` console script: one command with a subcommand per entry point, the same code, arguments, one-line
errors and exit codes as `python -m pipeline.<name>`:

    tfpipe prepare|train|evaluate|run-all|launch [--params FILE] [--debug] [OVERRIDE ...]
    tfpipe audit RUN_ID [--rerun] [--tolerance X] [--against RUN] [--tracking-uri URI]
    tfpipe compare RUN_A RUN_B [--tracking-uri URI]
    tfpipe promote RUN_ID [--alias champion] [--force]
    tfpipe tune NAME [--storage URL] [--study NAME] [OVERRIDE ...]
    tfpipe predict MODEL_URI INPUT_DIR [--out predictions.csv] [--tracking-uri URI]

(Hydra sweeps stay `python -m pipeline.sweep --multirun ...`: Hydra's own command line, next to conf/.)
"""

from __future__ import annotations

import sys
from typing import Callable, Dict, Optional, Sequence, Tuple

USAGE = "usage: tfpipe {prepare,train,evaluate,run-all,launch,audit,compare,promote,tune,predict} [ARGS ...] (tfpipe SUBCOMMAND --help)"


def _stages() -> Dict[str, Tuple[Callable, str]]:
    from tfpipe import launcher, stages

    return {
        "prepare": (
            stages.run_prepare,
            "DVC stage `prepare`: source data -> sharded TFRecords + manifest.json",
        ),
        "train": (
            launcher.train_stage,
            "DVC stage `train`: prepared TFRecords -> model, SavedModel, MLflow run",
        ),
        "evaluate": (stages.run_evaluate, "DVC stage `evaluate`: the SavedModel on the test split"),
        "run-all": (stages.run_all, "prepare (when stale), train, evaluate"),
        "launch": (launcher.launch_stage, "Local launcher of a multi-process strategy"),
    }


def main(argv: Optional[Sequence[str]] = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE, file=sys.stderr if not argv else sys.stdout)
        sys.exit(2 if not argv else 0)
    name, rest = argv[0], argv[1:]
    if name in ("audit", "compare"):
        from tfpipe import audit_cli

        sys.exit(audit_cli.main(name, rest))
    if name == "promote":
        from tfpipe import promote_cli

        sys.exit(promote_cli.main(rest, prog="tfpipe promote"))
    if name == "tune":
        from tfpipe import tuning

        sys.exit(tuning.main(rest, prog="tfpipe tune"))
    if name == "predict":
        from tfpipe import predict

        sys.exit(predict.main(rest, prog="tfpipe predict"))
    stages = _stages()
    if name not in stages:
        print(f"tfpipe: error: unknown subcommand {name!r}; {USAGE}", file=sys.stderr)
        sys.exit(2)
    from tfpipe.entry import main as entry_main

    run, description = stages[name]
    entry_main(name.replace("-", "_"), run, description, rest, prog=f"tfpipe {name}")


if __name__ == "__main__":
    main()
