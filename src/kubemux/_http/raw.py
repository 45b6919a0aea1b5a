"""Bytes of an upgraded HTTP connection, read from an asyncio protocol with a bounded buffer.

After a ``101 Switching Protocols`` to anything but a WebSocket (``SPDY/3.1``), neither
aiohttp nor uvicorn has a reader for the connection: the proxy and FakeCluster install a
:class:`ByteQueue` as the protocol's payload parser (aiohttp) or feed it themselves
(uvicorn). It buffers at most ``limit`` bytes: past that the transport stops reading until
the consumer catches up (TCP's backpressure), so a fast peer and a slow consumer cost
bounded memory.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

__all__ = ["ByteQueue"]


class ByteQueue:
    """Bytes fed by a protocol callback, read by one task; ``b""`` at the end."""

    def __init__(
        self,
        pause: Callable[[], None],
        resume: Callable[[], None],
        *,
        limit: int = 1024 * 1024,
    ) -> None:
        self._pause = pause
        self._resume = resume
        self.limit = limit
        self._buffer = bytearray()
        self._eof = False
        self._paused = False
        self._ready = asyncio.Event()

    # the protocol side (aiohttp calls a payload parser's feed_data / feed_eof)
    def feed_data(self, data: bytes) -> tuple[bool, bytes]:
        if data and not self._eof:
            self._buffer += data
            if len(self._buffer) >= self.limit and not self._paused:
                self._paused = True
                self._pause()
            self._ready.set()
        return False, b""

    def feed_eof(self) -> None:
        self._eof = True
        self._ready.set()

    def set_exception(self, exc: BaseException, exc_cause: BaseException | None = None) -> None:
        self.feed_eof()

    def is_eof(self) -> bool:
        return self._eof and not self._buffer

    # the reader side
    async def read(self) -> bytes:
        """What arrived since the last read (waiting for something); ``b""`` at the end."""
        while not self._buffer and not self._eof:
            self._ready.clear()
            await self._ready.wait()
        data = bytes(self._buffer)
        self._buffer.clear()
        if self._paused and not self._eof:
            self._paused = False
            self._resume()
        return data
