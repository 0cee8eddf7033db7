"""SIGINT and SIGTERM stop a run or a suite with one line and exit code 128 + signal, never 0.

Lightning answers SIGTERM by leaving the fit early and returning normally, so without this a
preempted job (SLURM sends SIGTERM) would evaluate a half-trained model and exit 0. The handler
raises `Interrupted`, a BaseException: `except Exception` in a suite's cell loop does not record it
as a failed cell, and Lightning re-raises it after its own teardown. Every file is written
atomically and a request counts as done only once its row is in `metrics.jsonl`, so the same
command resumes where the signal landed.

A signal that lands while Python runs a weakref callback or a `__del__` has its exception printed
and dropped ("Exception ignored in ..."), and the work would go on to exit 0 (seen in `tune`). So the
handler also records the signal: `raise_if_interrupted` raises it again at the next safe point (each
request of a run, suite cell or tuning trial), and the block never ends normally after a signal.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from contextlib import contextmanager

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Interrupted(BaseException):
    """A SIGINT or SIGTERM arrived; `where` says what was under way (filled in on the way up)."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum
        self.where: str | None = None

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


_received: list[int] = []


def _raise(signum: int, frame) -> None:
    _received.append(signum)
    raise Interrupted(signum)


def raise_if_interrupted() -> None:
    """Raises `Interrupted` if a signal arrived whose exception was dropped on the way."""
    if _received:
        raise Interrupted(_received[0])


@contextmanager
def interruptible() -> Iterator[None]:
    """Within the block, SIGINT and SIGTERM raise `Interrupted`; the previous handlers come back after."""
    previous = {signum: signal.getsignal(signum) for signum in SIGNALS}
    _received.clear()
    for signum in SIGNALS:
        signal.signal(signum, _raise)
    try:
        yield
        raise_if_interrupted()
    finally:
        _received.clear()
        for signum, handler in previous.items():
            signal.signal(signum, handler)
