"""The one redaction owner for free text logged to MLflow (diffs, dvc.lock, YAML, tags, sources).

`redact_urls` hides URL passwords (userinfo and secret-named query parameters) via `urlsplit`;
`scan_text` runs detect-secrets (AWS keys, basic-auth URLs, secret keywords, private keys, long
base64 strings of high entropy, GitHub/GitLab/PyPI/OpenAI/Slack/Stripe tokens, JWTs) line by line, plus the
Hugging Face token pattern it lacks, and replaces each secret value with '***'; a URL's long user name with no
password (`https://<token>@host`) and signed-URL signatures (`X-Amz-Signature=`) are hidden too. Hex
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
        "signature",
        "x-amz-signature",  # S3 pre-signed URLs
        "x-amz-credential",
        "x-amz-security-token",
        "x-goog-signature",  # GCS signed URLs
        "x-goog-credential",
    }
)
PLUGINS = [
    {"name": "AWSKeyDetector"},
    {"name": "BasicAuthDetector"},
    {"name": "KeywordDetector"},
    {"name": "PrivateKeyDetector"},
    {"name": "Base64HighEntropyString", "limit": 4.5},
    {"name": "GitHubTokenDetector"},  # ghp_, gho_, ghs_, github_pat_ ...
    {"name": "GitLabTokenDetector"},  # glpat-, gldt- ...
    {"name": "JwtTokenDetector"},
    {"name": "OpenAIDetector"},
    {"name": "PypiTokenDetector"},
    {"name": "SlackDetector"},
    {"name": "StripeDetector"},
]
# Tokens detect-secrets 1.5 has no plugin for: Hugging Face access tokens (hf_ + 34 letters/digits).
_EXTRA_TOKENS = re.compile(r"\bhf_[A-Za-z0-9]{30,}\b")
_TOKEN_CHARS = r"[A-Za-z0-9_\-.]"  # what a token is made of, around the part a plugin reports
TOKEN_USERNAME_LENGTH = 20  # a URL user name this long, with no password, is a token (https://<token>@host)
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
    token_user = not password and len(parts.username or "") >= TOKEN_USERNAME_LENGTH
    if not password and not secret_query and not token_user:
        return url  # unchanged byte for byte (urlunsplit would turn sqlite:///x into sqlite:/x)
    netloc = parts.netloc
    if password:
        userinfo, host = netloc.rsplit("@", 1)
        netloc = f"{userinfo.split(':', 1)[0]}:{REDACTED}@{host}"
    elif token_user:
        netloc = f"{REDACTED}@{netloc.rsplit('@', 1)[1]}"
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
    text = _EXTRA_TOKENS.sub(REDACTED, text)
    return "\n".join(_scan_line(plugins, line, i + 1) for i, line in enumerate(text.split("\n")))


def _scan_line(plugins, line: str, number: int) -> str:
    # the yaml file type makes the keyword plugin read `key: value` and `key = value` lines
    values = {
        s.secret_value
        for p in plugins
        for s in p.analyze_line(filename="scan.yaml", line=line, line_number=number)
    }
    for value in sorted((v for v in values if v and not _VERSION.fullmatch(v)), key=len, reverse=True):
        # the token plugins report only the part their pattern captures (`ghp`, a JWT's head): the whole token goes
        line = re.sub(rf"{_TOKEN_CHARS}*{re.escape(value)}{_TOKEN_CHARS}*", REDACTED, line)
    return line


def scrub(text: str) -> str:
    """URLs redacted, then the detect-secrets scan: what every logged text passes through."""
    return scan_text(redact_urls(text))
