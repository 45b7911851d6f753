"""Ray Train as a launcher (`strategy.launcher=ray`, multi_worker_mirrored only).

The train stage hands a multi_worker_mirrored job without TF_CONFIG to `launch(cfg, root)` (through
`tfpipe.launch.local.launch_stage`), which runs it through `ray.train.tensorflow.TensorflowTrainer`:
`ScalingConfig(num_workers=strategy.num_workers)` actors, each given TF_CONFIG by Ray's TensorFlow backend
(ray/train/tensorflow/config.py, `_setup_tensorflow_environment`: cluster {"worker": [...]}, task
{"type": "worker", "index": rank}). Every worker runs the unchanged train stage (`stages.run_train`) in the
project folder, so checkpoints land in models/<dataset>/ as with the local launcher and worker 0, the chief,
alone opens the MLflow run. A dead worker fails the whole worker group; Ray starts it again up to
`strategy.max_restarts` times (`FailureConfig(max_failures=...)`) and the chief resumes from its last
checkpoint in the same MLflow run.

Ray's address: `strategy.ray_address` (null: the RAY_ADDRESS environment variable, else a local Ray started
for this job and stopped after it). `render_rayjob(...)` fills in deploy/k8s/rayjob.yaml.tmpl, a KubeRay
`RayJob` whose entrypoint is the same command.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import time
from pathlib import Path
from typing import Sequence

from tfpipe import strategies
from tfpipe.errors import ConfigError
from tfpipe.exits import EXIT_FAILED, EXIT_OK

INSTALL_HINT = "pip install -e .[ray]"
PID_DIR_ENV = "TFPIPE_RAY_PID_DIR"  # tests: each worker writes worker-<rank>.pid there (to kill one)
LEGACY_KERAS_ENV = "TF_USE_LEGACY_KERAS"  # Ray's TF backend sets it to 1; tf_keras is not part of tfpipe


def check_installed() -> None:
    """`strategy.launcher=ray` without Ray Train: one line naming the fix, before Ray or TensorFlow load."""
    try:
        found = importlib.util.find_spec("ray") and importlib.util.find_spec("ray.train")
    except (ImportError, ValueError):
        found = None
    if not found:
        raise ConfigError(f"strategy.launcher=ray: Ray Train is not installed; {INSTALL_HINT}")


def train_loop_per_worker(config: dict) -> None:
    """One Ray Train worker: the train stage under the TF_CONFIG Ray set, in the project folder."""
    restore_keras_env(config.get("legacy_keras"))
    root = Path(config["root"])
    root = root if root.is_dir() else Path.cwd()  # another node: the job's working_dir
    os.chdir(root)
    _write_pid(root)
    from tfpipe.stages import run_train

    run_train(config["cfg"], root)


def restore_keras_env(driver_value) -> None:
    """Undo Ray's TF_USE_LEGACY_KERAS=1 (tf.keras -> tf_keras, not installed) unless the driver had it set:
    tf.keras then stays Keras 3, as in a launcher child. TensorFlow reads it at the first tf.keras access."""
    if driver_value is None:
        os.environ.pop(LEGACY_KERAS_ENV, None)
    else:
        os.environ[LEGACY_KERAS_ENV] = driver_value


def _write_pid(root: Path) -> None:
    folder = os.environ.get(PID_DIR_ENV)
    if not folder:
        return
    from tfpipe.launch import cluster

    rank = cluster.task()[1]
    Path(folder).mkdir(parents=True, exist_ok=True)
    (Path(folder) / f"worker-{rank}.pid").write_text(str(os.getpid()))


def trainer(cfg, root: Path):
    """The TensorflowTrainer of this job (the caller has connected to Ray)."""
    from ray.train import FailureConfig, RunConfig, ScalingConfig
    from ray.train.tensorflow import TensorflowTrainer

    st = cfg.strategy
    return TensorflowTrainer(
        train_loop_per_worker=train_loop_per_worker,
        train_loop_config={
            "cfg": cfg,
            "root": str(Path(root).resolve()),
            "legacy_keras": os.environ.get(LEGACY_KERAS_ENV),
        },
        scaling_config=ScalingConfig(num_workers=st.num_workers, use_gpu=False),
        run_config=RunConfig(
            name=f"tfpipe-{cfg.dataset.name}-{time.strftime('%Y%m%d-%H%M%S')}",
            failure_config=FailureConfig(max_failures=st.max_restarts),
        ),
    )


def _connect(address) -> bool:
    """Attach to Ray (strategy.ray_address, else RAY_ADDRESS, else a new local Ray); True when we started it."""
    import ray

    if ray.is_initialized():
        return False
    local = not (address or os.environ.get("RAY_ADDRESS"))
    ray.init(address=address or None, include_dashboard=False if local else None, log_to_driver=True)
    return local


def check_data(cfg, root: Path) -> None:
    """The prepared data the workers will read (manifest, shards), checked before Ray starts: a DataError
    here is one line and exit 2, where a worker's would only make Ray start the worker group again."""
    from tfpipe import data
    from tfpipe.layout import rooted as _rooted

    prepared = Path(_rooted(cfg, root).data.output_dir)
    data.verify_shards(prepared, data.load_manifest(prepared))


