"""Errors users can act on. Each carries a one-line message that names the offending key or node."""


class PrimusppError(Exception):
    """Base of every error primuspp raises for bad input. `str(err)` is a single line."""

    def __init__(self, message: str, *, key: str | None = None) -> None:
        super().__init__(" ".join(message.split("\n")))
        self.key = key


class ConfigError(PrimusppError):
    """A configuration value, option or file is invalid."""


class ScheduleError(PrimusppError):
    """An algorithm refuses its input (unsupported p, v, m or parameter)."""


class ValidationError(PrimusppError):
    """A schedule table is invalid: incomplete, out of dependency order, mispaired, or it deadlocks."""
