"""Audits of real recorded runs: check (untouched -> exit 0; each tampering case -> a difference, exit 1) and
compare. The --rerun verdicts (judge) and what they compare: test_audit_verdicts.py; each verdict of the CLI on
a real rerun of a dirty run (its recorded diff applied), from its own clone and from another:
test_audit_rerun.py."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tfpipe import audit

ROOT = Path(__file__).resolve().parents[1]
TINY = [
    "experiment=smoke",
    "data.source=directory",
    "data.examples_per_shard=8",
    "model.filters=[8,8]",
    "model.dense_units=16",
    "train.batch_size_per_replica=8",
    "train.log_every_steps=1",
    "tracking.log_model=false",
    "data.output_dir=data/prepared/cifar10",
]


def _git(project, *args):
    subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args],
        cwd=project,
        check=True,
        capture_output=True,
    )


@pytest.fixture(scope="module")
def audited(tmp_path_factory, prepared_image, image_dir):
    """A git project with prepared data and two recorded runs: A (the config in params.yaml) and B
    (learning rate 0.01). Returns (project, run_a, run_b). Tests restore whatever they tamper with."""
    from tfpipe import config, stages

    saved = os.environ.pop("MLFLOW_TRACKING_URI", None)
    project = tmp_path_factory.mktemp("audit") / "project"
    shutil.copytree(prepared_image.prepared_dir, project / "data" / "prepared" / "cifar10")
    (project / ".gitignore").write_text(
        "/data/\n/models/\n/metrics/\n/plots/\n/run.json\n/mlflow.db\n/mlartifacts/\n"
    )
    overrides = [*TINY, f"data.path={image_dir}"]
    (project / "params.yaml").write_text(config.compose_yaml(overrides, config_dir=ROOT / "conf"))
    _git(project, "init", "-q", "-b", "main")
    _git(project, "add", "-A")
    _git(project, "commit", "-qm", "init")
    cfg = config.load_params(project / "params.yaml")
    stages.run_train(cfg, project)
    run_a = json.loads((project / "run.json").read_text())["run_id"]
    stages.run_train(
        config.compose([*overrides, "train.optimizer.learning_rate=0.01"], config_dir=ROOT / "conf"), project
    )
    run_b = json.loads((project / "run.json").read_text())["run_id"]
    yield project, run_a, run_b
    if saved is not None:
        os.environ["MLFLOW_TRACKING_URI"] = saved


def _cli(module, *args, cwd):
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(ROOT / "src"), env.get("PYTHONPATH", "")])
    return subprocess.run(
        [sys.executable, "-m", module, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300
    )


def _by_name(items):
    return {item.name: item for item in items}


@pytest.mark.slow
def test_untouched_project_passes_the_check(audited):
    project, run_a, _ = audited
    proc = _cli("pipeline.audit", run_a, cwd=project)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for name in (
        "code",
        "data.manifest",
        "config",
        "env.tensorflow",
        "env.keras",
        "env.python",
        "env.cpu_flags",
    ):
        assert any(line.startswith(name + " ") and " match " in line for line in proc.stdout.splitlines()), (
            proc.stdout
        )
    assert "ALL MATCH" in proc.stdout


@pytest.mark.slow
def test_capped_onednn_kernels_are_an_environment_difference(audited, monkeypatch):
    """The same CPU model with oneDNN capped at AVX2 runs other kernels: the audit says so (the model name alone
    would match, as it does between the AVX2-only and the AVX512 AMD EPYCs)."""
    project, run_a, _ = audited
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX2")
    proc = _cli("pipeline.audit", run_a, cwd=project)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    line = next(line for line in proc.stdout.splitlines() if line.startswith("env.cpu_flags "))
    assert "differs" in line and "WITHIN TOLERANCE" in line and "; ONEDNN_MAX_CPU_ISA=AVX2)" in line, line
    item = _by_name(audit.check(run_a, project))["env.cpu_flags"]
    assert item.present.endswith("; ONEDNN_MAX_CPU_ISA=AVX2") and ";" not in item.recorded, item
    assert any(line.startswith("env.cpu ") and " match " in line for line in proc.stdout.splitlines())


@pytest.mark.slow
def test_unknown_run_id_is_bad_input(audited):
    project, _, _ = audited
    proc = _cli("pipeline.audit", "0123456789abcdef0123456789abcdef", cwd=project)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "audit: error:" in proc.stderr and "not found" in proc.stderr


@pytest.mark.slow
def test_a_changed_shard_is_a_data_difference(audited):
    project, run_a, _ = audited
    shard = sorted((project / "data" / "prepared" / "cifar10").rglob("*.tfrecord*"))[0]
    original = shard.read_bytes()
    try:
        shard.write_bytes(original[:-1] + bytes([original[-1] ^ 1]))
        items = _by_name(audit.check(run_a, project))
        assert items["data.manifest"].status == audit.DIFFERS
        assert shard.name in items["data.manifest"].detail
        assert items["config"].status == audit.MATCH and items["code"].status == audit.MATCH
        assert not audit.ok(items.values())
    finally:
        shard.write_bytes(original)


@pytest.mark.slow
def test_edited_params_are_a_config_and_code_difference(audited):
    project, run_a, _ = audited
    params = project / "params.yaml"
    original = params.read_text()
    try:
        params.write_text(original.replace("learning_rate: 0.001", "learning_rate: 0.002"))
        proc = _cli("pipeline.audit", run_a, cwd=project)
        assert proc.returncode == 1, proc.stdout + proc.stderr
        config_line = next(line for line in proc.stdout.splitlines() if line.startswith("config "))
        assert "differs" in config_line and "train.optimizer.learning_rate: 0.001 -> 0.002" in config_line
        code_line = next(line for line in proc.stdout.splitlines() if line.startswith("code "))
        assert "differs" in code_line and "params.yaml" in code_line
    finally:
        params.write_text(original)


@pytest.mark.slow
def test_a_different_package_version_is_an_environment_difference(audited):
    from tfpipe import provenance

    project, run_a, _ = audited
    env = provenance.environment()
    env["packages"] = {**env["packages"], "keras": "3.0.0"}
    items = _by_name(audit.check(run_a, project, present_environment=env))
    assert items["env.keras"].status == audit.DIFFERS
    assert (
        items["env.keras"].present == "3.0.0"
        and items["env.keras"].recorded == provenance.package_versions()["keras"]
    )
    assert items["env.tensorflow"].status == audit.MATCH
    assert items["env.all_packages"].status == audit.MATCH  # the full recorded freeze equals this environment
    env["pip_freeze"] = provenance.pip_freeze().replace("\nkeras==", "\nkeras==0.0.1-")
    items = _by_name(audit.check(run_a, project, present_environment=env))
    assert items["env.all_packages"].status == audit.DIFFERS and "keras" in items["env.all_packages"].detail


@pytest.mark.slow
def test_compare_lists_differing_params_and_metrics(audited):
    project, run_a, run_b = audited
    proc = _cli("pipeline.compare", run_a, run_b, cwd=project)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    lr = next(line for line in lines if "train.optimizer.learning_rate" in line)
    assert lr.split()[0] == "config" and "0.001" in lr and "0.01" in lr
    assert any(line.split()[0] == "metrics" and "final_train_loss" in line for line in lines), proc.stdout
    assert any("weights.sha256" in line for line in lines), proc.stdout
    assert not any("seconds" in line or "per_sec" in line for line in lines)  # timing is not a difference
    same = _cli("pipeline.compare", run_a, run_a, cwd=project)
    assert same.returncode == 0 and "no differences" in same.stdout


def test_a_recorded_diff_that_does_not_apply_stops_the_rerun(tmp_path):
    """The rerun must not silently audit other code than the run's: `git apply` failing is one-line bad input."""
    from tfpipe.audit.rerun import _make_worktree
    from tfpipe.errors import UserError

    repo = tmp_path / "repo"
    repo.mkdir()
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@x",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@x",
    }
    for cmd in (["git", "init", "-q"], ["git", "add", "-A"], ["git", "commit", "-qm", "c", "--allow-empty"]):
        subprocess.run(cmd, cwd=repo, env=env, check=True)
    commit = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True
    ).stdout.strip()
    bad_diff = "diff --git a/x.txt b/x.txt\n--- a/x.txt\n+++ b/x.txt\n@@ -1 +1 @@\n-old\n+new\n"  # x.txt is not there
    run = {"tags": {"git.commit": commit}, "git_diff": bad_diff, "config": {}}
    work = tmp_path / "work"
    work.mkdir()
    with pytest.raises(UserError, match="recorded git diff does not apply"):
        _make_worktree(repo, run, work, log=lambda m: None)
