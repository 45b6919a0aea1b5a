"""Which HTTP/2 server for the proxy (issue 32, point 2): the candidates on the same workloads,
in the same run, with a minimal watch-like ASGI app (not the proxy), over TLS.

Candidates (each in its own server process, this file with ``--serve KIND``):

- ``uvicorn``: today's path, uvicorn + httptools, HTTP/1.1 over TLS, one connection per watch;
- ``h2``: the ``h2`` library on an asyncio Protocol (bench/_h2_asgi.py), ALPN ``h2`` with
  HTTP/1.1 handed to uvicorn's httptools protocol on the same port;
- ``hypercorn``: hypercorn's asyncio worker (h2 via the same ``h2`` library);
- ``granian``: granian's embedded server (Rust: hyper, rustls, tokio threads) in the app's
  process, as the proxy would have to run it (the caches live in that process). Its RSS and
  CPU are the whole process's, Rust threads included (``/proc``, every thread).

Workloads (the clients are this file with ``--client``, in separate processes; h2 clients
speak like client-go: 4 MiB stream window, 1 GiB connection window):

1. RSS per additional watch stream: 40 connections x 1 stream, then x 25 (1,000 streams),
   then x 250 (10,000); HTTP/1.1: 40, 1,000, then 10,000 connections.
2. 1,000 watchers of one stream, 100 events/s of ~1 KB for ``--seconds``: p99 delivery,
   server CPU per event delivered, events lost; then one burst to all 10,000 streams.
   The app wakes its watchers at most every 50 ms, as the proxy's views do.
3. A stalled stream beside 20 live ones on one connection (HTTP/1.1: a connection that
   stops reading beside 20 live ones): 4 KB events at 100/s; do the live ones still get
   everything, does the app see the stall (its ``send`` blocks: bytes pile up in the app,
   where a byte budget can cut the watcher) or does the server buffer it out of sight?
4. A LIST: 10,000 objects, ~20 MB of JSON in 128 KiB chunks, fetched with curl (best of
   ``--list-runs``, server CPU the mean), over h2 and over HTTP/1.1 on the same port.
5. A clean stop with every watch of workload 1 open: the app ends each watch (its last
   chunk), then the server stops; the clients count END_STREAM, RST_STREAM and cut streams.

Workloads 3 and 4 each get a fresh server process (RSS growth is then visible). With
``--breakdown``, only where each server's Python memory per added stream goes (tracemalloc).

Run: ``python bench/h2_servers.py [--servers uvicorn,h2,hypercorn,granian] [--seconds 20]
[--h1-max 10000] [--breakdown]``. Needs h2, hypercorn and granian (not kubemux
dependencies) and curl.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import http.client
import json
import os
import socket
import ssl
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

CANDIDATES = ("uvicorn", "h2", "hypercorn", "granian")
H2_CAPABLE = ("h2", "hypercorn", "granian")
STREAMS_PER_CONN = 250
WRITE_INTERVAL = 0.05  # the proxy's WatchSettings.write_interval
LIST_OBJECTS = 10_000
LIST_OBJECT_BYTES = 2_000
CHUNK = 128 * 1024  # the proxy's LIST chunks
TLS_READ_BUFFER = 16 * 1024  # what `kubemux proxy` sets for asyncio's TLS connections
CLIENTS = 2  # client processes per workload
BUCKET = 0.0005  # latency histogram resolution (s)
STOP_WAIT = 15.0  # a clean stop's bound


# ============================================================================ the app
class Watcher:
    __slots__ = ("buffer", "ended", "pending", "sending_since", "wake")

    def __init__(self) -> None:
        self.buffer: list[bytes] = []
        self.pending = 0  # bytes in the buffer
        self.ended = False
        self.sending_since = 0.0  # loop time a send() began, 0 when none is under way
        self.wake = asyncio.Event()


class Hub:
    """One watched resource: each event appended to every watcher's buffer, watchers woken at
    most every WRITE_INTERVAL (kubemux.proxy._watch_views.View's pacing)."""

    def __init__(self) -> None:
        self.watchers: set[Watcher] = set()
        self.loop = asyncio.get_running_loop()
        self.last_round = -1e9
        self.round: asyncio.TimerHandle | None = None
        self.max_pending = 0
        self.max_blocked = 0.0
        self.list_chunks = _list_chunks()

    def publish(self, line: bytes) -> None:
        size = len(line)
        for w in self.watchers:
            w.buffer.append(line)
            w.pending += size
        if self.round is None:
            due = self.last_round + WRITE_INTERVAL
            if self.loop.time() >= due:
                self.wake()
            else:
                self.round = self.loop.call_at(due, self.wake)

    def wake(self) -> None:
        self.round = None
        self.last_round = self.loop.time()
        for w in self.watchers:
            if w.buffer:
                w.wake.set()

    def stats(self) -> dict[str, Any]:
        now = self.loop.time()
        blocked = max(
            (now - w.sending_since for w in self.watchers if w.sending_since), default=0.0
        )
        pending = max((w.pending for w in self.watchers), default=0)
        self.max_pending = max(self.max_pending, pending)
        self.max_blocked = max(self.max_blocked, blocked)
        return {
            "watchers": len(self.watchers),
            "max_pending": self.max_pending,
            "max_blocked": self.max_blocked,
        }

    async def churn(self, run: int, rate: float, count: int, size: int) -> None:
        pad = b"x" * max(0, size - 120)
        began = time.monotonic()
        for seq in range(count):
            delay = began + seq / rate - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            self.publish(
                b'{"type":"MODIFIED","run":%d,"seq":%d,"sent":%.6f,"object":{"kind":"Pod",'
                b'"metadata":{"name":"churn"},"pad":"%s"}}\n' % (run, seq, time.time(), pad)
            )


def _list_chunks() -> list[bytes]:
    pad = b"y" * (LIST_OBJECT_BYTES - 150)
    items = [
        b'{"apiVersion":"v1","kind":"Pod","metadata":{"name":"web-%07d","namespace":"ns-%d",'
        b'"resourceVersion":"%d"},"spec":{"pad":"%s"}}' % (i, i % 20, 1000 + i, pad)
        for i in range(LIST_OBJECTS)
    ]
    body = b'{"kind":"PodList","apiVersion":"v1","metadata":{"resourceVersion":"99999"},"items":['
    body += b",".join(items) + b"]}"
    return [body[i : i + CHUNK] for i in range(0, len(body), CHUNK)]


def make_app(hub_box: list[Hub]) -> Any:
    tasks: set[asyncio.Task[None]] = set()

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                else:
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        if not hub_box:
            hub_box.append(Hub())
        hub = hub_box[0]
        path = scope["path"]
        if path == "/watch":
            await watch(hub, receive, send)
            return
        if path == "/list":
            await send(
                {
                    "type": "http.response.start",
                    "status": 200,
                    "headers": [(b"content-type", b"application/json")],
                }
            )
            for chunk in hub.list_chunks:
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
            return
        body = b"{}"
        if path == "/churn":
            q = dict(p.split("=") for p in scope["query_string"].decode().split("&"))
            task = asyncio.get_running_loop().create_task(
                hub.churn(int(q["run"]), float(q["rate"]), int(q["count"]), int(q["size"]))
            )
            tasks.add(task)
            task.add_done_callback(tasks.discard)
        elif path == "/stats":
            body = json.dumps(hub.stats()).encode()
        elif path == "/reset-stats":
            hub.max_pending, hub.max_blocked = 0, 0.0
        elif path == "/held":
            body = json.dumps(server_held()).encode()
        elif path == "/trace-mark":
            import gc
            import tracemalloc

            gc.collect()
            _trace[:] = [tracemalloc.take_snapshot()]
        elif path == "/trace-diff":
            body = json.dumps(trace_diff()).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", b"%d" % len(body)),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})

    return app


async def watch(hub: Hub, receive: Any, send: Any) -> None:
    """A watch as the proxy serves one: headers, a first line, then whatever the hub
    buffered, one write per wake-up; a task waits for the client's disconnect (the proxy's
    stream_watch does the same)."""
    w = Watcher()
    hub.watchers.add(w)
    loop = hub.loop

    async def disconnected() -> None:
        while (await receive())["type"] != "http.disconnect":
            pass
        w.ended = True
        w.wake.set()

    waiter = loop.create_task(disconnected())
    try:
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", b"application/json")],
            }
        )
        await send({"type": "http.response.body", "body": b'{"type":"ADDED"}\n', "more_body": True})
        while not w.ended:
            if not w.buffer:
                w.wake.clear()
                await w.wake.wait()
                continue
            data = b"".join(w.buffer)
            w.buffer.clear()
            w.sending_since = loop.time()
            await send({"type": "http.response.body", "body": data, "more_body": True})
            hub.max_blocked = max(hub.max_blocked, loop.time() - w.sending_since)
            w.sending_since = 0.0
            w.pending -= len(data)
        await send({"type": "http.response.body", "body": b"", "more_body": False})
    finally:
        hub.max_pending = max(hub.max_pending, w.pending)
        hub.watchers.discard(w)
        waiter.cancel()


