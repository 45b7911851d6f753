"""Serving: `python -m pipeline.serve MODEL_URI [--port 5000]` checks a logged model as batch prediction does, then
serves it with `mlflow models serve`; see `tfpipe.serve_cli`."""

import sys

from tfpipe.serve_cli import main

if __name__ == "__main__":
    sys.exit(main())
