"""The error root: every bad input and every damaged file is a `ConfigError`, which the CLI prints as one line
and answers with exit code 2. A module of its own, with no heavy imports, so the CLI can catch it without loading
torch."""

import logging
import reprlib
import sys

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


class _WarningLine(logging.Handler):
    """The package's warnings (`logging.warning`) as the commands print their errors: one line on stderr."""

    def emit(self, record: logging.LogRecord) -> None:
        print(f"unlearnbench: warning: {record.getMessage()}", file=sys.stderr)


def print_warnings_as_lines() -> None:
    """The commands' own warnings are problems the command worked around but the user must know of (a damaged model
    store entry retrained): printed as one line each, on stderr, so `--quiet true`, which silences stdout and the
    libraries' warnings, keeps them. Called by the command line only, never at import (a library user keeps their
    logging configuration); once per process, however many commands it runs."""
    logger = logging.getLogger("unlearnbench")
    if not any(isinstance(handler, _WarningLine) for handler in logger.handlers):
        logger.addHandler(_WarningLine(logging.WARNING))
