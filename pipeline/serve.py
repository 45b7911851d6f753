"""Serving: `python -m pipeline.serve MODEL_URI [--port 5000]` checks a logged model as batch prediction does, then
serves it with `mlflow models serve`; see `tfpipe.commands.serve`."""

import sys

from tfpipe.commands.serve import main

if __name__ == "__main__":
    sys.exit(main())