_trace: list[Any] = []


def trace_diff() -> list[tuple[str, int, int]]:
    """Python allocations since /trace-mark, by the line that made them (``--breakdown``)."""
    import gc
    import tracemalloc

    gc.collect()
    stats = tracemalloc.take_snapshot().compare_to(_trace[0], "lineno")

    def where(st: Any) -> str:  # no path of this machine: what follows site-packages/ etc.
        text = str(st.traceback)
        for mark in ("site-packages/", "/bench/", "/python3.11/"):
            if mark in text:
                return text.rpartition(mark)[2]
        return text

    return [(where(st), st.size_diff, st.count_diff) for st in stats[:25]]


def server_held() -> dict[str, int]:
    """Bytes the server holds for its clients outside the app: asyncio transports' write
    buffers (TLS backlog and socket), hypercorn's per-stream buffers; found by the garbage
    collector (granian's are in Rust: not seen)."""
    import gc

    transports = stream_buffers = 0
    for obj in gc.get_objects():
        name = type(obj).__name__
        if name == "StreamBuffer" and hasattr(obj, "buffer"):
            stream_buffers += len(obj.buffer)
        elif isinstance(obj, asyncio.Transport) and not obj.is_closing():
            with contextlib.suppress(Exception):
                transports += obj.get_write_buffer_size()
    return {"transports": transports, "stream_buffers": stream_buffers}


# ============================================================================ the servers
def _bind(port: int = 0) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", port))
    sock.listen(8192)
    sock.setblocking(False)
    return sock


def _server_context(cert: str, key: str) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.num_tickets = 0  # as the proxy's
    context.load_cert_chain(cert, key)
    return context


