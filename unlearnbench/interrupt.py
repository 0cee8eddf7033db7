"""SIGINT and SIGTERM stop a run, a suite or a study with one line and exit code 128 + signal, never 0.

Lightning answers SIGTERM by leaving the fit early and returning normally, so without this a
preempted job (SLURM sends SIGTERM) would evaluate a half-trained model and exit 0. The handler
raises `Interrupted`, a BaseException: `except Exception` in a suite's cell loop does not record it
as a failed cell, and Lightning re-raises it after its own teardown. Every file is written
atomically and a request counts as done only once its row is in `metrics.jsonl`, so the same
command resumes where the signal landed.

A signal can land anywhere, and Python does not carry every exception up from everywhere, so the
exception is only the fast path and the signal's record is what decides:
- Raised inside a weakref callback or a `__del__` (SQLAlchemy's pool and `WeakKeyDictionary` run such
  callbacks at any allocation), `Interrupted` is handed to `sys.unraisablehook`, which Python would
  print as "Exception ignored in ..." with a traceback before going on. The block's hook drops it
  silently instead, and `raise_if_interrupted` raises it again at the next safe point: each request
  of a run (so each suite cell and tuning trial) and each batch of a Lightning fit.
- A library that catches it, logs it and raises it again (SQLAlchemy's pool, whose connection reset the signal
  cut short, logs "Exception during reset or similar" with the traceback) would print that traceback on stderr:
  within the block, the handlers such a record reaches (`logging.lastResort` where nobody configured logging, the
  root logger's where somebody did) drop a record whose exception is `Interrupted`. The exception goes on up.
- Another thread's exception after a signal is a consequence of it (Optuna's heartbeat thread finds the
  SQLite database locked by the transaction the signal cut short in the main thread): the block's
  thread hook drops it instead of printing its traceback. Before a signal, it is printed as ever.
- Only the first signal raises. A second one (a second Ctrl+C, or SLURM's SIGTERM after the user's
  SIGINT) is recorded only, so the clean-up on the way up (Lightning's teardown, Optuna's heartbeat
  join, the logger's finish) is never cut short by it; were the first one dropped, the next safe
  point raises.
- A library that catches the exception and raises another (Lightning's own `SIGTERMException` is a
  `SystemExit`) does not change the outcome: whatever leaves the block after a signal is the signal.
- `exit_process` leaves the process without the interpreter's shutdown, which would run atexit hooks
  and weakref callbacks after the handlers are gone, and would wait for ever on a non-daemon thread
  a signal left running (Optuna's heartbeat thread, when the signal lands before its stop event).
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress

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


#: The signals received in the current block, in order; the first decides the exit code.
_received: list[int] = []


def _on_signal(signum: int, frame) -> None:
    first = not _received
    _received.append(signum)
    if first:
        raise Interrupted(signum)


def _record_only(signum: int, frame) -> None:
    """Outside a block, a signal that comes after the work (while the process leaves) changes nothing."""
    _received.append(signum)


def _unraisable(previous):
    def hook(unraisable) -> None:
        if not isinstance(unraisable.exc_value, Interrupted):  # dropped by Python: the next safe point raises it
            previous(unraisable)

    return hook


def _thread_exception(previous):
    def hook(failure) -> None:
        if not _received:  # after a signal, the thread failed because the process is stopping
            previous(failure)

    return hook


def _not_interrupted(record: logging.LogRecord) -> bool:
    """A log handler's filter: False for a record whose exception is `Interrupted`."""
    return not (record.exc_info and isinstance(record.exc_info[1], Interrupted))


def raise_if_interrupted() -> None:
    """A safe point: raises `Interrupted` if a signal arrived whose exception was dropped on the way."""
    if _received:
        raise Interrupted(_received[0])


@contextmanager
def interruptible() -> Iterator[None]:
    """Within the block, SIGINT and SIGTERM raise `Interrupted`, and whatever leaves the block after one arrived
    is that `Interrupted`; the previous handlers, unraisable hook, thread hook and log filters come back after."""
    previous = {signum: signal.getsignal(signum) for signum in SIGNALS}
    previous_hook, previous_thread_hook = sys.unraisablehook, threading.excepthook
    sys.unraisablehook = _unraisable(previous_hook)
    threading.excepthook = _thread_exception(previous_thread_hook)
    handlers = [handler for handler in (logging.lastResort, *logging.getLogger().handlers) if handler is not None]
    for handler in handlers:
        handler.addFilter(_not_interrupted)
    for signum in SIGNALS:
        signal.signal(signum, _on_signal)
    try:
        raise_if_interrupted()  # one that `ignore_late_signals` recorded before the block began
        yield
        raise_if_interrupted()
    except Interrupted:
        raise
    except BaseException as error:
        if _received:  # a library wrapped or replaced the exception on its way up
            raise Interrupted(_received[0]) from error
        raise
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        sys.unraisablehook, threading.excepthook = previous_hook, previous_thread_hook
        for handler in handlers:
            handler.removeFilter(_not_interrupted)
        _received.clear()


def ignore_late_signals() -> None:
    """For a process about to run a command and leave: a signal before `interruptible` is raised as the block begins,
    one after it (while the process leaves) is ignored."""
    for signum in SIGNALS:
        signal.signal(signum, _record_only)


def exit_process(code: int) -> None:
    """Leave now with `code`, output flushed, skipping the interpreter's shutdown (see the module's docstring)."""
    for stream in (sys.stdout, sys.stderr):
        with suppress(OSError, ValueError):  # a closed pipe or stream has nothing left to say
            stream.flush()
    os._exit(code)
