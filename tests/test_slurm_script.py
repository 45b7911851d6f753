"""The rendered Slurm script run by bash, with stand-ins for `srun` and `python` that record what they get:
Hydra overrides with spaces, quotes and `${oc.env:...}` reach the train entry point exactly as given."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tfpipe.launch import cluster

OVERRIDES = [
    "train.epochs=2",
    "tracking.experiment_name='team a'",  # a space, inside Hydra's quotes
    'tracking.artifact_location="it\'s here"',  # both kinds of quote
    "data.path=${oc.env:HOME}/data dir",  # an interpolation the shell must not expand, and a space
    "tracking.run_file='$(touch pwned).json'",  # command substitution: must stay text
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
        "if sys.argv[1:3] == ['-m', 'tfpipe.launch.cluster']:\n    print('{}')\nelse:\n"
        f"    open({str(record)!r}, 'w').write(json.dumps(sys.argv[1:]))",
    )
    script = tmp_path / "train.sbatch"
    script.write_text(cluster.render_slurm(nodes=2, overrides=OVERRIDES))
    env = {
        "PATH": f"{bin_dir}{os.pathsep}/usr/bin:/bin",
        "SLURM_SUBMIT_DIR": str(tmp_path),
        "SLURM_NTASKS": "2",
        "SLURM_JOB_ID": "7",
    }
    proc = subprocess.run(
        ["bash", str(script)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    argv = json.loads(record.read_text())
    assert argv[:5] == ["-m", "tfpipe", "train", "strategy=multi_worker_mirrored", "strategy.num_workers=2"]
    assert argv[5:] == OVERRIDES
    assert not (tmp_path / "pwned").exists()


def test_the_job_exits_with_the_first_failing_tasks_code_not_srun_s_highest(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    # srun with --kill-on-bad-exit: task 1 fails with 2 (bad data), then task 0 is stopped by SIGTERM (143);
    # srun itself returns the highest code, 143.
    _stub(
        bin_dir,
        "srun",
        "import subprocess\nargs = [a for a in sys.argv[1:] if not a.startswith('--')]\ncodes = "
        "[subprocess.run(args, env={**os.environ, 'SLURM_PROCID': t}).returncode for t in ('1', '0')]\n"
        "sys.exit(max(codes))",
    )
    _stub(
        bin_dir,
        "python",
        "if sys.argv[1:3] == ['-m', 'tfpipe.launch.cluster']:\n    print('{}')\nelse:\n"
        "    sys.exit(2 if os.environ['SLURM_PROCID'] == '1' else 143)",
    )
    script = tmp_path / "train.sbatch"
    script.write_text(cluster.render_slurm(nodes=2))
    env = {"PATH": f"{bin_dir}{os.pathsep}/usr/bin:/bin", "SLURM_SUBMIT_DIR": str(tmp_path),
           "SLURM_NTASKS": "2", "SLURM_JOB_ID": "7"}  # fmt: skip
    proc = subprocess.run(["bash", str(script)], cwd=tmp_path, env=env, capture_output=True, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert not list(tmp_path.glob(".tfpipe-train-*")), "the exit-code file is removed"


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"nodes": 0}, "nodes=0: must be a whole number >= 1"),
        ({"tasks_per_node": -1}, "tasks_per_node=-1: must be a whole number >= 1"),
        ({"overrides": ["train.epochs=0"]}, "train.epochs"),
        ({"overrides": ["train.optimizer.lr=0.1"]}, "train.optimizer.lr"),
        (
            {"overrides": ["strategy=mirrored"]},
            "override 'strategy=mirrored': the rendered job sets strategy itself",
        ),
        ({"overrides": ["strategy.num_workers=3"]}, "the rendered job sets strategy.num_workers itself"),
        ({"overrides": ["+strategy.launcher=ray"]}, "the rendered job sets strategy.launcher itself"),
    ],
)
def test_a_bad_render_is_refused_in_one_line(kwargs, message):
    from tfpipe.errors import ConfigError

    with pytest.raises(ConfigError) as err:
        cluster.render_slurm(**kwargs)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_a_render_for_a_single_process_strategy_is_refused():
    from tfpipe.errors import ConfigError

    with pytest.raises(ConfigError, match=r"strategy='mirrored': not a multi-process strategy; allowed: "):
        cluster.check_render_input("mirrored", {}, [])
