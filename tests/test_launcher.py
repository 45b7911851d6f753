"""TF_CONFIG parsing/rendering, the deploy templates, and the launcher's failure handling with real processes."""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tfpipe.errors import UserError
from tfpipe.launch import cluster

ROOT = Path(__file__).resolve().parents[1]


# ----------------------------------------------------------------------------- cluster / TF_CONFIG


def test_local_clusters_have_the_roles_and_distinct_free_ports():
    mwms = cluster.local_cluster("multi_worker_mirrored", 3)
    assert list(mwms) == ["worker"] and len(mwms["worker"]) == 3
    ps = cluster.local_cluster("parameter_server", 2, 1)
    assert {k: len(v) for k, v in ps.items()} == {"chief": 1, "worker": 2, "ps": 1}
    addresses = [a for v in ps.values() for a in v]
    assert len(set(addresses)) == 4 and all(a.startswith("127.0.0.1:") for a in addresses)
    assert cluster.roles(ps) == [("chief", 0), ("worker", 0), ("worker", 1), ("ps", 0)]
    with pytest.raises(UserError, match="mirrored"):
        cluster.local_cluster("mirrored", 2)


def test_chief_is_the_chief_task_or_worker_zero():
    ps = {"chief": ["h:1"], "worker": ["h:2", "h:3"], "ps": ["h:4"]}
    mw = {"worker": ["h:1", "h:2"]}
    env = lambda c, t, i: {"TF_CONFIG": cluster.tf_config(c, t, i)}  # noqa: E731
    assert cluster.is_chief({}) is True  # single process
    assert cluster.is_chief(env(ps, "chief", 0)) and not cluster.is_chief(env(ps, "worker", 0))
    assert not cluster.is_chief(env(ps, "ps", 0))
    assert cluster.is_chief(env(mw, "worker", 0)) and not cluster.is_chief(env(mw, "worker", 1))
    assert cluster.task(env(mw, "worker", 1)) == ("worker", 1)
    assert cluster.public_spec(env(mw, "worker", 1)) == mw
    blank = {"TF_CONFIG": "  \n"}  # blank is unset, for every question (tfconfig.is_set)
    assert cluster.is_chief(blank) and cluster.task(blank) == (None, 0) and cluster.public_spec(blank) == {}


@pytest.mark.parametrize(
    "text, needle",
    [
        ("{not json", "not valid JSON"),
        ('{"cluster": {}}', "expected"),
        ('{"cluster": {"boss": ["h:1"]}, "task": {"type": "boss", "index": 0}}', "'boss' not allowed"),
        ('{"cluster": {"worker": ["h:1"]}, "task": {"type": "ps", "index": 0}}', "task.type='ps'"),
        ('{"cluster": {"worker": ["h:1"]}, "task": {"type": "worker", "index": 3}}', "task.index=3"),
        ('{"cluster": {"worker": ["nohostport"]}, "task": {"type": "worker", "index": 0}}', "host:port"),
    ],
)
def test_bad_tf_config_is_one_clear_line(text, needle):
    with pytest.raises(UserError) as err:
        cluster.read_tf_config({"TF_CONFIG": text})
    assert needle in str(err.value) and "\n" not in str(err.value) and "TF_CONFIG" in str(err.value)


# ----------------------------------------------------------------------------- deploy templates


def test_slurm_script_renders():
    text = cluster.render_slurm(nodes=3, cpus_per_task=4, tasks_per_node=2, overrides=["train.epochs=2"])
    assert "#SBATCH --nodes=3" in text and "#SBATCH --cpus-per-task=4" in text
    assert "#SBATCH --ntasks-per-node=2" in text
    assert (
        "python -m tfpipe.launch.cluster slurm-tf-config" in text and "strategy=multi_worker_mirrored" in text
    )
    assert '"${SLURM_SUBMIT_DIR}"' in text and "train.epochs=2" in text and "$${" not in text
    subprocess.run(["bash", "-n"], input=text, text=True, check=True)  # valid shell


@pytest.mark.parametrize(
    "nodelist, tasks_per_node, workers",
    [
        ("n[1-3]", "1(x3)", ["n1:2222", "n2:2222", "n3:2222"]),  # one task per node
        ("n[1-2]", "2(x2)", ["n1:2222", "n1:2223", "n2:2222", "n2:2223"]),  # two per node: port offsets
    ],
)
def test_slurm_tf_config_comes_from_tensorflows_resolver(monkeypatch, nodelist, tasks_per_node, workers):
    configs = []
    for procid in range(len(workers)):
        for key, value in {
            "SLURM_PROCID": procid,
            "SLURM_STEP_NODELIST": nodelist,
            "SLURM_STEP_TASKS_PER_NODE": tasks_per_node,
            "SLURM_STEP_NUM_TASKS": len(workers),
        }.items():
            monkeypatch.setenv(key, str(value))
        configs.append(json.loads(cluster.slurm_tf_config(2222)))
    assert all(c["cluster"] == {"worker": workers} for c in configs), configs
    assert [c["task"] for c in configs] == [{"type": "worker", "index": i} for i in range(len(workers))]
    assert cluster.is_chief({"TF_CONFIG": json.dumps(configs[0])})
    assert "CUDA_VISIBLE_DEVICES" not in os.environ  # CPU-only: the resolver must not hide devices


# ----------------------------------------------------------------------------- the launcher with real processes


