"""The one redaction owner for free text logged to MLflow (diffs, dvc.lock, YAML, tags, sources).

`redact_urls` hides URL passwords (userinfo and secret-named query parameters, `is_secret_query_key`) via
`urlsplit`, and the same query values in text that is no whole URL (`/v1/items?X-Api-Key=...`); `scan_text`
runs detect-secrets (AWS keys, basic-auth URLs, secret keywords, private keys, long base64 strings of high
entropy, GitHub/GitLab/PyPI/OpenAI/Slack/Stripe/npm tokens, JWTs) line by line, plus `TokenDetector`: the
forms detect-secrets 1.5 has no plugin for (Hugging Face, Google API, npm and Anthropic keys outside their
config files, `token:`/`api_token =`/`Authorization: Bearer` values), built on its `RegexBasedDetector`; each
secret value becomes '***', the rest of its line kept. A URL's long user name with no password
(`https://<token>@host`) and signed-URL signatures (`X-Amz-Signature=`) are hidden too. Hex high-entropy
detection is off: dvc.lock and provenance are full of md5/sha256 digests and commit hashes that the audit
compares, and those must survive.
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
        "auth",
        "x-api-key",
        "private_token",  # GitLab
        "code",  # an OAuth authorization code (`/callback?code=...`)
    }
)
# a query parameter with one of these word parts holds a credential too (`X-Auth-Token`, `client_secret`)
_SECRET_QUERY_WORDS = frozenset(
    {"token", "secret", "password", "passwd", "apikey", "auth", "credential", "credentials", "signature"}
)
# ... and one ending in `key` after one of these (`subscription-key`, `access_key`; not `sort_key`)
_KEY_QUALIFIERS = frozenset(
    {"api", "access", "secret", "private", "client", "auth", "subscription", "account"}
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
    {"name": "NpmDetector"},  # .npmrc `//registry/:_authToken=` lines
    {"name": "OpenAIDetector"},
    {"name": "PypiTokenDetector"},
    {"name": "SlackDetector"},
    {"name": "StripeDetector"},
]
# A credential value after a keyword: letters and digits both (`Tk7fR2...`; not `os.environ`, `512`, `null`,
# `${oc.env:X}`), whole (the lookahead stops a backtrack to a shorter run) and not called or indexed (code).
_VALUE_CHARS = r"[A-Za-z0-9_\-.~+/]"
_KEYWORD_VALUE = (
    rf"(?={_VALUE_CHARS}*[0-9])(?={_VALUE_CHARS}*[A-Za-z])({_VALUE_CHARS}{{8,}}=*)(?![\w\-.~+/=(\[])"
)
_HEADER_VALUE = rf"({_VALUE_CHARS}{{8,}}=*)(?![\w\-.~+/=])"  # an Authorization header's credential: any
_TOKEN_CHARS = r"[A-Za-z0-9_\-.]"  # what a token is made of, around the part a plugin reports
TOKEN_USERNAME_LENGTH = 20  # a URL user name this long, with no password, is a token (https://<token>@host)
# a version number is no secret (the keyword plugin reads `detect-secrets==1.5.0` in pip_freeze.txt as one)
_VERSION = re.compile(r"\d+(\.\d+)*([a-z]+\d*)?(\.post\d+|\.dev\d+)?")
# a scheme is short: bounded (and started at a word's start), the search stays linear on a long line of words
_URL = re.compile(r"(?<![a-zA-Z0-9+.-])[a-zA-Z][a-zA-Z0-9+.-]{0,31}://[^\s'\"<>]+")
# `?name=value` / `&name=value` anywhere: urlsplit cannot read a URL with no scheme (`/v1?X-Api-Key=...`)
_QUERY_PAIR = re.compile(r"(?<=[?&])([A-Za-z][\w.\-]*)=([^&#\s'\"<>`]+)")


def is_secret_query_key(name: str) -> bool:
    """A query parameter whose value is a credential: `password`, `X-Api-Key`, `private_token`, `code`, ..."""
    lowered = name.lower()
    if lowered in SECRET_QUERY_KEYS:
        return True
    parts = [p for p in re.split(r"[^a-z0-9]+", lowered) if p]
    if any(p in _SECRET_QUERY_WORDS for p in parts):
        return True
    return len(parts) >= 2 and parts[-1] == "key" and parts[-2] in _KEY_QUALIFIERS


def redact_url(url: str) -> str:
    """One URL with its userinfo password and secret query values replaced by '***'."""
    try:
        parts = urlsplit(url)
        password = parts.password
    except ValueError:
        return url
    pairs = parse_qsl(parts.query, keep_blank_values=True)
    secret_query = any(is_secret_query_key(k) for k, _ in pairs)
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
        query = urlencode([(k, REDACTED if is_secret_query_key(k) else v) for k, v in pairs], safe="*")
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def redact_urls(text: str) -> str:
    """Every URL inside `text` passed through `redact_url`, and secret `?name=value` pairs of text that is no
    whole URL (a relative one in a diff); the rest of the text unchanged."""
    return _QUERY_PAIR.sub(_query_pair, _URL.sub(lambda m: redact_url(m.group(0)), text))


def _query_pair(match: re.Match) -> str:
    return f"{match.group(1)}={REDACTED}" if is_secret_query_key(match.group(1)) else match.group(0)


@functools.lru_cache(maxsize=1)
def _plugins() -> tuple:
    """The detect-secrets plugins of PLUGINS and `token_detector`, built once (on first use: detect-secrets
    imports requests)."""
    from detect_secrets.settings import get_plugins, transient_settings

    with transient_settings({"plugins_used": PLUGINS}):
        return (*get_plugins(), token_detector())


def token_detector():
    """The forms detect-secrets 1.5 has no plugin for, as a plugin of its own kind (`RegexBasedDetector`, its
    `build_assignment_regex`); each pattern says why it is ours."""
    from detect_secrets.plugins.base import RegexBasedDetector

    assignment = RegexBasedDetector.build_assignment_regex

    class TokenDetector(RegexBasedDetector):
        secret_type = "tfpipe: token"
        denylist = (
            # Hugging Face access tokens (hf_ + 34 letters/digits): no plugin
            re.compile(r"\b(hf_[A-Za-z0-9]{30,})\b"),
            # Google API keys: no plugin
            re.compile(r"\b(AIza[0-9A-Za-z_\-]{35})(?![0-9A-Za-z_\-])"),
            # npm access tokens outside .npmrc: NpmDetector reads only `//registry/:_authToken=` lines
            re.compile(r"\b(npm_[A-Za-z0-9]{36})\b"),
            # Anthropic API keys: OpenAIDetector knows only OpenAI's `T3BlbkFJ` marker
            re.compile(r"\b(sk-ant-[A-Za-z0-9_\-]{20,})"),
            # `token: v`, `api_token = v`, `X-Auth-Token: v`, `X-Api-Key: v`: not KeywordDetector's words
            assignment(
                prefix_regex=r"(?:[a-z0-9]{1,24}[_-]){0,4}[a-z0-9]{0,24}",  # bounded: linear on long lines
                secret_keyword_regex=r"(?:token|auth|authorization|api-key)",
                secret_regex=_KEYWORD_VALUE,
            ),
            # `Authorization: Bearer v` (Basic, ...): no plugin reads the header; JwtTokenDetector only JWTs
            assignment(
                prefix_regex=r"(?:proxy-)?",
                secret_keyword_regex="authorization",
                secret_regex=rf"(?:bearer|basic|token|digest|negotiate)\s+{_HEADER_VALUE}",
            ),
            # a bearer token quoted without its header (an error message, a log line): no plugin either
            re.compile(rf"(?i)\bbearer\s+{_KEYWORD_VALUE}"),
        )

    return TokenDetector()


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
        # the token plugins report only the part their pattern captures (`ghp`, a JWT's head): the whole token goes
        line = re.sub(rf"{_TOKEN_CHARS}*{re.escape(value)}{_TOKEN_CHARS}*", REDACTED, line)
    return line


def scrub(text: str) -> str:
    """URLs redacted, then the detect-secrets scan: what every logged text passes through."""
    return scan_text(redact_urls(text))
