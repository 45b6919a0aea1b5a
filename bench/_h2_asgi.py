"""A minimal HTTP/2 server for an ASGI app on asyncio, with the ``h2`` library: the shape in
which kubemux would embed it (bench/h2_servers.py measures it against uvicorn, hypercorn and
granian; the evaluation is in docs/design-notes.md).

One listening socket, TLS with ALPN ``h2`` and ``http/1.1``. After the handshake,
:class:`H2Protocol` looks at the protocol the client chose: ``h2`` is served here; anything
else is handed, in place, to the HTTP/1.1 protocol ``h1_factory`` makes (uvicorn's httptools
one, as the proxy runs today, subclass and all: the SPDY and WebSocket upgrades stay there).

Per stream: one task runs the app (as uvicorn and hypercorn do); ``receive`` gives the body,
then waits for the stream's end (``http.disconnect`` on RST_STREAM or a lost connection);
``send`` writes HEADERS and DATA within the stream's and the connection's flow-control
windows, so a client that stops reading one stream blocks that stream's ``send`` only (the
app sees its stall as a ``send`` that does not return, as with a full socket in HTTP/1.1),
and a full transport (the client reads nothing at all) blocks every stream of the connection.
An app that returns without ending its response gets the stream reset (CANCEL), never the
connection closed. Streams are capped by SETTINGS_MAX_CONCURRENT_STREAMS (the h2 library
treats a client that exceeds it after acknowledging as a connection error); connections by
``max_connections`` (a refused one is closed right after its handshake);
the handshake by ``handshake_timeout``.

:meth:`H2Server.close` is the clean stop: new streams are refused (SETTINGS 0, RST_STREAM
REFUSED_STREAM), the caller ends its streams (a watch writes its last chunk: END_STREAM),
then each connection gets GOAWAY and closes. The h2 library moves a connection to CLOSED as
soon as GOAWAY is sent (no DATA after it), hence GOAWAY last.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Callable
from typing import Any

import h2.config
import h2.connection
import h2.errors
import h2.events
import h2.exceptions
import h2.settings

__all__ = ["H2Protocol", "H2Server"]

# headers HTTP/2 forbids (RFC 9113 8.2.2); an ASGI app written for HTTP/1.1 may set them
_HOP_BY_HOP = frozenset(
    {b"connection", b"keep-alive", b"proxy-connection", b"transfer-encoding", b"upgrade"}
)
_WRITE_NOW = 64 * 1024  # queued DATA written at once past this (the transport then pauses)


class _Stream:
    """One request: the app's task, its body, its flow-control wait."""

    __slots__ = (
        "body",
        "body_done",
        "ended",
        "gone",
        "headers_sent",
        "proto",
        "read",
        "sid",
        "task",
        "waiter",
    )

    def __init__(self, proto: H2Protocol, sid: int) -> None:
        self.proto = proto
        self.sid = sid
        self.body: list[bytes] = []
        self.body_done = False  # END_STREAM received
        self.read = False  # the app has had the whole body
        self.gone = False  # reset by the client, or the connection lost
        self.headers_sent = False
        self.ended = False  # END_STREAM sent
        self.waiter: asyncio.Future[None] | None = None
        self.task: asyncio.Task[None] | None = None

    # the app's receive and send (bound methods: no closure per stream)
    async def receive(self) -> dict[str, Any]:
        return await self.proto.receive(self)

    async def send(self, message: dict[str, Any]) -> None:
        await self.proto.send(self, message)

    def wake(self) -> None:
        waiter = self.waiter
        if waiter is not None:
            self.waiter = None
            if not waiter.done():
                waiter.set_result(None)


class H2Server:
    """The listener and what its connections share (the app, caps, the live connections)."""

    def __init__(
        self,
        app: Any,
        ssl_context: ssl.SSLContext,
        *,
        h1_factory: Callable[[], asyncio.Protocol] | None = None,
        max_streams: int = 250,
        max_connections: int = 10_000,
        handshake_timeout: float = 10.0,
        max_header_list: int = 1024 * 1024,
    ) -> None:
        self.app = app
        self.ssl_context = ssl_context
        ssl_context.set_alpn_protocols(["h2", "http/1.1"] if h1_factory else ["h2"])
        self.h1_factory = h1_factory
        self.max_streams = max_streams
        self.max_connections = max_connections
        self.handshake_timeout = handshake_timeout
        self.max_header_list = max_header_list
        self.connections: set[H2Protocol] = set()
        self.accepting = True
        self.refused = 0
        self._server: asyncio.Server | None = None

    async def start(self, sock: Any) -> None:
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            lambda: H2Protocol(self),
            sock=sock,
            ssl=self.ssl_context,
            ssl_handshake_timeout=self.handshake_timeout,
        )

    async def close(self, end_streams: Callable[[], None] | None = None, wait: float = 5.0) -> None:
        """Refuse new streams, let ``end_streams`` end the app's streams (their last DATA
        carries END_STREAM), wait for them within ``wait`` seconds, then GOAWAY and close."""
        self.accepting = False
        if self._server is not None:
            self._server.close()
        for proto in list(self.connections):
            proto.refuse_new_streams()
        if end_streams is not None:
            end_streams()
        tasks = [s.task for p in self.connections for s in p.streams.values() if s.task]
        if tasks:
            await asyncio.wait(tasks, timeout=wait)
        for proto in list(self.connections):
            proto.goaway()


