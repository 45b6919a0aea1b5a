"""HTTP/2 on the proxy's TLS port: the ``h2`` library on asyncio, HTTP/1.1 handed on by ALPN.

Each TLS connection (wrapped by :mod:`.admission`) gets an :class:`Http2Protocol`. After the
handshake it looks at the protocol the client chose: ``h2`` is served here; anything else
is handed, in place, to the HTTP/1.1 protocol the server made (uvicorn's httptools protocol,
subclassed in :mod:`.server`), so the WebSocket and SPDY upgrades of exec, attach and
port-forward, and the header limits, stay exactly as they are (kube-apiserver and
client-go use HTTP/1.1 for those too).

Per stream: one task runs the ASGI app; ``receive`` gives the body (acknowledged as the
app reads it: an unread body costs at most the stream's window), then waits for the
stream's end (``http.disconnect``; a watch asks for a callback, and detaches from its
task: :meth:`.Stream.detach`). ``send`` frames DATA itself (windows in the ``h2``
connection's counters), not with ``H2Connection.send_data`` (~8 us a frame); HEADERS,
END_STREAM, RST_STREAM and every received frame go through the library. A stream whose client stops reading blocks its own
``send`` at a zero window (the app sees a ``send`` that does not return, as with a full
socket in HTTP/1.1: the watch's idle cut ends it, with RST_STREAM CANCEL, the connection
stays); a full transport (the client reads nothing at all) blocks every stream of the
connection before its next frame, so a connection holds about one high-water mark beyond
what its streams' budgets hold.

Hostile clients (:class:`Calm`): streams are capped per connection by
SETTINGS_MAX_CONCURRENT_STREAMS and by the app tasks still running (a stream reset by the
client counts until its task ends: rapid reset, CVE-2023-44487, gets REFUSED_STREAM, never
more work); SETTINGS, PING, PRIORITY, resets, refused streams and window updates of less
than 1 KiB draw from a per-connection budget (1,000, refilled at 100 a second), past which
the connection gets GOAWAY ENHANCE_YOUR_CALM; a header block is at most
``max_header_bytes`` (the library's hpack limit, a connection error) and 64 CONTINUATION
frames; the first request must arrive within ``header_timeout``; no DATA frame is sent
smaller than 1 KiB unless it is the end of the data (a window opened a byte at a time
cannot make the proxy frame a byte at a time).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

import h2.config
import h2.connection
import h2.errors
import h2.events
import h2.exceptions
import h2.settings

from .._watch.flow import DETACH, ON_DISCONNECT
from .http2_hub import Calm, Http2Hub
from .http2_stream import MIN_FRAME, WRITE_NOW, Stream, data_frames, peer_address
from .sni import SNI_EXTENSION
from .tls import server_name_of

__all__ = ["Http2Protocol"]

log = logging.getLogger(__name__)

# headers HTTP/2 forbids (RFC 9113 8.2.2); an ASGI app written for HTTP/1.1 may set them
_HOP_BY_HOP = frozenset(
    {b"connection", b"keep-alive", b"proxy-connection", b"transfer-encoding", b"upgrade"}
)
STREAM_WINDOW = 1024 * 1024  # a request body the app has not read yet, per stream
CONNECTION_WINDOW = 4 * 1024 * 1024  # ... and per connection
# what a connection's transport may hold before its streams wait (asyncio's default is 64
# KiB: sized for one response, where an h2 connection carries up to 250 watches' rounds)
TRANSPORT_HIGH = 1024 * 1024
_SETTINGS = h2.settings.SettingCodes


class Http2Protocol(asyncio.Protocol):
    """One TLS connection: HTTP/2 here, or handed to the HTTP/1.1 protocol by ALPN.

    ``admitted`` is set by the admission (``bind``) before the handshake; it is passed on
    to the HTTP/1.1 protocol, or trusted here once a request carries the token."""

    def __init__(self, hub: Http2Hub, h1_factory: Callable[[], asyncio.Protocol]) -> None:
        self.hub = hub
        self.h1_factory = h1_factory
        self.admitted: Any = None
        self.transport: asyncio.Transport | None = None
        self.conn: h2.connection.H2Connection | None = None
        self.streams: dict[int, Stream] = {}
        self.blocked: set[Stream] = set()  # waiting for a window
        self.paused = False  # the transport's buffer is full
        self.drained: asyncio.Future[None] | None = None
        self.out: list[bytes | memoryview] = []  # frames to write, in order
        self.pending = 0  # bytes in ``out``
        self.flush_soon: asyncio.Handle | None = None
        self.scope_base: dict[str, Any] = {}
        self.timer: asyncio.TimerHandle | None = None
        self.loop = asyncio.get_running_loop()
        self.calm = Calm(*hub.calm, self.loop.time())

    # ------------------------------------------------------------------ the connection
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        hub = self.hub
        ssl_object = transport.get_extra_info("ssl_object")
        alpn = ssl_object.selected_alpn_protocol() if ssl_object is not None else None
        if alpn != "h2":  # uvicorn's protocol takes the connection over
            hub.counts["http/1.1"] += 1
            h1 = self.h1_factory()
            if self.admitted is not None:
                h1.admitted = self.admitted  # type: ignore[attr-defined]
            transport.set_protocol(h1)
            h1.connection_made(transport)
            return
        hub.counts["h2"] += 1
        self.transport = transport
        transport.set_write_buffer_limits(high=TRANSPORT_HIGH)
        hub.connections.add(self)
        config = h2.config.H2Configuration(client_side=False, header_encoding=None)
        conn = self.conn = h2.connection.H2Connection(config)
        conn.local_settings = h2.settings.Settings(
            client=False,
            initial_values={
                _SETTINGS.MAX_CONCURRENT_STREAMS: hub.max_streams if hub.accepting else 0,
                _SETTINGS.MAX_HEADER_LIST_SIZE: hub.max_header_bytes,
                _SETTINGS.INITIAL_WINDOW_SIZE: STREAM_WINDOW,
            },
        )
        conn.initiate_connection()
        conn.increment_flow_control_window(CONNECTION_WINDOW - 65535)
        self.scope_base = {
            "type": "http",
            "asgi": {"version": "3.0", "spec_version": "2.3"},
            "http_version": "2",
            "scheme": "https",
            "server": peer_address(transport.get_extra_info("sockname")),
            "client": peer_address(transport.get_extra_info("peername")),
            "root_path": "",
        }
        if (sni := server_name_of(ssl_object)) is not None:  # which context (.sni)
            self.scope_base["extensions"] = {SNI_EXTENSION: sni}
        self.timer = self.loop.call_later(hub.header_timeout, self._too_slow)
        self.pull()
        self.flush_now()

    def connection_lost(self, exc: Exception | None) -> None:
        self.hub.connections.discard(self)
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        if self.flush_soon is not None:
            self.flush_soon.cancel()
            self.flush_soon = None
        self.out.clear()
        for stream in list(self.streams.values()):
            stream.lose()
        self.blocked.clear()
        self._drained()

    def _too_slow(self) -> None:
        self.timer = None
        log.info(
            "closing an HTTP/2 connection whose first request took over %gs",
            self.hub.header_timeout,
        )
        self.goaway(h2.errors.ErrorCodes.NO_ERROR)

    def pause_writing(self) -> None:
        self.paused = True

    def resume_writing(self) -> None:
        self.paused = False
        self._drained()
        self._window_opened(0)  # detached streams kept their data while paused

    def _drained(self) -> None:
        waiter = self.drained
        if waiter is not None:
            self.drained = None
            if not waiter.done():
                waiter.set_result(None)

    def pull(self) -> None:
        """What the ``h2`` connection queued (HEADERS, END_STREAM, acknowledgements),
        after the DATA frames already in ``out``: frames stay in order."""
        assert self.conn is not None
        data = self.conn.data_to_send()
        if data:
            self.out.append(data)
            self.pending += len(data)

    def flush(self) -> None:
        """Write ``out`` once per loop iteration: the streams woken together (a view's
        round) share TLS records and syscalls, which HTTP/1.1 cannot do."""
        if self.flush_soon is None:
            self.flush_soon = self.loop.call_soon(self.flush_now)

    def flush_now(self) -> None:
        if self.flush_soon is not None:
            self.flush_soon.cancel()
            self.flush_soon = None
        out = self.out
        if not out:
            return
        self.out = []
        self.pending = 0
        transport = self.transport
        if transport is not None and not transport.is_closing():
            transport.write(out[0] if len(out) == 1 else b"".join(out))

    def data_received(self, data: bytes) -> None:
        conn = self.conn
        assert conn is not None
        try:
            events = conn.receive_data(data)
        except h2.exceptions.ProtocolError:  # a GOAWAY is queued: send it, then close
            self._end()
            return
        try:
            self._events(events)
        except h2.exceptions.ProtocolError:  # a call the library refused: end cleanly
            log.warning("ending an HTTP/2 connection after a protocol error", exc_info=True)
            self.goaway(h2.errors.ErrorCodes.INTERNAL_ERROR)

    def _events(self, events: list[h2.events.Event]) -> None:
        now = self.loop.time()
        calm = self.calm
        transport = self.transport
        for event in events:
            if transport is None or transport.is_closing():
                return
            if isinstance(event, h2.events.RequestReceived):
                self._request(event)
            elif isinstance(event, h2.events.DataReceived):
                self._data(event)
            elif isinstance(event, h2.events.StreamEnded):
                stream = self.streams.get(event.stream_id)
                if stream is not None:
                    stream.body_done = True
                    stream.wake()
            elif isinstance(event, h2.events.StreamReset):
                stream = self.streams.get(event.stream_id)
                if stream is not None:
                    self.blocked.discard(stream)
                    stream.lose()
                    if not stream.ended and event.remote_reset and not calm.spend(now):
                        self._calm_down()
                        return
            elif isinstance(event, h2.events.WindowUpdated):
                self._window_opened(event.stream_id)
                if event.delta < MIN_FRAME and not calm.spend(now):
                    self._calm_down()
                    return
            elif isinstance(event, h2.events.RemoteSettingsChanged):
                if _SETTINGS.INITIAL_WINDOW_SIZE in event.changed_settings:
                    self._window_opened(0)
                if not calm.spend(now):
                    self._calm_down()
                    return
            elif isinstance(event, h2.events.PingReceived | h2.events.PriorityUpdated):
                if not calm.spend(now):
                    self._calm_down()
                    return
            elif isinstance(event, h2.events.ConnectionTerminated):
                self._end()
                return
        self.pull()
        self.flush()

    def _end(self) -> None:
        """Write what is queued (a GOAWAY the library made) and close."""
        self.pull()
        self.flush_now()
        if self.transport is not None:
            self.transport.close()

    def _calm_down(self) -> None:
        self.hub.counts["calmed"] += 1
        log.warning("closing an HTTP/2 connection that sent too many resets or control frames")
        self.goaway(h2.errors.ErrorCodes.ENHANCE_YOUR_CALM)

    def _window_opened(self, sid: int) -> None:
        if sid == 0:
            blocked, self.blocked = self.blocked, set()
            for stream in blocked:
                stream.wake()
        else:
            one = self.streams.get(sid)
            if one is not None and one in self.blocked:
                self.blocked.discard(one)
                one.wake()

    def refuse_new_streams(self) -> None:
        if self.conn is not None and self.transport is not None:
            self.conn.update_settings({_SETTINGS.MAX_CONCURRENT_STREAMS: 0})
            self.pull()
            self.flush()

    def goaway(self, code: h2.errors.ErrorCodes) -> None:
        transport = self.transport
        if self.conn is not None and transport is not None and not transport.is_closing():
            self.conn.close_connection(error_code=code)
            self._end()

    # ---------------------------------------------------------------------- a stream
    def _request(self, event: h2.events.RequestReceived) -> None:
        conn = self.conn
        assert conn is not None
        sid = event.stream_id
        hub = self.hub
        if not hub.accepting or len(self.streams) >= hub.max_streams:
            # the streams reset by the client whose tasks still run count (rapid reset)
            try:
                conn.reset_stream(sid, h2.errors.ErrorCodes.REFUSED_STREAM)
            except h2.exceptions.ProtocolError:  # the client reset it in the same read
                pass
            if hub.accepting and not self.calm.spend(self.loop.time()):
                self._calm_down()
            return
        state = conn.streams.get(sid)
        if state is None or state.closed:  # reset in the same read: no work for it
            if not self.calm.spend(self.loop.time()):
                self._calm_down()
            return
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        headers: list[tuple[bytes, bytes]] = []
        method = path = b""
        authority = None
        for name, value in event.headers or ():
            name = bytes(name)
            value = bytes(value)
            if name[:1] == b":":
                if name == b":method":
                    method = value
                elif name == b":path":
                    path = value
                elif name == b":authority":
                    authority = value
            else:
                headers.append((name, value))
                if name == b"authorization":
                    self._trust(value)
        if authority is not None:  # what the Host check reads (RFC 9113 8.3.1)
            headers.insert(0, (b"host", authority))
        raw_path, _, query = path.partition(b"?")
        scope = dict(self.scope_base)
        scope.update(
            method=method.decode("latin-1"),
            path=raw_path.decode("latin-1"),
            raw_path=raw_path,
            query_string=query,
            headers=headers,
        )
        hub.counts["streams"] += 1
        stream = self.streams[sid] = Stream(self, sid, head=method == b"HEAD")
        scope[ON_DISCONNECT] = stream.when_gone
        scope[DETACH] = stream.detach
        stream.task = self.loop.create_task(self._run(stream, scope))

    def _trust(self, authorization: bytes) -> None:
        admitted = self.admitted
        if admitted is not None and not admitted.trusted and self.hub.authorized(authorization):
            admitted.trust()

    def _data(self, event: h2.events.DataReceived) -> None:
        assert self.conn is not None
        found = self.streams.get(event.stream_id)
        size = event.flow_controlled_length
        if found is None or found.gone:
            self._acknowledge(size, event.stream_id)
            return
        stream = found
        stream.body.append(event.data)
        stream.unread += size
        stream.wake()

    def _acknowledge(self, size: int, sid: int) -> None:
        if size and self.conn is not None:
            try:
                self.conn.acknowledge_received_data(size, sid)
            except h2.exceptions.ProtocolError:  # the connection is closing
                return
            self.pull()
            self.flush()

    async def _run(self, stream: Stream, scope: dict[str, Any]) -> None:
        try:
            await self.hub.app(scope, stream.receive, stream.send)
        except Exception:  # an app error ends its stream, not the connection
            log.exception("the proxy app failed on an HTTP/2 stream")
            if not stream.headers_sent and not stream.gone:
                await self.send(stream, {"type": "http.response.start", "status": 500})
                await self.send(stream, {"type": "http.response.body", "body": b""})
        finally:
            self._acknowledge(stream.unread, stream.sid)  # an unread body frees its window
            stream.unread = 0
            stream.task = None  # a detached stream's lives on without it
            if not stream.detached:  # returned mid-response: RST_STREAM CANCEL, if not ended
                self.forget(stream)
                stream.abort()

    async def receive(self, stream: Stream) -> dict[str, Any]:
        while True:
            if stream.body or (stream.body_done and not stream.read):
                body = b"".join(stream.body)
                stream.body.clear()
                stream.read = stream.body_done
                unread, stream.unread = stream.unread, 0
                self._acknowledge(unread, stream.sid)
                return {"type": "http.request", "body": body, "more_body": not stream.read}
            if stream.gone:
                return {"type": "http.disconnect"}
            await stream.wait()

    async def send(self, stream: Stream, message: dict[str, Any]) -> None:
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
            try:
                conn.send_headers(stream.sid, headers)
            except h2.exceptions.ProtocolError:  # closed under us, or a header h2 refuses
                log.warning("an HTTP/2 response's headers could not be sent: stream reset")
                self._reset(stream, h2.errors.ErrorCodes.INTERNAL_ERROR)
                return
            stream.headers_sent = True
            self.pull()
            self.flush()
            return
        if kind != "http.response.body" or not stream.headers_sent:
            return
        body = message.get("body", b"")
        more = bool(message.get("more_body", False))
        if not stream.head and body and not await self._write(stream, memoryview(bytes(body))):
            return
        if not more:
            try:
                conn.end_stream(stream.sid)
            except h2.exceptions.ProtocolError:  # reset by the client meanwhile
                stream.gone = True
                return
            stream.ended = True
            self.pull()
        self.flush()

    async def _write(self, stream: Stream, data: memoryview) -> bool:
        """DATA frames for ``data`` within the windows (False: the stream is gone)."""
        conn = self.conn
        assert conn is not None
        sid = stream.sid
        while data:
            # the transport's buffer is full (the client reads nothing): no frame more
            # until it drains, so a connection holds about one high-water mark, not every
            # stream's chunk (the app keeps the rest, where its budget counts it)
            while self.paused and not stream.gone:
                if self.drained is None:
                    self.drained = self.loop.create_future()
                await asyncio.shield(self.drained)
            if stream.gone:
                return False
            state = conn.streams.get(sid)
            if state is None or state.closed:
                stream.lose()
                return False
            window = min(conn.outbound_flow_control_window, state.outbound_flow_control_window)
            if window < min(len(data), MIN_FRAME):  # its client is not reading: it waits
                self.flush()
                self.blocked.add(stream)
                await stream.wait()
                continue
            size = min(len(data), window)
            self.pull()  # HEADERS before DATA
            frames = data_frames(sid, data[:size], conn.max_outbound_frame_size)
            self.out += frames
            conn.outbound_flow_control_window -= size
            state.outbound_flow_control_window -= size
            self.pending += size
            data = data[size:]
            if self.pending >= WRITE_NOW:
                self.flush_now()  # may pause the transport, seen at the next frame
        return True

    def forget(self, stream: Stream) -> None:  # its response is over
        self.streams.pop(stream.sid, None)
        self.blocked.discard(stream)
        if stream.detached:
            self.hub.detached_ended()

    def _reset(self, stream: Stream, code: h2.errors.ErrorCodes) -> None:
        stream.gone = True
        if self.conn is not None:
            try:
                self.conn.reset_stream(stream.sid, code)
            except h2.exceptions.ProtocolError:
                return
            self.pull()
            self.flush()
