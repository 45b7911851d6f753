"""One-line checks of single values: each raises ConfigError naming the key, the value and what is allowed."""

from __future__ import annotations

import difflib
import re
from typing import Any, Optional

from tfpipe import strategies
from tfpipe.choices import TRACKING_SCHEMES
from tfpipe.errors import ConfigError

LAUNCHERS = ("local", "ray")  # strategy.launcher: tfpipe.launch.local, or Ray Train (tfpipe.launch.ray)

# a tf.distribute device string: [/job:J][/replica:R][/task:T]/[device:]TYPE[:INDEX]
DEVICE_RE = re.compile(
    r"^(?:/job:[A-Za-z0-9_-]+)?(?:/replica:\d+)?(?:/task:\d+)?/?(?:device:)?(?P<type>cpu|gpu|tpu)(?::(?P<index>\d+))?$",
    re.IGNORECASE,
)


def did_you_mean(value: Any, allowed, prefix: str = "", suffix: str = "") -> str:
    hint = difflib.get_close_matches(str(value), list(allowed), n=1)
    return f" (did you mean '{prefix}{hint[0]}{suffix}'?)" if hint else ""


def choice(key: str, value: Any, allowed: tuple) -> None:
    if value not in allowed:
        raise ConfigError(
            f"{key}={value!r}: not allowed{did_you_mean(value, allowed)}; allowed: {', '.join(allowed)}"
        )


def positive(key: str, value: Any, allow_none: bool = False) -> None:
    if value is None and allow_none:
        return
    if value is None or value <= 0:
        raise ConfigError(f"{key}={value!r}: must be > 0")


def non_negative(key: str, value: float) -> None:
    if value < 0:
        raise ConfigError(f"{key}={value!r}: must be >= 0")


def launcher(value: str, strategy: str) -> None:
    """strategy.launcher: local, or ray (Ray Train's TensorflowTrainer sets TF_CONFIG up for workers alone)."""
    choice("strategy.launcher", value, LAUNCHERS)
    if value == "ray" and not strategies.spec(strategy).workers_only:
        allowed = strategies.names(workers_only=True)
        raise ConfigError(
            f"strategy.launcher=ray: Ray Train runs only {', '.join(allowed)}, not "
            f"strategy.name={strategy!r}; use strategy={allowed[0]}, or strategy.launcher=local"
        )


def device(key: str, value: str) -> None:
    """A tf.distribute device string (whether the device exists is checked at stage start: tfpipe.preflight)."""
    if not DEVICE_RE.match(str(value).strip()):
        raise ConfigError(
            f"{key}={value!r}: not a device name; allowed: /cpu:N, /gpu:N, /tpu:N "
            "(or the long form /job:J/replica:R/task:T/device:GPU:N)"
        )


def tracking_uri(key: str, uri: Optional[str]) -> None:
    """Refuse a tracking URI MLflow would choke on late (typo in the scheme, no host)."""
    if uri is None or not str(uri).strip():
        return
    uri = str(uri).strip()
    if uri.startswith("databricks") or "://" not in uri:
        if uri.startswith(("sqlite:", "http:", "https:")):  # scheme without '//'
            raise ConfigError(
                f"{key}={uri!r}: missing '//' after the scheme; e.g. sqlite:///mlflow.db, http://host:5000"
            )
        return  # a folder path (file store), file:PATH or databricks[://profile]
    scheme = uri.split("://", 1)[0].lower()
    base = scheme.split("+", 1)[0]  # postgresql+psycopg2
    if base not in TRACKING_SCHEMES:
        raise ConfigError(
            f"{key}={uri!r}: unknown scheme '{scheme}'{did_you_mean(base, TRACKING_SCHEMES)}; allowed: "
            f"{', '.join(TRACKING_SCHEMES)} or a folder path"
        )
    if base in ("http", "https") and not uri.split("://", 1)[1].split("/", 1)[0]:
        raise ConfigError(f"{key}={uri!r}: no host; allowed: http(s)://HOST[:PORT]")


ALIAS_CHARS = re.compile(r"^[\w-]+$")  # MLflow's rule for registry aliases; 'latest' and 'v<N>' are reserved


def registry_alias(key: str, alias: Optional[str], allow_none: bool = False) -> None:
    if alias is None and allow_none:
        return
    text = str(alias or "")
    if not ALIAS_CHARS.match(text) or text.lower() == "latest" or re.match(r"^[vV]\d+$", text):
        raise ConfigError(
            f"{key}={alias!r}: not a valid registry alias; use letters, digits, '_' or '-' "
            "(not 'latest' or 'v<number>', which MLflow reserves)"
        )


def registry_name(key: str, name: Optional[str]) -> None:
    """A registered model name must survive a `models:/NAME@ALIAS` URI."""
    if name is not None and (not str(name).strip() or any(c in str(name) for c in "/@:'")):
        raise ConfigError(
            f"{key}={name!r}: not a usable registered model name; no '/', '@', ':' or quote, not empty"
        )


def dataset_name(name: Any, tfds_name: Any, source: str) -> None:
    """dataset.name names folders, runs and the registered model: a safe identifier; TFDS needs a builder."""
    from tfpipe import choices

    if not isinstance(name, str) or not re.fullmatch(choices.DATASET_NAME_RE, name) or ".." in name:
        raise ConfigError(f"dataset.name={name!r}: allowed: {choices.DATASET_NAME_RULE}")
    if source == "tfds" and not tfds_name:
        raise ConfigError(
            f"dataset.tfds_name=None: data.source=tfds needs the TFDS builder name of dataset {name!r}; "
            "for a local class-per-folder tree set data.source=directory"
        )
