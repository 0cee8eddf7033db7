"""Where a number came from: package version, git commit, device, library versions and method code of each session.

Recorded by the run directory (`provenance.json`, one entry per session, so a resumed run shows
every machine it ran on) and read by the leaderboard's provenance section. The method's code
(`method_code`: the package that defines it, its version and a hash of each module of its import
closure, guards included) is
compared on every rerun: a finished run whose method changed since says so, and a partial one is
not resumed into a mix of two versions' numbers. It is provenance, not identity: the run's name
stays the same, so a code change is reported rather than silently starting a second run.
"""

from __future__ import annotations

import ast
import datetime as dt
import hashlib
import importlib.util
import inspect
import json
import os
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import asdict, is_dataclass
from functools import cache
from importlib.metadata import PackageNotFoundError, packages_distributions, version
from pathlib import Path


def git_commit() -> str | None:
    """The commit of the checkout this package runs from (with `-dirty` for local changes), if any."""
    root = Path(__file__).resolve().parents[1]
    try:
        commit = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True, timeout=10
        )
        if commit.returncode != 0:
            return None
        dirty = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=10,
        )
        return commit.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")
    except (OSError, subprocess.SubprocessError):
        return None


def describe_device() -> str:
    """The accelerator this process computes on, in words (recorded in provenance.json)."""
    import platform

    import torch

    if torch.cuda.is_available():
        return f"{torch.cuda.get_device_name(0)} x{torch.cuda.device_count()}"
    return f"cpu {platform.machine()} ({os.cpu_count()} cores)"


#: The packages a method's code spans, besides its own package: its helpers and the base classes in
#: `unlearnbench.methods`, and the guards a run applies with it.
CODE_PACKAGES = ("unlearnbench.methods", "unlearnbench.guards")


def method_code(cls: type, parts: Sequence[Callable] = ()) -> dict:
    """The code a run's method runs, with `parts` (the classes the method finds by name, its `code_parts`: RUM's
    stages; the guards' classes; a user's metric functions): package and
    version, a hash of every module of their import closure, and the method's hyperparameter defaults.

    The closure starts from the modules defining `cls`, its bases and mixins and the `parts`, and follows every
    import (lazy ones too) into `CODE_PACKAGES` and the top-level package of each (a plugin's): SFR-on's code
    is `sfron.py` and the base classes, masks, schedules and gradient helpers it uses. `modules` maps each module
    to the hash of its source, so a change names the module; `source_sha256` hashes them all. The defaults are
    those of the run identity's `method_args` (a group a mapping of its fields): what the leaderboard labels a
    variant by, read from the run directory rather than from code that may have changed since or be absent.
    """
    tops = {part.__module__.split(".")[0] for part in (cls, *parts)} - {"unlearnbench"}  # a plugin's package
    scopes = tuple(f"{package}." for package in (*CODE_PACKAGES, *sorted(tops)))
    roots = {klass.__module__ for klass in cls.__mro__ if f"{klass.__module__}.".startswith(scopes)}
    for part in parts:  # a part made at run time (a notebook's metric) has no file: the method's code still counts
        defining = {klass.__module__ for klass in getattr(part, "__mro__", (part,))}
        roots |= {name for name in defining if f"{name}.".startswith(scopes) and _source_file(name) is not None}
    try:
        modules = {name: _sha256(name.encode() + b"\0" + path.read_bytes()) for name, path in _closure(roots, scopes)}
        source_sha256 = _sha256(b"".join(value.encode() for value in modules.values()))
    except (TypeError, OSError):  # a class made at run time (exec, a notebook): no file to hash
        modules, source_sha256 = {}, None
    top = cls.__module__.split(".")[0]
    package = _distribution(top)
    return {
        "package": package,
        "version": _version(package, top),
        "modules": modules,
        "source_sha256": source_sha256,
        "defaults": json.loads(json.dumps(_defaults(cls), default=str)),
    }


def _defaults(cls: type) -> dict:
    """`cls`'s argument defaults, a group's (a dataclass) as the mapping of its fields."""
    parameters = inspect.signature(cls).parameters.items()
    return {k: asdict(p.default) if is_dataclass(p.default) else p.default for k, p in parameters}


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:16]


