"""A raw HTTP/2 client for the proxy's tests: the ``h2`` library over an asyncio TLS
connection (ALPN ``h2``), with the client's flow control in the test's hands (a stream can
be left unread: its window is never opened) and raw frames for the hostile tests."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import AsyncIterator, Callable
from typing import Any

import anyio
import h2.config
import h2.connection
import h2.events
import h2.settings
from hyperframe.frame import Frame

from kubemux.proxy import ProxyServer

__all__ = ["H2Client", "Reply", "h2_client"]


@dataclasses.dataclass
class Reply:
    """What arrived on one stream."""

    status: int = 0
    headers: dict[bytes, bytes] = dataclasses.field(default_factory=dict)
    data: bytearray = dataclasses.field(default_factory=bytearray)
    frames: list[int] = dataclasses.field(default_factory=list)  # DATA frame sizes
    ended: bool = False
    reset: int | None = None  # the RST_STREAM error code

    def lines(self) -> list[bytes]:
        return [line for line in bytes(self.data).split(b"\n") if line]


class H2Client:
    """One HTTP/2 connection to a running proxy."""

    def __init__(
        self,
        server: ProxyServer,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        conn: h2.connection.H2Connection,
    ) -> None:
        self.server = server
        self.reader = reader
        self.writer = writer
        self.conn = conn
        self.replies: dict[int, Reply] = {}
        self.stalled: set[int] = set()  # streams whose window the client never opens
        self.goaway: int | None = None  # the GOAWAY's error code
        self.closed = False
        self.remote_settings: dict[int, int] = {}
        self._changed = asyncio.Event()

    @property
    def alpn(self) -> str | None:
        ssl_object = self.writer.get_extra_info("ssl_object")
        return None if ssl_object is None else ssl_object.selected_alpn_protocol()

    def flush(self) -> None:
        data = self.conn.data_to_send()
        if data and not self.writer.is_closing():
            self.writer.write(data)

    def raw(self, *frames: Frame | bytes) -> None:
        """Frames written as they are (the client's state machine never sees them)."""
        self.flush()
        for frame in frames:
            self.writer.write(frame if isinstance(frame, bytes) else frame.serialize())

    def request(
        self,
        method: str,
        path: str,
        *,
        headers: dict[str, str] | None = None,
        body: bytes = b"",
        token: bool = True,
        authority: str | None = None,
    ) -> int:
        sid = self.conn.get_next_available_stream_id()
        assert self.server.url is not None
        sent = [
            (":method", method),
            (":scheme", "https"),
            (":authority", authority or self.server.url.removeprefix("https://")),
            (":path", path),
        ]
        if token:
            sent.append(("authorization", f"Bearer {self.server.token}"))
        sent += list((headers or {}).items())
        self.conn.send_headers(sid, sent, end_stream=not body)
        if body:
            self.conn.send_data(sid, body, end_stream=True)
        self.replies[sid] = Reply()
        self.flush()
        return sid

    async def run(self) -> None:
        """Read until the connection ends (a task of :func:`h2_client`)."""
        try:
            while data := await self.reader.read(65536):
                for event in self.conn.receive_data(data):
                    self._event(event)
                self.flush()
                self._pulse()
        except (ConnectionError, OSError, h2.exceptions.ProtocolError):
            pass  # the test looks at what arrived before
        self.closed = True
        self._pulse()

    def _pulse(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    def _event(self, event: Any) -> None:
        reply = self.replies.get(getattr(event, "stream_id", 0) or 0)
        if isinstance(event, h2.events.ResponseReceived) and reply is not None:
            headers = dict(event.headers)
            reply.status = int(headers.pop(b":status"))
            reply.headers = headers
        elif isinstance(event, h2.events.DataReceived) and reply is not None:
            reply.data += event.data
            reply.frames.append(len(event.data))
            if event.stream_id in self.stalled:  # the connection's window only
                self.conn.increment_flow_control_window(event.flow_controlled_length)
            else:
                self.conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
        elif isinstance(event, h2.events.StreamEnded) and reply is not None:
            reply.ended = True
        elif isinstance(event, h2.events.StreamReset) and reply is not None:
            reply.reset = int(event.error_code)
        elif isinstance(event, h2.events.ConnectionTerminated):
            self.goaway = int(event.error_code)
        elif isinstance(event, h2.events.RemoteSettingsChanged):
            for code, change in event.changed_settings.items():
                self.remote_settings[int(code)] = change.new_value

    async def until(self, check: Callable[[], bool]) -> None:
        """Until ``check()`` holds (looked at after each read; 10 s at most)."""
        with anyio.fail_after(10):
            while not check():
                if self.closed:
                    raise AssertionError("the connection ended before the condition held")
                await self._changed.wait()

    async def until_closed(self) -> None:
        with anyio.fail_after(10):
            while not self.closed:
                await self._changed.wait()

    async def reply(self, sid: int) -> Reply:
        await self.until(lambda: self.replies[sid].ended or self.replies[sid].reset is not None)
        return self.replies[sid]


@contextlib.asynccontextmanager
async def h2_client(
    server: ProxyServer,
    *,
    settings: dict[int, int] | None = None,
    alpn: tuple[str, ...] = ("h2",),
    sni: str | None = None,
) -> AsyncIterator[H2Client]:
    """An HTTP/2 connection (its reader running) for the block."""
    assert server.url is not None
    host, _, port = server.url.removeprefix("https://").rpartition(":")
    context = server.certificates.client_context()
    context.set_alpn_protocols(list(alpn))
    reader, writer = await asyncio.open_connection(
        host.strip("[]"), int(port), ssl=context, server_hostname=sni or host.strip("[]")
    )
    conn = h2.connection.H2Connection(
        h2.config.H2Configuration(client_side=True, header_encoding=None)
    )
    conn.local_settings = h2.settings.Settings(
        client=True, initial_values={h2.settings.SettingCodes.ENABLE_PUSH: 0, **(settings or {})}
    )
    conn.initiate_connection()
    client = H2Client(server, reader, writer, conn)
    client.flush()
    task = asyncio.get_running_loop().create_task(client.run())
    try:
        yield client
    finally:
        writer.transport.abort()  # no TLS close_notify to wait for: a test may stop reading
        with contextlib.suppress(Exception):
            await writer.wait_closed()
        task.cancel()
        with contextlib.suppress(BaseException):
            await task