def _env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(ROOT / "src"), env.get("PYTHONPATH", "")])
    env.pop("TF_CONFIG", None)
    return env


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie not yet reaped by anyone counts as gone
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(") ")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_launcher_refuses_a_single_process_strategy(tmp_path):
    import shutil

    shutil.copytree(ROOT / "conf", tmp_path / "conf")
    proc = subprocess.run(
        [sys.executable, "-m", "pipeline.launch", "strategy=mirrored"],
        cwd=tmp_path,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2
    assert "strategy.name='mirrored'" in proc.stderr and "multi_worker_mirrored" in proc.stderr


@pytest.mark.slow
def test_killing_one_worker_stops_the_job_with_no_orphans(prepared_image, tmp_path):
    import shutil

    shutil.copytree(ROOT / "conf", tmp_path / "conf")
    cmd = [
        sys.executable,
        "-m",
        "pipeline.launch",
        "strategy.stop_grace_seconds=3",
        "strategy=multi_worker_mirrored",
        "model.filters=[4]",
        "model.dense_units=8",
        "train.batch_size_per_replica=2",
        "train.epochs=500",
        f"data.output_dir={prepared_image.prepared_dir}",
        f"tracking.uri=sqlite:///{tmp_path / 'mlflow.db'}",
    ]
    launcher = subprocess.Popen(
        cmd, cwd=tmp_path, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    lines: queue.Queue = queue.Queue()
    threading.Thread(target=lambda: [lines.put(l) for l in launcher.stdout], daemon=True).start()
    pids, log, deadline = {}, [], time.monotonic() + 180
    try:
        while time.monotonic() < deadline:  # wait until both workers train (epoch lines)
            try:
                line = lines.get(timeout=1)
            except queue.Empty:
                continue
            log.append(line)
            if line.startswith("[launcher] started"):
                pids = {
                    k: int(v) for k, v in (p.split("=") for p in line.split(": ", 1)[1].strip().split(", "))
                }
            if line.startswith("[worker:1]") and "epoch 1/" in line:
                break
        else:
            pytest.fail("workers did not start training:\n" + "".join(log[-40:]))
        assert set(pids) == {"worker:0", "worker:1"}
        killed_at = time.monotonic()
        os.kill(pids["worker:1"], signal.SIGKILL)
        code = launcher.wait(timeout=60)
        elapsed = time.monotonic() - killed_at
    finally:
        if launcher.poll() is None:
            launcher.kill()
            launcher.wait()
    rest = []
    while not lines.empty():
        rest.append(lines.get())
    assert code != 0
    assert elapsed < 30, elapsed  # grace 3 s + polling; never hangs on the surviving worker's collectives
    assert any("worker:1" in l and "exited with" in l for l in rest), "".join(rest[-20:])
    time.sleep(0.5)
    assert not [p for p in pids.values() if _alive(p)], "orphan processes left"


@pytest.mark.slow
def test_a_dead_worker_restarts_the_job_which_resumes_in_the_same_run(prepared_image, tmp_path):
    """strategy.max_restarts=1: worker 1 is killed mid-training; the launcher stops the job, starts it again,
    the chief resumes from its last checkpoint and finishes the one MLflow run."""
    import shutil

    from mlflow import MlflowClient

    shutil.copytree(ROOT / "conf", tmp_path / "conf")
    db = tmp_path / "mlflow.db"
    cmd = [
        sys.executable,
        "-m",
        "pipeline.train",
        "strategy=multi_worker_mirrored",
        "strategy.max_restarts=1",
        "strategy.stop_grace_seconds=2",
        "model.filters=[4]",
        "model.dense_units=8",
        "train.batch_size_per_replica=2",
        "train.epochs=8",
        "train.checkpoint_every_steps=2",
        "tracking.log_model=false",
        "train.tensorboard=false",
        f"data.output_dir={prepared_image.prepared_dir}",
        f"tracking.uri=sqlite:///{db}",
    ]
    proc = subprocess.Popen(
        cmd, cwd=tmp_path, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    lines: queue.Queue = queue.Queue()
    threading.Thread(target=lambda: [lines.put(l) for l in proc.stdout], daemon=True).start()
    log, killed, deadline = [], False, time.monotonic() + 400
    try:
        while proc.poll() is None or not lines.empty():
            assert time.monotonic() < deadline, "job did not finish:\n" + "".join(log[-40:])
            try:
                line = lines.get(timeout=1)
            except queue.Empty:
                continue
            log.append(line)
            if line.startswith("[launcher] started") and not killed:
                pids = {
                    k: int(v) for k, v in (p.split("=") for p in line.split(": ", 1)[1].strip().split(", "))
                }
            if not killed and line.startswith("[worker:0]") and "epoch 3/" in line:
                os.kill(pids["worker:1"], signal.SIGKILL)
                killed = True
        code = proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    text = "".join(log)
    assert killed and code == 0, text[-4000:]
    assert "restart 1 of 1" in text and "resuming from" in text
    client = MlflowClient(tracking_uri=f"sqlite:///{db}")
    runs = client.search_runs([e.experiment_id for e in client.search_experiments()])
    assert len(runs) == 1 and runs[0].info.status == "FINISHED"
    assert runs[0].data.tags["tfpipe.resumes"] == "1"
    epochs = sorted(m.step for m in client.get_metric_history(runs[0].info.run_id, "val_loss"))
    assert epochs == list(range(8)), "every epoch's metrics exactly once"
