"""The rendered Slurm script run by bash, with stand-ins for `srun` and `python` that record what they get:
Hydra overrides with spaces, quotes and `${oc.env:...}` reach the train entry point exactly as given."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tfpipe import cluster

OVERRIDES = [
    "train.epochs=2",
    "tracking.experiment_name='team a'",  # a space, inside Hydra's quotes
    'tracking.run_name="it\'s mine"',  # both kinds of quote
    "data.path=${oc.env:HOME}/data dir",  # an interpolation the shell must not expand, and a space
    "+tag=$(touch pwned)",  # command substitution: must stay text
]


def _stub(folder: Path, name: str, body: str) -> None:
    path = folder / name
    path.write_text(f"#!{sys.executable}\nimport json, os, sys\n{body}\n")
    path.chmod(0o755)


def test_overrides_reach_the_train_command_unchanged_through_the_rendered_script(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    record = tmp_path / "argv.json"
    # srun: drop its options, run the task command (one task is enough to see the quoting)
    _stub(
        bin_dir,
        "srun",
        "args = [a for a in sys.argv[1:] if not a.startswith('--')]\nos.execvp(args[0], args)",
    )
    _stub(
        bin_dir,
        "python",
        "if sys.argv[1:3] == ['-m', 'tfpipe.cluster']:\n    print('{}')\nelse:\n"
        f"    open({str(record)!r}, 'w').write(json.dumps(sys.argv[1:]))",
    )
    script = tmp_path / "train.sbatch"
    script.write_text(cluster.render_slurm(nodes=2, overrides=OVERRIDES))
    env = {
        "PATH": f"{bin_dir}{os.pathsep}/usr/bin:/bin",
        "SLURM_SUBMIT_DIR": str(tmp_path),
        "SLURM_NTASKS": "2",
    }
    proc = subprocess.run(
        ["bash", str(script)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    argv = json.loads(record.read_text())
    assert argv[:4] == ["-m", "pipeline.train", "strategy=multi_worker_mirrored", "strategy.num_workers=2"]
    assert argv[4:] == OVERRIDES
    assert not (tmp_path / "pwned").exists()
