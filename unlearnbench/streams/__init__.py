"""Request streams: `RequestStream` plus one module per stream kind, registered in `STREAMS`.

The package imports none of its modules: `streams.base` imports Lightning, and a kind's own module (numpy only)
is imported before it, where `run` checks a stream's size against its dataset (`early_checks.check_stream_size`).
"""

from __future__ import annotations

import importlib

__all__ = ["Request", "RequestStream", "StreamError", "UnlearningRequest"]


def __getattr__(name: str) -> object:
    """`from unlearnbench.streams import RequestStream`: imports `streams.base` when first asked for."""
    if name in __all__:
        return getattr(importlib.import_module("unlearnbench.streams.base"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
