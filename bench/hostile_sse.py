"""SSE load on the dashboard: N clients that never read plus N that do, connecting at once.

    python bench/hostile_sse.py [--pods 5000] [--seconds 10] [--external-clients]
                                [--in-process [--freeze]] [N ...]
                                                                    (default N: 100 500)

One FakeCluster with --pods pods, in a process of its own (as an API server is; with
--in-process, in this one, where the collector's full collections over its millions of
objects count as the dashboard's lag unless --freeze), the dashboard served by uvicorn in
this event loop. For each N: N raw connections ask for ``/api/stream`` and never read, N
more read everything; meanwhile pods keep changing and ``/api/contexts`` is timed. Prints
RSS growth, the worst event-loop lag (wall clock: it counts the time the process waited for
a CPU too, so it varies with the machine's load) and the CPU time of the longest turn of the
event loop (the lag this process caused itself), ``/api/contexts`` latency, and how many
streams were open at the end (non-reading ones are dropped after ``stream_send_timeout``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import socket
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import anyio
import httpx
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
import anyio.lowlevel
from _common import server, table
from _server import churn_step

from kubemux.dashboard import DashboardServer, create_app
from kubemux.testing import FakeCluster, kubeconfig_dict, make_pod


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


async def lag_probe(worst: list[float], stop: anyio.Event) -> None:
    while not stop.is_set():
        start = time.perf_counter()
        await anyio.sleep(0.01)
        worst[0] = max(worst[0], time.perf_counter() - start - 0.01)


@contextlib.contextmanager
def turn_cpu(worst: list[float]) -> Iterator[None]:
    """The CPU time of the event loop's longest turn into ``worst[0]``: the lag the server
    itself causes, whatever else runs on the machine (the wall-clock lag counts the time
    this process waited for a CPU as well)."""
    loop = asyncio.get_running_loop()
    run_once = loop._run_once  # type: ignore[attr-defined]

    def timed() -> None:
        start = time.thread_time()
        run_once()
        worst[0] = max(worst[0], time.thread_time() - start)

    loop._run_once = timed  # type: ignore[attr-defined]
    try:
        yield
    finally:
        del loop._run_once  # type: ignore[attr-defined]


async def reader(port: int, stop: anyio.Event) -> None:
    with contextlib.suppress(OSError):
        r, w = await asyncio.open_connection("127.0.0.1", port)
        w.write(b"GET /api/stream HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        while not stop.is_set() and await r.read(65536):
            pass
        w.close()


async def clients(port: int, n: int, stop: anyio.Event) -> None:
    """N connections that ask for the stream and never read, N that read everything."""
    stalled = []
    try:
        async with anyio.create_task_group() as tg:
            for i in range(n):
                if i % 50 == 0:  # the clients' own work, spread: it is not the server's
                    await anyio.lowlevel.checkpoint()
                sock = socket.socket()
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
                sock.setblocking(False)
                with contextlib.suppress(BlockingIOError):
                    sock.connect(("127.0.0.1", port))
                stalled.append(sock)
            await anyio.sleep(0.05)
            for sock in stalled:
                with contextlib.suppress(OSError):
                    sock.send(b"GET /api/stream HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
                tg.start_soon(reader, port, stop)
            await stop.wait()
            tg.cancel_scope.cancel()
    finally:
        for sock in stalled:
            sock.close()


def client_process(port: int, n: int) -> None:
    """``--clients PORT N``: the clients in a process of their own, until killed."""

    async def run() -> None:
        await clients(port, n, anyio.Event())

    anyio.run(run)


async def scenario(
    url: str, n: int, seconds: float, cluster: FakeCluster | None, app: object, external: bool
) -> list[str]:
    """One run; ``cluster`` is None when it runs in its own process (and churns itself)."""
    port = int(url.rsplit(":", 1)[1].strip("/"))
    state = app.state.dashboard  # type: ignore[attr-defined]
    before = rss_mb()
    stop = anyio.Event()
    worst = [0.0]
    latencies: list[float] = []
    peak = before
    process = None
    turn = [0.0]
    async with (
        anyio.create_task_group() as tg,
        httpx.AsyncClient(base_url=url, timeout=60) as c,
    ):
        tg.start_soon(lag_probe, worst, stop)
        if external:
            args = [sys.executable, __file__, "--clients", str(port), str(n)]
            process = await anyio.open_process(args)
        else:
            tg.start_soon(clients, port, n, stop)
        end = time.monotonic() + seconds
        i = 0
        with turn_cpu(turn):
            while time.monotonic() < end:
                if cluster is not None:  # the churn bench/_server.py does by itself
                    churn_step(cluster, i)
                    i += 1
                start = time.perf_counter()
                response = await c.get("/api/contexts")
                latencies.append(time.perf_counter() - start)
                assert response.status_code == 200
                peak = max(peak, rss_mb())
                await anyio.sleep(0.1)
        open_streams = state.streams
        stop.set()
        if process is not None:
            process.kill()
            await process.wait()
            await process.aclose()
        tg.cancel_scope.cancel()
    return [
        str(n),
        f"{before:.0f}",
        f"+{peak - before:.0f}",
        f"{worst[0] * 1000:.0f}",
        f"{turn[0] * 1000:.0f}",
        f"{statistics.median(latencies) * 1000:.1f}",
        f"{max(latencies) * 1000:.0f}",
        str(open_streams),
    ]


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pods", type=int, default=5000)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument(
        "--external-clients",
        action="store_true",
        help="run the clients in another process (the lag is then the server's alone)",
    )
    parser.add_argument(
        "--freeze",
        action="store_true",
        help="gc.freeze() the fake cluster's objects (no full collections over them)",
    )
    parser.add_argument(
        "--in-process",
        action="store_true",
        help="run the fake cluster in this process (its objects then weigh on the collector)",
    )
    parser.add_argument("n", type=int, nargs="*", default=[100, 500])
    args = parser.parse_args()
    rows = []
    async with contextlib.AsyncExitStack() as stack:
        cluster: FakeCluster | None = None
        if args.in_process:
            cluster = await stack.enter_async_context(FakeCluster())
            for i in range(args.pods):
                cluster.create("pods", make_pod(f"p-{i:05d}", size=1200))
            target: FakeCluster | str = cluster
        else:
            target = stack.enter_context(server(args.pods, 1200, churn=0.1))[0]
        if args.freeze:
            # The fake cluster's objects (dicts, millions of gc-tracked objects) live in this
            # process only because the bench puts them here: out of the collector's sight,
            # the full collections they cause (100-400 ms each) stop counting as server lag.
            gc.collect()
            gc.freeze()
        tmp = stack.enter_context(tempfile.TemporaryDirectory())
        path = Path(tmp) / "config"
        path.write_text(yaml.safe_dump(kubeconfig_dict({"prod": target})))  # type: ignore[dict-item]
        for n in args.n:
            app = create_app(kubeconfig=str(path), max_streams=4 * n, stream_send_timeout=5)
            dashboard = DashboardServer(app, port=0)
            async with anyio.create_task_group() as tg:
                url = await tg.start(dashboard.serve)
                async with (
                    httpx.AsyncClient(base_url=url, timeout=60) as c,
                    c.stream("GET", "/api/stream") as warm,
                ):
                    seen = b""
                    async for chunk in warm.aiter_bytes():  # the table synced: imports done
                        seen = seen[-64:] + chunk
                        if b"event: synced" in seen:
                            break
                rows.append(
                    await scenario(url, n, args.seconds, cluster, app, args.external_clients)
                )
                dashboard.shutdown()
    print(
        table(
            f"SSE load: {args.pods} pods, N stalled + N reading clients, {args.seconds:g}s"
            + (", cluster in this process" if args.in_process else "")
            + (", clients in another process" if args.external_clients else "")
            + (", cluster objects frozen" if args.freeze else ""),
            [
                "N",
                "RSS MB",
                "RSS peak",
                "loop lag max ms",
                "longest turn CPU ms",
                "/api/contexts p50 ms",
                "max ms",
                "streams open at end",
            ],
            rows,
        )
    )


if __name__ == "__main__":
    if sys.argv[1:2] == ["--clients"]:
        client_process(int(sys.argv[2]), int(sys.argv[3]))
    else:
        anyio.run(main)