def _closure(roots: set[str], scopes: tuple[str, ...]) -> list[tuple[str, Path]]:
    """`roots` and every module they import at any depth inside `scopes`, sorted by name, with their source files.

    Imports are read from the source (not from `sys.modules`), so the closure does not depend on which lazy
    imports have run yet. A root without a source file is a TypeError."""
    found: dict[str, Path] = {}
    todo = sorted(roots)
    while todo:
        name = todo.pop()
        if name in found:
            continue
        path = _source_file(name)
        if path is None:
            raise TypeError(f"module {name} has no source file")
        found[name] = path
        todo += [m for m in _imported(name, path) if f"{m}.".startswith(scopes) and _source_file(m) is not None]
    return sorted(found.items())


def _source_file(name: str) -> Path | None:
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):  # `from package.module import name`: name is no module
        return None
    return Path(spec.origin) if spec and spec.origin and spec.origin.endswith(".py") else None


def _imported(name: str, path: Path) -> set[str]:
    """The modules `name`'s source imports anywhere in its body: `import a.b`, `from a import b` (a.b and a)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    imported = set()
    for node in ast.walk(ast.parse(path.read_bytes())):
        if isinstance(node, ast.Import):
            imported |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            module = importlib.util.resolve_name("." * node.level + (node.module or ""), package)
            imported |= {module, *(f"{module}.{alias.name}" for alias in node.names)}
    return imported


@cache
def _distribution(top: str) -> str:
    """The distribution that installs the top-level package `top` (`top` itself where none does).

    `packages_distributions` reads the metadata of every installed distribution (about half a second
    with a hundred of them): once per process, not once per run of a suite.
    """
    return (packages_distributions().get(top) or [top])[0]


def _version(package: str, top: str) -> str | None:
    try:
        return version(package)
    except PackageNotFoundError:  # a checkout on PYTHONPATH: the package's own version, if it states one
        return getattr(sys.modules.get(top), "__version__", None)


def method_code_change(recorded: dict | None, current: dict) -> str | None:
    """What changed in a method's code since `recorded`, in a few words (None: unchanged, or nothing recorded).

    A record from before the import closure was hashed (`modules` a list of the method's own modules, with one
    hash over them) is compared on what it covers: those modules' sources today against its hash. The defaults
    are not compared: they are part of the source, whose hash is."""
    if not recorded:
        return None
    what = [
        f"{key} {recorded.get(key)} -> {current.get(key)}"
        for key in ("package", "version")
        if recorded.get(key) != current.get(key)
    ]
    before, now = recorded.get("modules"), current.get("modules") or {}
    if isinstance(before, dict):
        what += [
            f"{name} {'added' if name not in before else 'removed' if name not in now else 'changed'}"
            for name in sorted({*before, *now})
            if before.get(name) != now.get(name)
        ]
    elif recorded.get("source_sha256") != _own_modules_sha256(before or []):
        what.append(f"{', '.join(before or [])} changed")
    return ", ".join(what) or None


def _own_modules_sha256(modules: list[str]) -> str | None:
    """The hash a record from before the closure was hashed holds, of those modules' sources as they are today."""
    digest = hashlib.sha256()
    for name in modules:
        path = _source_file(name)
        if path is None:
            return None
        digest.update(name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


#: The distributions whose version can change a number: the numeric stack and what trains, evaluates and tunes.
NUMERIC_DEPENDENCIES = (
    "torch", "torchvision", "lightning", "torchmetrics", "numpy", "scipy", "scikit-learn", "optuna", "timm", "geoopt",
)  # fmt: skip


def dependency_versions() -> dict[str, str]:
    """The installed version of each of `NUMERIC_DEPENDENCIES` (those not installed are left out), and Python's."""
    import platform

    versions = {"python": platform.python_version()}
    for name in NUMERIC_DEPENDENCIES:
        try:
            versions[name] = version(name)
        except PackageNotFoundError:
            continue
    return versions


def session_record(first_request: int, code: dict | None = None) -> dict:
    """This session: package version, git commit, device, the versions of the libraries the numbers depend on, the
    method's code, the request it starts at, and when."""
    from unlearnbench import __version__

    record = {
        "package_version": __version__,
        "git_commit": git_commit(),
        "device": describe_device(),
        "versions": dependency_versions(),
        "first_request": first_request,
        "started": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
    }
    return record | ({"method_code": code} if code else {})
