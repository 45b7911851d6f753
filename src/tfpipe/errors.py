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
