"""Seconds to import TensorFlow in a tfpipe process, with and without Keras's optional extras (tfpipe.lean_keras).

    python benchmarks/startup.py [--repeats 3]

Runs `import tfpipe, tensorflow, keras` in fresh processes, alternating the two settings (TFPIPE_KERAS_EXTRAS unset
and =1) so a busy machine slows both alike, and prints each setting's median wall seconds with the CPU model and its
AVX/AMX flags. The import is timed inside the child, after the interpreter has started.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
from pathlib import Path

CHILD = (
    "import time; t = time.perf_counter(); import tfpipe, tensorflow, keras; print(time.perf_counter() - t)"
)
SETTINGS = {"lean (default)": "", "with Keras's extras (TFPIPE_KERAS_EXTRAS=1)": "1"}


def cpu() -> str:
    text = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").is_file() else ""
    model = next(
        (line.split(":", 1)[1].strip() for line in text.splitlines() if line.startswith("model name")), "?"
    )
    flags = next(
        (line.split(":", 1)[1].split() for line in text.splitlines() if line.startswith("flags")), []
    )
    wide = sorted(f for f in flags if f.startswith(("avx", "amx")))
    return f"{model}; {os.cpu_count()} cores; flags: {' '.join(wide) or 'no avx/amx'}"


def one(extras: str) -> float:
    env = dict(os.environ, TFPIPE_KERAS_EXTRAS=extras, TF_CPP_MIN_LOG_LEVEL="3")
    out = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, check=True)
    return float(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    times = {name: [] for name in SETTINGS}
    for _ in range(args.repeats):
        for name, extras in SETTINGS.items():
            times[name].append(one(extras))
    print(cpu())
    for name, values in times.items():
        print(f"{statistics.median(values):6.2f} s  {name}  ({', '.join(f'{v:.2f}' for v in values)})")


if __name__ == "__main__":
    main()
