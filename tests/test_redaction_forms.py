"""Issue 50, item 7: each credential form is '***' wherever tfpipe writes text to the store (the recorded git
diff, a tag value, a param value, the `tfpipe.failure` tag), the rest of its line kept; digests, commit hashes
and counts that merely look alike survive untouched. Every planted value is made up (and split, so no secret
scanner takes this file for a leak)."""

from __future__ import annotations

import hashlib

import pytest

from tfpipe.errors import one_line
from tfpipe.tracking.redact import forget_secrets, redact, redact_text, redact_tree

GOOGLE_KEY = "AIza" + "SyD3x9Qm7Lp2Vt8Rk4Wn6Zc1Hb5Jf0Gs_eQ"
NPM_TOKEN = "npm_" + "Q7wE3rT9yU1iO5pA2sD8fG4hJ6kL0zX9cV3b"
ANTHROPIC_KEY = "sk-ant-" + "api03-" + "Zx8Kq2Lm5Np9Rt3Vw7Yb1Cd4Fg6Hj0Ks" * 3 + "AA"

# (id, the line as it appears in a diff/tag/param/message, the secret part, the parts of the line kept)
FORMS = [
    (
        "auth-query",
        "fetch https://api.example.com/v1/data?auth=Zq8vLm2RtY7pWx4K&page=2 (nightly)",
        "Zq8vLm2RtY7pWx4K",
        ("fetch https://api.example.com/v1/data?auth=", "&page=2 (nightly)"),
    ),
    (
        "x-api-key-query",
        'url = "https://api.example.com/v2/items?X-Api-Key=Kx93mQ0vTz7LpW2r&limit=10"',
        "Kx93mQ0vTz7LpW2r",
        ('url = "https://api.example.com/v2/items?X-Api-Key=', '&limit=10"'),
    ),
    (
        "x-api-key-relative-query",
        'path = f"/v2/items?X-Api-Key=Hn4cR8wQ2zL6tV1m&limit={n}"',
        "Hn4cR8wQ2zL6tV1m",
        ('path = f"/v2/items?X-Api-Key=', "&limit={n}"),
    ),
    (
        "token-colon",
        "  token: Tk7fR2mQ9vXz4LpW8sNc  # the hub's",
        "Tk7fR2mQ9vXz4LpW8sNc",
        ("  token:", "# the hub's"),
    ),
    ("api-token-equals", "api_token = Ap9dK3mQ7vXz2LpW5sNe", "Ap9dK3mQ7vXz2LpW5sNe", ("api_token =",)),
    (
        "authorization-bearer",
        "curl -H 'Authorization: Bearer Br3aZ8kQ1mV7xT5nL9pW' https://api.example.com/v1",
        "Br3aZ8kQ1mV7xT5nL9pW",
        ("curl -H 'Authorization: Bearer ", "' https://api.example.com/v1"),
    ),
    ("google-api-key", f"export MAPS={GOOGLE_KEY} && ./run.sh", GOOGLE_KEY, ("export MAPS=", " && ./run.sh")),
    ("npm-token", f"echo {NPM_TOKEN} > ~/.npm-token-file", NPM_TOKEN, ("echo ", " > ~/.npm-token-file")),
    ("anthropic-key", f"  judge: {ANTHROPIC_KEY}  # eval", ANTHROPIC_KEY, ("  judge: ", "  # eval")),
    (
        "private-token-query",
        "GET https://gitlab.example.com/api/v4/projects?private_token=Gp5tK8mQ2vX7zL4wR9sN&per_page=50",
        "Gp5tK8mQ2vX7zL4wR9sN",
        ("GET https://gitlab.example.com/api/v4/projects?private_token=", "&per_page=50"),
    ),
    (
        "oauth-code-query",
        "redirect to https://app.example.com/callback?code=Oc4hQ8mZ2vT7xL5wK9rN&state=ok",
        "Oc4hQ8mZ2vT7xL5wK9rN",
        ("redirect to https://app.example.com/callback?code=", "&state=ok"),
    ),
]
IDS = [form[0] for form in FORMS]

