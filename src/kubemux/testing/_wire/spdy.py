"""A minimal SPDY/3.1 server side: the framing kubectl's port-forward and exec speak.

kubectl (client-go's ``httpstream/spdy``, on moby's ``spdystream``) opens every stream
itself with a ``SYN_STREAM`` and waits for the ``SYN_REPLY``; data goes both ways in DATA
frames, a DATA (or SYN) frame with the FIN flag half-closes a stream, ``RST_STREAM`` drops
it; ``PING`` is answered with the same id (kubectl pings every 10 s when the SPDY runs
inside a WebSocket). Header blocks are zlib-compressed with the SPDY/3 dictionary, one
compression stream per direction for the whole connection, so every header block received
is inflated, even those of frames this side ignores (``HEADERS``, ``SYN_REPLY``).

Not implemented, as spdystream does not implement them either: flow control
(``WINDOW_UPDATE`` and ``SETTINGS`` are read and ignored; a slow stream holds the
connection's reader, which is TCP's backpressure), priorities, server pushes.

Hostile input is bounded: a frame longer than ``max_frame`` bytes, a header block inflating
past ``max_header_bytes``, a zlib error, a control frame of another version or a DATA frame
on stream 0 ends the connection with a ``GOAWAY`` (PROTOCOL_ERROR); data for a stream that
is not open is dropped; more than ``max_streams`` open streams are refused
(``RST_STREAM`` REFUSED_STREAM). Unknown control frame types are skipped (SPDY/3 §2.2.1).
"""

from __future__ import annotations

import logging
import struct
import zlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Protocol

import anyio
import anyio.abc
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

__all__ = [
    "DICTIONARY",
    "Frame",
    "FrameReader",
    "HeaderCompressor",
    "SpdyConnection",
    "SpdyError",
    "SpdyStream",
    "StreamHandler",
    "encode_data",
    "encode_goaway",
    "encode_ping",
    "encode_rst",
    "encode_syn_reply",
    "encode_syn_stream",
]

log = logging.getLogger(__name__)

VERSION = 3
SYN_STREAM, SYN_REPLY, RST_STREAM, SETTINGS, PING, GOAWAY, HEADERS, WINDOW_UPDATE = (
    1,
    2,
    3,
    4,
    6,
    7,
    8,
    9,
)
FLAG_FIN = 0x01
PROTOCOL_ERROR, INVALID_STREAM, REFUSED_STREAM, CANCEL, INTERNAL_ERROR = 1, 2, 3, 5, 6
GOAWAY_OK, GOAWAY_PROTOCOL_ERROR = 0, 1

# The SPDY/3 header dictionary (draft 3, section 2.6.10.1): length-prefixed words, then a
# run of status codes, reason phrases, dates and media types without prefixes.
_WORDS = (
    "options head post put delete trace accept accept-charset accept-encoding "
    "accept-language accept-ranges age allow authorization cache-control connection "
    "content-base content-encoding content-language content-length content-location "
    "content-md5 content-range content-type date etag expect expires from host if-match "
    "if-modified-since if-none-match if-range if-unmodified-since last-modified location "
    "max-forwards pragma proxy-authenticate proxy-authorization range referer retry-after "
    "server te trailer transfer-encoding upgrade user-agent vary via warning "
    "www-authenticate method get status version HTTP/1.1 url public set-cookie "
    "keep-alive origin"
)
_TAIL = (
    "100101201202205206300302303304305306307402405406407408409410411412413414415416417502"
    "504505203 Non-Authoritative Information204 No Content301 Moved Permanently"
    "400 Bad Request401 Unauthorized403 Forbidden404 Not Found500 Internal Server Error"
    "501 Not Implemented503 Service UnavailableJan Feb Mar Apr May Jun Jul Aug Sept Oct "
    "Nov Dec 00:00:00 Mon, Tue, Wed, Thu, Fri, Sat, Sun, GMTchunked,text/html,image/png,"
    "image/jpg,image/gif,application/xml,application/xhtml+xml,text/plain,text/javascript,"
    "publicprivatemax-age=gzip,deflate,sdchcharset=utf-8charset=iso-8859-1,utf-,*,enq=0."
)


def _dictionary() -> bytes:
    words = _WORDS.split()
    words.insert(words.index("status") + 1, "200 OK")  # the one word with a space
    parts = [struct.pack("!I", len(w)) + w.encode() for w in words]
    return b"".join(parts) + _TAIL.encode()


DICTIONARY = _dictionary()


class SpdyError(Exception):
    """A SPDY protocol error: the connection ends with a GOAWAY.

    Attributes:
        frames: The frames complete before the error (to handle before the GOAWAY).
    """

    frames: list[Frame]

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.frames = []


