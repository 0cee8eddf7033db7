"""Where a number came from: package version, git commit and device of each session of a run.

Recorded by the run directory (`provenance.json`, one entry per session, so a resumed run shows
every machine it ran on) and read by the leaderboard's provenance section.
"""

from __future__ import annotations

import datetime as dt
import os
import subprocess
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


def session_record(first_request: int) -> dict:
    """This session: package version, git commit, device, the request it starts at, and when."""
    from unlearnbench import __version__

    return {
        "package_version": __version__,
        "git_commit": git_commit(),
        "device": describe_device(),
        "first_request": first_request,
        "started": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
    }
