"""tfpipe.provenance in a real temporary git repository."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from conftest import churning_environment, cpu_flags

from tfpipe import provenance

GIT = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false"]

LOCK = {
    "schema": "2.0",
    "stages": {
        "prepare": {
            "cmd": "python -m pipeline.prepare",
            "deps": [{"path": "data/raw", "md5": "abc.dir"}],
            "outs": [{"path": "data/prepared/cifar10", "md5": "def.dir"}],
        },
        "train": {
            "cmd": "python -m pipeline.train",
            "params": {"params.yaml": {"train": {"epochs": 1}}},
            "outs": [{"path": "run.json", "md5": "123"}],
        },
    },
}


def _git(repo: Path, *args: str) -> str:
    return subprocess.run([*GIT, *args], cwd=repo, check=True, capture_output=True, text=True).stdout


@pytest.fixture
def repo(tmp_path) -> Path:
    _git(tmp_path, "init", "-q")
    (tmp_path / "code.py").write_text("x = 1\n")
    (tmp_path / "dvc.lock").write_text(yaml.safe_dump(LOCK, sort_keys=False))
    _git(tmp_path, "add", "-A")
    _git(tmp_path, "commit", "-qm", "init")
    return tmp_path


def test_clean_repo(repo):
    info = provenance.collect(repo)
    assert info["git"]["commit"] == _git(repo, "rev-parse", "HEAD").strip()
    assert info["git"]["dirty"] is False
    assert info["git"]["diff"] is None


def test_untracked_files_do_not_make_it_dirty(repo):
    (repo / "scratch.txt").write_text("notes")
    assert provenance.collect(repo)["git"]["dirty"] is False


def test_modified_tracked_file_is_dirty_with_its_diff(repo):
    (repo / "code.py").write_text("x = 2\n")
    git = provenance.collect(repo)["git"]
    assert git["dirty"] is True
    assert "-x = 1" in git["diff"] and "+x = 2" in git["diff"]
    _git(repo, "add", "code.py")  # staged changes count as well
    assert provenance.collect(repo)["git"]["dirty"] is True


def test_credential_files_are_left_out_of_the_diff_and_named(repo):
    """A dirty `.dvc/config`, `.env` (any depth) or key file never enters the recorded diff; the record
    names them so an audit knows the diff is partial. Other dirty files stay in the diff."""
    secret_files = [".dvc/config", ".dvc/config.local", ".env", "sub/.env.prod", "certs/tls.key", ".netrc"]
    for name in secret_files:
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text("old\n")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "credential files")
    for name in secret_files:
        (repo / name).write_text("token = planted-credential-value\n")
    (repo / "code.py").write_text("x = 2\n")
    git = provenance.collect(repo)["git"]
    assert git["dirty"] is True
    assert "planted-credential-value" not in git["diff"]
    assert "+x = 2" in git["diff"]
    assert git["diff_excluded"] == sorted(secret_files)


def test_not_a_git_repo(tmp_path):
    info = provenance.collect(tmp_path)
    assert info["git"] == {"commit": None, "branch": None, "dirty": None, "diff": None, "diff_excluded": []}
    assert info["dvc_lock"] == {"present": False, "content": None, "stages": {}}


def test_dvc_lock_stage_hashes(repo):
    lock = provenance.collect(repo)["dvc_lock"]
    assert lock["present"] and lock["content"] == (repo / "dvc.lock").read_text()
    expected = hashlib.sha256(json.dumps(LOCK["stages"]["train"], sort_keys=True).encode()).hexdigest()
    assert lock["stages"] == {"prepare": lock["stages"]["prepare"], "train": expected}

    changed = json.loads(json.dumps(LOCK))
    changed["stages"]["train"]["outs"][0]["md5"] = "456"
    (repo / "dvc.lock").write_text(yaml.safe_dump(changed))
    again = provenance.collect(repo)["dvc_lock"]["stages"]
    assert again["prepare"] == lock["stages"]["prepare"]  # untouched stage: same hash
    assert again["train"] != lock["stages"]["train"]
    assert provenance.stage_hashes("not: [valid") == {}


def test_environment_facts():
    env = provenance.collect(Path.cwd())["environment"]
    assert env["python"] == ".".join(map(str, sys.version_info[:3]))
    for package in ("tensorflow", "keras", "mlflow", "dvc", "tensorflow_datasets", "hydra"):
        assert env["packages"][package], package
    assert env["num_cpus"] >= 1 and env["platform"]
    if Path("/proc/cpuinfo").is_file():
        assert env["cpu"]
    wanted = [f for f in ("avx2", "avx512f", "avx512_bf16", "amx_bf16") if f in cpu_flags()]
    assert env["cpu_flags"].split(";")[0].split() == wanted or not wanted


def test_collect_is_fast_and_does_not_import_tensorflow(repo):
    code = (
        "import sys, time; t = time.perf_counter(); from tfpipe import provenance; "
        f"info = provenance.collect({str(repo)!r}); "
        "print(time.perf_counter() - t, 'tensorflow' in sys.modules, info['environment']['gpus'])"
    )
    src = Path(__file__).resolve().parents[1] / "src"
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONPATH": str(src)},
    ).stdout.split()
    seconds, imported_tf, gpus = float(out[0]), out[1], out[2]
    assert imported_tf == "False" and gpus == "None"  # the order: no TensorFlow import to list no GPUs
    assert seconds < 10.0  # generous bound (shared machine)


def test_gpus_listed_when_tensorflow_is_loaded(repo):
    pytest.importorskip("tensorflow")
    started = time.perf_counter()
    import tensorflow as tf

    gpus = provenance.collect(repo)["environment"]["gpus"]
    assert gpus == [d.name for d in tf.config.list_physical_devices("GPU")]
    assert time.perf_counter() - started < 60.0  # generous: includes importing TensorFlow


def test_the_environments_children_get_survive_a_thread_changing_it(monkeypatch):
    """The launcher's task environment and a tuning trial's are built while MLflow's threads may run."""
    from tfpipe.launch import local as launcher

    monkeypatch.setenv("TFPIPE_TEST_KEEP", "kept")
    seen = []
    churning_environment(lambda: seen.append(launcher._child_env("{}")["TFPIPE_TEST_KEEP"]))
    # dict(os.environ) failed about 50 times in 20,000 reads here (KeyError / RuntimeError)
    churning_environment(lambda: seen.append(provenance.environ_snapshot()["TFPIPE_TEST_KEEP"]), 20000)
    assert seen == ["kept"] * 20300


