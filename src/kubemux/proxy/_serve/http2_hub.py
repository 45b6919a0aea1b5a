"""What the HTTP/2 connections of one proxy server share (:class:`Http2Hub`), and the
budget each connection has for frames that cost the server and do the client no good
(:class:`Calm`)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, Protocol

import h2.errors

from .http2_stream import Stream

__all__ = ["Calm", "Connection", "Http2Hub"]


class Connection(Protocol):
    """An HTTP/2 connection of the hub (:class:`~.http2.Http2Protocol`)."""

    streams: dict[int, Stream]

    def refuse_new_streams(self) -> None: ...

    def goaway(self, code: h2.errors.ErrorCodes) -> None: ...


class Calm:
    """A per-connection budget of frames that cost the server and do the client no good:
    ``capacity`` at once, ``rate`` more a second."""

    __slots__ = ("capacity", "level", "rate", "when")

    def __init__(self, capacity: float, rate: float, now: float) -> None:
        self.capacity = capacity
        self.rate = rate
        self.level = capacity
        self.when = now

    def spend(self, now: float, cost: float = 1.0) -> bool:
        """Take ``cost``; False when the budget is spent (close the connection)."""
        self.level = min(self.capacity, self.level + (now - self.when) * self.rate) - cost
        self.when = now
        return self.level >= 0


class Http2Hub:
    """What the HTTP/2 connections of one server share: the app, the limits, the live
    connections, and counts of what was served (for :meth:`ProxyServer.protocols`)."""

    def __init__(
        self,
        app: Any,
        *,
        max_streams: int = 250,
        header_timeout: float = 10.0,
        max_header_bytes: int = 1024 * 1024,
        authorized: Callable[[bytes], bool] = lambda header: False,
        calm: tuple[float, float] = (1000.0, 100.0),
    ) -> None:
        self.app = app
        self.max_streams = max_streams
        self.header_timeout = header_timeout
        self.max_header_bytes = max_header_bytes
        self.authorized = authorized
        self.calm = calm
        self.connections: set[Connection] = set()
        self.accepting = True
        # counts since start: connections by protocol, h2 streams, connections ended for abuse
        self.counts = {"h2": 0, "http/1.1": 0, "streams": 0, "calmed": 0}
        self.settled: asyncio.Future[None] | None = None  # a detached stream ended

    def detached_ended(self) -> None:
        settled = self.settled
        if settled is not None and not settled.done():
            settled.set_result(None)

    def refuse_new_streams(self) -> None:
        """The server begins to stop: no new stream is taken (REFUSED_STREAM), and every
        client is told so (SETTINGS_MAX_CONCURRENT_STREAMS 0)."""
        self.accepting = False
        for proto in list(self.connections):
            proto.refuse_new_streams()

    async def close(self, wait: float) -> None:
        """Wait ``wait`` seconds at most for the streams to end (the caller ended the
        watches: their last DATA carries END_STREAM), then GOAWAY and close each
        connection. The ``h2`` library moves a connection to CLOSED once GOAWAY is sent
        (no DATA after it), hence GOAWAY last."""
        self.refuse_new_streams()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait
        tasks = [s.task for p in self.connections for s in p.streams.values() if s.task]
        if tasks:
            await asyncio.wait(tasks, timeout=wait)
        # detached streams (watches written from callbacks) have no task: their ends
        while any(s.detached for p in self.connections for s in p.streams.values()):
            left = deadline - loop.time()
            if left <= 0:
                break
            self.settled = loop.create_future()
            await asyncio.wait([self.settled], timeout=left)
        self.settled = None
        for proto in list(self.connections):
            proto.goaway(h2.errors.ErrorCodes.NO_ERROR)
