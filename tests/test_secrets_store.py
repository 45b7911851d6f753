"""Secrets never reach the MLflow store: URL passwords (userinfo and query), access keys and keyword
secrets are '***' in every logged text, credential files stay out of the recorded diff, and the
md5/sha256 digests of dvc.lock survive untouched."""

from __future__ import annotations

import hashlib
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from tfpipe.tracking.secrets import redact_url, redact_urls, scan_text, scrub

ACCESS_KEY = "AKIAZ7QPLANTED4TEST9"  # AWS access key id shape: AKIA + 16 of [0-9A-Z]
SECRET_KEY = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYPLANTEDKEY"
URL_PASSWORD = "urlPassw0rdPlanted"
QUERY_PASSWORD = "qryPassw0rdPlanted"
PLANTED = (ACCESS_KEY, SECRET_KEY, URL_PASSWORD, QUERY_PASSWORD)


# ----------------------------------------------------------------------------- URL redaction


@pytest.mark.parametrize(
    "url, expected",
    [
        ("https://me:pw-123@host/x", "https://me:***@host/x"),
        (
            "postgresql://u:p%40ss@db:5432/mlflow?sslmode=require",
            "postgresql://u:***@db:5432/mlflow?sslmode=require",
        ),
        ("https://h/x?password=abc&n=1", "https://h/x?password=***&n=1"),
        ("https://h/x?PassWord=abc", "https://h/x?PassWord=***"),
        ("s3://b/k?token=t&secret=s&key=k&sig=g", "s3://b/k?token=***&secret=***&key=***&sig=***"),
        ("https://h/x?X-Sig=1&Sig=abc", "https://h/x?X-Sig=1&Sig=***"),
    ],
)
def test_url_passwords_and_secret_query_values_are_redacted(url, expected):
    assert redact_url(url) == expected


@pytest.mark.parametrize(
    "text", ["https://me@host/x?page=2", "sqlite:///tmp/mlflow.db", "file:///a/b", "/data/raw/cifar10", "n=3"]
)
def test_text_without_a_secret_is_unchanged(text):
    assert redact_urls(text) == text
    assert scrub(text) == text


def test_urls_inside_text_are_redacted_and_the_line_kept():
    text = "remote: https://ci:pw-999@dvc.example/store?token=abc (shared)"
    assert redact_urls(text) == "remote: https://ci:***@dvc.example/store?token=*** (shared)"


# Token formats seen in diffs and configs (issue 35, item 6); each planted value, made up, must not survive.
GH_TOKEN = "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"
GL_TOKEN = "glpat-" + "aB3dE5fG7hI9jK1lM3nO"
HF_TOKEN = "hf_" + "AbCdEfGhIjKlMnOpQrStUvWxYz01234567"
JWT = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJwbGFudGVkIn0.c2lnbmF0dXJlLXBsYW50ZWQtZm9yLWEtdGVzdA"


@pytest.mark.parametrize(
    "text, planted, kept",
    [
        (f"+export GITHUB={GH_TOKEN}", GH_TOKEN, "+export GITHUB="),
        (f"remote = {GL_TOKEN} # ci", GL_TOKEN, "# ci"),
        (f"hub: {HF_TOKEN}", HF_TOKEN, "hub:"),
        (f"Authorization: Bearer {JWT}", JWT, "Authorization: Bearer"),
        (f"git clone https://{GH_TOKEN}@github.com/o/r.git", GH_TOKEN, "@github.com/o/r.git"),
        (
            "https://oauth2token0123456789abc@gitlab.example/r.git",
            "oauth2token0123456789abc",
            "@gitlab.example/r.git",
        ),
        (
            "https://b.s3.amazonaws.com/k?X-Amz-Credential=AK%2F1&X-Amz-Signature=5f1e2d",
            "5f1e2d",
            "X-Amz-Signature=***",
        ),
    ],
)
def test_token_formats_are_redacted_whole(text, planted, kept):
    out = scrub(text)
    assert planted not in out and "***" in out and kept in out, out
    assert not any(part in out for part in (planted[4:20], planted[-12:])), (
        out
    )  # no tail or head of it either


def test_the_study_record_is_redacted(tmp_path):
    """tune/space.yaml, best/overrides.txt, best/params.yaml and the study's params and tags go through the same
    redaction as every other record (a real SQLite store; the parent run is any run with a client and an id)."""
    from types import SimpleNamespace

    from mlflow import MlflowClient

    from tfpipe.tracking import study

    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    run_id = client.create_run(client.create_experiment("s", (tmp_path / "art").as_uri())).info.run_id
    parent = SimpleNamespace(client=client, run_id=run_id)
    url = f"https://me:{URL_PASSWORD}@host/x"
    study.record_space(
        parent, {"tune.base": f"tracking.uri={url}"}, f"base: [tracking.uri={url}]\ntoken: {HF_TOKEN}\n"
    )
    study.record_best(
        parent, {"best": 1.0}, {"tune.best": GH_TOKEN}, [f"tracking.uri={url}"], f"hub: {HF_TOKEN}\n"
    )
    run = client.get_run(run_id)
    texts = [
        client.download_artifacts(run_id, p, str(tmp_path))
        for p in ("tune/space.yaml", "best/overrides.txt", "best/params.yaml")
    ]
    everything = "".join(Path(t).read_text() for t in texts) + str(run.data.params) + str(run.data.tags)
    for planted in (URL_PASSWORD, HF_TOKEN, GH_TOKEN):
        assert planted not in everything, everything


