"""Issue 51 (B), short ids: wherever a run id is taken (audit, compare, promote, the `runs:/<id>/...` URIs of
predict, serve and train.init_from) a unique prefix of at least 8 hex characters names the run, as git takes a
commit; one helper resolves it through the store (`tfpipe.tracking.runids`). A prefix several runs share is
refused in one line naming them (exit 2); one that matches nothing is "not found" as any unknown id.

All against real SQLite MLflow stores. Two runs sharing an 8-character prefix would take tens of thousands of
runs by chance, so the refusal is shown twice: by the helper's own logic on a 1-character prefix, which 17
runs must share (16 hex digits: pigeonhole), and through the commands on two runs whose ids the test chooses
(the store's own `create_run`, with Python's uuid4, the source of MLflow's run ids, answering the chosen ids
for those two)."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections import Counter
from pathlib import Path

import pytest
import test_registry
from conftest import seed_store

from tfpipe.errors import TrackingError
from tfpipe.tracking.runids import MIN_PREFIX, resolve_run_id

ROOT = Path(__file__).resolve().parents[1]
# test_registry's fixtures (test_tracking's: a fresh SQLite store, tiny sealed SavedModels) and its logged run
cfg, clean_mlflow, project, saved_models = (
    test_registry.cfg,
    test_registry.clean_mlflow,
    test_registry.project,
    test_registry.saved_models,
)


def _store(folder: Path):
    from mlflow import MlflowClient

    seed_store(folder)
    uri = f"sqlite:///{folder / 'mlflow.db'}"
    return uri, MlflowClient(tracking_uri=uri)


def test_a_unique_prefix_names_its_run_and_a_shared_one_is_refused(tmp_path):
    uri, client = _store(tmp_path)
    kept = client.create_experiment("kept", artifact_location=str(tmp_path / "a"))
    gone = client.create_experiment("gone", artifact_location=str(tmp_path / "b"))
    ids = [client.create_run(kept if i % 2 else gone, run_name=f"r{i}").info.run_id for i in range(17)]
    client.delete_experiment(gone)  # its runs are still runs `get_run` finds: prefixes count them
    client.delete_run(ids[1])
    for run_id in ids:
        assert resolve_run_id(uri, run_id[:MIN_PREFIX]) == run_id
    assert resolve_run_id(uri, ids[2][:12].upper()) == ids[2]
    assert resolve_run_id(uri, ids[3]) == ids[3]  # a whole id: as given, no search
    # not a prefix the helper looks up: shorter than 8, not hex; or one no run has: left for "not found"
    assert resolve_run_id(uri, ids[4][:7]) == ids[4][:7]
    assert resolve_run_id(uri, "champion") == "champion"
    unused = next(p for p in ("0" * 8, "f" * 8, "0123abcd") if not any(i.startswith(p) for i in ids))
    assert resolve_run_id(uri, unused) == unused
    # 17 ids, 16 first digits: some digit starts two of them
    digit, count = Counter(i[0] for i in ids).most_common(1)[0]
    assert count >= 2
    with pytest.raises(TrackingError) as refused:
        resolve_run_id(uri, digit, min_chars=1)
    message = str(refused.value)
    assert "\n" not in message and f"run id '{digit}' is ambiguous" in message, message
    sharing = [i for i in ids if i.startswith(digit)]
    shown = sharing if len(sharing) <= 5 else []
    assert all(i in message for i in shown) and "give more of the id" in message, message


def _runs_with_ids(client, experiment: str, wanted: list, monkeypatch) -> list:
    """Runs the store creates (`create_run`), MLflow's uuid4 answering the `wanted` ids in turn."""
    real = uuid.uuid4
    queue = [uuid.UUID(hex=w) for w in wanted]
    monkeypatch.setattr(uuid, "uuid4", lambda: queue.pop(0) if queue else real())
    try:
        made = [client.create_run(experiment, run_name=f"chosen-{n}").info.run_id for n in range(len(wanted))]
    finally:
        monkeypatch.setattr(uuid, "uuid4", real)
    assert made == wanted, "the store did not take its run ids from uuid4: choose them another way"
    return made


def _command(main, argv: list, capsys) -> tuple:
    capsys.readouterr()
    try:
        code = main(argv)
    except SystemExit as exc:
        code = exc.code
    out = capsys.readouterr()
    return code, out.out, [line for line in out.err.splitlines() if line.strip()]


def test_the_commands_take_a_prefix_and_refuse_a_shared_one(tmp_path, monkeypatch, capsys):
    from tfpipe.commands import audit, promote

    uri, client = _store(tmp_path)
    experiment = client.create_experiment("tfpipe", artifact_location=str(tmp_path / "mlartifacts"))
    a, b = _runs_with_ids(client, experiment, ["abcdef12" + "0" * 24, "abcdef12" + "f" * 24], monkeypatch)
    monkeypatch.chdir(tmp_path)
    for main, argv, prog in (
        (audit.compare_main, ["abcdef12", b, "--tracking-uri", uri], "compare"),
        (audit.compare_main, [a, "abcdef12", "--tracking-uri", uri], "compare"),
        (audit.audit_main, ["abcdef12", "--tracking-uri", uri], "audit"),
        (audit.audit_main, [a, "--against", "ABCDEF12", "--tracking-uri", uri], "audit"),
        (promote.main, ["abcdef12", "--tracking-uri", uri], "promote"),
    ):
        code, _, err = _command(main, argv, capsys)
        assert code == 2 and len(err) == 1, err
        assert err[0].startswith(f"{prog}: error: run id ") and "is ambiguous" in err[0], err
        assert f"{a} (chosen-0)" in err[0] and f"{b} (chosen-1)" in err[0], err
    # one more character tells them apart
    code, out, err = _command(audit.compare_main, ["abcdef120", "abcdef12f", "--tracking-uri", uri], capsys)
    assert code == 0 and f"runs {a} and {b}: no differences" in out, (out, err)
    # a prefix no run has: not found, as any unknown id
    code, _, err = _command(audit.compare_main, ["12345678", a, "--tracking-uri", uri], capsys)
    assert code == 2 and len(err) == 1 and "run '12345678': not found" in err[0], err


@pytest.mark.slow
def test_tfpipe_promote_and_a_runs_uri_take_an_8_character_prefix(
    cfg, project, saved_models, prepared_image, tmp_path
):
    """The real command line once (`python -m tfpipe promote <prefix>`, the console script's main), and the
    `runs:/<prefix>/model` URI predict, serve and train.init_from download, here with the store given from
    another folder than the project's (MLflow looks the logged model up in its default store:
    `model_uri._default_store`)."""
    from tfpipe.tracking import loading

    run_id, _ = test_registry._evaluated(cfg, project, saved_models, prepared_image, {"test_accuracy": 0.6})
    uri = test_registry._uri(project)
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), env.get("PYTHONPATH", "")])
    cmd = [sys.executable, "-m", "tfpipe", "promote", run_id[:8], "--alias", "champion"]
    cmd += ["--tracking-uri", uri]
    proc = subprocess.run(cmd, cwd=project, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"{test_registry.NAME} version 1 is 'champion' (was unset)" in proc.stdout, proc.stdout
    # from another folder than the project (whose ./mlflow.db MLflow's default store would be)
    local, source = loading.fetch(f"runs:/{run_id[:8]}/model", uri, tmp_path / "download")
    assert source == {"source_run": run_id} and (local / "MLmodel").is_file()
