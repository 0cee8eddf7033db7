"""The error root: every bad input and every damaged file is a `ConfigError`, which the CLI prints as one line
and answers with exit code 2. A module of its own, with no heavy imports, so the CLI can catch it without loading
torch."""

import reprlib

_EXCERPT = reprlib.Repr()
_EXCERPT.maxlevel, _EXCERPT.maxstring, _EXCERPT.maxother = 3, 60, 60
_EXCERPT.maxlist = _EXCERPT.maxtuple = _EXCERPT.maxdict = _EXCERPT.maxset = 6


def excerpt(value: object) -> str:
    """A value as an error message quotes it: at most a few levels and items, never the whole of a huge value."""
    return _EXCERPT.repr(value)


class ConfigError(ValueError):
    """Invalid user input; the CLI prints it as one line and exits 2."""


class DamagedFileError(ConfigError):
    """A file of a run directory or store that cannot be what the run wrote; the message names it and the fix."""
