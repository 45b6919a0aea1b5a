"""How the dashboard's event streams reach many clients: shared views, stalled clients,
catching up, pacing (``kubemux.dashboard._broadcast``), over real HTTP to uvicorn."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import socket
from collections.abc import Iterator
from pathlib import Path

import anyio
import httpx
import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.routing import Mount

from kubemux import WatcherRegistry, dashboard
from kubemux.dashboard import _broadcast
from kubemux.dashboard import server as dashboard_server
from kubemux.testing import FakeCluster, make_pod, write_kubeconfig
from support import TIMEOUT
from test_dashboard import FAST, event_stream, make_app, serving

STREAM_REQUEST = b"GET /api/stream HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"


def hub_of(app: Starlette) -> _broadcast.Hub:
    hub = app.state.dashboard.hub
    assert isinstance(hub, _broadcast.Hub)
    return hub


@contextlib.contextmanager
def stalled_clients(port: int, n: int) -> Iterator[list[socket.socket]]:
    """``n`` connections that ask for the table's stream and never read."""
    sockets = []
    try:
        for _ in range(n):
            sock = socket.socket()
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            sock.connect(("127.0.0.1", port))  # the backlog takes it at once
            sock.sendall(STREAM_REQUEST)
            sockets.append(sock)
        yield sockets
    finally:
        for sock in sockets:
            sock.close()


def port_of(url: str) -> int:
    return int(url.rsplit(":", 1)[1].strip("/"))


async def test_a_stalled_client_never_delays_a_reading_one(tmp_path: Path) -> None:
    """50 clients that stopped reading, each with a write under way, while a reading client
    gets a live change: nobody awaits a stalled client's write."""
    n = 50
    async with FakeCluster() as c:
        for i in range(1500):  # a snapshot of some MB: more than the socket buffers hold
            c.create("pods", make_pod(f"p-{i:04d}", labels={"blob": "x" * 4000}))
        path = write_kubeconfig(tmp_path / "config", {"prod": c})
        app = make_app(path, max_streams=2 * n, stream_send_timeout=600)
        hub = hub_of(app)
        async with serving(app) as url:
            async with httpx.AsyncClient(base_url=url, timeout=TIMEOUT) as client:
                with anyio.fail_after(TIMEOUT):
                    await client.get("/api/contexts/prod/pods")  # synced

            def blocked() -> int:
                return sum(conn.since is not None for conn in hub.connections)

            with stalled_clients(port_of(url), n):
                with anyio.fail_after(2 * TIMEOUT):
                    await c.wait_for(lambda: blocked() == n, timeout=2 * TIMEOUT)
                async with event_stream(url) as reader:
                    await reader.until_event("synced")
                    assert len(reader.names()) == 1500
                    c.create("pods", make_pod("live-1"))
                    await reader.until(lambda: "live-1" in reader.names())
                    # the stalled ones are still stuck in their writes, all of them
                    assert blocked() == n
                    assert len(hub.views) == 1
                    [view] = hub.views.values()
                    assert len(view.members) == n + 1


async def test_streams_of_one_table_share_one_view(tmp_path: Path) -> None:
    async with FakeCluster() as c:
        c.create("pods", make_pod("web-1"))
        c.create("pods", make_pod("db-1", namespace="data"))
        path = write_kubeconfig(tmp_path / "config", {"prod": c})
        app = make_app(path)
        hub = hub_of(app)
        async with serving(app) as url, contextlib.AsyncExitStack() as stack:
            streams = [await stack.enter_async_context(event_stream(url)) for _ in range(3)]
            for stream in streams:
                await stream.until(lambda s=stream: s.names() == {"web-1", "db-1"})
            data = await stack.enter_async_context(event_stream(url, "?namespace=data"))
            await data.until(lambda: data.names() == {"db-1"})
            assert sorted(len(view.members) for view in hub.views.values()) == [1, 3]
            c.create("pods", make_pod("web-2"))
            for stream in streams:
                await stream.until(lambda s=stream: "web-2" in s.names())
            await stack.aclose()  # every client leaves: the views end with them
            with anyio.fail_after(TIMEOUT):
                await c.wait_for(lambda: not hub.views and not hub.connections)


async def test_a_stream_joining_a_running_view_misses_no_change(tmp_path: Path) -> None:
    """A stream joins while changes keep coming: it catches up from the stores, and every
    change after that reaches it (its table ends equal to the store)."""
    async with FakeCluster() as c:
        for i in range(300):
            c.create("pods", make_pod(f"p-{i:03d}"))
        path = write_kubeconfig(tmp_path / "config", {"prod": c})
        app = make_app(path)
        async with serving(app) as url, event_stream(url) as first:
            await first.until(lambda: len(first.names()) == 300)
            churning = anyio.Event()
            done = anyio.Event()

            async def churn() -> None:
                i = 0
                while not done.is_set():
                    c.create("pods", make_pod(f"live-{i:04d}"))
                    if i % 3 == 0:
                        c.delete("pods", "default", f"p-{i % 300:03d}")
                    i += 1
                    if i == 20:
                        churning.set()
                    await anyio.lowlevel.checkpoint()

            async with anyio.create_task_group() as tg:
                tg.start_soon(churn)
                with anyio.fail_after(TIMEOUT):
                    await churning.wait()
                async with event_stream(url) as second:
                    await second.until_event("synced")  # caught up while changes came
                    for _ in range(20):
                        await second.next()
                    done.set()
                    c.create("pods", make_pod("last"))
                    await second.until(lambda: "last" in second.names())
                    await first.until(lambda: "last" in first.names())
                    expected = {p["metadata"]["name"] for p in c.objects("pods")}
                    assert second.names() == expected
                    assert first.names() == expected


