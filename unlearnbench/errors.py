"""The error root: every bad input and every damaged file is a `ConfigError`, which the CLI prints as one line
and answers with exit code 2. A module of its own, with no imports, so the CLI can catch it without loading torch."""


class ConfigError(ValueError):
    """Invalid user input; the CLI prints it as one line and exits 2."""


class DamagedFileError(ConfigError):
    """A file of a run directory or store that cannot be what the run wrote; the message names it and the fix."""