def _uvicorn_config(app: Any) -> Any:
    import uvicorn

    config = uvicorn.Config(
        app,
        http="httptools",
        ws="none",
        lifespan="off",
        log_level="warning",
        log_config=None,
        access_log=False,
        server_header=False,
        timeout_keep_alive=3600,
    )
    config.load()
    return config


async def serve(kind: str, cert: str, key: str) -> None:
    """Serve the app with ``kind``; print READY PORT PID; stop when stdin closes."""
    import asyncio.sslproto

    asyncio.sslproto.SSLProtocol.max_size = TLS_READ_BUFFER
    if os.environ.get("H2_BENCH_TRACE"):
        import tracemalloc

        tracemalloc.start()
    hub_box: list[Hub] = [Hub()]
    app = make_app(hub_box)
    stop = asyncio.Event()
    runner: asyncio.Task[Any] | None = None
    sock = _bind()
    port = sock.getsockname()[1]
    if kind == "uvicorn":
        import uvicorn

        config = _uvicorn_config(app)
        config.ssl = _server_context(cert, key)
        server = uvicorn.Server(config)
        server.install_signal_handlers = lambda: None  # type: ignore[method-assign]
        runner = asyncio.create_task(server.serve(sockets=[sock]))
        while not server.started:  # noqa: ASYNC110 - uvicorn has no event for it
            await asyncio.sleep(0.01)
    elif kind == "h2":
        from _h2_asgi import H2Server
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
        from uvicorn.server import ServerState

        config = _uvicorn_config(app)
        state = ServerState()
        h2server = H2Server(
            app,
            _server_context(cert, key),
            h1_factory=lambda: HttpToolsProtocol(config, state, {}),
            max_streams=STREAMS_PER_CONN,
            max_connections=20_000,
        )
        await h2server.start(sock)
    elif kind == "hypercorn":
        from hypercorn.asyncio import serve as hypercorn_serve
        from hypercorn.config import Config

        hconfig = Config()
        hconfig.bind = [f"fd://{sock.fileno()}"]
        hconfig.certfile, hconfig.keyfile = cert, key
        hconfig.h2_max_concurrent_streams = STREAMS_PER_CONN
        hconfig.keep_alive_timeout = 3600
        hconfig.backlog = 8192
        hconfig.accesslog = None
        hconfig.errorlog = "-"
        hconfig.loglevel = "WARNING"
        runner = asyncio.create_task(
            hypercorn_serve(app, hconfig, shutdown_trigger=stop.wait, mode="asgi")  # type: ignore[arg-type]
        )
    elif kind == "granian":
        from granian.constants import HTTPModes, Interfaces, SSLProtocols
        from granian.http import HTTP2Settings
        from granian.log import LogLevels
        from granian.server.embed import Server

        sock.close()  # granian binds its own socket
        gserver = Server(
            app,
            address="127.0.0.1",
            port=port,
            interface=Interfaces.ASGINL,
            http=HTTPModes.auto,
            ssl_cert=Path(cert),
            ssl_key=Path(key),
            ssl_protocol_min=SSLProtocols.tls12,
            backlog=8192,
            backpressure=20_000,  # granian's connection cap (default: backlog / workers)
            http2_settings=HTTP2Settings(max_concurrent_streams=STREAMS_PER_CONN),
            log_level=LogLevels.warning,
        )
        runner = asyncio.create_task(gserver.serve())
        for _ in range(500):
            with contextlib.suppress(OSError):
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            await asyncio.sleep(0.02)
    else:
        raise SystemExit(f"unknown server {kind}")
    print("READY", port, os.getpid(), flush=True)
    while (await asyncio.to_thread(sys.stdin.readline)).strip() == "shutdown":
        # what the proxy would do on SIGTERM: end every watch (its last chunk), then stop
        began = time.monotonic()
        hub = hub_box[0]
        for w in hub.watchers:
            w.ended = True
            w.wake.set()
        if kind == "uvicorn":
            server.should_exit = True
        elif kind == "h2":
            await h2server.close()
        elif kind == "hypercorn":
            stop.set()
        elif kind == "granian":
            gserver.stop()
        if runner is not None:
            await asyncio.wait([runner], timeout=STOP_WAIT)
        print("STOPPED", f"{time.monotonic() - began:.2f}", len(hub.watchers), flush=True)
    stop.set()
    if runner is not None:
        runner.cancel()
    os._exit(0)  # the bench is done with it


# ============================================================================ the clients
def _client_context(ca: str, alpn: str) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=ca)
    context.set_alpn_protocols([alpn])
    return context


class Results:
    """What one client process saw: per run, a latency histogram and per-stream counts."""

    def __init__(self) -> None:
        self.hist: dict[int, dict[int, int]] = {}
        self.opened = 0
        self.ended = 0  # streams ended cleanly (END_STREAM, the last chunk)
        self.reset = 0  # RST_STREAM
        self.cut = 0  # the connection closed under an open stream

    def record(self, run: int, latency: float) -> None:
        hist = self.hist.get(run)
        if hist is None:
            hist = self.hist[run] = {}
        bucket = int(latency / BUCKET) if latency > 0 else 0
        hist[bucket] = hist.get(bucket, 0) + 1


