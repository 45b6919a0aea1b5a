"""WATCH through the proxy, from the cache's event history: where a watch starts (now, a
resourceVersion in the history, one older: 410), bookmarks, WatchList's initial events and
their end marker, selectors with enter and leave, Table watches, one upstream watch however
many downstream ones, slow watchers cut off, and the per-credential cap."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import urllib.parse
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import anyio

from kubemux.proxy import ProxySettings
from kubemux.proxy._watch.watch import WatchLimits
from kubemux.testing import FakeCluster, make_pod
from proxy_support import (  # the fixtures cluster and kubeconfig
    TABLE,
    ProxyClient,
    informer_watching,
    running_proxy,
    upstream_cluster,  # noqa: F401
    upstream_kubeconfig,  # noqa: F401
)


class Watch:
    """One watch stream through the proxy, read event by event."""

    def __init__(self, resp: aiohttp.ClientResponse) -> None:
        self.resp = resp

    async def event(self) -> dict[str, Any]:
        line = await self.resp.content.readline()
        assert line, "the watch ended"
        event: dict[str, Any] = json.loads(line)
        return event

    async def events(self, n: int) -> list[tuple[str, str]]:
        return [short(await self.event()) for _ in range(n)]

    async def rest(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in (await self.resp.read()).splitlines()]


def short(event: dict[str, Any]) -> tuple[str, str]:
    obj = event["object"]
    if obj.get("kind") == "Table":
        rows = obj["rows"]
        name = rows[0]["object"]["metadata"].get("name", "") if rows else ""
        return event["type"], name
    return event["type"], obj["metadata"].get("name", "")


@contextlib.asynccontextmanager
async def watch(
    client: ProxyClient, path: str, headers: dict[str, str] | None = None
) -> AsyncIterator[Watch]:
    url = client.url("prod", path)
    async with client.session.get(
        url, headers={**client.auth, **(headers or {})}, ssl=client.ssl
    ) as resp:
        assert resp.status == 200, await resp.text()
        assert resp.headers["X-Kubemux-Cache"] == "hit"
        yield Watch(resp)


async def list_rv(client: ProxyClient, path: str = "/api/v1/pods") -> str:
    status, doc = await client.get_json("prod", path)
    assert status == 200
    rv: str = doc["metadata"]["resourceVersion"]
    return rv


def relabel(cluster: FakeCluster, name: str, labels: dict[str, str]) -> None:
    pod = cluster.get("pods", "default", name)
    assert pod is not None
    pod["metadata"]["labels"] = labels
    cluster.update("pods", pod)


async def test_a_watch_resumes_from_a_version_in_the_history(
    cluster: FakeCluster, kubeconfig: Path
) -> None:
    async with running_proxy(kubeconfig) as (_, client):
        with anyio.fail_after(20):
            rv = await list_rv(client)
            cluster.create("pods", make_pod("web-3", size=600))
            relabel(cluster, "web-1", {"app": "x"})
            cluster.delete("pods", "data", "db-1")
            async with watch(client, f"/api/v1/pods?watch=1&resourceVersion={rv}") as w:
                assert await w.events(3) == [
                    ("ADDED", "web-3"),
                    ("MODIFIED", "web-1"),
                    ("DELETED", "db-1"),
                ]
                cluster.create("pods", make_pod("web-4", size=600))
                event = await w.event()
                assert short(event) == ("ADDED", "web-4")
                assert event["object"]["metadata"]["resourceVersion"] == cluster.resource_version
            # resumed from the version just before the last event: only that one
            before = str(int(cluster.resource_version) - 1)
            url = f"/api/v1/pods?watch=1&resourceVersion={before}&timeoutSeconds=1"
            async with watch(client, url) as w:
                assert [short(e) for e in await w.rest()] == [("ADDED", "web-4")]


async def test_a_version_older_than_the_history_is_410_in_the_stream(
    cluster: FakeCluster, kubeconfig: Path
) -> None:
    async with running_proxy(kubeconfig) as (_, client):
        with anyio.fail_after(20):
            rv = await list_rv(client)  # the history records from here
            async with watch(client, "/api/v1/pods?watch=1&resourceVersion=1") as w:
                (event,) = await w.rest()
    assert event["type"] == "ERROR"
    status = event["object"]
    assert (status["kind"], status["code"], status["reason"]) == ("Status", 410, "Expired")
    assert status["message"] == f"too old resource version: 1 ({rv})"


async def test_watch_list_initial_events_then_the_end_bookmark(
    cluster: FakeCluster, kubeconfig: Path
) -> None:
    query = "watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan"
    async with running_proxy(kubeconfig) as (_, client):
        with anyio.fail_after(20):
            await list_rv(client)
            async with watch(client, f"/api/v1/pods?{query}&allowWatchBookmarks=true") as w:
                assert sorted(await w.events(3)) == [
                    ("ADDED", "db-1"),
                    ("ADDED", "web-1"),
                    ("ADDED", "web-2"),
                ]
                end = await w.event()
                assert end["type"] == "BOOKMARK"
                assert end["object"]["metadata"] == {
                    "resourceVersion": cluster.resource_version,
                    "annotations": {"k8s.io/initial-events-end": "true"},
                }
                assert (end["object"]["kind"], end["object"]["apiVersion"]) == ("Pod", "v1")
                cluster.create("pods", make_pod("web-3", size=600))
                assert short(await w.event()) == ("ADDED", "web-3")
            # unset or "0" without sendInitialEvents: the same (WatchList's defaulting)
            url = "/api/v1/pods?watch=1&allowWatchBookmarks=true&resourceVersion=0"
            async with watch(client, url) as w:
                await w.events(4)
                assert (await w.event())["type"] == "BOOKMARK"


async def test_bookmarks_come_periodically_when_allowed(
    cluster: FakeCluster, kubeconfig: Path
) -> None:
    settings = ProxySettings(watch=WatchLimits(bookmark_period=0.2))
    async with running_proxy(kubeconfig, settings=settings) as (_, client):
        with anyio.fail_after(20):
            rv = await list_rv(client)
            url = f"/api/v1/pods?watch=1&resourceVersion={rv}&allowWatchBookmarks=true"
            async with watch(client, url) as w:
                for _ in range(2):
                    event = await w.event()
                    assert event["type"] == "BOOKMARK"
                    assert event["object"]["metadata"] == {"resourceVersion": rv}
            async with watch(client, f"/api/v1/pods?watch=1&resourceVersion={rv}") as w:
                cluster.create("pods", make_pod("web-3", size=600))
                assert short(await w.event()) == ("ADDED", "web-3")  # no bookmark first


async def test_selectors_see_objects_enter_and_leave(
    cluster: FakeCluster, kubeconfig: Path
) -> None:
    async with running_proxy(kubeconfig) as (_, client):
        with anyio.fail_after(20):
            rv = await list_rv(client)
            for prefix in ("/api/v1/pods", "/api/v1/namespaces/default/pods"):
                path = f"{prefix}?watch=1&resourceVersion={rv}&labelSelector=app%3Dweb"
                async with watch(client, path) as w:
                    relabel(cluster, "web-1", {"app": "other"})
                    left = await w.event()
                    assert short(left) == ("DELETED", "web-1")
                    assert left["object"]["metadata"]["resourceVersion"] == (
                        cluster.resource_version
                    )
                    relabel(cluster, "web-2", {"app": "web", "more": "yes"})
                    assert short(await w.event()) == ("MODIFIED", "web-2")
                    relabel(cluster, "web-1", {"app": "web"})
                    assert short(await w.event()) == ("ADDED", "web-1")
                rv = cluster.resource_version
            # a field selector too, and a watch of one object by its name
            path = f"/api/v1/pods?watch=1&resourceVersion={rv}&fieldSelector=spec.nodeName%3Dn9"
            async with (
                watch(client, path) as by_node,
                watch(
                    client, f"/api/v1/namespaces/default/pods/web-2?watch=1&resourceVersion={rv}"
                ) as by_name,
            ):
                pod = cluster.get("pods", "default", "web-1")
                assert pod is not None
                pod["spec"]["nodeName"] = "n9"
                cluster.update("pods", pod)
                assert short(await by_node.event()) == ("ADDED", "web-1")
                relabel(cluster, "web-2", {"app": "web2"})
                assert short(await by_name.event()) == ("MODIFIED", "web-2")


async def test_table_watches_from_the_table_view(cluster: FakeCluster, kubeconfig: Path) -> None:
    async with running_proxy(kubeconfig) as (_, client):
        with anyio.fail_after(20):
            status, table = await client.get_json(
                "prod", "/api/v1/namespaces/default/pods", headers={"Accept": TABLE}
            )
            assert status == 200
            rv = table["metadata"]["resourceVersion"]
            path = f"/api/v1/namespaces/default/pods?watch=1&resourceVersion={rv}"
            async with watch(client, path, {"Accept": TABLE}) as w:
                cluster.create("pods", make_pod("web-3", size=600, phase="Pending"))
                relabel(cluster, "web-1", {"app": "x"})
                first, second = await w.event(), await w.event()
            watches = cluster.open_watches
    assert short(first) == ("ADDED", "web-3") and short(second) == ("MODIFIED", "web-1")
    assert first["object"]["columnDefinitions"] == table["columnDefinitions"]
    assert second["object"]["columnDefinitions"] is None  # only in the first event
    assert first["object"]["rows"][0]["cells"][:3] == ["web-3", "0/1", "ContainerCreating"]
    assert first["object"]["rows"][0]["object"]["kind"] == "PartialObjectMetadata"
    assert watches == 1  # the table view's own (no objects informer was needed)


async def test_one_upstream_watch_for_many_downstream_ones(
    cluster: FakeCluster, kubeconfig: Path
) -> None:
    async with running_proxy(kubeconfig) as (server, client):
        with anyio.fail_after(30):
            rv = await list_rv(client)
            paths = [
                f"/api/v1/pods?watch=1&resourceVersion={rv}",
                f"/api/v1/pods?watch=1&resourceVersion={rv}&labelSelector=app%3Dweb",
                f"/api/v1/namespaces/default/pods?watch=1&resourceVersion={rv}",
                f"/api/v1/namespaces/data/pods?watch=1&resourceVersion={rv}",
            ] * 10
            await informer_watching(cluster)
            upstream = cluster.request_count("watch", "pods")
            async with contextlib.AsyncExitStack() as stack:
                streams = [await stack.enter_async_context(watch(client, p)) for p in paths]
                (served,) = server.app.state.proxy.status()
                assert (served.watches, served.views) == (40, 4)
                cluster.create("pods", make_pod("web-3", size=600))
                cluster.create("pods", make_pod("db-2", "data", size=600))
                for i, w in enumerate(streams):
                    expected = [("ADDED", "web-3"), ("ADDED", "db-2")][i % 4 == 3 :]
                    if i % 4 in (1, 2):
                        expected = expected[:1]
                    assert await w.events(len(expected)) == expected
                assert cluster.open_watches == 1
            assert cluster.request_count("watch", "pods") == upstream


async def test_watches_per_credential_are_capped(cluster: FakeCluster, kubeconfig: Path) -> None:
    settings = ProxySettings(max_watches_per_credential=2)
    async with running_proxy(kubeconfig, settings=settings) as (server, client):
        with anyio.fail_after(20):
            rv = await list_rv(client)
            path = f"/api/v1/pods?watch=1&resourceVersion={rv}"
            async with watch(client, path), watch(client, path + "&labelSelector=a"):
                for query in (path, path + "&pretty=true"):  # from the cache, or upstream
                    status, headers, body = await client.request("GET", "prod", query)
                    assert status == 429 and headers["Retry-After"] == "1"
                    doc = json.loads(body)
                    assert (doc["reason"], doc["message"]) == (
                        "TooManyRequests",
                        "Too many requests, please try again later.",
                    )
            cached = server.app.state.proxy.cached
            await cluster.wait_for(lambda: not cached.watching)  # both have left
            async with watch(client, path):  # the slots came back
                pass


async def test_a_slow_watcher_is_cut_off_and_slows_nobody(
    cluster: FakeCluster, kubeconfig: Path
) -> None:
    settings = ProxySettings(watch_write_timeout=0.5, watch=WatchLimits(max_buffered_events=20))
    async with running_proxy(kubeconfig, settings=settings) as (server, client):
        with anyio.fail_after(60):
            rv = await list_rv(client)
            path = f"/api/v1/pods?watch=1&resourceVersion={rv}"
            target = urllib.parse.urlsplit(client.url("prod", path))
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # a reader that
            sock.setblocking(False)  # takes nothing: the server's buffers fill
            await asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", server.port))
            reader, writer = await asyncio.open_connection(
                sock=sock, ssl=server.certificates.client_context(), server_hostname="127.0.0.1"
            )
            try:
                async with watch(client, path) as fast:
                    writer.write(
                        f"GET {target.path}?{target.query} HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                        f"Authorization: Bearer {server.token}\r\n\r\n".encode()
                    )
                    head = await reader.readuntil(b"\r\n\r\n")  # then reads nothing more
                    assert head.startswith(b"HTTP/1.1 200 ")
                    pad = "x" * 60_000
                    for i in range(150):  # ~9 MB: more than the buffers on the way hold
                        pod = make_pod(f"big-{i}", size=600)
                        pod["metadata"].setdefault("annotations", {})["pad"] = pad
                        cluster.create("pods", pod)
                    got = [short(await fast.event()) for _ in range(150)]
                    assert got == [("ADDED", f"big-{i}") for i in range(150)]
                    # the slow one was cut off: after what it had buffered, its response
                    # ends (the last chunk) or its connection closes
                    tail = b""
                    while not tail.endswith(b"\r\n0\r\n\r\n"):
                        data = await reader.read(1 << 20)
                        if not data:
                            break
                        tail = (tail + data)[-16:]
                    (served,) = server.app.state.proxy.status()
                    assert served.watches == 1
            finally:
                writer.close()


async def test_stopping_a_context_ends_its_cached_watches(
    cluster: FakeCluster, kubeconfig: Path
) -> None:
    async with running_proxy(kubeconfig) as (server, client):
        with anyio.fail_after(20):
            rv = await list_rv(client)
            async with watch(client, f"/api/v1/pods?watch=1&resourceVersion={rv}") as w:
                assert await server.registry.stop_watcher("prod")
                assert await w.rest() == []  # the stream ends, cleanly: the client re-lists
            assert server.app.state.proxy.status() == ()  # the store's state went with it
            status, doc = await client.get_json("prod", "/api/v1/pods")  # starts again
            assert status == 200 and len(doc["items"]) == 3
