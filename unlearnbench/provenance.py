"""Where a number came from: package version, git commit, device, library versions and method code of each session.

Recorded by the run directory (`provenance.json`, one entry per session, so a resumed run shows
every machine it ran on) and read by the leaderboard's provenance section. The method's code
(`method_code`: the package that defines it, its version and a hash of its modules' source) is
compared on every rerun: a finished run whose method changed since says so, and a partial one is
not resumed into a mix of two versions' numbers. It is provenance, not identity: the run's name
stays the same, so a code change is reported rather than silently starting a second run.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import inspect
import os
import subprocess
import sys
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


def method_code(cls: type, base: type) -> dict:
    """The code a method runs: its package and version, and a hash of the source of every module defining it.

    The modules are those of `cls` and of its ancestors below `base` (SalUn's includes RL's module,
    whose training it reuses); `base`'s module, the framework (`GradientMethod` too), is the package
    version's business.
    """
    modules = sorted(
        {klass.__module__ for klass in cls.__mro__ if issubclass(klass, base) and klass.__module__ != base.__module__}
    )
    digest = hashlib.sha256()
    try:
        for name in modules:
            digest.update(name.encode() + b"\0" + Path(inspect.getsourcefile(sys.modules[name])).read_bytes())
        source_sha256 = digest.hexdigest()[:16]
    except (KeyError, TypeError, OSError):  # a class made at run time (exec, a notebook): no file to hash
        source_sha256 = None
    top = cls.__module__.split(".")[0]
    package = (packages_distributions().get(top) or [top])[0]
    return {
        "package": package,
        "version": _version(package, top),
        "modules": modules,
        "source_sha256": source_sha256,
    }


def _version(package: str, top: str) -> str | None:
    try:
        return version(package)
    except PackageNotFoundError:  # a checkout on PYTHONPATH: the package's own version, if it states one
        return getattr(sys.modules.get(top), "__version__", None)


def method_code_change(recorded: dict | None, current: dict) -> str | None:
    """What changed in a method's code since `recorded` (None: unchanged, or a run from before it was recorded)."""
    if not recorded or recorded == current:
        return None
    what = [
        f"{key} {recorded.get(key)} -> {current.get(key)}"
        for key in ("package", "version", "modules", "source_sha256")
        if recorded.get(key) != current.get(key)
    ]
    return ", ".join(what)


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