class Lines:
    """One stream's bytes cut into lines; churn lines timed and counted."""

    __slots__ = ("counts", "done", "opened", "partial", "results", "stalled")

    def __init__(self, results: Results, stalled: bool = False) -> None:
        self.results = results
        self.partial = b""
        self.opened = False
        self.counts: dict[int, int] = {}
        self.stalled = stalled
        self.done = False

    def feed(self, data: bytes, now: float) -> None:
        data = self.partial + data if self.partial else data
        lines = data.split(b"\n")
        self.partial = lines.pop()
        for line in lines:
            if line.startswith(b'{"type":"MODIFIED"'):
                parts = line.split(b",", 4)
                run = int(parts[1][6:])
                self.counts[run] = self.counts.get(run, 0) + 1
                if not self.stalled:
                    self.results.record(run, now - float(parts[3][7:]))
            elif not self.opened and line.startswith(b'{"type":"ADDED"'):
                self.opened = True
                self.results.opened += 1


class H2WatchConnection(asyncio.Protocol):
    """One h2 connection holding watch streams, acknowledging data as it arrives (a stalled
    stream: the connection's window only)."""

    def __init__(self, results: Results, port: int, window: int, stall_first: bool) -> None:
        import h2.config
        import h2.connection
        import h2.settings

        self.results = results
        self.authority = b"127.0.0.1:%d" % port
        self.streams: dict[int, Lines] = {}
        self.stall_first = stall_first
        self.stalled_sid = -1
        self.conn = h2.connection.H2Connection(
            h2.config.H2Configuration(client_side=True, header_encoding=None)
        )
        self.conn.local_settings = h2.settings.Settings(
            client=True,
            initial_values={
                h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: window,
                h2.settings.SettingCodes.ENABLE_PUSH: 0,
            },
        )
        self.transport: asyncio.Transport | None = None
        self.lost = asyncio.get_running_loop().create_future()
        # the h2 library closes a connection on GOAWAY, where RFC 9113 lets the streams it
        # covers finish (hyper sends GOAWAY first on a graceful stop): frames are split here,
        # and from a GOAWAY on read by hand
        self.pending = b""
        self.until = 0  # bytes of the current frame not seen yet
        self.goaway = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        self.conn.initiate_connection()
        self.conn.increment_flow_control_window(2**30 - 65535)
        transport.write(self.conn.data_to_send())

    def open(self, count: int) -> None:
        for _ in range(count):
            sid = self.conn.get_next_available_stream_id()
            stalled = self.stall_first and self.stalled_sid < 0
            if stalled:
                self.stalled_sid = sid
            self.streams[sid] = Lines(self.results, stalled)
            self.conn.send_headers(
                sid,
                [
                    (b":method", b"GET"),
                    (b":scheme", b"https"),
                    (b":authority", self.authority),
                    (b":path", b"/watch"),
                ],
                end_stream=True,
            )
        assert self.transport is not None
        self.transport.write(self.conn.data_to_send())

    def data_received(self, data: bytes) -> None:
        buf = self.pending + data if self.pending else data
        self.pending = b""
        if self.goaway:
            self.after_goaway(buf)
            return
        i, n = 0, len(buf)
        while True:
            if self.until:
                take = min(self.until, n - i)
                i += take
                self.until -= take
                if self.until:
                    break
            if n - i < 9:
                break
            if buf[i + 3] == 7:  # GOAWAY
                self.h2_received(buf[:i])
                self.goaway = True
                self.after_goaway(buf[i:])
                return
            self.until = int.from_bytes(buf[i : i + 3], "big")
            i += 9
        self.pending = buf[i:]
        self.h2_received(buf[:i])

    def after_goaway(self, buf: bytes) -> None:
        i, n = 0, len(buf)
        while n - i >= 9:
            length = int.from_bytes(buf[i : i + 3], "big")
            if n - i < 9 + length:
                break
            kind, flags = buf[i + 3], buf[i + 4]
            sid = int.from_bytes(buf[i + 5 : i + 9], "big") & 0x7FFFFFFF
            lines = self.streams.get(sid)
            if lines is not None and not lines.done:
                if kind == 0:
                    lines.feed(buf[i + 9 : i + 9 + length], time.time())
                if kind in (0, 1) and flags & 1:
                    lines.done = True
                    self.results.ended += 1
                elif kind == 3:
                    lines.done = True
                    self.results.reset += 1
            i += 9 + length
        self.pending = buf[i:]
        if self.transport is not None and all(lines.done for lines in self.streams.values()):
            self.transport.close()  # as Go's client does once GOAWAY's streams are done

    def h2_received(self, data: bytes) -> None:
        import h2.events

        if not data:
            return
        now = time.time()
        conn = self.conn
        for event in conn.receive_data(data):
            if isinstance(event, h2.events.DataReceived):
                self.streams[event.stream_id].feed(event.data, now)
                if event.stream_id == self.stalled_sid:
                    if event.flow_controlled_length:
                        conn.increment_flow_control_window(event.flow_controlled_length)
                else:
                    conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
            elif isinstance(event, h2.events.StreamEnded):
                self.results.ended += 1
                self.streams[event.stream_id].done = True
            elif isinstance(event, h2.events.StreamReset):
                self.results.reset += 1
                self.streams[event.stream_id].done = True
        out = conn.data_to_send()
        if out and self.transport is not None:
            self.transport.write(out)

    def connection_lost(self, exc: Exception | None) -> None:
        self.results.cut += sum(not lines.done for lines in self.streams.values())
        if not self.lost.done():
            self.lost.set_result(None)


