"""Run the CLI as its own process and deliver SIGINT/SIGTERM at chosen calls, in the awkward places on purpose.

Usage: python tests/signal_at.py TARGET:N:HOW:SIGNAL [...] -- <unlearnbench arguments>

At the N-th call of TARGET (a dotted path as the code under test looks it up, e.g.
`unlearnbench.runner.compute_logits`), just before the call, SIGNAL (SIGINT or SIGTERM) is raised
in the calling thread, HOW:
- `call`: right there (in a non-main thread, such as Optuna's heartbeat thread, the main thread's
  handler runs at its next instruction, wherever that is);
- `weakref`: inside a weakref callback, where Python prints and drops the handler's exception;
- `del`: inside a `__del__`, likewise.
The handler runs before `raise_signal` returns, so the signal lands exactly there, every time.
Several points may be given (a second signal during the first one's clean-up). The process ends as
the console script's does (`main()` without arguments), so its exit path is the one under test.
"""

from __future__ import annotations

import functools
import signal
import sys
import weakref

from tests.crash_at import _resolve


class _Dying:
    def __init__(self, signum: int):
        self.signum = signum

    def __del__(self):
        signal.raise_signal(self.signum)


class _Referent:
    pass


def _deliver(how: str, signum: int) -> None:
    if how == "call":
        signal.raise_signal(signum)
    elif how == "weakref":
        referent = _Referent()
        reference = weakref.ref(referent, lambda _: signal.raise_signal(signum))
        del referent  # the callback runs here
        assert reference() is None
    elif how == "del":
        _Dying(signum)  # collected at once
    else:
        raise SystemExit(f"unknown way {how!r}")


def _arm(point: str) -> None:
    target, count, how, name = point.rsplit(":", 3)
    owner, attribute = _resolve(target)
    original = owner.__dict__[attribute] if isinstance(owner, type) else getattr(owner, attribute)
    function = original.__func__ if isinstance(original, staticmethod) else original
    calls = {"n": 0}

    @functools.wraps(function)
    def signalling(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == int(count):
            _deliver(how, signal.Signals[name])
        return function(*args, **kwargs)

    setattr(owner, attribute, staticmethod(signalling) if isinstance(original, staticmethod) else signalling)


def main() -> int:
    separator = sys.argv.index("--")
    for point in sys.argv[1:separator]:
        _arm(point)
    sys.argv = ["unlearnbench", *sys.argv[separator + 1 :]]
    from unlearnbench.cli import main as cli_main

    return cli_main()


if __name__ == "__main__":
    raise SystemExit(main())
