"""What a stage process's exit costs, with and without the interpreter's teardown (issue 52).

    python benchmarks/stage_exit.py [--pairs 3]

Each run is a fresh interpreter that loads what a stage process holds at its end (TensorFlow, MLflow with its
SQLAlchemy store, scikit-learn's metrics, a small Keras model built and called once), then exits either as
Python does (`sys.exit`: threads, atexit, then the teardown) or as the stage entry does now
(`tfpipe.commands.process_exit.exit`: threads, atexit, no teardown). The figure is the seconds from the exit
call to the process's end as its parent sees it; runs interleave (sys, fast, sys, fast, ...). Prints each run,
the medians, the CPU model, its flags and the load average.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

CHILD = """
import sys, time
import numpy as np
import tensorflow as tf
import mlflow
from mlflow.store.tracking import sqlalchemy_store  # what opening a SQLite run imports
import sklearn.metrics
import tfpipe.stages
model = tf.keras.Sequential([tf.keras.Input((32, 32, 3)), tf.keras.layers.Conv2D(8, 3), tf.keras.layers.Flatten(),
                             tf.keras.layers.Dense(10)])
model(np.zeros((2, 32, 32, 3), "float32"))
with open(sys.argv[2], "w") as fh:
    fh.write(repr(time.time()))
if sys.argv[1] == "fast":
    from tfpipe.commands import process_exit
    process_exit.exit(0)
sys.exit(0)
"""


def one(form: str, stamp: Path) -> float:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "TF_CPP_MIN_LOG_LEVEL": "2"}
    subprocess.run([sys.executable, "-c", CHILD, form, str(stamp)], env=env, check=True, timeout=600)
    return time.time() - float(stamp.read_text())


def cpu() -> str:
    from tfpipe import hardware, provenance

    load = " ".join(f"{x:.1f}" for x in os.getloadavg())
    return f"{provenance.cpu_model() or '?'}; {os.cpu_count()} cores; {hardware.cpu_kernels()}; load {load}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=3)
    args = parser.parse_args()
    print(f"CPU: {cpu()}", flush=True)
    seconds: dict = {"sys": [], "fast": []}
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.pairs):
            for form in seconds:
                seconds[form].append(one(form, Path(tmp) / "stamp"))
                print(
                    f"{form} {i + 1}: {seconds[form][-1]:.2f} s (load {os.getloadavg()[0]:.1f})", flush=True
                )
    for form, values in seconds.items():
        print(f"{form}: median {statistics.median(values):.2f} s of {', '.join(f'{v:.2f}' for v in values)}")
    print(f"CPU: {cpu()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