# ----------------------------------------------------------------------------- detect-secrets scan


def test_scanner_replaces_access_keys_and_keyword_secrets_keeping_lines():
    text = f"[remote]\n    access_key_id = {ACCESS_KEY}\n+    secret_access_key = {SECRET_KEY}\nname = x\n"
    assert scan_text(text) == "[remote]\n    access_key_id = ***\n+    secret_access_key = ***\nname = x\n"


def test_scanner_keeps_md5_and_sha256_digests():
    """dvc.lock is full of digests the audit compares: hex has at most 4 bits of entropy a character, under
    the base64 limit, and the hex-entropy plugin is off."""
    lines = [
        f"      md5: {hashlib.md5(b'x').hexdigest()}",
        f"      md5: {hashlib.md5(b'y').hexdigest()}.dir",
        f"  sha256: {hashlib.sha256(b'x').hexdigest()}",
        f'"manifest_digest": "{hashlib.sha256(b"z").hexdigest()}"',
        f"git.commit: {hashlib.sha1(b'c').hexdigest()}",
        "detect-secrets==1.5.0",  # pip_freeze.txt: the audit compares it
    ]
    text = "\n".join(lines) + "\n"
    assert scan_text(text) == text


# ----------------------------------------------------------------------------- the whole store


def _plant(project: Path, env: dict) -> None:
    """Commit a notes file, then dirty it and `.dvc/config` with an access key and a query password."""
    from test_pipeline_e2e import _run

    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t"]
    (project / "notes.txt").write_text("team notes\n")
    _run([*git, "add", "notes.txt"], project, env)
    _run([*git, "commit", "-qm", "notes"], project, env)
    remote = f"['remote \"store\"']\n    url = s3://bucket/store\n    access_key_id = {ACCESS_KEY}\n"
    with open(project / ".dvc" / "config", "a") as fh:
        fh.write(f"{remote}    secret_access_key = {SECRET_KEY}\n")
    (project / "notes.txt").write_text(
        f"team notes\naws_access_key_id = {ACCESS_KEY}\naws_secret_access_key = {SECRET_KEY}\n"
        f"mirror: https://mirror.example/data?Password={QUERY_PASSWORD}\n"
    )


def _dump_store(project: Path) -> str:
    """Every row of every table of the SQLite store, and every file under the artifact root, as text."""
    with sqlite3.connect(project / "mlflow.db") as db:
        parts = list(db.iterdump())
    for path in sorted((project / "mlartifacts").rglob("*")):
        if path.is_file():
            parts.append(f"== {path}\n" + path.read_bytes().decode("utf-8", errors="replace"))
    return "\n".join(parts)


def _digests(lock_text: str) -> list:
    return [line.strip() for line in lock_text.splitlines() if line.strip().startswith(("md5:", "hash:"))]


@pytest.mark.slow
def test_no_planted_secret_reaches_the_store(tmp_path, image_dir, text_dir):
    """An access key + secret in a dirty `.dvc/config` and in a dirty tracked file, a `user:password@` URL
    and a `?password=` URL in the params (so in dvc.lock): after a real `dvc repro`, none of them is in the
    database or in any artifact; the logged dvc.lock keeps every digest."""
    from mlflow import MlflowClient
    from test_pipeline_e2e import _make_project, _run

    data_dir = f"https://reader:{URL_PASSWORD}@datasets.example/tfds?password={QUERY_PASSWORD}"
    project, env = _make_project(tmp_path, image_dir, text_dir, f"data.tfds_data_dir='{data_dir}'")
    _plant(project, env)
    _run([sys.executable, "-m", "dvc", "repro"], project, env)
    lock = (project / "dvc.lock").read_text()
    assert URL_PASSWORD in lock and QUERY_PASSWORD in lock  # really planted where the run reads it

    store = _dump_store(project)
    for secret in PLANTED:
        assert secret not in store, secret
    client = MlflowClient(tracking_uri=f"sqlite:///{project / 'mlflow.db'}")
    runs = client.search_runs([e.experiment_id for e in client.search_experiments()])
    assert any(".dvc/config" in r.data.tags.get("git.diff_excluded", "") for r in runs)
    logged_lock = next((project / "mlartifacts").rglob("provenance/dvc.lock")).read_text()
    # logged by train, before DVC wrote train/evaluate entries: its digests are the final lock's, intact
    assert _digests(logged_lock) and set(_digests(logged_lock)) <= set(_digests(lock))
    assert "notes.txt" in next((project / "mlartifacts").rglob("provenance/git_diff.patch")).read_text()

    # The audit compares the tree as the record was made: credential files out, secrets scrubbed, so the
    # unchanged dirty tree matches its own (redacted) record.
    run_id = (project / "run.json").read_text().split('"run_id": "')[1].split('"')[0]
    check = subprocess.run(
        [sys.executable, "-m", "pipeline.audit", run_id], cwd=project, env=env, capture_output=True, text=True
    )
    (code,) = [line.split() for line in check.stdout.splitlines() if line.startswith("code ")]
    assert code[1] == "match", check.stdout + check.stderr[-2000:]
