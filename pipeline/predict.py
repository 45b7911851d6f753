"""Batch prediction: `python -m pipeline.predict MODEL_URI INPUT_DIR [--out predictions.csv]` scores a folder of
images or .txt files with a logged model (runs:/, models:/NAME@ALIAS or a folder); see
`tfpipe.commands.predict`."""

import sys

from tfpipe.commands.predict import main

if __name__ == "__main__":
    sys.exit(main())