@pytest.mark.slow  # starts processes
def test_mlflow_telemetry_is_off_unless_asked_for():
    """tfpipe.tracking turns MLflow's telemetry off by default (README, Security); an explicit choice stays."""
    code = "import os, tfpipe.tracking; print(os.environ.get('MLFLOW_DISABLE_TELEMETRY'))"
    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_DISABLE_TELEMETRY"}
    default = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
    )
    assert default.stdout.strip() == "true", default.stderr[-2000:]
    env["MLFLOW_DISABLE_TELEMETRY"] = "false"
    chosen = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
    )
    assert chosen.stdout.strip() == "false", chosen.stderr[-2000:]


def test_lock_stages_reads_any_text_and_never_raises():
    """provenance.lock_stages, the one reader of dvc.lock (issue 53), takes a run record's text as untrusted:
    none, no YAML, a list, stages that are no mapping, an entry that is no mapping."""
    from tfpipe import provenance

    for text in (None, "", "not: [valid", "- a\n- b\n", "stages: 3\n", "schema: '2.0'\n"):
        assert provenance.lock_stages(text) == {}, text
    text = "schema: '2.0'\nstages:\n  prepare:\n    cmd: x\n  bad: 3\n  train:\n    outs: []\n"
    assert provenance.lock_stages(text) == {"prepare": {"cmd": "x"}, "train": {"outs": []}}