@dataclass(frozen=True, slots=True)
class Frame:
    """One frame: ``kind`` 0 for DATA, else the control frame type."""

    kind: int
    flags: int
    stream_id: int = 0
    headers: dict[str, str] = field(default_factory=dict)
    data: bytes = b""
    value: int = 0  # RST status, PING id, GOAWAY last stream, WINDOW_UPDATE delta

    @property
    def fin(self) -> bool:
        return bool(self.flags & FLAG_FIN)


class FrameReader:
    """Bytes in, frames out (sans I/O), with one header inflater for the connection."""

    def __init__(self, *, max_frame: int = 1 << 20, max_header_bytes: int = 64 * 1024) -> None:
        self.max_frame = max_frame
        self.max_header_bytes = max_header_bytes
        self._buffer = bytearray()
        self._inflater = zlib.decompressobj(zdict=DICTIONARY)

    def feed(self, data: bytes) -> list[Frame]:
        """The frames ``data`` completes.

        Raises:
            SpdyError: the bytes are not SPDY/3.1, or exceed a limit.
        """
        self._buffer += data
        frames: list[Frame] = []
        try:
            self._parse(frames)
        except SpdyError as exc:
            exc.frames = frames
            raise
        return frames

    def _parse(self, frames: list[Frame]) -> None:
        while len(self._buffer) >= 8:
            first, second = struct.unpack_from("!II", self._buffer)
            length = second & 0xFFFFFF
            if length > self.max_frame:
                raise SpdyError(f"a frame of {length} bytes (at most {self.max_frame})")
            if len(self._buffer) < 8 + length:
                break
            payload = bytes(self._buffer[8 : 8 + length])
            del self._buffer[: 8 + length]
            flags = second >> 24
            if not first & 0x80000000:
                stream_id = first & 0x7FFFFFFF
                if stream_id == 0:
                    raise SpdyError("a DATA frame on stream 0")
                frames.append(Frame(0, flags, stream_id, data=payload))
                continue
            version, kind = (first >> 16) & 0x7FFF, first & 0xFFFF
            if version != VERSION:
                raise SpdyError(f"SPDY version {version} (only {VERSION} is spoken)")
            frame = self._control(kind, flags, payload)
            if frame is not None:
                frames.append(frame)

    def _control(self, kind: int, flags: int, payload: bytes) -> Frame | None:
        def word(offset: int) -> int:
            if len(payload) < offset + 4:
                raise SpdyError(f"a short control frame (type {kind})")
            return int(struct.unpack_from("!I", payload, offset)[0])

        if kind == SYN_STREAM:
            stream_id = word(0) & 0x7FFFFFFF
            word(4)  # associated stream (server pushes only)
            if len(payload) < 10:
                raise SpdyError("a short SYN_STREAM")
            return Frame(kind, flags, stream_id, self._headers(payload[10:]))
        if kind in (SYN_REPLY, HEADERS):
            stream_id = word(0) & 0x7FFFFFFF
            return Frame(kind, flags, stream_id, self._headers(payload[4:]))
        if kind == RST_STREAM:
            return Frame(kind, flags, word(0) & 0x7FFFFFFF, value=word(4))
        if kind == PING:
            return Frame(kind, flags, value=word(0))
        if kind == GOAWAY:
            return Frame(kind, flags, value=word(0) & 0x7FFFFFFF)
        if kind == WINDOW_UPDATE:
            return Frame(kind, flags, word(0) & 0x7FFFFFFF, value=word(4) & 0x7FFFFFFF)
        if kind == SETTINGS:
            return Frame(kind, flags)
        return None  # unknown control frames are ignored

    def _headers(self, block: bytes) -> dict[str, str]:
        try:
            raw = self._inflater.decompress(block, self.max_header_bytes)
        except zlib.error as exc:
            raise SpdyError(f"a header block that does not inflate: {exc}") from None
        if self._inflater.unconsumed_tail:
            raise SpdyError(f"a header block over {self.max_header_bytes} bytes")
        return _parse_block(raw)


def _parse_block(raw: bytes) -> dict[str, str]:
    try:
        (count,) = struct.unpack_from("!I", raw)
        offset, headers = 4, {}
        for _ in range(count):
            (size,) = struct.unpack_from("!I", raw, offset)
            name = raw[offset + 4 : offset + 4 + size]
            offset += 4 + size
            (size,) = struct.unpack_from("!I", raw, offset)
            value = raw[offset + 4 : offset + 4 + size]
            offset += 4 + size
            if offset > len(raw):
                raise SpdyError("a truncated header block")
            headers[name.decode("latin-1").lower()] = value.decode("latin-1")
    except struct.error:
        raise SpdyError("a truncated header block") from None
    return headers


