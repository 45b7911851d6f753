"""What bounds CIFAR-10 training time on this CPU: FLOPs per image (counted by TensorFlow's profiler on the
forward graph) times images, against the FLOP/s the train step sustains and the CPU's float32 matmul rate.

    python benchmarks/cifar_bound.py [--repeats 3] [--batch 512]

For each preset's model (cifar10_airbench's airbench, cifar10_fast's resnet), side by side in one run: a bare
compiled train step (GradientTape, SGD, the preset's label smoothing; no strategy, metrics or input pipeline) on
random uint8 images of one batch, the median of `--repeats` timings, in the policy `precision=auto` picks here
and in float32 (once if they are the same).
Prints the CPU model and flags first, then a table with the time the airbench94 recipe's 9.9 epochs x 50,000
images (its 94% run) would take at that rate, and the images 30 minutes reach.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "benchmarks"))

AIRBENCH94_IMAGES = 9.9 * 50_000  # airbench94's training images for its 94.0% (Jordan 2024)
PRESETS = {"cifar10_airbench": "airbench", "cifar10_fast": "resnet"}
NORM = {"mean": [0.49, 0.48, 0.45], "std": [0.25, 0.24, 0.26]}  # CIFAR-10's, roughly (speed only)


def matmul_gflops(repeats: int, dtype: str = "float32", n: int = 2048) -> float:
    """n x n matmuls back to back: the CPU's practical FLOP/s ceiling for the dense kernels in `dtype`."""
    import tensorflow as tf

    a = tf.cast(tf.random.normal((n, n)), dtype)
    step = tf.function(lambda x: tf.linalg.matmul(x, a))
    step(a).numpy()
    rates = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(10):
            out = step(a)
        out.numpy()
        rates.append(10 * 2 * n**3 / (time.perf_counter() - t0) / 1e9)
    return statistics.median(rates)


def forward_gflops(model) -> float:
    """Float operations of one image's forward pass in training mode, counted by tf.compat.v1.profiler."""
    import tensorflow as tf

    fn = tf.function(lambda x: model(x, training=True))
    graph = fn.get_concrete_function(tf.TensorSpec([1, 32, 32, 3], tf.uint8)).graph
    opts = tf.compat.v1.profiler.ProfileOptionBuilder.float_operation()
    opts["output"] = "none"
    return tf.compat.v1.profiler.profile(graph, options=opts).total_float_ops / 1e9


def step_rate(preset: str, batch: int, repeats: int, policy_name: str) -> tuple:
    """(images/s of a bare train step, forward GFLOP per image, policy) for the preset's model."""
    import keras
    import numpy as np
    import tensorflow as tf
    from perf import compiled_step

    from tfpipe import config, models, precision

    cfg = config.compose([f"experiment={preset}"], config_dir=ROOT / "conf")
    with precision.policy_scope(policy_name) as policy:
        model = models.build_model(cfg, num_classes=10, normalization=NORM)
        flops = forward_gflops(model)
        optimizer = keras.optimizers.SGD(0.01, momentum=0.9, nesterov=True)
        loss_fn = keras.losses.CategoricalCrossentropy(label_smoothing=float(cfg.train.label_smoothing))
        step = compiled_step(model, optimizer, loss_fn)
        rng = np.random.default_rng(0)
        x = tf.constant(rng.integers(0, 256, (batch, 32, 32, 3), dtype=np.uint8))
        y = tf.one_hot(rng.integers(0, 10, batch), 10)
        step(x, y).numpy()
        rates = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            for _ in range(5):
                loss = step(x, y)
            loss.numpy()
            rates.append(5 * batch / (time.perf_counter() - t0))
    return statistics.median(rates), flops, policy


def main() -> int:
    from perf import cpu_line

    from tfpipe import precision

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--batch", type=int, default=512)
    args = parser.parse_args()
    print(cpu_line())
    policies = list(dict.fromkeys([precision.resolve_policy("auto"), "float32"]))
    peaks = {"float32": matmul_gflops(args.repeats)}
    if "mixed_bfloat16" in policies:
        peaks["mixed_bfloat16"] = matmul_gflops(args.repeats, "bfloat16")
    for policy, peak in peaks.items():
        print(f"matmul 2048x2048 for {policy}: {peak:,.0f} GFLOP/s (median of {args.repeats})")
    print(
        "| preset (model, policy) | forward GFLOP/image | train images/s | train GFLOP/s (3x forward) "
        "| of matmul rate | 495k images (airbench94's 94% run) take | images in 30 min |"
    )
    print("|---|---|---|---|---|---|---|")
    for preset, name in PRESETS.items():
        for policy_name in policies:
            rate, flops, policy = step_rate(preset, args.batch, args.repeats, policy_name)
            sustained = rate * 3 * flops
            print(
                f"| {preset} ({name}, {policy}) | {flops:.3f} | {rate:,.0f} | {sustained:,.0f} "
                f"| {sustained / peaks[policy]:.0%} | {AIRBENCH94_IMAGES / rate / 60:,.0f} min | {rate * 1800:,.0f} |"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