def launch(cfg, root: Path, out=None) -> int:
    """Run the job through Ray Train; 0 when every worker finished, 1 when Ray gave up."""
    check_installed()
    check_data(cfg, root)
    st = cfg.strategy
    out = out or sys.stdout
    started = _connect(st.ray_address)
    from ray.train import TrainingFailedError

    try:
        trainer(cfg, root).fit()
    except TrainingFailedError as exc:
        out.write(f"[ray] training failed (strategy.max_restarts={st.max_restarts}): {_first_line(exc)}\n")
        return EXIT_FAILED
    finally:
        if started:
            import ray

            ray.shutdown()
    out.write(f"[ray] done: {st.num_workers} workers finished\n")
    return EXIT_OK


def _first_line(exc: BaseException) -> str:
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return " ".join(lines[:2])[:300]


def render_rayjob(
    job_name: str,
    image: str,
    num_workers: int = 2,
    namespace: str = "default",
    overrides: Sequence[str] = (),
    ray_version: str = "2.60.0",
    operator_namespace: str = "default",
) -> str:
    """deploy/k8s/rayjob.yaml.tmpl -> a KubeRay RayJob (a head, `num_workers` worker pods, the submitter pod;
    non-root, no API token; the train stage with strategy.launcher=ray as the job's entrypoint) and the
    NetworkPolicy fencing its pods: the job API (8265) open only to the submitter and to the KubeRay operator,
    whose namespace is `operator_namespace` (where its Helm chart was installed; "default" as in its docs)."""
    from tfpipe.launch import cluster
    from tfpipe.launch.k8s import CONTAINER_SECURITY, POD_SECURITY

    if num_workers < 1:
        raise ConfigError(f"num_workers={num_workers!r}: must be > 0")
    args = [
        f"strategy={strategies.first(workers_only=True).name}",  # Ray Train's TF_CONFIG describes workers alone
        "strategy.launcher=ray",
        f"strategy.num_workers={num_workers}",
        *overrides,
    ]
    entrypoint = " ".join(["python", "-m", "tfpipe", "train", *(_quote(a) for a in args)])
    values = {
        "pod_security": json.dumps(POD_SECURITY),
        "container_security": json.dumps(CONTAINER_SECURITY),
        "job_name": job_name,
        "namespace": namespace,
        "operator_namespace": operator_namespace,
        "image": image,
        "num_workers": num_workers,
        "ray_version": ray_version,
        "entrypoint": json.dumps(entrypoint),
    }
    return cluster.render_template(cluster.DEPLOY_DIR / "k8s" / "rayjob.yaml.tmpl", values)


def _quote(arg: str) -> str:
    import shlex

    return shlex.quote(arg)
