"""Run the CLI in this process and SIGKILL it at the N-th call of a chosen function.

Usage: python tests/crash_at.py TARGET N before|after -- <unlearnbench arguments>

TARGET is a dotted path to a function or method as the code under test looks it up (e.g.
`unlearnbench.runner.compute_logits`). A real SIGKILL leaves no chance to clean up: this is how
the reliability tests check that a rerun of the same command recovers from a kill at any point.
"""

from __future__ import annotations

import functools
import importlib
import os
import signal
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path


def _resolve(target: str):
    parts = target.split(".")
    for split in range(len(parts) - 1, 0, -1):
        try:
            owner = importlib.import_module(".".join(parts[:split]))
        except ModuleNotFoundError:
            continue
        for attribute in parts[split:-1]:
            owner = getattr(owner, attribute)
        return owner, parts[-1]
    raise SystemExit(f"cannot resolve {target}")


def crash_at(target: str, count: int, when: str) -> None:
    """Patch TARGET so that this process SIGKILLs itself before or after its `count`-th call."""
    assert when in ("before", "after")
    owner, name = _resolve(target)
    original = getattr(owner, name)
    calls = {"n": 0}

    @functools.wraps(original)
    def crashing(*args, **kwargs):
        calls["n"] += 1
        if when == "before" and calls["n"] == count:
            os.kill(os.getpid(), signal.SIGKILL)
        result = original(*args, **kwargs)
        if when == "after" and calls["n"] == count:
            os.kill(os.getpid(), signal.SIGKILL)
        return result

    setattr(owner, name, crashing)


def pause_at(target: str, count: int, until: Path) -> None:
    """Patch TARGET so that this process waits, at its `count`-th call, until the file `until` exists."""
    owner, name = _resolve(target)
    original = getattr(owner, name)
    calls = {"n": 0}

    @functools.wraps(original)
    def pausing(*args, **kwargs):
        calls["n"] += 1
        while calls["n"] == count and not until.exists():
            time.sleep(0.05)
        return original(*args, **kwargs)

    setattr(owner, name, pausing)


def fork_cli(argv: list[str], patch: Callable[[], None] = lambda: None, stderr: Path | None = None) -> int:
    """The process id of a forked child that runs `patch()`, then the CLI on `argv` (its stderr into the file
    `stderr` where given), and exits with the CLI's code. Forked, not started: the child pays no import (most of a
    fresh process's time in these tests), and a SIGKILL gives it no more chance to clean up than a fresh process."""
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            if stderr is not None:
                os.dup2(os.open(stderr, os.O_WRONLY | os.O_CREAT | os.O_TRUNC), 2)
                sys.stderr = open(2, "w", closefd=False)  # noqa: SIM115 (the child's stderr until it exits)
            patch()
            from unlearnbench.cli import main

            code = main(argv)
        except SystemExit as exit_:  # the CLI's own exit (a refusal is SystemExit(2))
            code = exit_.code if isinstance(exit_.code, int) else 1
        except BaseException:
            traceback.print_exc()
        finally:
            sys.stderr.flush()
            os._exit(code)
    return pid


def exit_code(pid: int) -> int:
    """The exit of child `pid`, once it ends: −N for a kill by signal N, else its code."""
    _, status = os.waitpid(pid, 0)
    return -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)


def cli_killed_at(target: str, count: int, when: str, argv: list[str]) -> int:
    """The exit of the CLI run on `argv` in a forked child (`fork_cli`) that SIGKILLs itself at `target`'s
    `count`-th call (`crash_at`): −9 where the kill came, else the CLI's code."""
    return exit_code(fork_cli(argv, lambda: crash_at(target, count, when)))


def main() -> int:
    target, count, when, separator, *argv = sys.argv[1:]
    assert separator == "--"
    crash_at(target, int(count), when)
    from unlearnbench.cli import main as cli_main

    return cli_main(argv)


if __name__ == "__main__":
    raise SystemExit(main())
