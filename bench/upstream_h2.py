"""Upstream watches over HTTP/1.1 (aiohttp, as kubemux's informers hold them: a connection per
watch) against HTTP/2 (httpx with h2: one connection per cluster, its watches as streams), at
1,000 contexts x 3 resources (issue 32, point 5).

One server process (TLS; uvicorn for HTTP/1.1, kubemux's own h2 server for h2: each event
a ~1 KiB JSON line to every open watch, ``--rate`` per second), one client process per
kind, measured apart: sockets held, client RSS per watch once all are open, client CPU per
event received (the transport only: lines are counted, not decoded, so what differs is the
HTTP stack's cost), and events lost.

Run: ``python bench/upstream_h2.py [--contexts 1000] [--resources 3] [--seconds 10]
[--rate 1]``.
"""

from __future__ import annotations

import argparse
import asyncio
import asyncio.sslproto
import json
import os
import socket
import ssl
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import table

HERE = Path(__file__).resolve().parent
LINE = (
    b'{"type":"MODIFIED","object":{"kind":"Pod","apiVersion":"v1","metadata":{"name":"p",'
    b'"namespace":"bench","resourceVersion":"1","annotations":{"x":"' + b"a" * 900 + b'"}}}}\n'
)


def rss_kib() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


# ------------------------------------------------------------------------- the server
async def serve(cert: str, key: str, rate: float) -> None:
    import uvicorn

    from kubemux.proxy._serve.http2 import Http2Protocol
    from kubemux.proxy._serve.http2_hub import Http2Hub

    watchers: set[asyncio.Queue[bytes]] = set()

    async def app(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        await send({"type": "http.response.start", "status": 200, "headers": []})
        queue: asyncio.Queue[bytes] = asyncio.Queue()
        watchers.add(queue)
        gone = asyncio.ensure_future(receive())  # http.request first, then the disconnect
        try:
            while True:
                got = asyncio.ensure_future(queue.get())
                done, _ = await asyncio.wait({got, gone}, return_when=asyncio.FIRST_COMPLETED)
                if gone in done:
                    if (gone.result())["type"] == "http.disconnect":
                        got.cancel()
                        return
                    gone = asyncio.ensure_future(receive())
                if got in done:
                    await send(
                        {"type": "http.response.body", "body": got.result(), "more_body": True}
                    )
                else:
                    got.cancel()
        finally:
            watchers.discard(queue)

    async def tick() -> None:
        while True:
            await asyncio.sleep(1 / rate)
            for queue in watchers:
                queue.put_nowait(LINE)

    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    h2_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    h2_context.load_cert_chain(cert, key)
    h2_context.set_alpn_protocols(["h2"])
    h1_sock, h2_sock = socket.socket(), socket.socket()
    for sock in (h1_sock, h2_sock):
        sock.bind(("127.0.0.1", 0))
        sock.listen(4096)
    config = uvicorn.Config(app, lifespan="off", log_level="warning", access_log=False)
    config.load()
    config.ssl = context
    server = uvicorn.Server(config)
    h1_task = asyncio.create_task(server.serve([h1_sock]))
    hub = Http2Hub(app, max_streams=250)
    loop = asyncio.get_running_loop()

    def no_h1() -> asyncio.Protocol:
        raise RuntimeError("h2 only here")

    await loop.create_server(lambda: Http2Protocol(hub, no_h1), sock=h2_sock, ssl=h2_context)
    ticker = asyncio.create_task(tick())
    print("READY", h1_sock.getsockname()[1], h2_sock.getsockname()[1], os.getpid(), flush=True)
    await asyncio.to_thread(sys.stdin.read)
    ticker.cancel()
    server.should_exit = True
    await h1_task


# ------------------------------------------------------------------------- the clients
async def client(kind: str, port: int, ca: str, contexts: int, resources: int) -> None:
    """Hold ``contexts`` x ``resources`` watches; ``OPEN`` once all answered, then on each
    ``report`` line the lines received so far and the CPU time."""
    got = [0]
    opened = [0]
    want = contexts * resources
    all_open = asyncio.Event()
    url = f"https://127.0.0.1:{port}/api/v1/namespaces/bench/pods?watch=1"
    tasks: list[asyncio.Task[None]] = []
    holders: list[Any] = []

    def one_open() -> None:
        opened[0] += 1
        if opened[0] == want:
            all_open.set()

    if kind == "aiohttp":
        import aiohttp

        # what `kubemux proxy` sets for every TLS connection of its process (upstream ones
        # too): asyncio's default read buffer is 256 KiB per connection
        asyncio.sslproto.SSLProtocol.max_size = 16 * 1024  # type: ignore[attr-defined]

        async def watch_aiohttp(session: aiohttp.ClientSession) -> None:
            timeout = aiohttp.ClientTimeout(total=None)
            async with session.get(url, timeout=timeout) as resp:
                one_open()
                async for chunk in resp.content.iter_any():
                    got[0] += chunk.count(b"\n")

        context = ssl.create_default_context(cafile=ca)
        for _ in range(contexts):  # a session (a connection pool) per context, as informers
            session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=context))
            holders.append(session)
            tasks += [asyncio.create_task(watch_aiohttp(session)) for _ in range(resources)]
    else:
        import httpx

        async def watch_httpx(client: httpx.AsyncClient) -> None:
            async with client.stream("GET", url, timeout=None) as resp:
                one_open()
                async for chunk in resp.aiter_raw():
                    got[0] += chunk.count(b"\n")

        context = ssl.create_default_context(cafile=ca)
        for _ in range(contexts):  # a client (one h2 connection) per context
            client = httpx.AsyncClient(http2=True, verify=context)
            holders.append(client)
            tasks += [asyncio.create_task(watch_httpx(client)) for _ in range(resources)]
    before = rss_kib()
    await asyncio.wait_for(all_open.wait(), 300)
    await asyncio.sleep(1)
    sockets = len(os.listdir("/proc/self/fd"))
    print("OPEN", json.dumps({"kib": (rss_kib() - before) / want, "fds": sockets}), flush=True)
    while line := await asyncio.to_thread(sys.stdin.readline):
        if line.strip() == "report":
            print(json.dumps({"got": got[0], "cpu": time.process_time()}), flush=True)