class H1WatchConnection(asyncio.Protocol):
    """One HTTP/1.1 connection, one chunked watch response (a stalled one stops reading)."""

    def __init__(self, results: Results, port: int, stall: bool) -> None:
        self.lines = Lines(results, stall)
        self.port = port
        self.stall = stall
        self.head = True
        self.raw = b""
        self.need = 0  # bytes of chunk data still to come
        self.crlf = 0  # bytes of the CRLF after a chunk still to come
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        transport.write(b"GET /watch HTTP/1.1\r\nhost: 127.0.0.1:%d\r\n\r\n" % self.port)

    def data_received(self, data: bytes) -> None:
        now = time.time()
        buf = self.raw + data if self.raw else data
        pos = 0
        if self.head:
            end = buf.find(b"\r\n\r\n")
            if end < 0:
                self.raw = buf
                return
            self.head = False
            pos = end + 4
        out: list[bytes] = []
        size = len(buf)
        while pos < size:
            if self.need:
                take = min(self.need, size - pos)
                out.append(buf[pos : pos + take])
                pos += take
                self.need -= take
                if not self.need:
                    self.crlf = 2
                continue
            if self.crlf:
                take = min(self.crlf, size - pos)
                pos += take
                self.crlf -= take
                continue
            end = buf.find(b"\r\n", pos)
            if end < 0:
                break
            self.need = int(buf[pos:end].split(b";")[0], 16)
            pos = end + 2
            if not self.need:
                self.lines.results.ended += 1
                self.lines.done = True
                break
        self.raw = buf[pos:]
        if out:
            self.lines.feed(b"".join(out), now)
        if self.stall and self.lines.opened and self.transport is not None:
            self.transport.pause_reading()

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.lines.done:
            self.lines.results.cut += 1


async def client(args: argparse.Namespace) -> None:
    """Hold watches; commands on stdin: ``grow CONNS STREAMS``, ``report RUN COUNT``."""
    loop = asyncio.get_running_loop()
    results = Results()
    h2conns: list[H2WatchConnection] = []
    h1conns: list[H1WatchConnection] = []
    context = _client_context(args.ca, "h2" if args.proto == "h2" else "http/1.1")

    async def connect(factory: Any) -> Any:
        _, proto = await loop.create_connection(
            factory, "127.0.0.1", args.port, ssl=context, server_hostname="127.0.0.1"
        )
        return proto

    async def grow(conns: int, streams: int) -> None:
        want = 0
        if args.proto == "h2":
            while len(h2conns) < conns:
                batch = min(50, conns - len(h2conns))
                h2conns.extend(
                    await asyncio.gather(
                        *(
                            connect(
                                lambda i=i: H2WatchConnection(
                                    results,
                                    args.port,
                                    args.window,
                                    args.stall and not h2conns and i == 0,
                                )
                            )
                            for i in range(batch)
                        )
                    )
                )
            for c in h2conns:
                c.open(streams - len(c.streams))
            want = sum(len(c.streams) for c in h2conns)
        else:
            while len(h1conns) < conns:
                batch = min(100, conns - len(h1conns))
                stall_first = args.stall and not h1conns
                h1conns.extend(
                    await asyncio.gather(
                        *(
                            connect(
                                lambda i=i, first=stall_first: H1WatchConnection(
                                    results, args.port, first and i == 0
                                )
                            )
                            for i in range(batch)
                        )
                    )
                )
            want = len(h1conns)
        deadline = time.monotonic() + 120
        while results.opened < want and time.monotonic() < deadline:  # noqa: ASYNC110 - a poll
            await asyncio.sleep(0.05)
        print("OPEN", results.opened, flush=True)

    def every_lines() -> Iterator[Lines]:
        for c in h2conns:
            yield from c.streams.values()
        for h in h1conns:
            yield h.lines

    cpu = time.process_time()
    await grow(args.conns, args.streams)
    while True:
        line = await asyncio.to_thread(sys.stdin.readline)
        words = line.split()
        if not words:
            break
        if words[0] == "grow":
            await grow(int(words[1]), int(words[2]))
        elif words[0] == "report":
            run, count = int(words[1]), int(words[2])
            lost = got = stalled_got = 0
            for lines in every_lines():
                n = lines.counts.get(run, 0)
                if lines.stalled:
                    stalled_got += n
                    continue
                got += n
                lost += max(0, count - n)
            now = time.process_time()
            print(
                "RESULT",
                json.dumps(
                    {
                        "got": got,
                        "lost": lost,
                        "stalled_got": stalled_got,
                        "hist": results.hist.get(run, {}),
                        "cpu": now - cpu,
                        "ended": results.ended,
                        "reset": results.reset,
                        "cut": results.cut,
                    }
                ),
                flush=True,
            )
            cpu = now


