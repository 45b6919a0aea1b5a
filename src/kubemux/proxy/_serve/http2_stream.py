"""One HTTP/2 stream of the proxy's server (:mod:`.http2`), and DATA frames written directly.

A stream is small on purpose (``__slots__``, no ``asyncio.Event``: a future is made only
while its task waits), since 10,000 watch streams may be open in one process.
"""

from __future__ import annotations

import asyncio
from typing import Any, Protocol

__all__ = ["Owner", "Stream", "data_frames", "peer_address"]


class Owner(Protocol):
    """The connection a stream is on (:class:`~.http2.Http2Protocol`)."""

    async def receive(self, stream: Stream) -> dict[str, Any]: ...

    async def send(self, stream: Stream, message: dict[str, Any]) -> None: ...


def data_frames(sid: int, data: memoryview, frame_size: int) -> list[bytes | memoryview]:
    """DATA frames (no flags) carrying ``data`` on stream ``sid``, at most ``frame_size``
    bytes each: a 9-byte header (RFC 9113 4.1: length, type 0, flags 0, stream id) before
    each slice."""
    tail = sid.to_bytes(4, "big")
    frames: list[bytes | memoryview] = []
    for start in range(0, len(data), frame_size):
        part = data[start : start + frame_size]
        frames.append(len(part).to_bytes(3, "big") + b"\x00\x00" + tail)
        frames.append(part)
    return frames


class Stream:
    """One request: its body as it arrives, what was sent, and the wait of its task."""

    __slots__ = (
        "body",
        "body_done",
        "ended",
        "gone",
        "head",
        "headers_sent",
        "proto",
        "read",
        "sid",
        "task",
        "unread",
        "waiters",
    )

    def __init__(self, proto: Owner, sid: int, *, head: bool = False) -> None:
        self.proto = proto
        self.sid = sid
        self.head = head  # a HEAD request: no DATA, whatever the app sends
        self.body: list[bytes] = []
        self.unread = 0  # flow-controlled bytes of body the app has not read (unacknowledged)
        self.body_done = False  # END_STREAM received
        self.read = False  # the app has had the whole body
        self.gone = False  # reset by the client, or the connection lost
        self.headers_sent = False
        self.ended = False  # END_STREAM sent
        # the task's receive (waiting for the body or the end) and its send (waiting for a
        # window) may wait at once: a watch waits for its client's disconnect meanwhile
        self.waiters: list[asyncio.Future[None]] = []
        self.task: asyncio.Task[None] | None = None

    def __repr__(self) -> str:
        return f"<Stream {self.sid} ended={self.ended} gone={self.gone}>"

    # the app's receive and send (bound methods: no closure per stream)
    async def receive(self) -> dict[str, Any]:
        return await self.proto.receive(self)

    async def send(self, message: dict[str, Any]) -> None:
        await self.proto.send(self, message)

    async def wait(self) -> None:
        """Until :meth:`wake` (data, a window, the stream's end)."""
        waiter = asyncio.get_running_loop().create_future()
        self.waiters.append(waiter)
        try:
            await waiter
        finally:
            if waiter in self.waiters:
                self.waiters.remove(waiter)

    def wake(self) -> None:
        waiters = self.waiters
        if waiters:
            self.waiters = []
            for waiter in waiters:
                if not waiter.done():
                    waiter.set_result(None)


def peer_address(value: Any) -> tuple[str, int] | None:
    """A socket address as ASGI's ``(host, port)``."""
    if isinstance(value, tuple) and len(value) >= 2:
        return (str(value[0]), int(value[1]))
    return None
