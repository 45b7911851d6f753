"""Hyperparameter search over whole pipeline runs: `python -m pipeline.tune NAME [--storage URL] [--study NAME]
[OVERRIDE ...]` with the search space in conf/tune/NAME.yaml (see `tfpipe.tuning`, README "Tuning")."""

import sys

from tfpipe.tuning import main

if __name__ == "__main__":
    sys.exit(main())
