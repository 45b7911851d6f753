"""Cost of monitoring, and what the profiler trace says, on a real prepared data set.

    python benchmarks/monitoring.py --prepared data/prepared/cifar10 [--steps 200] [overrides ...]

Trains `--steps` steps (one epoch, train.steps_per_epoch) three times from scratch into temp dirs:
  off      train.tensorboard=false
  summary  TensorBoard summaries (step scalars every train.log_every_steps, histograms, graph)
  profile  summaries + train.profile_steps=10-20
and prints wall seconds, examples/s of the epoch and the size of the log dir. When the `xprof`
package (tensorboard-plugin-profile) is importable, it also prints the overview page's input
analysis of the trace ("input-bound" percentage). Results: docs/monitoring.md.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time
from pathlib import Path


def _dir_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) if path.exists() else 0


def _input_bound(log_dir: Path):
    """(input_percent, verdict) from the overview page of the trace, or None without xprof."""
    try:
        from xprof.convert import raw_to_tool_data
    except ImportError:
        return None
    traces = [str(p) for p in log_dir.glob("plugins/profile/*/*.xplane.pb")]
    data, _ = raw_to_tool_data.xspace_to_tool_data(traces, "overview_page", {})
    text = data.decode() if isinstance(data, bytes) else str(data)
    pages = json.loads(text)
    for table in pages if isinstance(pages, list) else [pages]:
        props = table.get("p", {}) if isinstance(table, dict) else {}
        if "input_conclusion" in props or "steptime_ms_average" in props:
            return {k: v for k, v in props.items() if "input" in k or "steptime" in k or "conclusion" in k}
    return {"raw": text[:400]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prepared", required=True, type=Path)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("overrides", nargs="*")
    args = parser.parse_args()

    from tfpipe import config, training

    root = Path(__file__).resolve().parents[1]
    base = [f"train.steps_per_epoch={args.steps}", "train.epochs=1", *args.overrides]
    variants = {
        "off": ["train.tensorboard=false"],
        "summary": [],
        "profile": ["train.profile_steps=10-20"],
    }
    for name, extra in variants.items():
        cfg = config.compose([*base, *extra], config_dir=root / "conf")
        out = Path(tempfile.mkdtemp(prefix=f"tfpipe-bench-{name}-"))
        try:
            t0 = time.perf_counter()
            result = training.train(cfg, prepared_dir=args.prepared, output_dir=out)
            seconds = time.perf_counter() - t0
            log_dir = out / "tensorboard"
            row = {
                "variant": name,
                "steps": result.steps,
                "train_seconds": round(result.train_seconds, 2),
                "wall_seconds": round(seconds, 2),
                "examples_per_sec": round(result.history[-1]["epoch_examples_per_sec"]),
                "log_dir_MB": round(_dir_bytes(log_dir) / 1e6, 2),
            }
            if name == "profile":
                row["trace_MB"] = round(_dir_bytes(log_dir / "plugins") / 1e6, 2)
                row["overview"] = _input_bound(log_dir)
            print(json.dumps(row), flush=True)
        finally:
            shutil.rmtree(out, ignore_errors=True)


if __name__ == "__main__":
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    main()