class HeaderCompressor:
    """Header blocks out, deflated on one zlib stream for the connection."""

    def __init__(self) -> None:
        self._deflater = zlib.compressobj(9, zdict=DICTIONARY)

    def block(self, headers: dict[str, str]) -> bytes:
        raw = [struct.pack("!I", len(headers))]
        for name, value in headers.items():
            for text in (name.lower(), value):
                encoded = text.encode("latin-1")
                raw.append(struct.pack("!I", len(encoded)) + encoded)
        return self._deflater.compress(b"".join(raw)) + self._deflater.flush(zlib.Z_SYNC_FLUSH)


def _control(kind: int, flags: int, payload: bytes) -> bytes:
    return struct.pack("!HHI", 0x8000 | VERSION, kind, (flags << 24) | len(payload)) + payload


def encode_syn_stream(
    compressor: HeaderCompressor, stream_id: int, headers: dict[str, str], *, fin: bool = False
) -> bytes:
    payload = struct.pack("!IIBB", stream_id, 0, 0, 0) + compressor.block(headers)
    return _control(SYN_STREAM, FLAG_FIN if fin else 0, payload)


def encode_syn_reply(
    compressor: HeaderCompressor, stream_id: int, headers: dict[str, str] | None = None
) -> bytes:
    return _control(SYN_REPLY, 0, struct.pack("!I", stream_id) + compressor.block(headers or {}))


def encode_rst(stream_id: int, status: int) -> bytes:
    return _control(RST_STREAM, 0, struct.pack("!II", stream_id, status))


def encode_ping(ping_id: int) -> bytes:
    return _control(PING, 0, struct.pack("!I", ping_id))


def encode_goaway(last_stream: int, status: int) -> bytes:
    return _control(GOAWAY, 0, struct.pack("!II", last_stream, status))


def encode_data(stream_id: int, data: bytes, *, fin: bool = False) -> bytes:
    return struct.pack("!II", stream_id, ((FLAG_FIN if fin else 0) << 24) | len(data)) + data


Receive = Callable[[], Awaitable[bytes | None]]
Send = Callable[[bytes], Awaitable[None]]
_CHUNK = 32 * 1024  # the largest DATA frame written (spdystream writes io.Copy's 32 KiB)


class SpdyStream:
    """One stream the client opened: its headers, its data in, data out."""

    def __init__(self, connection: SpdyConnection, stream_id: int, headers: dict[str, str]):
        self.connection = connection
        self.id = stream_id
        self.headers = headers
        self.remote_closed = False  # the client sent FIN or RST
        self.local_closed = False  # this side sent FIN or RST
        self._inbox: MemoryObjectSendStream[bytes]
        self._outbox: MemoryObjectReceiveStream[bytes]
        self._inbox, self._outbox = anyio.create_memory_object_stream[bytes](16)

    def __repr__(self) -> str:
        return f"<SpdyStream {self.id} {self.headers.get('streamtype', '')}>"

    async def receive(self) -> bytes:
        """The next data from the client; ``b""`` once it closed its side (or reset)."""
        try:
            return await self._outbox.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError):
            return b""

    async def send(self, data: bytes) -> None:
        """Send ``data`` (nothing once this side is closed)."""
        for start in range(0, len(data), _CHUNK):
            if self.local_closed:
                return
            await self.connection.write(encode_data(self.id, data[start : start + _CHUNK]))

    async def close(self) -> None:
        """Half-close: a DATA frame with FIN."""
        if not self.local_closed:
            self.local_closed = True
            await self.connection.write(encode_data(self.id, b"", fin=True))
            self.connection.forget(self)

    async def reset(self, status: int = CANCEL) -> None:
        if not self.local_closed:
            self.local_closed = True
            await self.connection.write(encode_rst(self.id, status))
        self.remote_ended()
        self.connection.forget(self)

    async def deliver(self, data: bytes) -> None:
        if self.remote_closed:
            return
        try:
            await self._inbox.send(data)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError):
            pass  # nobody reads this stream any more

    def remote_ended(self) -> None:
        self.remote_closed = True
        self._inbox.close()
        self.connection.forget(self)

    def discard(self) -> None:
        """No one will read this stream (its data is dropped)."""
        self._outbox.close()


class StreamHandler(Protocol):
    """What serves a connection's streams."""

    def accept(self, stream: SpdyStream) -> str | None:
        """None to accept a new stream, else why it is refused (it must not block)."""

    def opened(self, stream: SpdyStream) -> None:
        """The stream was accepted and its SYN_REPLY sent (start work here)."""


