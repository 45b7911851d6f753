"""Speed cost of `train.deterministic`, measured side by side in one invocation.

    python benchmarks/determinism.py [--repeats 2] [--steps 60] [--epochs 2] [--examples 4000] [override ...]

Builds a synthetic CIFAR-shaped class-per-folder tree in a temp dir (image content does not change
speed), prepares it once, then trains the default cifar10 `cnn` config alternately with
train.deterministic=true and =false, each run in a fresh process (TF op determinism is process-wide
and cannot be switched off once on). Reports the last epoch's examples/s per run, the median per
mode, the cost in %, and whether the weight hashes of repeated runs are identical.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def _worker(args) -> None:
    sys.path.insert(0, str(ROOT / "src"))
    from tfpipe import config, training

    cfg = config.compose(
        [*args.overrides, f"train.deterministic={args.deterministic}"], config_dir=ROOT / "conf"
    )
    with tempfile.TemporaryDirectory(prefix="tfpipe-bench-") as out:
        result = training.train(cfg, prepared_dir=cfg.data.output_dir, output_dir=Path(out))
    print(
        json.dumps(
            {
                "examples_per_sec": result.history[-1]["epoch_examples_per_sec"],
                "weights_sha256": result.weights_sha256,
                "val_accuracy": result.final_metrics["val_accuracy"],
            }
        )
    )


def _make_data(tmp: Path, examples: int) -> Path:
    import numpy as np
    from PIL import Image

    sys.path.insert(0, str(ROOT / "src"))
    from tfpipe import config, data

    rng = np.random.default_rng(0)
    per_class = max(examples // 10, 2)
    for split, n in (("train", per_class), ("test", max(per_class // 5, 2))):
        for label in range(10):
            folder = tmp / "raw" / split / f"c{label}"
            folder.mkdir(parents=True)
            for i in range(n):
                pixels = rng.integers(0, 255, size=(32, 32, 3), dtype=np.uint8)
                pixels[..., label % 3] //= 2
                Image.fromarray(pixels, "RGB").save(folder / f"{i:05d}.png")
    cfg = config.compose(
        ["data.source=directory", f"data.path={tmp / 'raw'}", f"data.output_dir={tmp / 'prepared'}"],
        config_dir=ROOT / "conf",
    )
    data.prepare(cfg, progress=False)
    return tmp / "prepared"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--steps", type=int, default=60, help="train.steps_per_epoch")
    parser.add_argument("--epochs", type=int, default=2, help="the last epoch is timed (the first warms up)")
    parser.add_argument("--examples", type=int, default=4000, help="synthetic train examples")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--deterministic", default="true", help=argparse.SUPPRESS)
    parser.add_argument("overrides", nargs="*", help="extra Hydra overrides, e.g. precision=mixed_bfloat16")
    args = parser.parse_args()
    if args.worker:
        return _worker(args)

    with tempfile.TemporaryDirectory(prefix="tfpipe-bench-data-") as tmp:
        prepared = _make_data(Path(tmp), args.examples)
        overrides = [
            "data.source=directory",
            f"data.output_dir={prepared}",
            f"train.epochs={args.epochs}",
            f"train.steps_per_epoch={args.steps}",
            *args.overrides,
        ]
        runs = {"true": [], "false": []}
        for _ in range(args.repeats):
            for mode in ("true", "false"):  # alternate so machine load hits both alike
                proc = subprocess.run(
                    [sys.executable, __file__, "--worker", "--deterministic", mode, *overrides],
                    capture_output=True,
                    text=True,
                    check=True,
                )
                runs[mode].append(json.loads(proc.stdout.strip().splitlines()[-1]))
                print(
                    f"deterministic={mode}: {runs[mode][-1]['examples_per_sec']:.0f} examples/s, "
                    f"weights {runs[mode][-1]['weights_sha256'][:12]}",
                    flush=True,
                )
    med = {m: statistics.median(r["examples_per_sec"] for r in runs[m]) for m in runs}
    print(
        f"\ncpu threads: {os.cpu_count()}, config: cifar10 cnn, overrides: {' '.join(args.overrides) or '(none)'}"
    )
    print("| train.deterministic | examples/s (median of %d) | repeated runs bit-identical |" % args.repeats)
    print("|---|---|---|")
    for m in ("true", "false"):
        same = len({r["weights_sha256"] for r in runs[m]}) == 1
        print(f"| {m} | {med[m]:,.0f} | {'yes' if same else 'no'} |")
    print(
        f"\ndeterministic / non-deterministic throughput: {med['true'] / med['false']:.2f}x "
        f"(< 1: determinism costs speed)"
    )


if __name__ == "__main__":
    main()