async def test_a_client_that_falls_behind_starts_again_from_a_snapshot(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its queue overflows while it does not read; once it reads again it gets ``reset``,
    the snapshot (with what changed meanwhile) and the changes after it."""
    monkeypatch.setattr(_broadcast, "PENDING_BYTES", 4096)
    async with FakeCluster() as c:
        for i in range(1500):  # a snapshot of some MB: more than the socket buffers hold
            c.create("pods", make_pod(f"p-{i:04d}", labels={"blob": "x" * 4000}))
        path = write_kubeconfig(tmp_path / "config", {"prod": c})
        app = make_app(path, stream_send_timeout=600)
        hub = hub_of(app)
        async with serving(app) as url:
            sock = socket.socket()
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            sock.connect(("127.0.0.1", port_of(url)))
            sock.setblocking(False)
            reader, writer = await asyncio.open_connection(sock=sock)
            try:
                writer.write(STREAM_REQUEST)
                seen = await reader.read(1024)  # the stream runs; now it stops reading
                with anyio.fail_after(TIMEOUT):
                    await c.wait_for(lambda: any(conn.since for conn in hub.connections), TIMEOUT)
                    store = hub.context.registry.store("prod", "pods", view="table")
                    assert store is not None
                    i = 0
                    while i < 5 or not any(conn.behind for conn in hub.connections):
                        c.create("pods", make_pod(f"live-{i:03d}", labels={"blob": "y" * 500}))
                        i += 1
                        await c.wait_for(lambda n=1500 + i: len(store) == n, TIMEOUT)
                last = f'"name":"live-{i:03d}"'.encode()
                c.create("pods", make_pod(f"live-{i:03d}"))  # after it fell behind
                # it reads again, through a window of its usual size: a few MB through 4 KiB
                # reads would be thousands of turns of the event loop (over 20 s when loaded)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)

                def caught_up() -> bool:  # the second reset's snapshot is complete
                    first = seen.find(b"event: reset")
                    again = seen.find(b"event: reset", first + 1) if first >= 0 else -1
                    return again >= 0 and last in seen and b"event: synced" in seen[again:]

                with anyio.fail_after(2 * TIMEOUT):
                    while not caught_up():
                        seen += await reader.read(1 << 20)
                again = seen.index(b"event: reset", seen.index(b"event: reset") + 1)
                assert b"event: synced" in seen[again:]
                for name in ("p-0000", "p-1499", "live-000", f"live-{i - 1:03d}"):
                    assert f'"name":"{name}"'.encode() in seen[again:], name
            finally:
                writer.close()


async def test_large_writes_are_spread_over_turns_of_the_event_loop() -> None:
    """The pacer lets ``TURN_BYTES`` through per turn, first come first served."""
    pacer = _broadcast._Pacer()
    size = _broadcast.TURN_BYTES // 2 + 1  # two do not fit in one turn
    turn = 0
    stop = False

    def tick() -> None:
        nonlocal turn
        turn += 1
        if not stop:
            asyncio.get_running_loop().call_soon(tick)

    asyncio.get_running_loop().call_soon(tick)
    order: list[tuple[int, int]] = []

    async def writer(index: int) -> None:
        await pacer.pace(size)
        order.append((index, turn))

    with anyio.fail_after(TIMEOUT):
        async with anyio.create_task_group() as tg:
            for index in range(6):
                tg.start_soon(writer, index)
    stop = True
    assert [index for index, _ in order] == list(range(6))
    turns = [t for _, t in order]
    assert len(set(turns)) == 6, turns  # one per turn
    small = _broadcast._Pacer()
    with anyio.fail_after(TIMEOUT):
        for _ in range(8):  # small ones share a turn: no wait
            await small.pace(1000)


async def test_streams_of_a_mounted_app(tmp_path: Path) -> None:
    """Mounted, the app has no lifespan: each stream runs a view of its own."""
    async with FakeCluster() as c:
        c.create("pods", make_pod("web-1"))
        path = write_kubeconfig(tmp_path / "config", {"prod": c})
        async with WatcherRegistry.from_kubeconfig(str(path), **FAST) as registry:
            inner = dashboard.create_app(registry)
            outer = Starlette(routes=[Mount("/dash", inner)])
            sock = socket.socket()
            sock.bind(("127.0.0.1", 0))
            sock.listen(16)
            port = sock.getsockname()[1]
            config = uvicorn.Config(outer, lifespan="off", log_config=None, log_level="warning")
            server = uvicorn.Server(config)
            try:
                async with anyio.create_task_group() as tg:
                    tg.start_soon(server.serve, [sock])
                    async with event_stream(f"http://127.0.0.1:{port}/dash") as stream:
                        await stream.until(lambda: stream.names() == {"web-1"})
                        c.create("pods", make_pod("web-2"))
                        await stream.until(lambda: stream.names() == {"web-1", "web-2"})
                        assert not hub_of(inner).is_running  # its own hub served it
                    server.should_exit = True
            finally:
                sock.close()


async def test_the_collector_is_tuned_while_serving(tmp_path: Path) -> None:
    async with FakeCluster() as c:
        path = write_kubeconfig(tmp_path / "config", {"prod": c})
        before = gc.get_threshold()
        async with serving(make_app(path)):
            assert gc.get_threshold()[0] == max(before[0], dashboard_server.GC_THRESHOLD)
            async with serving(make_app(path)):
                assert gc.get_threshold()[0] == max(before[0], dashboard_server.GC_THRESHOLD)
        assert gc.get_threshold() == before