class SpdyConnection:
    """The server side of one SPDY/3.1 connection over ``receive`` / ``send``.

    ``handler.accept`` is called for every new stream: it returns None to accept it (a
    SYN_REPLY is sent, then ``handler.opened`` is called) or a reason to refuse it
    (RST_STREAM, logged). Both run in the reader, so they must not block; work is started
    in :attr:`task_group`.

    Cancellation: :meth:`run` returns when the peer closes or errs, or when cancelled;
    every task started in :attr:`task_group` ends with it.
    """

    def __init__(
        self,
        receive: Receive,
        send: Send,
        handler: StreamHandler,
        *,
        max_streams: int = 256,
        max_frame: int = 1 << 20,
    ) -> None:
        self._receive = receive
        self._send = send
        self._handler = handler
        self.max_streams = max_streams
        self.reader = FrameReader(max_frame=max_frame)
        self.compressor = HeaderCompressor()
        self.streams: dict[int, SpdyStream] = {}
        self.last_stream = 0
        self._lock = anyio.Lock()
        self._closed = False
        self.task_group: anyio.abc.TaskGroup | None = None

    async def write(self, frame: bytes) -> None:
        if self._closed:
            return
        async with self._lock:
            try:
                await self._send(frame)
            except (OSError, ConnectionError, RuntimeError, anyio.BrokenResourceError):
                self._closed = True

    def forget(self, stream: SpdyStream) -> None:
        if stream.local_closed and stream.remote_closed:
            self.streams.pop(stream.id, None)
            stream.discard()

    async def goaway(self, drain_timeout: float = 5.0) -> None:
        """Say no more streams will be served (GOAWAY), then end the connection once the
        client closes it, or after ``drain_timeout`` seconds (closing at once could reset
        the connection before the client has read the end of the data)."""
        await self.write(encode_goaway(self.last_stream, GOAWAY_OK))
        if self.task_group is not None:
            self.task_group.start_soon(self._stop_after, drain_timeout)

    async def _stop_after(self, delay: float) -> None:
        await anyio.sleep(delay)
        if self.task_group is not None:
            self.task_group.cancel_scope.cancel("the SPDY connection drained")

    async def run(self) -> None:
        async with anyio.create_task_group() as tg:
            self.task_group = tg
            try:
                await self._read_loop()
            finally:
                self._closed = True
                for stream in list(self.streams.values()):
                    stream.local_closed = True
                    stream.remote_ended()
                tg.cancel_scope.cancel("the SPDY connection ended")

    async def _read_loop(self) -> None:
        while True:
            data = await self._receive()
            if data is None:
                return
            error: SpdyError | None = None
            try:
                frames = self.reader.feed(data)
            except SpdyError as exc:
                frames, error = exc.frames, exc
            for frame in frames:
                if not await self._handle(frame):
                    return
            if error is not None:
                log.info("ending a SPDY connection: %s", error)
                await self.write(encode_goaway(self.last_stream, GOAWAY_PROTOCOL_ERROR))
                return

    async def _handle(self, frame: Frame) -> bool:
        kind = frame.kind
        if kind == 0:
            stream = self.streams.get(frame.stream_id)
            if stream is None:
                return True  # not open (any more): dropped
            if frame.data:
                await stream.deliver(frame.data)
            if frame.fin:
                stream.remote_ended()
        elif kind == SYN_STREAM:
            await self._open(frame)
        elif kind == RST_STREAM:
            stream = self.streams.pop(frame.stream_id, None)
            if stream is not None:
                stream.local_closed = True
                stream.remote_ended()
        elif kind == PING:
            await self.write(encode_ping(frame.value))
        elif kind == GOAWAY:
            return False
        return True  # SETTINGS, WINDOW_UPDATE, HEADERS, SYN_REPLY: nothing to do

    async def _open(self, frame: Frame) -> None:
        sid = frame.stream_id
        if sid == 0 or sid % 2 == 0 or sid <= self.last_stream:
            await self.write(encode_rst(sid, PROTOCOL_ERROR))
            return
        self.last_stream = sid
        if len(self.streams) >= self.max_streams:
            await self.write(encode_rst(sid, REFUSED_STREAM))
            return
        stream = SpdyStream(self, sid, frame.headers)
        self.streams[sid] = stream
        refusal = self._handler.accept(stream)
        if refusal is not None:
            log.info("refusing SPDY stream %d: %s", sid, refusal)
            await stream.reset(REFUSED_STREAM)
            return
        await self.write(encode_syn_reply(self.compressor, sid))
        if frame.fin:
            stream.remote_ended()
        self._handler.opened(stream)