SHA256 = hashlib.sha256(b"weights").hexdigest()
MD5 = hashlib.md5(b"shard").hexdigest()
COMMIT = hashlib.sha1(b"commit").hexdigest()
# Lines that look a little like the forms above and hold no credential: kept byte for byte.
HARMLESS = [
    "token_count: 5",
    "max_tokens: 512",
    "dataset.max_tokens = 20000",
    "tokenizer: bert-base-uncased",
    "token_type: Bearer",
    "auth_method: oauth2",
    "exit code=2 after 3 retries",
    "https://example.com/search?q=tokens&page=2&sort=name",
    "https://h/x?X-Sig=1&code_version=v2",
    f"commit {COMMIT}",
    f"git.commit: {COMMIT}",
    f"weights.sha256: {SHA256}",
    f'"weights_sha256": "{SHA256}"',
    f"      md5: {MD5}",
    f"      md5: {MD5}.dir",
    f"  hash: md5\n  md5: {MD5}\n  size: 1234",
    "token: ${oc.env:HF_TOKEN}",
    "token: null",
    "detect-secrets==1.5.0",
    "https://me@host/x?page=2",
]


@pytest.fixture(autouse=True)
def _no_remembered_secrets():
    forget_secrets()
    yield
    forget_secrets()


def _assert_redacted(out: str, secret: str, kept) -> None:
    assert secret not in out, out
    assert secret[:8] not in out and secret[-8:] not in out, out  # no head or tail of it either
    assert "***" in out, out
    for part in kept:
        assert part in out, (part, out)


# ----------------------------------------------------------------------------- each form, each place


@pytest.mark.parametrize("form, line, secret, kept", FORMS, ids=IDS)
def test_form_in_a_recorded_diff(form, line, secret, kept):
    head = "diff --git a/run.sh b/run.sh\n--- a/run.sh\n+++ b/run.sh\n@@ -1,2 +1,2 @@\n-echo old\n"
    out = redact_text(f"{head}+{line}\n same\n")
    _assert_redacted(out, secret, [f"+{kept[0]}", *kept[1:]])
    assert out.startswith(head) and out.endswith("\n same\n")  # the other lines as they were


@pytest.mark.parametrize("form, line, secret, kept", FORMS, ids=IDS)
def test_form_in_a_tag_value(form, line, secret, kept):
    _assert_redacted(redact({"note": line})["note"], secret, kept)


@pytest.mark.parametrize("form, line, secret, kept", FORMS, ids=IDS)
def test_form_in_a_param_value(form, line, secret, kept):
    out = redact({"data.source": line, "train.epochs": 3})
    _assert_redacted(out["data.source"], secret, kept)
    assert out["train.epochs"] == 3
    _assert_redacted(redact_tree({"data": {"source": line}})["data"]["source"], secret, kept)


@pytest.mark.parametrize("form, line, secret, kept", FORMS, ids=IDS)
def test_form_in_a_failure_message(form, line, secret, kept):
    message = one_line(RuntimeError(f"stage train failed:\n  {line}\n"), 500)
    # one_line joins the lines with their indentation stripped
    _assert_redacted(redact_text(message), secret, [*(part.strip() for part in kept), "stage train failed:"])


@pytest.mark.parametrize("text", HARMLESS)
def test_harmless_text_is_kept_byte_for_byte(text):
    assert redact_text(text) == text
    assert redact({"note": text}) == {"note": text}
    diff = f"+{text}\n-{text}\n {text}\n"
    assert redact_text(diff) == diff


def test_redaction_is_idempotent_on_every_form():
    """A record redacted twice (a text artifact whose source was already redacted) is the same record."""
    for _, line, _, _ in FORMS:
        once = redact_text(line)
        assert redact_text(once) == once, once


def test_a_long_line_is_scanned_in_linear_time():
    """A minified file in a diff is one long line of words: the URL and keyword patterns stay linear on it (the
    URL pattern's unbounded scheme took 25 s on this 180,000-character line)."""
    import time

    line = "-".join(["ababab"] * 30000)
    start = time.monotonic()
    assert redact_text(line) == line
    assert time.monotonic() - start < 10


# ----------------------------------------------------------------------------- interpolated env values