# ============================================================================ the driver
def proc_cpu(pid: int) -> float:
    """CPU seconds of a process, every thread."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def proc_rss(pid: int) -> int:
    with open(f"/proc/{pid}/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


class Proc:
    """A child of this file, speaking lines on stdin/stdout."""

    def __init__(self, *args: str, env: dict[str, str] | None = None) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve()), *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env={**os.environ, **(env or {})},
        )

    def expect(self, word: str) -> list[str]:
        assert self.proc.stdout is not None
        while True:
            line = self.proc.stdout.readline()
            if not line:
                raise RuntimeError(f"child ended before {word}")
            parts = line.split(maxsplit=1)
            if parts and parts[0] == word:
                return parts[1:]

    def say(self, line: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def close(self) -> None:
        if self.proc.stdin is not None:
            with contextlib.suppress(BrokenPipeError):
                self.proc.stdin.close()
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


class Control:
    """HTTP/1.1 requests to the app (start a churn, read its stats)."""

    def __init__(self, port: int, ca: str) -> None:
        self.port = port
        self.context = ssl.create_default_context(cafile=ca)

    def get(self, path: str) -> dict[str, Any]:
        return dict(self.get_any(path))

    def get_list(self, path: str) -> list[Any]:
        return list(self.get_any(path))

    def get_any(self, path: str) -> Any:
        conn = http.client.HTTPSConnection("127.0.0.1", self.port, context=self.context)
        try:
            conn.request("GET", path)
            return json.loads(conn.getresponse().read())
        finally:
            conn.close()


def merge(results: list[dict[str, Any]]) -> dict[str, Any]:
    hist: dict[int, int] = {}
    for r in results:
        for bucket, n in r["hist"].items():
            hist[int(bucket)] = hist.get(int(bucket), 0) + n
    total = sum(hist.values())

    def pct(p: float) -> float:
        seen, target = 0, p * total
        for bucket in sorted(hist):
            seen += hist[bucket]
            if seen >= target:
                return (bucket + 1) * BUCKET
        return float("nan")

    return {
        "got": sum(r["got"] for r in results),
        "lost": sum(r["lost"] for r in results),
        "stalled_got": sum(r["stalled_got"] for r in results),
        "ended": sum(r["ended"] for r in results),
        "reset": sum(r["reset"] for r in results),
        "cut": sum(r["cut"] for r in results),
        "cpu": sum(r["cpu"] for r in results),
        "p50": pct(0.5) if total else float("nan"),
        "p99": pct(0.99) if total else float("nan"),
        "max": (max(hist) + 1) * BUCKET if hist else float("nan"),
    }


class Clients:
    def __init__(self, kind: str, port: int, ca: str, conns: int, streams: int, **opts: Any):
        proto = "h2" if kind in H2_CAPABLE else "h1"
        self.procs = [
            Proc(
                "--client",
                proto,
                "--port",
                str(port),
                "--ca",
                ca,
                "--conns",
                str(conns),
                "--streams",
                str(streams),
                "--window",
                str(opts.get("window", 4 << 20)),
                *(["--stall"] if opts.get("stall") and i == 0 else []),
            )
            for i in range(opts.get("processes", CLIENTS))
        ]
        self.opened = sum(int(p.expect("OPEN")[0]) for p in self.procs)

    def grow(self, conns: int, streams: int) -> int:
        for p in self.procs:
            p.say(f"grow {conns} {streams}")
        self.opened = sum(int(p.expect("OPEN")[0]) for p in self.procs)
        return self.opened

    def report(self, run: int, count: int) -> dict[str, Any]:
        for p in self.procs:
            p.say(f"report {run} {count}")
        return merge([json.loads(p.expect("RESULT")[0]) for p in self.procs])

    def close(self) -> None:
        for p in self.procs:
            p.close()


def churn(
    ctl: Control, pid: int, clients: Clients, run: int, rate: float, count: int, size: int
) -> dict[str, Any]:
    cpu = proc_cpu(pid)
    ctl.get(f"/churn?run={run}&rate={rate}&count={count}&size={size}")
    time.sleep(count / rate + 2.0)
    result = clients.report(run, count)
    result["server_cpu"] = proc_cpu(pid) - cpu
    return result


def curl_list(port: int, ca: str, pid: int, version: str, runs: int) -> tuple[float, float, str]:
    """(best seconds, mean server CPU seconds, the HTTP version curl got) over ``runs``."""
    best, cpu_total, got = float("inf"), 0.0, "?"
    for _ in range(runs):
        cpu = proc_cpu(pid)
        out = subprocess.run(
            [
                "curl",
                "-sS",
                "-o",
                "/dev/null",
                version,
                "--cacert",
                ca,
                "-w",
                "%{time_total} %{http_version} %{size_download}",
                f"https://127.0.0.1:{port}/list",
            ],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split()
        cpu_total += proc_cpu(pid) - cpu
        best, got = min(best, float(out[0])), out[1]
    return best, cpu_total / runs, got


@contextlib.contextmanager
def server_process(
    kind: str, cert: str, key: str, env: dict[str, str] | None = None
) -> Iterator[tuple[int, int, Proc]]:
    server = Proc("--serve", kind, "--cert", cert, "--key", key, env=env)
    try:
        port, pid = server.expect("READY")[0].split()
        yield int(port), int(pid), server
    finally:
        server.close()


def stop_with_watches(server: Proc, clients: Clients) -> dict[str, Any]:
    """The app ends every watch, the server stops: how each stream ended, and how long."""
    server.say("shutdown")
    seconds, left = server.expect("STOPPED")[0].split()
    time.sleep(1)
    result = clients.report(0, 0)
    return {
        "seconds": float(seconds),
        "app_watchers_left": int(left),
        **{k: result[k] for k in ("ended", "reset", "cut")},
    }


def measure(kind: str, args: argparse.Namespace, cert: str, key: str, ca: str) -> dict[str, Any]:
    out: dict[str, Any] = {"kind": kind}
    h2 = kind in H2_CAPABLE
    per = CLIENTS
    conns0 = 40 // per
    with server_process(kind, cert, key) as (port, pid, server):
        ctl = Control(port, ca)
        # 1. RSS per stream, 2. delivery at 100 events/s
        clients = Clients(kind, port, ca, conns0, 1)
        try:
            time.sleep(1)
            rss0, n0 = proc_rss(pid), clients.opened
            n1 = clients.grow(conns0, 1000 // 40) if h2 else clients.grow(1000 // per, 1)
            time.sleep(1)
            rss1 = proc_rss(pid)
            count = int(args.seconds * args.rate)
            out["churn"] = churn(ctl, pid, clients, 1, args.rate, count, 1000)
            out["churn"]["watchers"] = n1
            rss1b = proc_rss(pid)
            out["rss"] = {"base": (n0, rss0), "idle": (n1, rss1), "busy": (n1, rss1b)}
            print(
                f"  {kind}: {n0} -> {n1} streams, RSS {rss0 >> 10} -> {rss1 >> 10} KiB, "
                f"{rss1b >> 10} KiB after the churn; {out['churn']}",
                flush=True,
            )
            if h2 or args.h1_max > 1000:
                began = time.monotonic()
                n2 = (
                    clients.grow(conns0, STREAMS_PER_CONN)
                    if h2
                    else clients.grow(args.h1_max // per, 1)
                )
                out["open_10k"] = time.monotonic() - began
                out["burst"] = churn(ctl, pid, clients, 2, 2.0, 6, 1000)
                out["burst"]["watchers"] = n2
                out["rss"]["10k"] = (n2, proc_rss(pid))
                print(
                    f"  {kind}: {n2} streams in {out['open_10k']:.1f}s, RSS "
                    f"{out['rss']['10k'][1] >> 10} KiB; burst {out['burst']}",
                    flush=True,
                )
            # 5. a clean stop with every watch open: does each end with its last frame?
            out["shutdown"] = stop_with_watches(server, clients)
            print(f"  {kind}: shutdown {out['shutdown']}", flush=True)
        finally:
            clients.close()
    # 4. LIST, on a server of its own
    with server_process(kind, cert, key) as (port, pid, _):
        out["list_h1"] = curl_list(port, ca, pid, "--http1.1", args.list_runs)
        if h2:
            out["list_h2"] = curl_list(port, ca, pid, "--http2", args.list_runs)
        print(f"  {kind}: list {out.get('list_h1')} {out.get('list_h2')}", flush=True)
    # 3. a stalled stream beside live ones, on a server of its own (RSS growth visible)
    with server_process(kind, cert, key) as (port, pid, _):
        ctl = Control(port, ca)
        stall = Clients(
            kind, port, ca, 1 if h2 else 21, 21 if h2 else 1, window=65535, stall=True, processes=1
        )
        try:
            time.sleep(1)
            rss_before = proc_rss(pid)
            out["stall"] = churn(ctl, pid, stall, 3, 100.0, int(args.stall_seconds * 100), 8000)
            out["stall"]["held"] = ctl.get("/held")
            out["stall"]["rss_growth"] = proc_rss(pid) - rss_before
            out["stall"].update(ctl.get("/stats"))
            print(f"  {kind}: stall {out['stall']}", flush=True)
        finally:
            stall.close()
    return out


def breakdown(kind: str, cert: str, key: str, ca: str) -> str:
    """Where a server's Python allocations per additional stream go (tracemalloc, lines)."""
    from _common import table

    h2 = kind in H2_CAPABLE
    with server_process(kind, cert, key, env={"H2_BENCH_TRACE": "1"}) as (port, _pid, _):
        ctl = Control(port, ca)
        clients = Clients(kind, port, ca, 20, 1)
        try:
            n0 = clients.opened
            ctl.get("/trace-mark")
            n1 = clients.grow(20, 25) if h2 else clients.grow(500, 1)
            diff = ctl.get_list("/trace-diff")
        finally:
            clients.close()
    added = n1 - n0
    rows = [
        [where[-90:], f"{size / added:.0f}", f"{count / added:.2f}"]
        for where, size, count in diff[:14]
    ]
    total = sum(size for _, size, _ in diff)
    return table(
        f"{kind}: Python allocations per additional stream ({added} added; top 25 lines "
        f"{total / added:.0f} B/stream)",
        ["allocated at", "B/stream", "objects"],
        rows,
    )


