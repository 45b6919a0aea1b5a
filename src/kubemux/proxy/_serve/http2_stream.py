"""One HTTP/2 stream of the proxy's server (:mod:`.http2`), and DATA frames written directly.

A stream is small on purpose (``__slots__``, no ``asyncio.Event``: a future is made only
while its task waits), since 10,000 watch streams may be open in one process.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, Protocol

import h2.connection
import h2.errors
import h2.exceptions

__all__ = ["MIN_FRAME", "WRITE_NOW", "Owner", "Stream", "data_frames", "peer_address"]

WRITE_NOW = 256 * 1024  # queued DATA written at once past this (the transport may pause)
MIN_FRAME = 1024  # the least DATA sent in a frame but for the end of the data


class Owner(Protocol):
    """The connection a stream is on (:class:`~.http2.Http2Protocol`)."""

    conn: h2.connection.H2Connection | None
    out: list[bytes | memoryview]
    pending: int
    paused: bool
    blocked: set[Stream]
    loop: asyncio.AbstractEventLoop

    async def receive(self, stream: Stream) -> dict[str, Any]: ...

    async def send(self, stream: Stream, message: dict[str, Any]) -> None: ...

    def pull(self) -> None: ...

    def flush(self) -> None: ...

    def flush_now(self) -> None: ...

    def forget(self, stream: Stream) -> None: ...


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
        "detached",
        "ended",
        "ending",
        "gone",
        "head",
        "headers_sent",
        "on_drain",
        "on_gone",
        "proto",
        "read",
        "rest",
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
        self.on_gone: Callable[[], object] | None = None  # the app's, when it asked
        # a detached stream (:meth:`detach`): the data its windows did not take yet, the
        # app's callback when they did, and END_STREAM due after it
        self.detached = False
        self.rest: memoryview | None = None
        self.on_drain: Callable[[], object] | None = None
        self.ending = False

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

    def when_gone(self, callback: Callable[[], object] | None) -> None:
        """Call ``callback`` once when the stream is reset or its connection lost (None:
        no more); offered to the app as :data:`~.._watch.flow.ON_DISCONNECT`, so a watch
        needs no task blocked on ``receive()``."""
        self.on_gone = callback
        if callback is not None and self.gone:
            self.wake()

    def lose(self) -> None:
        """The client reset the stream, or the connection is lost."""
        self.gone = True
        self.wake()

    def wake(self) -> None:
        if self.gone and self.on_gone is not None:
            callback, self.on_gone = self.on_gone, None
            callback()
        if self.gone and self.ending:
            self._close()
        elif self.rest is not None and not self.gone and self.push(self.rest):
            if self.ending:
                self.finish()
            elif self.on_drain is not None:
                self.on_drain()
        waiters = self.waiters
        if waiters:
            self.waiters = []
            for waiter in waiters:
                if not waiter.done():
                    waiter.set_result(None)

    # a detached stream: the app's task has returned, the app writes from callbacks
    def detach(self) -> Stream:
        """The app's task may return without ending the response: it writes from then on
        with :meth:`push` and ends it with :meth:`finish` or :meth:`abort`, called back
        with ``on_drain`` when a push the windows did not take has gone (a watch costs no
        task and no coroutine frames while it waits). Offered as
        :data:`~.._watch.flow.DETACH`."""
        self.detached = True
        return self

    def push(self, data: bytes | memoryview) -> bool:
        """DATA frames for ``data`` now, as far as the windows and the transport allow;
        False: the rest waits for the client (``on_drain`` is called when it went)."""
        proto = self.proto
        conn = proto.conn
        if self.gone or self.ended or conn is None:
            self.rest = None
            return True
        state = conn.streams.get(self.sid)
        if state is None or state.closed:
            self.rest = None
            proto.loop.call_soon(self.lose)
            return True
        size = len(data)
        if (  # a round's few lines: one frame (a peer's frame size is at least 16 KiB)
            size <= 16384
            and not proto.paused
            and size <= conn.outbound_flow_control_window
            and size <= state.outbound_flow_control_window
        ):
            proto.out += ((size << 48 | self.sid).to_bytes(9, "big"), data)
            conn.outbound_flow_control_window -= size
            state.outbound_flow_control_window -= size
            proto.pending += size
            if proto.pending >= WRITE_NOW:
                proto.flush_now()
            proto.flush()
            self.rest = None
            return True
        rest = memoryview(data)
        while rest and not proto.paused:
            window = min(conn.outbound_flow_control_window, state.outbound_flow_control_window)
            if window < min(len(rest), MIN_FRAME):
                break
            size = min(len(rest), window)  # (the HEADERS went out when sent: no pull)
            proto.out += data_frames(self.sid, rest[:size], conn.max_outbound_frame_size)
            conn.outbound_flow_control_window -= size
            state.outbound_flow_control_window -= size
            proto.pending += size
            rest = rest[size:]
            if proto.pending >= WRITE_NOW:
                proto.flush_now()  # may pause the transport
        proto.flush()
        if rest:
            self.rest = rest
            proto.blocked.add(self)
            return False
        self.rest = None
        return True

    def finish(self) -> None:
        """END_STREAM (after what waits for the window)."""
        if self.rest is not None and not self.gone:
            self.ending = True
            return
        conn = self.proto.conn
        if not self.gone and not self.ended and conn is not None:
            try:
                conn.end_stream(self.sid)
                self.ended = True
            except h2.exceptions.ProtocolError:  # reset by the client meanwhile
                self.gone = True
            self.proto.pull()
            self.proto.flush()
        self._close()

    def abort(self) -> None:
        """RST_STREAM CANCEL: the app gives up on the response (a client not reading)."""
        conn = self.proto.conn
        if not self.gone and not self.ended and conn is not None:
            try:
                conn.reset_stream(self.sid, h2.errors.ErrorCodes.CANCEL)
            except h2.exceptions.ProtocolError:
                pass
            self.proto.pull()
            self.proto.flush()
        self.gone = True
        self._close()

    def _close(self) -> None:
        self.rest = None
        self.on_drain = self.on_gone = None
        if self.detached:
            self.proto.forget(self)
            self.detached = False


def peer_address(value: Any) -> tuple[str, int] | None:
    """A socket address as ASGI's ``(host, port)``."""
    if isinstance(value, tuple) and len(value) >= 2:
        return (str(value[0]), int(value[1]))
    return None
