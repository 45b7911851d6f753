"""Issue 50, redaction gaps: the texts tfpipe uploads that did not pass the redactor. An audit's record (its tags and
its `audit/` report, `tfpipe.tracking.reading.record_audit`) and the data report (data/report.json, logged by the
train stage) each carry every credential form of tests/test_redaction_forms.py in a field; the store (its SQLite
rows and its artifact files) then holds none of them, the rest of each line kept."""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

import pytest
from test_redaction_forms import FORMS

from tfpipe.tracking.redact import forget_secrets

SECRETS = [secret for _, _, secret, _ in FORMS]
LINES = [line for _, line, _, _ in FORMS]


@pytest.fixture
def store(tmp_path, db_template, monkeypatch):
    """(project folder, uri) of a fresh real SQLite store with its artifacts in the folder."""
    for name in ("MLFLOW_TRACKING_URI", "MLFLOW_RUN_ID", "MLFLOW_EXPERIMENT_ID", "MLFLOW_EXPERIMENT_NAME"):
        monkeypatch.delenv(name, raising=False)
    forget_secrets()
    shutil.copy(db_template, tmp_path / "mlflow.db")
    yield tmp_path, f"sqlite:///{tmp_path / 'mlflow.db'}"
    forget_secrets()


def _everything(project: Path) -> str:
    """Every row of the store and every file under the project (artifacts included), as text."""
    with sqlite3.connect(project / "mlflow.db") as db:
        parts = list(db.iterdump())
    for path in sorted(project.rglob("*")):
        if path.is_file() and path.name != "mlflow.db" and "prepared" not in path.parts:
            parts.append(f"== {path}\n" + path.read_bytes().decode("utf-8", errors="replace"))
    return "\n".join(parts)


def _assert_none_in(text: str) -> None:
    for secret in SECRETS:
        assert secret not in text and secret[:8] not in text, secret


def test_an_audit_record_holds_no_secret(store):
    """record_audit's tags and report, each form in a tag value, a report field, a nested list of log lines."""
    from mlflow import MlflowClient

    from tfpipe.tracking import reading

    project, uri = store
    client = MlflowClient(uri)
    exp = client.create_experiment("audited", artifact_location=(project / "art").as_uri())
    run_id = client.create_run(exp).info.run_id
    tags = {f"audit.note{i}": line for i, line in enumerate(LINES)}
    report = {"verdict": "DIFFERS", "notes": LINES, "rerun": {"stderr_tail": "\n".join(LINES)}}
    report["differences"] = {line: [0.5, 0.25] for line in LINES}  # a key a record took from the data
    assert reading.record_audit(uri, run_id, tags, report, "rerun-1.json") is None
    recorded = _everything(project)
    _assert_none_in(recorded)
    (artifact,) = (project / "art").rglob("rerun-1.json")
    notes = json.loads(artifact.read_text())["notes"]
    assert all("***" in note for note in notes) and notes[0].startswith("fetch https://api.example.com/")
    assert client.get_run(run_id).data.tags["audit.note0"].endswith("&page=2 (nightly)")


def test_a_data_report_holds_no_secret_once_logged(store, make_config, prepared_text):
    """The train stage's upload of data/report.json (`records.data_report`): prepare's real report of a text
    set, a form in each string field a prepare fills from the data or the config: the dataset's name, a class
    name, a listed example, a setting."""
    from tfpipe import records, tracking
    from tfpipe.data.report import REPORT_FILE

    project, _ = store
    prepared = project / "prepared"
    prepared.mkdir()
    report = json.loads((Path(prepared_text.prepared_dir) / REPORT_FILE).read_text())
    report["dataset"] = LINES[0]
    report["splits"]["train"]["classes"].update({line: {"examples": 1} for line in LINES})
    report["leakage"]["dropped_examples"] = LINES
    report["settings"]["reference"] = LINES[-1]
    (prepared / REPORT_FILE).write_text(json.dumps(report, indent=2))
    with tracking.start_run(make_config("experiment=smoke"), project, stage="train") as run:
        records.data_report(run, prepared)
    uploaded = [p for p in project.rglob(REPORT_FILE) if "prepared" not in p.parts]
    assert uploaded, "no data report was logged"
    _assert_none_in(_everything(project))
    logged = json.loads(uploaded[0].read_text())
    assert logged["leakage"]["dropped_examples"][-1].startswith("redirect to https://app.example.com/")
    assert logged["splits"]["test"] == report["splits"]["test"]  # the figures as they were
