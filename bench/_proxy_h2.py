"""bench/proxy.py's HTTP/2 rows: watches held by h2 clients in separate processes, and the
LIST over h2 beside HTTP/1.1.

The client (``python bench/_proxy_h2.py URL CA TOKEN CONNS STREAMS``) speaks like kubectl
1.33 (its SETTINGS read off the wire: 4 MiB stream window, 1 GiB connection window) and
frames by hand: a Python HTTP/2 library would cost the 2-core machine more CPU than the
proxy it measures. Each DATA frame's lines are counted per stream; each event's delay is
now less the ``bench/sent`` time in the object (every 10th stream: the others count lines). Commands on stdin: ``report N`` (a JSON
line: streams with N events, events lost, delay percentiles since the last report), and
end of input (the process exits, its connections close).
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import gc
import json
import os
import ssl
import subprocess
import sys
import time
import urllib.parse
from collections.abc import AsyncIterator
from typing import Any

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
STREAM_WINDOW = 4 * 1024 * 1024
CONNECTION_WINDOW = 1 << 30
SENT = b'"bench/sent":"'


def _frame(kind: int, flags: int, sid: int, payload: bytes) -> bytes:
    return len(payload).to_bytes(3, "big") + bytes((kind, flags)) + sid.to_bytes(4, "big") + payload


class Stream:
    __slots__ = ("delays", "got", "mark", "partial", "probe", "status")

    def __init__(self, probe: bool) -> None:
        self.probe = probe  # every 10th stream times its events; the others count lines
        self.got = 0
        self.mark = 0  # ``got`` at the last report
        self.partial = b""
        self.status = 0
        self.delays: list[float] = []


class Conn(asyncio.Protocol):
    """One h2 connection holding ``streams`` watches of ``path``."""

    def __init__(self, authority: str, path: str, token: str, streams: int, opened: Any) -> None:
        import hpack

        self.encoder = hpack.Encoder()
        self.decoder = hpack.Decoder()
        self.decoder.max_header_list_size = 1 << 20
        self.authority, self.path, self.token = authority, path, token
        self.count = streams
        self.streams: dict[int, Stream] = {}
        self.buf = b""
        self.opened = opened
        self.consumed = 0  # connection-level bytes not yet given back
        self.transport: asyncio.Transport | None = None
        self.resets = 0
        self.ended = 0  # streams the proxy ended (END_STREAM: a watcher cut for its budget)
        self.goaway = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        settings = (2).to_bytes(2, "big") + (0).to_bytes(4, "big")  # ENABLE_PUSH 0
        settings += (4).to_bytes(2, "big") + STREAM_WINDOW.to_bytes(4, "big")
        out = [PREFACE, _frame(4, 0, 0, settings)]
        out.append(_frame(8, 0, 0, (CONNECTION_WINDOW - 65535).to_bytes(4, "big")))
        headers = [
            (":method", "GET"),
            (":scheme", "https"),
            (":authority", self.authority),
            (":path", self.path),
            ("authorization", f"Bearer {self.token}"),
            ("accept", "application/json"),
        ]
        for n in range(self.count):
            sid = 1 + 2 * n
            self.streams[sid] = Stream(probe=n % 10 == 0)
            out.append(_frame(1, 0x5, sid, self.encoder.encode(headers)))  # END_STREAM|HEADERS
        transport.write(b"".join(out))

    def data_received(self, data: bytes) -> None:
        buf = self.buf + data if self.buf else data
        i, n = 0, len(buf)
        out: list[bytes] = []
        now = time.time()
        while n - i >= 9:
            length = int.from_bytes(buf[i : i + 3], "big")
            if n - i < 9 + length:
                break
            kind, flags = buf[i + 3], buf[i + 4]
            sid = int.from_bytes(buf[i + 5 : i + 9], "big") & 0x7FFFFFFF
            payload = buf[i + 9 : i + 9 + length]
            i += 9 + length
            if kind == 0:  # DATA
                stream = self.streams.get(sid)
                if stream is not None and payload:
                    self._lines(stream, payload, now)
                if flags & 1:
                    self.ended += 1
                self.consumed += length
                if self.consumed >= CONNECTION_WINDOW // 2:
                    out.append(_frame(8, 0, 0, self.consumed.to_bytes(4, "big")))
                    self.consumed = 0
            elif kind == 1:  # HEADERS (the responses fit one frame)
                stream = self.streams.get(sid)
                for name, value in self.decoder.decode(payload):
                    if name == ":status" and stream is not None:
                        stream.status = int(value)
                        self.opened()
            elif kind == 4 and not flags & 1:  # SETTINGS: acknowledged
                out.append(_frame(4, 1, 0, b""))
            elif kind == 6 and not flags & 1:  # PING
                out.append(_frame(6, 1, 0, payload))
            elif kind == 3:
                self.resets += 1
            elif kind == 7:
                self.goaway = True
        self.buf = buf[i:]
        if out and self.transport is not None:
            self.transport.write(b"".join(out))

    @staticmethod
    def _lines(stream: Stream, payload: bytes, now: float) -> None:
        if not stream.probe:
            stream.got += payload.count(b"\n")
            return
        data = stream.partial + payload if stream.partial else payload
        end = data.rfind(b"\n")
        if end < 0:
            stream.partial = data
            return
        stream.partial = data[end + 1 :]
        start = 0
        while True:
            at = data.find(SENT, start, end)
            if at < 0:
                break
            stop = data.find(b'"', at + len(SENT))
            stream.delays.append(now - float(data[at + len(SENT) : stop]))
            start = stop
        stream.got += data.count(b"\n", 0, end + 1)


async def client(url: str, ca: str, token: str, conns: int, streams: int) -> None:
    parts = urllib.parse.urlsplit(url)
    context = ssl.create_default_context(cafile=ca)
    context.set_alpn_protocols(["h2"])
    loop = asyncio.get_running_loop()
    want = conns * streams
    opened = 0
    all_open = asyncio.Event()

    def one() -> None:
        nonlocal opened
        opened += 1
        if opened == want:
            all_open.set()

    path = parts.path + ("?" + parts.query if parts.query else "")
    made: list[Conn] = []
    for _ in range(conns):
        _, conn = await loop.create_connection(
            lambda: Conn(parts.netloc, path, token, streams, one),
            parts.hostname,
            parts.port,
            ssl=context,
        )
        made.append(conn)
    await asyncio.wait_for(all_open.wait(), 300)
    print("OPEN", flush=True)
    while line := await asyncio.to_thread(sys.stdin.readline):
        words = line.split()
        if words[:1] == ["report"]:
            events = int(words[1])
            every = [s for c in made for s in c.streams.values()]
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and any(  # noqa: ASYNC110 - a poll of counters
                s.got - s.mark < events for s in every
            ):
                await asyncio.sleep(0.1)
            delays = sorted(d for s in every for d in s.delays)
            for s in every:
                s.delays.clear()
            result = {
                "complete": sum(1 for s in every if s.got - s.mark >= events),
                "lost": sum(max(0, events - (s.got - s.mark)) for s in every),
                "p50": delays[len(delays) // 2] if delays else None,
                "p99": delays[int(len(delays) * 0.99)] if delays else None,
                "max": delays[-1] if delays else None,
                "resets": sum(c.resets for c in made),
                "ended": sum(c.ended for c in made),
                "ok": sum(1 for s in every if s.status == 200),
            }
            for s in every:
                s.mark = s.got
            print(json.dumps(result), flush=True)


# ----------------------------------------------------------- the rows (bench/proxy.py's side)
def trimmed_rss_kib() -> int:
    """The process's RSS after a collection and ``malloc_trim`` (what an earlier run freed
    goes back to the system, so a delta measures what is held now)."""
    gc.collect()
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


class Clients:
    """Client processes holding ``conns`` x ``streams`` h2 watches between them."""

    def __init__(self) -> None:
        self.procs: list[asyncio.subprocess.Process] = []

    async def add(
        self, url: str, ca: str, token: str, conns: int, streams: int, procs: int
    ) -> None:
        per, extra = divmod(conns, procs)
        started = []
        for p in range(procs):
            mine = per + (1 if p < extra else 0)
            if not mine:
                continue
            proc = await asyncio.create_subprocess_exec(
                sys.executable, __file__, url, ca, token, str(mine), str(streams),
                stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            )  # fmt: skip
            started.append(proc)
        for proc in started:
            assert proc.stdout is not None
            line = await asyncio.wait_for(proc.stdout.readline(), 300)
            if line.strip() != b"OPEN":
                raise RuntimeError("an h2 watch client did not open its streams")
        self.procs += started

    async def report(self, events: int) -> dict[str, Any]:
        results = []
        for proc in self.procs:
            assert proc.stdin is not None and proc.stdout is not None
            proc.stdin.write(f"report {events}\n".encode())
            await proc.stdin.drain()
        for proc in self.procs:
            assert proc.stdout is not None
            results.append(json.loads(await asyncio.wait_for(proc.stdout.readline(), 120)))
        merged: dict[str, Any] = {
            k: sum(r[k] for r in results) for k in ("complete", "lost", "resets", "ended", "ok")
        }
        for k in ("p50", "p99", "max"):  # the worst client's (a bound, not a merge)
            values = [r[k] for r in results if r[k] is not None]
            merged[k] = max(values) if values else None
        return merged

    async def close(self) -> None:
        for proc in self.procs:
            assert proc.stdin is not None
            proc.stdin.close()
        for proc in self.procs:
            try:
                await asyncio.wait_for(proc.wait(), 20)
            except TimeoutError:
                proc.kill()
                await proc.wait()
        self.procs = []


@contextlib.asynccontextmanager
async def clients() -> AsyncIterator[Clients]:
    held = Clients()
    try:
        yield held
    finally:
        await held.close()


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def curl_version(url: str, token: str, ca: str, version: str, pid: int) -> tuple[float, float]:
    """(best wall seconds of 3, mean CPU seconds of ``pid`` per GET) for curl ``version``
    (``--http2`` or ``--http1.1``); checks the protocol curl got."""
    best, cpu = float("inf"), cpu_seconds(pid)
    for _ in range(3):
        out = subprocess.run(
            ["curl", "-sS", "-o", "/dev/null", version, "--cacert", ca,
             "-H", f"Authorization: Bearer {token}",
             "-w", "%{http_code} %{time_total} %{http_version}", url],
            capture_output=True, text=True, check=True,
        ).stdout.split()  # fmt: skip
        want = "2" if version == "--http2" else "1.1"
        if out[0] != "200" or out[2] != want:
            raise RuntimeError(f"GET {url} ({version}): {out}")
        best = min(best, float(out[1]))
    return best, (cpu_seconds(pid) - cpu) / 3


if __name__ == "__main__":
    url_, ca_, token_, conns_, streams_ = sys.argv[1:6]
    asyncio.run(client(url_, ca_, token_, int(conns_), int(streams_)))
