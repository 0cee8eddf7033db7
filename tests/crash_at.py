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
import traceback


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


def cli_killed_at(target: str, count: int, when: str, argv: list[str]) -> int:
    """The CLI run on `argv` in a forked child that SIGKILLs itself at `target`'s `count`-th call (`crash_at`);
    its exit: −9 where the kill came, else its return code. Forked, not started: the child pays no import (most of a
    fresh process's time here), and a SIGKILL gives it no more chance to clean up than it gives a fresh process."""
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            crash_at(target, count, when)
            from unlearnbench.cli import main

            code = main(argv)
        except BaseException:
            traceback.print_exc()
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    return -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)


def main() -> int:
    target, count, when, separator, *argv = sys.argv[1:]
    assert separator == "--"
    crash_at(target, int(count), when)
    from unlearnbench.cli import main as cli_main

    return cli_main(argv)


if __name__ == "__main__":
    raise SystemExit(main())
