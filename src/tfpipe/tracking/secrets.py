"""The one redaction owner for free text logged to MLflow (diffs, dvc.lock, YAML, tags, sources).

`redact_urls` hides URL passwords (userinfo and secret-named query parameters) via `urlsplit`;
`scan_text` runs detect-secrets (AWS keys, basic-auth URLs, secret keywords, private keys, long
base64 strings of high entropy) line by line and replaces each secret value with '***'. Hex
high-entropy detection is off: dvc.lock and provenance are full of md5/sha256 digests that the
audit compares, and those must survive.
"""

from __future__ import annotations

import functools
import re
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

REDACTED = "***"
# query parameter names whose value is a credential (compared lower-cased)
SECRET_QUERY_KEYS = frozenset(
    {
        "password",
        "passwd",
        "pwd",
        "pass",
        "token",
        "access_token",
        "secret",
        "key",
        "api_key",
        "apikey",
        "sig",
    }
)
PLUGINS = [
    {"name": "AWSKeyDetector"},
    {"name": "BasicAuthDetector"},
    {"name": "KeywordDetector"},
    {"name": "PrivateKeyDetector"},
    {"name": "Base64HighEntropyString", "limit": 4.5},
]
# a version number is no secret (the keyword plugin reads `detect-secrets==1.5.0` in pip_freeze.txt as one)
_VERSION = re.compile(r"\d+(\.\d+)*([a-z]+\d*)?(\.post\d+|\.dev\d+)?")
_URL = re.compile(r"[a-zA-Z][a-zA-Z0-9+.-]*://[^\s'\"<>]+")


def redact_url(url: str) -> str:
    """One URL with its userinfo password and secret query values replaced by '***'."""
    try:
        parts = urlsplit(url)
        password = parts.password
    except ValueError:
        return url
    pairs = parse_qsl(parts.query, keep_blank_values=True)
    secret_query = any(k.lower() in SECRET_QUERY_KEYS for k, _ in pairs)
    if not password and not secret_query:
        return url  # unchanged byte for byte (urlunsplit would turn sqlite:///x into sqlite:/x)
    netloc = parts.netloc
    if password:
        userinfo, host = netloc.rsplit("@", 1)
        netloc = f"{userinfo.split(':', 1)[0]}:{REDACTED}@{host}"
    query = parts.query
    if secret_query:
        query = urlencode(
            [(k, REDACTED if k.lower() in SECRET_QUERY_KEYS else v) for k, v in pairs], safe="*"
        )
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def redact_urls(text: str) -> str:
    """Every URL inside `text` passed through `redact_url`; the rest of the text unchanged."""
    return _URL.sub(lambda m: redact_url(m.group(0)), text)


@functools.lru_cache(maxsize=1)
def _plugins() -> tuple:
    """The detect-secrets plugins of PLUGINS, built once (their settings are read at construction)."""
    from detect_secrets.settings import get_plugins, transient_settings

    with transient_settings({"plugins_used": PLUGINS}):
        return tuple(get_plugins())


def scan_text(text: str) -> str:
    """Each secret value detect-secrets finds replaced by '***', the lines otherwise kept."""
    plugins = _plugins()
    return "\n".join(_scan_line(plugins, line, i + 1) for i, line in enumerate(text.split("\n")))


def _scan_line(plugins, line: str, number: int) -> str:
    # the yaml file type makes the keyword plugin read `key: value` and `key = value` lines
    values = {
        s.secret_value
        for p in plugins
        for s in p.analyze_line(filename="scan.yaml", line=line, line_number=number)
    }
    for value in sorted((v for v in values if v and not _VERSION.fullmatch(v)), key=len, reverse=True):
        line = line.replace(value, REDACTED)
    return line


def scrub(text: str) -> str:
    """URLs redacted, then the detect-secrets scan: what every logged text passes through."""
    return scan_text(redact_urls(text))
