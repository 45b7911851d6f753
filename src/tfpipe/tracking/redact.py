"""Keep credentials out of MLflow: secret-looking keys are logged as '***'.

A key is secret when one of its word parts (split on anything but letters/digits, and on
camelCase) is a credential word, or when it contains an unambiguous one anywhere:
  secret: `db.password`, `api_key`, `apiKey`, `aws_access_key_id`, `hf_token`, `client_secret`,
          `credentials_file`, `auth`
  not:    `dataset.max_tokens`, `train.max_checkpoints_to_keep`, `keyboard`, `monkey`
Every logged string also passes `redact_text`: URL passwords (userinfo and `?password=`-like query
values) and whatever detect-secrets finds (`tracking.secrets`) become '***'.
Values of environment variables with a secret-looking name (`AWS_SECRET_ACCESS_KEY`, `HF_TOKEN`,
`MLFLOW_TRACKING_PASSWORD`, ...) are replaced by '***' wherever they appear inside any logged
string (a config value interpolated with `${oc.env:...}`, a URL, a path), so a credential that
reaches the config through the environment is not recorded either. A value hidden for its key
(`db.password: ${oc.env:DB_PASS}`) is remembered for the rest of the process (`remember_secret`), and so is
any environment value inside it whatever the variable's name: each is '***' wherever it appears later (the
`tfpipe.failure` tag, a tag, a text artifact). Values shorter than `MIN_SECRET_LENGTH` characters, plain
booleans/numbers and plain words (`labels`, `input_ids`: no digit, no punctuation) are left alone (too common
to be secrets), and so are paths among the environment values (`HOME` inside a credentials file's path).
"""

from __future__ import annotations

import os
import re
import threading

from tfpipe.provenance import environ_snapshot  # noqa: F401 - re-exported
from tfpipe.tracking.secrets import REDACTED, scrub

MIN_SECRET_LENGTH = 6
# environment variables whose names look secret but hold no credential (the working directory, sockets)
_NOT_SECRET_ENV = frozenset({"PWD", "OLDPWD", "SSH_AUTH_SOCK", "XAUTHORITY", "GPG_AGENT_INFO"})
# word parts that mark a key as a credential
_SECRET_WORDS = frozenset(
    {
        "password",
        "passwd",
        "pwd",
        "passphrase",
        "token",
        "secret",
        "key",
        "apikey",
        "access",
        "credential",
        "credentials",
        "auth",
        "authorization",
        "cookie",
    }
)
# substrings that mark a key as a credential wherever they occur (e.g. `dbpassword`)
_SECRET_SUBSTRINGS = ("password", "passwd", "secret", "credential", "apikey", "accesskey", "privatekey")
INTERPOLATED_MIN_LENGTH = 8  # an environment value found inside a hidden one: longer, to be no coincidence
# a value with no digit and no punctuation is a word (`labels`, `input_ids`) that other records need
_PLAIN_WORD = re.compile(r"[A-Za-z_.\-]+")
_remembered: set = set()  # values hidden for their key, hidden wherever they appear later in this process
_remembered_lock = threading.Lock()
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
_PARTS = re.compile(r"[^a-z0-9]+")


def is_secret_key(key: str) -> bool:
    lowered = _CAMEL.sub("_", str(key)).lower()
    parts = [p for p in _PARTS.split(lowered) if p]
    if any(p in _SECRET_WORDS for p in parts):
        return True
    squashed = "".join(parts)
    return any(s in squashed for s in _SECRET_SUBSTRINGS)


def secret_env_values(environ=None) -> list:
    """Values of environment variables whose names look like credentials, longest first."""
    values = set()
    for name, value in environ_snapshot(environ).items():
        value = (value or "").strip()
        if len(value) < MIN_SECRET_LENGTH or value.lower() in ("true", "false", "none", "null"):
            continue
        if _is_number(value) or name.upper() in _NOT_SECRET_ENV or not is_secret_key(name):
            continue
        values.add(value)
    return sorted(values, key=len, reverse=True)


def _is_number(text: str) -> bool:
    try:
        float(text)
        return True
    except ValueError:
        return False


def _plausible_secret(text: str) -> bool:
    if len(text) < MIN_SECRET_LENGTH or text.lower() in ("true", "false", "none", "null"):
        return False
    return not _is_number(text) and not _PLAIN_WORD.fullmatch(text) and text != REDACTED


def remember_secret(value, environ=None) -> None:
    """`value` was hidden for its key: hide it, and each environment value inside it (what `${oc.env:...}`
    interpolated, whatever the variable's name), wherever it appears from now on in this process."""
    text = str(value).strip()
    found = {text} if _plausible_secret(text) else set()
    for env_value in environ_snapshot(environ).values():
        env_value = (env_value or "").strip()
        if len(env_value) >= INTERPOLATED_MIN_LENGTH and env_value in text and not os.path.isabs(env_value):
            if _plausible_secret(env_value):
                found.add(env_value)
    if found:
        with _remembered_lock:
            _remembered.update(found)


def forget_secrets() -> None:
    """Forget what `remember_secret` learned (tests; a new process starts empty anyway)."""
    with _remembered_lock:
        _remembered.clear()


def redact_text(value: str, environ=None) -> str:
    """Any logged string made safe: URL passwords and secret query values -> '***', each secret
    detect-secrets finds -> '***' (`tracking.secrets.scrub`), and any secret environment value or value
    hidden earlier for its key (`remember_secret`) -> '***'."""
    value = scrub(value)
    with _remembered_lock:
        remembered = tuple(_remembered)
    for secret in sorted({*secret_env_values(environ), *remembered}, key=len, reverse=True):
        if secret in value:
            value = value.replace(secret, REDACTED)
    return value


redact_url = redact_text  # the name the URI error messages use


def redact_strings(tree):
    """`redact_text` applied to every string of nested dicts/lists, the keys too (provenance.json, a data report
    whose class names or file names are keys, an audit's report); a key that is no secret is kept as it is."""
    if isinstance(tree, dict):
        return {(redact_text(k) if isinstance(k, str) else k): redact_strings(v) for k, v in tree.items()}
    if isinstance(tree, (list, tuple)):
        return [redact_strings(v) for v in tree]
    return redact_text(tree) if isinstance(tree, str) else tree


def redact(mapping: dict) -> dict:
    """Copy of a flat mapping with secret keys' values replaced by '***' (and URL passwords hidden)."""
    out = {}
    for key, value in mapping.items():
        if is_secret_key(key) and value is not None and value != "":
            remember_secret(value)
            out[key] = REDACTED
        elif isinstance(value, str):
            out[key] = redact_text(value)
        else:
            out[key] = value
    return out


def redact_tree(tree):
    """`redact` applied through nested dicts/lists (for the resolved config YAML)."""
    if isinstance(tree, dict):
        out = {}
        for k, v in tree.items():
            if is_secret_key(k) and v not in (None, "") and not isinstance(v, (dict, list)):
                remember_secret(v)
                out[k] = REDACTED
            else:
                out[k] = redact_tree(v)
        return out
    if isinstance(tree, list):
        return [redact_tree(v) for v in tree]
    if isinstance(tree, str):
        return redact_text(tree)
    return tree