def uptime() -> str:
    with open("/proc/loadavg") as f:
        return "load " + " ".join(f.read().split()[:3])


def report(results: list[dict[str, Any]], args: argparse.Namespace, loads: list[str]) -> str:
    from _common import table

    base = next((r for r in results if r["kind"] == "uvicorn"), None)

    def per_stream(r: dict[str, Any], key: str) -> float:
        (n0, r0), (n, rss) = r["rss"]["base"], r["rss"][key]
        return (rss - r0) / 1024 / max(1, n - n0)

    def cpu_per_event(r: dict[str, Any]) -> float:
        c = r["churn"]
        return float(c["server_cpu"] / max(1, c["got"]) * 1e6)

    def vs(value: float, r: dict[str, Any], of: Any) -> str:
        if base is None or r is base:
            return f"{value:.1f}"
        return f"{value:.1f} ({value / of(base):.2f}x)"

    def us(seconds: float) -> float:
        return seconds / LIST_OBJECTS * 1e6

    first, second = [], []
    for r in results:
        c = r["churn"]
        big = r["rss"].get("10k")
        burst = r.get("burst")
        first.append(
            [
                r["kind"],
                vs(per_stream(r, "idle"), r, lambda b: per_stream(b, "idle")),
                vs(per_stream(r, "busy"), r, lambda b: per_stream(b, "busy")),
                f"{per_stream(r, '10k'):.1f} ({big[0]})" if big else "-",
                f"{c['p99'] * 1000:.0f} / {c['p50'] * 1000:.0f}",
                vs(cpu_per_event(r), r, cpu_per_event),
                str(c["lost"]),
                f"{c['cpu'] / max(1, c['got']) * 1e6:.1f}",
                f"{burst['max'] * 1000:.0f} ms, {burst['lost']} lost" if burst else "-",
            ]
        )
        s = r["stall"]
        l1, l2 = r["list_h1"], r.get("list_h2")
        second.append(
            [
                r["kind"],
                f"{s['lost']} lost, p99 {s['p99'] * 1000:.0f} ms",
                f"{s['stalled_got']}",
                f"{s['max_pending'] >> 10} KiB, send blocked {s['max_blocked']:.1f} s",
                f"{(s['held']['transports'] + s['held']['stream_buffers']) >> 10} KiB"
                + (" (Rust: not seen)" if r["kind"] == "granian" else ""),
                f"{s['rss_growth'] / 2**20:+.1f} MiB",
                f"{us(l1[0]):.2f} ({us(l1[1]):.2f})",
                f"{us(l2[0]):.2f} ({us(l2[1]):.2f}), {us(l2[0]) / us(l1[0]):.2f}x h1"
                if l2
                else "-",
            ]
        )
    when = time.strftime("%Y-%m-%d %H:%M")
    one = table(
        f"Watches ({when}, {os.cpu_count()} CPUs, {loads[0]} before, {loads[-1]} after; "
        f"1,000 watchers x {args.rate:.0f} events/s x {args.seconds:.0f} s, ~1 KB events; "
        "ratios against uvicorn)",
        [
            "server",
            "KiB/stream idle @1k",
            "KiB/stream after events @1k",
            "KiB/stream @10k",
            "p99 / p50 ms",
            "server CPU us/event",
            "lost",
            "client CPU us/event",
            "one event to all (max)",
        ],
        first,
    )
    two = table(
        f"A stalled stream beside 20 live ones ({args.stall_seconds:.0f} s, 8 KB events at 100/s,"
        " 64 KiB stream window; HTTP/1.1: a connection that stops reading), and a LIST of "
        f"{LIST_OBJECTS:,} objects (~20 MB; best wall time of {args.list_runs}, "
        "server CPU mean, per object)",
        [
            "server",
            "live streams",
            "stalled got",
            "the app holds for the stalled one",
            "the server holds",
            "server RSS growth",
            "LIST h1 us/obj (CPU)",
            "LIST h2 us/obj (CPU)",
        ],
        second,
    )
    three = table(
        "A clean stop with every watch open (the app ends each watch, then the server stops; "
        "the clients count how each stream ended)",
        ["server", "streams", "ended cleanly", "reset", "cut (connection closed)", "stop took"],
        [
            [
                r["kind"],
                str(r["rss"].get("10k", r["rss"]["idle"])[0]),
                str(r["shutdown"]["ended"]),
                str(r["shutdown"]["reset"]),
                str(r["shutdown"]["cut"]),
                f"{r['shutdown']['seconds']:.1f} s",
            ]
            for r in results
        ],
    )
    return one + "\n\n" + two + "\n\n" + three


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--servers", default=",".join(CANDIDATES))
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--rate", type=float, default=100.0)
    parser.add_argument("--h1-max", type=int, default=10_000)
    parser.add_argument("--stall-seconds", type=float, default=10.0)
    parser.add_argument("--list-runs", type=int, default=10)
    parser.add_argument("--json", help="also write the raw figures here")
    parser.add_argument(
        "--breakdown",
        action="store_true",
        help="only where each server's Python memory per stream goes",
    )
    # children
    parser.add_argument("--serve")
    parser.add_argument("--cert")
    parser.add_argument("--key")
    parser.add_argument("--client", dest="proto")
    parser.add_argument("--port", type=int)
    parser.add_argument("--ca")
    parser.add_argument("--conns", type=int, default=1)
    parser.add_argument("--streams", type=int, default=1)
    parser.add_argument("--window", type=int, default=4 << 20)
    parser.add_argument("--stall", action="store_true")
    args = parser.parse_args()
    if args.serve:
        asyncio.run(serve(args.serve, args.cert, args.key))
        return
    if args.proto:
        asyncio.run(client(args))
        return
    from kubemux.proxy import make_certificates

    certs = make_certificates()
    loads = [uptime()]
    results = []
    with tempfile.TemporaryDirectory(prefix="h2-bench-") as folder:
        paths = {}
        for name, data in (
            ("cert", certs.cert_pem + certs.ca_pem),
            ("key", certs.key_pem),
            ("ca", certs.ca_pem),
        ):
            path = paths[name] = os.path.join(folder, f"{name}.pem")
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as f:
                f.write(data)
        if args.breakdown:
            for kind in args.servers.split(","):
                print(breakdown(kind, paths["cert"], paths["key"], paths["ca"]), "\n", flush=True)
            return
        for kind in args.servers.split(","):
            print(f"{kind} ({uptime()})", flush=True)
            results.append(measure(kind, args, paths["cert"], paths["key"], paths["ca"]))
            loads.append(uptime())
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    print()
    print(report(results, args, loads))


if __name__ == "__main__":
    main()
