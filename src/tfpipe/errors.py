"""Errors meant for the user: the stage entry points print their one-line message and exit 2.

Kept free of heavy imports so a bad config is refused before TensorFlow loads.
"""


class UserError(Exception):
    """Bad input (config, data, tracking backend): the message is one line naming what is wrong."""


class ConfigError(UserError, ValueError):
    """A config key or value is not allowed."""


class DataError(UserError):
    """Source data or prepared data is missing, malformed or does not match its manifest."""


class TrackingError(UserError):
    """The MLflow backend cannot be used (unreachable, refused, or the run to resume is unknown)."""


USER_ERRORS = (UserError,)


def one_line(error: BaseException | str, limit: int | None = None) -> str:
    """An error (or text) as one line: its lines joined, whitespace collapsed; cut to `limit` characters."""
    text = " ".join(part.strip() for part in str(error).splitlines() if part.strip())
    if not text and isinstance(error, BaseException):
        text = type(error).__name__
    return text if limit is None or len(text) <= limit else text[: limit - 3] + "..."