class H2Protocol(asyncio.Protocol):
    """One TLS connection: HTTP/2 here, or handed to the HTTP/1.1 protocol by ALPN."""

    def __init__(self, server: H2Server) -> None:
        self.server = server
        self.transport: asyncio.Transport | None = None
        self.conn: h2.connection.H2Connection | None = None
        self.streams: dict[int, _Stream] = {}
        self.blocked: set[_Stream] = set()  # waiting for a window
        self.paused = False  # the transport's buffer is full
        self.drained: asyncio.Future[None] | None = None
        self.unflushed = 0  # bytes of DATA queued in the h2 connection since the last write
        self.flush_soon: asyncio.Handle | None = None
        self.scope_base: dict[str, Any] = {}

    # ------------------------------------------------------------------ the connection
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        server = self.server
        if len(server.connections) >= server.max_connections or not server.accepting:
            server.refused += 1
            transport.abort()
            return
        ssl_object = transport.get_extra_info("ssl_object")
        alpn = ssl_object.selected_alpn_protocol() if ssl_object is not None else None
        if alpn != "h2":
            if server.h1_factory is None:
                transport.abort()
                return
            h1 = server.h1_factory()  # uvicorn's protocol takes the connection over
            transport.set_protocol(h1)
            h1.connection_made(transport)
            return
        self.transport = transport
        server.connections.add(self)
        conn = self.conn = h2.connection.H2Connection(
            h2.config.H2Configuration(client_side=False, header_encoding=None)
        )
        conn.local_settings = h2.settings.Settings(
            client=False,
            initial_values={
                h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS: server.max_streams,
                h2.settings.SettingCodes.MAX_HEADER_LIST_SIZE: server.max_header_list,
            },
        )
        conn.initiate_connection()
        self.scope_base = {
            "type": "http",
            "asgi": {"version": "3.0", "spec_version": "2.3"},
            "http_version": "2",
            "scheme": "https",
            "server": transport.get_extra_info("sockname")[:2],
            "client": transport.get_extra_info("peername")[:2],
            "root_path": "",
        }
        self.flush()

    def connection_lost(self, exc: Exception | None) -> None:
        self.server.connections.discard(self)
        for stream in self.streams.values():
            stream.gone = True
            stream.wake()
        self.blocked.clear()
        self._drained()

    def pause_writing(self) -> None:
        self.paused = True

    def resume_writing(self) -> None:
        self.paused = False
        self._drained()

    def _drained(self) -> None:
        waiter = self.drained
        if waiter is not None:
            self.drained = None
            if not waiter.done():
                waiter.set_result(None)

    def flush(self) -> None:
        """Write what h2 queued, once per loop iteration: the streams woken together (a
        view's round) share TLS records and syscalls, which HTTP/1.1 cannot do."""
        if self.flush_soon is None:
            self.flush_soon = asyncio.get_running_loop().call_soon(self.flush_now)

    def flush_now(self) -> None:
        assert self.conn is not None and self.transport is not None
        if self.flush_soon is not None:
            self.flush_soon.cancel()
            self.flush_soon = None
        self.unflushed = 0
        data = self.conn.data_to_send()
        if data and not self.transport.is_closing():
            self.transport.write(data)

    def data_received(self, data: bytes) -> None:
        conn = self.conn
        assert conn is not None
        try:
            events = conn.receive_data(data)
        except h2.exceptions.ProtocolError:  # a GOAWAY is queued: send it, then close
            self.flush_now()
            assert self.transport is not None
            self.transport.close()
            return
        for event in events:
            if isinstance(event, h2.events.RequestReceived):
                self._request(event)
            elif isinstance(event, h2.events.DataReceived):
                stream = self.streams.get(event.stream_id)
                if stream is None:
                    conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
                    continue
                stream.body.append(event.data)
                # acknowledged at once: the app reads bodies whole (kubemux caps them at 3 MiB)
                conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
                stream.wake()
            elif isinstance(event, h2.events.StreamEnded):
                stream = self.streams.get(event.stream_id)
                if stream is not None:
                    stream.body_done = True
                    stream.wake()
            elif isinstance(event, h2.events.StreamReset):
                stream = self.streams.get(event.stream_id)
                if stream is not None:
                    stream.gone = True
                    self.blocked.discard(stream)
                    stream.wake()
            elif isinstance(event, h2.events.WindowUpdated):
                self._window_opened(event.stream_id)
            elif isinstance(event, h2.events.RemoteSettingsChanged):
                if h2.settings.SettingCodes.INITIAL_WINDOW_SIZE in event.changed_settings:
                    self._window_opened(0)
            elif isinstance(event, h2.events.ConnectionTerminated):
                self.flush_now()
                assert self.transport is not None
                self.transport.close()
                return
        self.flush()

    def _window_opened(self, sid: int) -> None:
        if sid == 0:
            blocked, self.blocked = self.blocked, set()
            for stream in blocked:
                stream.wake()
        else:
            stream = self.streams.get(sid)
            if stream is not None and stream in self.blocked:
                self.blocked.discard(stream)
                stream.wake()

    def refuse_new_streams(self) -> None:
        if self.conn is not None and self.transport is not None:
            self.conn.update_settings({h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS: 0})
            self.flush()

    def goaway(self) -> None:
        if self.conn is not None and self.transport is not None and not self.transport.is_closing():
            self.conn.close_connection()
            self.flush_now()
            self.transport.close()

    # ---------------------------------------------------------------------- a stream
    def _request(self, event: h2.events.RequestReceived) -> None:
        conn = self.conn
        assert conn is not None
        sid = event.stream_id
        if not self.server.accepting:
            conn.reset_stream(sid, h2.errors.ErrorCodes.REFUSED_STREAM)
            return
        headers: list[tuple[bytes, bytes]] = []
        method = path = b""
        authority = None
        for name, value in event.headers or ():
            if name[:1] == b":":
                if name == b":method":
                    method = value
                elif name == b":path":
                    path = value
                elif name == b":authority":
                    authority = value
            else:
                headers.append((name, value))
        if authority is not None:  # what the Host check reads
            headers.insert(0, (b"host", authority))
        raw_path, _, query = path.partition(b"?")
        scope = dict(self.scope_base)
        scope.update(
            method=method.decode("ascii"),
            path=raw_path.decode("latin-1"),
            raw_path=raw_path,
            query_string=query,
            headers=headers,
        )
        stream = self.streams[sid] = _Stream(self, sid)
        stream.task = asyncio.get_running_loop().create_task(self._run(stream, scope))

    async def _run(self, stream: _Stream, scope: dict[str, Any]) -> None:
        try:
            await self.server.app(scope, stream.receive, stream.send)
        except Exception:  # noqa: BLE001 - an app error ends its stream, not the connection
            if not stream.headers_sent and not stream.gone:
                await self.send(stream, {"type": "http.response.start", "status": 500})
        finally:
            del self.streams[stream.sid]
            self.blocked.discard(stream)
            if not stream.ended and not stream.gone and self.transport is not None:
                try:  # the app returned mid-response: the stream ends, the connection stays
                    assert self.conn is not None
                    self.conn.reset_stream(stream.sid, h2.errors.ErrorCodes.CANCEL)
                    self.flush()
                except h2.exceptions.ProtocolError:
                    pass

    async def receive(self, stream: _Stream) -> dict[str, Any]:
        while True:
            if stream.body or (stream.body_done and not stream.read):
                body = b"".join(stream.body)
                stream.body.clear()
                stream.read = stream.body_done
                return {"type": "http.request", "body": body, "more_body": not stream.read}
            if stream.gone:
                return {"type": "http.disconnect"}
            waiter = stream.waiter = asyncio.get_running_loop().create_future()
            await waiter

    async def send(self, stream: _Stream, message: dict[str, Any]) -> None:
        conn = self.conn
        assert conn is not None
        if stream.gone or stream.ended:
            return
        kind = message["type"]
        if kind == "http.response.start":
            headers = [(b":status", str(message["status"]).encode("ascii"))]
            headers += [
                (k.lower(), v)
                for k, v in message.get("headers") or ()
                if k.lower() not in _HOP_BY_HOP
            ]
            conn.send_headers(stream.sid, headers)
            stream.headers_sent = True
            self.flush()
            return
        if kind != "http.response.body":
            return
        data = memoryview(message.get("body", b""))
        more = message.get("more_body", False)
        sid = stream.sid
        try:
            while data:
                # the transport's buffer is full (the client reads nothing): no frame more
                # until it drains, so a connection holds about one high-water mark, not
                # every stream's chunk (the app keeps the rest, where its budget counts it)
                while self.paused and not stream.gone:
                    if self.drained is None:
                        self.drained = asyncio.get_running_loop().create_future()
                    await asyncio.shield(self.drained)
                if stream.gone:
                    return
                window = min(conn.local_flow_control_window(sid), conn.max_outbound_frame_size)
                if window <= 0:  # this stream's client is not reading: only this send waits
                    self.flush()
                    self.blocked.add(stream)
                    stream.waiter = asyncio.get_running_loop().create_future()
                    await stream.waiter
                    continue
                last = len(data) <= window
                conn.send_data(sid, data[:window], end_stream=last and not more)
                self.unflushed += min(window, len(data))
                stream.ended = last and not more
                data = data[window:]
                if self.unflushed >= _WRITE_NOW:
                    self.flush_now()  # may pause the transport, seen at the next frame
            if not more and not stream.ended:
                conn.end_stream(sid)
                stream.ended = True
        except h2.exceptions.ProtocolError:  # the stream closed under the write
            stream.gone = True
            return
        self.flush()