def test_an_env_value_a_secret_param_hid_is_hidden_in_every_later_text(monkeypatch):
    """`db.password: ${oc.env:DB_PASS}`: DB_PASS is no credential-like name, yet the param hid its value by
    the key; the failure message, a tag and a text artifact that quote the value hide it too."""
    value = "Pq7sW2xZ9kL4mN8v"
    monkeypatch.setenv("TFPIPE_TEST_DB_PASS", value)
    assert (
        redact_text(f"login as {value} refused") == f"login as {value} refused"
    )  # unknown until a key hides it
    assert redact({"db.password": value, "db.host": "db.example"}) == {
        "db.password": "***",
        "db.host": "db.example",
    }
    message = one_line(ConnectionError(f"postgres refused login with {value}: bad password"), 500)
    assert redact_text(message) == "postgres refused login with ***: bad password"
    assert redact({"note": f"used {value}"}) == {"note": "used ***"}


def test_an_env_value_interpolated_inside_a_secret_value_is_hidden_alone_too(monkeypatch):
    """`db.dsn_password: pre-${oc.env:X}-post`: X's value is hidden wherever it appears on its own too."""
    value = "Ev5nT8qW3zR6kM1x"
    monkeypatch.setenv("TFPIPE_TEST_INTERPOLATED", value)
    monkeypatch.setenv("TFPIPE_TEST_HOME", "/home/tfpipe-tester")  # a path: never hidden for being inside one
    redact_tree({"db": {"password": f"/home/tfpipe-tester:{value}:5432"}})
    assert redact_text(f"failed with {value}") == "failed with ***"
    assert redact_text("data in /home/tfpipe-tester/data") == "data in /home/tfpipe-tester/data"


# ----------------------------------------------------------------------------- the real store


def _store_run(tmp_path):
    from mlflow import MlflowClient

    from tfpipe.tracking.run import Run

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = MlflowClient(uri)
    experiment_id = client.create_experiment("forms", (tmp_path / "art").as_uri())
    run_id = client.create_run(experiment_id).info.run_id
    run = Run(
        run_id=run_id,
        experiment_id=experiment_id,
        tracking_uri=uri,
        run_name="r",
        stage="train",
        client=client,
    )
    return run, client


def test_no_form_reaches_the_store_and_harmless_records_survive(tmp_path):
    """Every form in the params, the tags and provenance/git_diff.patch of a real SQLite store: gone; the
    commit, the weights' sha256 and dvc.lock's md5 logged alongside: intact."""
    from pathlib import Path

    run, client = _store_run(tmp_path)
    diff = "".join(f"+{line}\n" for _, line, _, _ in FORMS) + f"+weights.sha256: {SHA256}\n"
    with run:
        # keys with no credential word (`form.auth-query` would hide the whole value for its key)
        run.log_params({f"form.f{i}": line for i, (_, line, _, _) in enumerate(FORMS)})
        run.set_tags(
            {**{f"note.f{i}": line for i, (_, line, _, _) in enumerate(FORMS)}, "git.commit": COMMIT}
        )
        run.log_provenance(
            {"git": {"commit": COMMIT, "diff": diff}, "dvc_lock": {"content": f"md5: {MD5}\n"}}
        )
    data = client.get_run(run.run_id).data
    patch = Path(
        client.download_artifacts(run.run_id, "provenance/git_diff.patch", str(tmp_path))
    ).read_text()
    lock = Path(client.download_artifacts(run.run_id, "provenance/dvc.lock", str(tmp_path))).read_text()
    for i, (_, _, secret, kept) in enumerate(FORMS):
        _assert_redacted(data.params[f"form.f{i}"], secret, kept)
        _assert_redacted(data.tags[f"note.f{i}"], secret, kept)
        assert secret not in patch and all(part in patch for part in kept), patch
    assert data.tags["git.commit"] == COMMIT and f"weights.sha256: {SHA256}" in patch and MD5 in lock


def test_the_failure_tag_in_the_store_is_redacted(tmp_path):
    """Each form in the exception that ends a run (one store, a run per form): the `tfpipe.failure` tag hides
    it, the rest of the message kept."""
    from tfpipe.tracking.run import Run

    run, client = _store_run(tmp_path)
    for _, line, secret, kept in FORMS:
        run_id = client.create_run(run.experiment_id).info.run_id
        failing = Run(
            run_id=run_id,
            experiment_id=run.experiment_id,
            tracking_uri="",
            run_name="r",
            stage="train",
            client=client,
        )
        with pytest.raises(RuntimeError):
            with failing:
                raise RuntimeError(f"stage train failed: {line}")
        _assert_redacted(
            client.get_run(run_id).data.tags["tfpipe.failure"], secret, [*kept, "stage train failed:"]
        )
