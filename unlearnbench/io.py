"""Atomic file writes: temp file in the same folder, fsync, rename. A reader never sees a torn file. And YAML read
with its aliases bounded."""

from __future__ import annotations

import glob
import hashlib
import json
import os
import socket
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


#: this host, as it names its temp files: a process id means something on its own host only (a store or run folder
#: may be shared by several nodes)
_HOST = hashlib.blake2b(socket.gethostname().encode(), digest_size=4).hexdigest()


def _temp_prefix(path: Path) -> str:
    """The start of the names of `path`'s temp files from this host; the writer's process id follows."""
    return f".{path.name}.{_HOST}-"


def _remove_abandoned_temp_files(path: Path) -> None:
    """The temp files of `path` whose writer, a process of this host, is gone: a kill between the write and the
    rename left them. A live writer's (another process writing `path` now) and another host's are left alone."""
    for temp in path.parent.glob(f"{glob.escape(_temp_prefix(path))}*.tmp"):
        pid = temp.name.removeprefix(_temp_prefix(path)).split(".", 1)[0]
        if pid.isdigit() and not _alive(int(pid)):
            temp.unlink(missing_ok=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def write_atomic(path: Path, write: Callable[[IO[bytes]], Any]) -> None:
    """Call `write(f)` on a temp file beside `path`, fsync it, then rename it over `path`.

    The temp file is named by this host and process, so that the next write of `path` removes what a killed
    writer left behind (`_remove_abandoned_temp_files`): a run killed at any point and run again leaves no
    temp file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    _remove_abandoned_temp_files(path)
    fd, tmp = tempfile.mkstemp(prefix=f"{_temp_prefix(path)}{os.getpid()}.", suffix=".tmp", dir=path.parent)
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


#: The most nodes a YAML document we read may expand to, aliases counted as often as they are used. A config file
#: has hundreds; ten levels of `&a [*b, *b, ...]` expand to billions (an "alias bomb"), which exhausts memory as soon
#: as anything walks the data, such as an error message that prints a value.
MAX_YAML_NODES = 100_000


def load_yaml(text: str):
    """`yaml.safe_load`, refusing (`yaml.YAMLError`) a document whose aliases expand past `MAX_YAML_NODES` nodes."""
    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        size = _expanded_size(node, {})
        if size > MAX_YAML_NODES:
            raise yaml.YAMLError(
                f"it holds more than {MAX_YAML_NODES:,} values once its aliases (*name) are expanded (an alias bomb?)"
            )
        return loader.construct_document(node)
    finally:
        loader.dispose()


def _expanded_size(node: yaml.Node, sizes: dict[int, int]) -> int:
    """Nodes under `node`, each alias counted in full; each node is walked once (a node that contains itself counts
    as too many)."""
    if id(node) in sizes:
        return sizes[id(node)]
    sizes[id(node)] = MAX_YAML_NODES + 1  # until known: a node reached again inside itself is a cycle
    if isinstance(node, yaml.SequenceNode):
        size = 1 + sum(_expanded_size(child, sizes) for child in node.value)
    elif isinstance(node, yaml.MappingNode):
        size = 1 + sum(_expanded_size(key, sizes) + _expanded_size(value, sizes) for key, value in node.value)
    else:
        size = 1
    sizes[id(node)] = size
    return size
