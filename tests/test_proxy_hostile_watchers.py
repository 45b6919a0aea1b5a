"""Watchers that never read (issue 28, point 1): what they may hold is budgeted in bytes, a
watcher that has not read for ``idle_timeout`` is cut, and events are kept once (the raw
bytes the store holds), not rendered once per view for watchers that never take them.

Each stalled watcher is a real TLS connection whose reading is paused after the response
head, so the proxy's writes to it block as they would for a client that stopped reading.
The sizes are scaled down (a few MB, a handful of watchers); bench/hostile_proxy.py holds
the full-size figures (40 watchers, 40 KB pods changing 10 times a second).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import socket
import tracemalloc
import urllib.parse
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import anyio

from kubemux.proxy import ProxyServer, ProxySettings, WatchLimits
from kubemux.testing import FakeCluster, make_pod
from proxy_support import (  # the fixtures cluster and kubeconfig
    ProxyClient,
    running_proxy,
    upstream_cluster,  # noqa: F401
    upstream_kubeconfig,  # noqa: F401
)
from support import TIMEOUT, wait_until

BIG = 40_000  # bytes per pod, as in the issue
EVENTS = 200  # 8 MB of events: more than the socket buffers on the way hold (~4.5 MB)


@contextlib.asynccontextmanager
async def stalled_watch(
    server: ProxyServer, client: ProxyClient, path: str
) -> AsyncIterator[tuple[asyncio.StreamReader, asyncio.Transport]]:
    """A watch whose client reads the response head, then nothing: its reading is paused,
    so the proxy's writes block once the socket buffers are full."""
    target = urllib.parse.urlsplit(client.url("prod", path))
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.setblocking(False)
    await asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", server.port))
    reader, writer = await asyncio.open_connection(
        sock=sock, ssl=server.certificates.client_context(), server_hostname="127.0.0.1"
    )
    try:
        writer.write(
            f"GET {target.path}?{target.query} HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            f"Authorization: Bearer {server.token}\r\n\r\n".encode()
        )
        head = await reader.readuntil(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200 ")
        transport = writer.transport
        assert isinstance(transport, asyncio.Transport)
        transport.pause_reading()
        yield reader, transport
    finally:
        writer.close()


@contextlib.asynccontextmanager
async def reading_watch(client: ProxyClient, path: str) -> AsyncIterator[aiohttp.ClientResponse]:
    url = client.url("prod", path)
    async with client.session.get(url, headers=client.auth, ssl=client.ssl) as resp:
        assert resp.status == 200
        yield resp


async def names(resp: aiohttp.ClientResponse, n: int) -> list[str]:
    out = []
    for _ in range(n):
        line = await resp.content.readline()
        assert line, "the watch ended"
        out.append(json.loads(line)["object"]["metadata"]["name"])
    return out


def big_pods(cluster: FakeCluster, n: int, prefix: str = "big") -> list[str]:
    created = [f"{prefix}-{i}" for i in range(n)]
    for name in created:
        cluster.create("pods", make_pod(name, labels={"app": "big"}, size=BIG))
    return created


def views(server: ProxyServer) -> int:
    return sum(s.views for s in server.proxy.status())


def watches(server: ProxyServer) -> int:
    return sum(s.watches for s in server.proxy.status())


async def start_rv(client: ProxyClient) -> str:
    status, doc = await client.get_json("prod", "/api/v1/pods")
    assert status == 200
    rv: str = doc["metadata"]["resourceVersion"]
    return rv


async def test_stalled_watchers_are_cut_when_their_bytes_reach_the_budget(
    cluster: FakeCluster, kubeconfig: Path
) -> None:
    budget = 256 * 1024  # bytes; idle long, so the budget is what cuts
    limits = WatchLimits(max_buffered_bytes=budget, idle_timeout=60.0, write_interval=0)
    settings = ProxySettings(watch=limits)
    async with running_proxy(kubeconfig, settings=settings) as (server, client):
        with anyio.fail_after(TIMEOUT * 2):
            rv = await start_rv(client)
            base = f"/api/v1/pods?watch=1&resourceVersion={rv}&labelSelector="
            async with contextlib.AsyncExitStack() as stack:
                for k in range(4):  # each its own selector: its own view
                    await stack.enter_async_context(
                        stalled_watch(server, client, f"{base}app%3Dbig,tier!%3D{k}")
                    )
                reader = await stack.enter_async_context(reading_watch(client, f"{base}app%3Dbig"))
                assert views(server) == 5
                for i in range(EVENTS):  # one at a time: the reader is never behind
                    created = big_pods(cluster, 1, f"big-{i}")
                    assert await names(reader, 1) == created
                # each stalled watcher went over its budget long before: cut off, its view gone
                assert views(server) == 1
                more = big_pods(cluster, 2, "after")
                assert await names(reader, 2) == more


async def test_a_watcher_that_does_not_read_is_cut_after_the_idle_timeout(
    cluster: FakeCluster, kubeconfig: Path
) -> None:
    settings = ProxySettings(watch=WatchLimits(idle_timeout=0.5))  # the default budget
    async with running_proxy(kubeconfig, settings=settings) as (server, client):
        with anyio.fail_after(TIMEOUT * 2):
            rv = await start_rv(client)
            base = f"/api/v1/pods?watch=1&resourceVersion={rv}"
            async with (
                stalled_watch(server, client, base) as (stalled, transport),
                reading_watch(client, base) as reader,
                reading_watch(client, f"{base}&labelSelector=app%3Dnothing") as quiet,
            ):
                created = big_pods(cluster, EVENTS)
                assert await names(reader, EVENTS) == created
                # the one that does not read is cut: its connection closes
                await wait_until(lambda: watches(server) == 2)
                transport.resume_reading()
                while await stalled.read(1 << 20):
                    pass  # what was on the way, then the end
                # nothing to send is not "not reading": the quiet watcher stays, and works
                more = big_pods(cluster, 1, "after")
                assert await names(reader, 1) == more
                assert watches(server) == 2
                assert not quiet.content.at_eof()


async def test_stalled_watchers_with_their_own_selectors_hold_no_copy_of_each_event(
    cluster: FakeCluster, kubeconfig: Path
) -> None:
    stalled = 12
    # neither cut here: a budget above what each holds, a long idle time
    settings = ProxySettings(watch=WatchLimits(max_buffered_bytes=64 << 20, idle_timeout=60.0))
    async with running_proxy(kubeconfig, settings=settings) as (server, client):
        with anyio.fail_after(TIMEOUT * 2):
            rv = await start_rv(client)
            base = f"/api/v1/pods?watch=1&resourceVersion={rv}&labelSelector="
            async with contextlib.AsyncExitStack() as stack:
                for k in range(stalled):
                    await stack.enter_async_context(
                        stalled_watch(server, client, f"{base}app%3Dbig,tier!%3D{k}")
                    )
                reader = await stack.enter_async_context(reading_watch(client, f"{base}app%3Dbig"))
                gc.collect()
                tracemalloc.start()
                try:
                    created = big_pods(cluster, EVENTS)
                    assert await names(reader, EVENTS) == created
                    gc.collect()
                    snapshot = tracemalloc.take_snapshot().filter_traces(
                        [tracemalloc.Filter(False, "*/kubemux/testing/*")]  # the cluster's own
                    )
                    grown = sum(stat.size for stat in snapshot.statistics("filename"))
                finally:
                    tracemalloc.stop()
                assert views(server) == stalled + 1  # none was cut: all still hold what they got
    raw = EVENTS * BIG
    # the cache's copy and what is in flight to each watcher; a rendered copy per view of
    # every event the socket buffers did not take would be ~40 MB more
    assert grown < 2.5 * raw, f"{grown / 1e6:.1f} MB for {raw / 1e6:.1f} MB of events"