class Proc:
    def __init__(self, *args: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, __file__, *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONPATH": str(HERE.parent / "src")},
        )

    def line(self) -> str:
        assert self.proc.stdout is not None
        return self.proc.stdout.readline().strip()

    def say(self, text: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(text + "\n")
        self.proc.stdin.flush()

    def stop(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        try:  # (aiohttp warns of the sessions left open: the process ends with them)
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def measure(kind: str, port: int, ca: str, args: argparse.Namespace) -> dict[str, Any]:
    proc = Proc("--client", kind, str(port), ca, str(args.contexts), str(args.resources))
    try:
        head, _, rest = proc.line().partition(" ")
        if head != "OPEN":
            raise RuntimeError(f"the {kind} client did not open its watches")
        opened = json.loads(rest)
        proc.say("report")
        first = json.loads(proc.line())
        time.sleep(args.seconds)
        proc.say("report")
        last = json.loads(proc.line())
    finally:
        proc.stop()
    watches = args.contexts * args.resources
    events = last["got"] - first["got"]
    expected = watches * args.rate * args.seconds
    return {
        "kib": opened["kib"],
        "fds": opened["fds"],
        "us_per_event": (last["cpu"] - first["cpu"]) / max(1, events) * 1e6,
        "events": events,
        "expected": expected,
    }


def main() -> None:
    if sys.argv[1:2] == ["--serve"]:
        asyncio.run(serve(sys.argv[2], sys.argv[3], float(sys.argv[4])))
        return
    if sys.argv[1:2] == ["--client"]:
        kind, port, ca, contexts, resources = sys.argv[2:7]
        asyncio.run(client(kind, int(port), ca, int(contexts), int(resources)))
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--contexts", type=int, default=1000)
    parser.add_argument("--resources", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--rate", type=float, default=1.0)
    args = parser.parse_args()
    import trustme

    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1")
    started = time.strftime("%Y-%m-%d %H:%M")
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        ca_pem, cert_pem, key_pem = (Path(tmp) / n for n in ("ca.pem", "cert.pem", "key.pem"))
        ca.cert_pem.write_to_path(str(ca_pem))
        cert.cert_chain_pems[0].write_to_path(str(cert_pem))
        cert.private_key_pem.write_to_path(str(key_pem))
        server = Proc("--serve", str(cert_pem), str(key_pem), str(args.rate))
        try:
            words = server.line().split()
            if words[:1] != ["READY"]:
                raise RuntimeError("the server did not start")
            h1_port, h2_port = int(words[1]), int(words[2])
            h1 = measure("aiohttp", h1_port, str(ca_pem), args)
            print("aiohttp", h1, file=sys.stderr, flush=True)
            h2 = measure("httpx", h2_port, str(ca_pem), args)
            print("httpx", h2, file=sys.stderr, flush=True)
        finally:
            server.stop()
    watches = args.contexts * args.resources
    rows = [
        ["sockets (fds) held", f"{h1['fds']}", f"{h2['fds']}", f"{h1['fds'] / h2['fds']:.1f}x"],
        ["client RSS per watch", f"{h1['kib']:.1f} KiB", f"{h2['kib']:.1f} KiB",
         f"{h2['kib'] / h1['kib']:.2f}x"],
        ["client CPU per event", f"{h1['us_per_event']:.1f} us", f"{h2['us_per_event']:.1f} us",
         f"{h2['us_per_event'] / h1['us_per_event']:.2f}x"],
        ["events received / sent", f"{h1['events']} / {h1['expected']:.0f}",
         f"{h2['events']} / {h2['expected']:.0f}", "-"],
    ]  # fmt: skip
    title = (
        f"upstream watches: aiohttp HTTP/1.1 vs httpx h2, {args.contexts} contexts x "
        f"{args.resources} = {watches} watches, {args.rate:g} event/s each, {args.seconds:g} s "
        f"({started}, {os.cpu_count()} CPUs, load {load:.1f})"
    )
    print(table(title, ["measure", "aiohttp, HTTP/1.1", "httpx, h2", "h2 / HTTP/1.1"], rows))


if __name__ == "__main__":
    main()
