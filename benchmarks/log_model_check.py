"""Seconds `run.log_model` takes with and without MLflow's serving check of the input example (issue 52).

    python benchmarks/log_model_check.py [--pairs 3]

Each log in a fresh process (as the train stage logs once per process: MLflow's serving check then pays its first
imports and the model's first load), against a real SQLite store in a temporary folder: a sealed SavedModel of the shape the train stage
exports for CIFAR-10 (uint8 [N,32,32,3] in, two 8-filter convolutions, ten classes), logged by `tracking.start_run`
+ `run.log_model` with a two-image input example, alternately (A, B, A, B, ...): A as before issue 52's cut
(`mlflow.pyfunc.log_model`, which loads the logged model again and serves the example), B as tfpipe logs it now
(`tracking.models._log_unvalidated`: the same files, no second load). Each line: the form, its seconds, the load
average; then the CPU model, flags and the medians.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
CLASSES = [f"c{i}" for i in range(10)]


def cpu() -> str:
    from tfpipe import hardware, provenance

    load = " ".join(f"{x:.1f}" for x in os.getloadavg())
    return f"{provenance.cpu_model() or '?'}; {os.cpu_count()} cores; {hardware.cpu_kernels()}; load {load}"


def saved_model(folder: Path) -> Path:
    """A sealed uint8-image SavedModel with a `serving_default` signature, as the export writes one."""
    import keras
    import tensorflow as tf

    from tfpipe import files

    keras.utils.set_random_seed(0)
    inputs = keras.Input((32, 32, 3), dtype="uint8")
    x = keras.layers.Rescaling(1 / 255.0)(inputs)
    for _ in range(2):
        x = keras.layers.Conv2D(8, 3, activation="relu")(x)
        x = keras.layers.MaxPooling2D()(x)
    x = keras.layers.GlobalAveragePooling2D()(x)
    model = keras.Model(inputs, keras.layers.Dense(len(CLASSES), activation="softmax")(x))
    archive = keras.export.ExportArchive()
    archive.track(model)
    archive.add_endpoint(
        name="serving_default",
        fn=lambda image: {"probabilities": model(image, training=False)},
        input_signature=[tf.TensorSpec([None, 32, 32, 3], tf.uint8, name="image")],
    )
    archive.write_out(str(folder), verbose=False)
    files.seal(folder)
    return folder


def _before(**kwargs):
    """The call tfpipe made before the cut: MLflow's log_model, its serving check included."""
    import mlflow.pyfunc

    return mlflow.pyfunc.log_model(**kwargs)


def log_once(cfg, project: Path, model_dir: Path, example, form: str) -> float:
    import numpy as np  # noqa: F401 - imported before timing

    from tfpipe import tracking
    from tfpipe.tracking import models

    unvalidated = models._log_unvalidated
    models._log_unvalidated = _before if form == "A" else unvalidated
    try:
        with tracking.start_run(cfg, project, stage="train") as run:
            t0 = time.perf_counter()
            run.log_model(model_dir, modality="image", input_example=example, class_names=CLASSES)
            return time.perf_counter() - t0
    finally:
        models._log_unvalidated = unvalidated


def one(form: str, work: Path) -> None:
    """A child process: TensorFlow and tfpipe imported, the run opened, then one timed log_model."""
    import numpy as np
    import tensorflow  # noqa: F401 - the train stage has it imported when it logs

    from tfpipe import config

    cfg = config.compose(["experiment=smoke"], config_dir=ROOT / "conf")
    example = np.random.default_rng(0).integers(0, 256, size=(2, 32, 32, 3), dtype=np.uint8)
    print(f"{log_once(cfg, work / 'project', work / 'saved_model', example, form):.3f}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--one", nargs=2, metavar=("FORM", "WORK"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    for name in [k for k in os.environ if k.startswith(("MLFLOW_", "DVC_"))]:
        os.environ.pop(name)
    if args.one:
        one(args.one[0], Path(args.one[1]))
        return 0
    work = Path(tempfile.mkdtemp(prefix="tfpipe-log-model-bench-"))
    seconds: dict = {"A": [], "B": []}
    try:
        saved_model(work / "saved_model")
        (work / "project").mkdir()
        for form in ["B"] + ["A", "B"] * args.pairs:  # the first (B) makes the store: not counted
            out = subprocess.run(
                [sys.executable, __file__, "--one", form, str(work)],
                capture_output=True,
                text=True,
                check=True,
            )
            seconds[form].append(float(out.stdout.strip().splitlines()[-1]))
            print(f"{form}: {seconds[form][-1]:.2f} s (load {os.getloadavg()[0]:.1f})", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    seconds["B"] = seconds["B"][1:]
    print(f"CPU: {cpu()}")
    for form, label in (("A", "with MLflow's serving check"), ("B", "without (tfpipe now)")):
        print(f"log_model {label}: median {statistics.median(seconds[form]):.2f} s of {len(seconds[form])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
