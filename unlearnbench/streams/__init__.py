"""Request streams: `RequestStream` plus one module per stream kind, registered in `STREAMS`."""

from unlearnbench.streams.base import Request, RequestStream, StreamError, UnlearningRequest

__all__ = ["Request", "RequestStream", "StreamError", "UnlearningRequest"]
