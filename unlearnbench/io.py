"""Atomic file writes: temp file in the same folder, fsync, rename. A reader never sees a torn file."""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

import yaml

from unlearnbench.errors import ConfigError


def _default_file_mode() -> int:
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


def write_atomic(path: Path, write: Callable[[IO[bytes]], Any]) -> None:
    """Call `write(f)` on a temp file beside `path`, fsync it, then rename it over `path`."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, _default_file_mode())
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)


def write_text_atomic(path: Path, text: str) -> None:
    write_atomic(path, lambda f: f.write(text.encode()))


def write_json_atomic(path: Path, data: Any) -> None:
    write_text_atomic(path, json.dumps(data, indent=1, allow_nan=True) + "\n")


def write_yaml_atomic(path: Path, data: Any) -> None:
    write_text_atomic(path, yaml.safe_dump(data, sort_keys=False))


def check_writable_directory(path: Path) -> None:
    """`path` is, or can be created as, a directory we may write into."""
    existing = path
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir():
        raise ConfigError(f"{existing} exists and is not a directory; choose another location than {path}")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise ConfigError(f"{existing} is not writable; choose another location than {path}")
