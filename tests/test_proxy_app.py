"""The proxy app through a running ProxyServer: reads from the cache, discovery from its
cache, everything else passed through, and the errors a client gets."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import aiohttp
import anyio
import pytest

from kubemux._wire.ages import human_duration, parse_timestamp
from kubemux.testing import FakeCluster, FakeContext, make_pod, write_kubeconfig
from proxy_support import (  # the fixtures cluster and kubeconfig
    TABLE,
    UPSTREAM_TOKEN,
    TinyUpstream,
    running_proxy,
    upstream_cluster,  # noqa: F401
    upstream_kubeconfig,  # noqa: F401
)
from support import wait_until

AGGREGATED = (
    "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,"
    "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,"
    "application/json"
)


def reads(cluster: FakeCluster) -> list[str]:
    """The upstream LISTs and GETs of objects (not discovery, not watches)."""
    return [
        r.path
        for r in cluster.requests
        if r.method == "GET" and not r.is_watch and "/pods" in r.path
    ]


async def test_lists_and_gets_come_from_the_cache(cluster: FakeCluster, kubeconfig: Path) -> None:
    async with running_proxy(kubeconfig) as (_, client):
        with anyio.fail_after(20):
            status, doc = await client.get_json("prod", "/api/v1/pods")
            assert status == 200
            cluster.clear_requests()
            for _ in range(5):
                status, doc = await client.get_json("prod", "/api/v1/pods")
                assert status == 200
                status, ns = await client.get_json("prod", "/api/v1/namespaces/data/pods")
                assert status == 200
                status, one = await client.get_json("prod", "/api/v1/namespaces/default/pods/web-1")
                assert status == 200
    assert reads(cluster) == []  # 15 reads, none upstream
    assert doc["kind"] == "PodList" and doc["apiVersion"] == "v1"
    assert doc["metadata"]["resourceVersion"] == cluster.resource_version
    names = [(p["metadata"]["namespace"], p["metadata"]["name"]) for p in doc["items"]]
    assert names == [("data", "db-1"), ("default", "web-1"), ("default", "web-2")]
    assert [p["metadata"]["name"] for p in ns["items"]] == ["db-1"]
    assert one == cluster.get("pods", "default", "web-1")


async def test_list_equals_the_servers_answer(cluster: FakeCluster, kubeconfig: Path) -> None:
    direct = cluster.objects("pods")
    async with running_proxy(kubeconfig) as (_, client):
        with anyio.fail_after(20):
            status, doc = await client.get_json("prod", "/api/v1/pods")
    assert status == 200
    by_name = {o["metadata"]["name"]: o for o in direct}
    for item in doc["items"]:  # managedFields and all: the proxy keeps what the server sent
        expected = dict(by_name[item["metadata"]["name"]])
        expected.setdefault("kind", "Pod")
        expected.setdefault("apiVersion", "v1")
        assert item == expected


async def test_table_lists_and_gets_come_from_a_table_view(
    cluster: FakeCluster, kubeconfig: Path
) -> None:
    async with (
        running_proxy(kubeconfig) as (_, client),
        aiohttp.ClientSession() as session,
    ):
        with anyio.fail_after(20):
            url = f"{cluster.server}/api/v1/pods?limit=500"
            headers = {"Authorization": f"Bearer {UPSTREAM_TOKEN}", "Accept": TABLE}
            async with session.get(url, headers=headers, ssl=cluster.client_ssl_context()) as r:
                upstream = await r.json()
            status, got = await client.get_json(
                "prod", "/api/v1/pods?limit=500", headers={"Accept": TABLE}
            )
            cluster.clear_requests()
            status, got = await client.get_json(
                "prod", "/api/v1/pods?limit=500", headers={"Accept": TABLE}
            )
            assert status == 200
            _, one = await client.get_json(
                "prod", "/api/v1/namespaces/default/pods/web-2", headers={"Accept": TABLE}
            )
    assert reads(cluster) == []
    assert got["kind"] == "Table" and got["apiVersion"] == "meta.k8s.io/v1"
    assert got["columnDefinitions"] == upstream["columnDefinitions"]
    # the same cells, but the Age: rendered at each read, as the API server renders it
    age = [c["name"] for c in got["columnDefinitions"]].index("Age")

    def ageless(rows: list[dict[str, Any]]) -> list[list[Any]]:
        return [r["cells"][:age] + r["cells"][age + 1 :] for r in rows]

    assert ageless(got["rows"]) == ageless(upstream["rows"])
    for row in got["rows"]:
        created = parse_timestamp(row["object"]["metadata"]["creationTimestamp"])
        assert created is not None
        old = time.time() - created
        assert row["cells"][age] in {human_duration(old - d) for d in (0, 1, 2, 3)}
    for mine, theirs in zip(got["rows"], upstream["rows"], strict=True):
        assert mine["object"]["kind"] == "PartialObjectMetadata"
        meta = dict(theirs["object"]["metadata"])
        meta.pop("managedFields", None)
        assert mine["object"]["metadata"] == meta
    assert [r["object"]["metadata"]["name"] for r in one["rows"]] == ["web-2"]


async def test_selectors_and_pages_come_from_the_cache(
    cluster: FakeCluster, kubeconfig: Path
) -> None:
    async with running_proxy(kubeconfig) as (_, client):
        with anyio.fail_after(20):
            await client.get_json("prod", "/api/v1/pods")  # the informer runs
            cluster.clear_requests()
            status, doc = await client.get_json("prod", "/api/v1/pods?labelSelector=app%3Dweb")
            assert status == 200 and len(doc["items"]) == 2
            status, page = await client.get_json("prod", "/api/v1/pods?limit=1")
            assert status == 200 and len(page["items"]) == 1 and page["metadata"]["continue"]
            status, _ = await client.get_json("prod", "/api/v1/namespaces/default/pods/nope")
            assert status == 404
    assert reads(cluster) == ["/api/v1/namespaces/default/pods/nope"]  # the server's 404


async def test_watch_from_the_cache(cluster: FakeCluster, kubeconfig: Path) -> None:
    async with running_proxy(kubeconfig) as (_, client):
        with anyio.fail_after(20):
            await client.get_json("prod", "/api/v1/pods")
            # the LIST is answered once the informer has listed; its watch opens just after
            await wait_until(lambda: cluster.open_watches == 1, poll=0.01)
            watches = cluster.open_watches
            url = client.url("prod", "/api/v1/namespaces/default/pods?watch=true")
            async with client.session.get(url, headers=client.auth, ssl=client.ssl) as resp:
                assert resp.status == 200
                events = []
                while len(events) < 2:
                    events.append(json.loads(await resp.content.readline()))
                assert {(e["type"], e["object"]["metadata"]["name"]) for e in events} == {
                    ("ADDED", "web-1"),
                    ("ADDED", "web-2"),
                }
                changed = cluster.get("pods", "default", "web-1")
                changed["metadata"]["labels"] = {"changed": "yes"}
                cluster.update("pods", changed)
                event = json.loads(await resp.content.readline())
                assert event["type"] == "MODIFIED"
                assert event["object"]["metadata"]["labels"] == {"changed": "yes"}
            assert cluster.open_watches == watches  # the informer's own, nothing more


async def test_watch_timeout_seconds_ends_the_stream(
    cluster: FakeCluster, kubeconfig: Path
) -> None:
    async with running_proxy(kubeconfig) as (_, client):
        with anyio.fail_after(20):
            url = client.url("prod", "/api/v1/pods?watch=1&timeoutSeconds=1")
            async with client.session.get(url, headers=client.auth, ssl=client.ssl) as resp:
                lines = (await resp.read()).splitlines()
    assert len(lines) == 3 and all(json.loads(x)["type"] == "ADDED" for x in lines)


async def test_discovery_is_asked_once(cluster: FakeCluster, kubeconfig: Path) -> None:
    async with running_proxy(kubeconfig) as (_, client):
        with anyio.fail_after(20):
            first = {}
            for path, accept in [
                ("/api", AGGREGATED),
                ("/apis", AGGREGATED),
                ("/api", "application/json"),
                ("/api/v1", "application/json"),
                ("/apis/apps/v1", "application/json"),
                ("/version", "application/json"),
            ]:
                first[path, accept] = await client.request(
                    "GET", "prod", f"{path}?timeout=32s", headers={"Accept": accept}
                )
            cluster.clear_requests()
            for (path, accept), (status, headers, body) in first.items():
                again = await client.request("GET", "prod", path, headers={"Accept": accept})
                assert again[0] == status == 200
                assert again[2] == body
                assert again[1]["Content-Type"] == headers["Content-Type"]
                assert again[1]["X-Kubemux-Cache"] == "hit"
    assert cluster.requests == []
    aggregated = first["/api", AGGREGATED]
    assert "as=APIGroupDiscoveryList" in aggregated[1]["Content-Type"]
    assert json.loads(first["/api", "application/json"][2])["kind"] == "APIVersions"


async def test_a_missing_document_is_not_kept(cluster: FakeCluster, kubeconfig: Path) -> None:
    async with running_proxy(kubeconfig) as (_, client):
        with anyio.fail_after(20):
            for _ in range(2):
                status, _, body = await client.request("GET", "prod", "/openapi/v2")
                assert status == 404 and json.loads(body)["kind"] == "Status"
    assert [r.path for r in cluster.requests].count("/openapi/v2") == 2


async def test_writes_pass_through_with_the_contexts_credential(
    cluster: FakeCluster, kubeconfig: Path
) -> None:
    pod = make_pod("new-1", size=300)
    async with running_proxy(kubeconfig) as (server, client):
        with anyio.fail_after(20):
            status, _, body = await client.request(
                "POST",
                "prod",
                "/api/v1/namespaces/default/pods",
                headers={"Content-Type": "application/json", "Cookie": "session=browser"},
                data=json.dumps(pod).encode(),
            )
            assert status == 201, body
            assert cluster.get("pods", "default", "new-1") is not None
            status, _, body = await client.request(
                "DELETE", "prod", "/api/v1/namespaces/default/pods/new-1"
            )
            assert status == 200, body
            assert cluster.get("pods", "default", "new-1") is None
            # a patch: the server's own answer comes back unchanged
            status, _, body = await client.request(
                "PATCH",
                "prod",
                "/api/v1/namespaces/default/pods/web-1",
                headers={"Content-Type": "application/merge-patch+json"},
                data=b'{"metadata":{"labels":{"a":"b"}}}',
            )
            assert status == 200, body
            assert json.loads(body)["metadata"]["labels"]["a"] == "b"
            assert cluster.get("pods", "default", "web-1")["metadata"]["labels"]["a"] == "b"
    sent = [r for r in cluster.requests if r.method in ("POST", "DELETE", "PATCH")]
    assert len(sent) == 3
    assert {r.token for r in cluster.requests} == {UPSTREAM_TOKEN}  # never the proxy's own
    assert server.token not in json.dumps([r.query for r in cluster.requests])


@pytest.mark.parametrize(
    ("status", "reason"),
    [(403, "Forbidden"), (404, "NotFound"), (429, "TooManyRequests"), (500, "InternalError")],
)
async def test_upstream_errors_come_back_as_the_upstreams_status(
    cluster: FakeCluster, kubeconfig: Path, status: int, reason: str
) -> None:
    async with running_proxy(kubeconfig) as (_, client):
        with anyio.fail_after(20):
            cluster.fail_next(
                1, status, reason=reason, path_prefix="/api/v1/namespaces/default/pods"
            )
            got, headers, body = await client.request(
                "POST",
                "prod",
                "/api/v1/namespaces/default/pods",
                headers={"Content-Type": "application/json"},
                data=json.dumps(make_pod("x")).encode(),
            )
    doc = json.loads(body)
    assert got == status and doc["code"] == status and doc["reason"] == reason
    assert "fault injected" in doc["message"]
    if status == 429:
        assert headers["Retry-After"] == "1"


async def test_unknown_contexts_and_escaping_paths_are_404(kubeconfig: Path) -> None:
    async with running_proxy(kubeconfig) as (server, client):
        assert server.url is not None
        raw = [
            "/clusters/nope/api/v1/pods",
            "/clusters/pr~zzod/api/v1/pods",
            "/clusters/prod/api/v1/namespaces/a%2F..%2F..%2Fsecrets/pods",
            "/clusters/prod/api/v1/namespaces/default/pods/..%2F..",
            "/elsewhere",
        ]
        with anyio.fail_after(20):
            for path in raw:
                url = aiohttp.client.URL(server.url + path, encoded=True)
                async with client.session.get(url, headers=client.auth, ssl=client.ssl) as r:
                    assert r.status == 404, path
                    doc = await r.json()
                    assert doc["kind"] == "Status" and doc["reason"] == "NotFound"


async def test_a_context_that_cannot_start_answers_503(tmp_path: Path) -> None:
    async with FakeCluster(tokens={UPSTREAM_TOKEN}) as fake:
        dead = fake.server
    kubeconfig = write_kubeconfig(
        tmp_path / "config", {"down": FakeContext(cluster=dead, token=UPSTREAM_TOKEN)}
    )
    async with running_proxy(kubeconfig) as (_, client):
        with anyio.fail_after(15):
            status, _, body = await client.request("GET", "down", "/api")
            assert status == 503
            doc = json.loads(body)
            assert doc["reason"] == "ServiceUnavailable" and "down" in doc["message"]
            status, _, body = await client.request("GET", "down", "/api/v1/pods")
            assert status in (503, 504)
    assert UPSTREAM_TOKEN not in body.decode()


async def test_request_bodies_are_capped(cluster: FakeCluster, kubeconfig: Path) -> None:
    from kubemux.proxy import ProxySettings

    async with running_proxy(kubeconfig, settings=ProxySettings(max_body_size=1000)) as (_, c):
        with anyio.fail_after(20):
            status, _, body = await c.request(
                "POST",
                "prod",
                "/api/v1/namespaces/default/pods",
                headers={"Content-Type": "application/json"},
                data=b"x" * 5000,
            )
    assert status == 413 and json.loads(body)["reason"] == "RequestEntityTooLarge"
    assert not [r for r in cluster.requests if r.method == "POST"]


async def test_exec_over_websocket_is_bridged(tmp_path: Path) -> None:
    async with TinyUpstream() as tiny:
        kubeconfig = write_kubeconfig(tmp_path / "config", {"tiny": FakeContext(cluster=tiny.url)})
        async with running_proxy(kubeconfig) as (_, client):
            url = client.url(
                "tiny", "/api/v1/namespaces/default/pods/shell/exec?command=cat&command=--stdin"
            )
            with anyio.fail_after(20):
                async with client.session.ws_connect(
                    url, protocols=("v5.channel.k8s.io",), headers=client.auth, ssl=client.ssl
                ) as ws:
                    assert ws.protocol == "v5.channel.k8s.io"
                    await ws.send_bytes(b"\x00hello")
                    msg = await ws.receive()
                    assert msg.type is aiohttp.WSMsgType.BINARY and msg.data == b"\x01hello"
                    await ws.send_bytes(b"\xff\x00")  # stdin closed
                    msg = await ws.receive()
                    assert msg.data[:1] == b"\x03" and b"Success" in msg.data
                    msg = await ws.receive()
                    assert msg.type is aiohttp.WSMsgType.CLOSE
                await tiny.exec_closed.wait()
    assert tiny.received == [b"\x00hello", b"\xff\x00"]
    _, _, headers = next(r for r in tiny.requests if "/exec" in r[1])
    assert headers["Sec-WebSocket-Protocol"] == "v5.channel.k8s.io"
    assert "Authorization" not in headers  # the context has no token, and ours stays here


async def test_a_refused_upgrade_is_refused_downstream_and_for_the_spdy_fallback(
    tmp_path: Path,
) -> None:
    async with TinyUpstream(refuse_exec=403) as tiny:
        kubeconfig = write_kubeconfig(tmp_path / "config", {"tiny": FakeContext(cluster=tiny.url)})
        async with running_proxy(kubeconfig) as (_, client):
            path = "/api/v1/namespaces/default/pods/shell/exec?command=ls"
            with anyio.fail_after(20):
                with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
                    await client.session.ws_connect(
                        client.url("tiny", path),
                        protocols=("v5.channel.k8s.io",),
                        headers=client.auth,
                        ssl=client.ssl,
                    )
                assert refused.value.status == 403
                # kubectl falls back to SPDY: it gets the same refusal
                status, _, body = await client.request(
                    "POST",
                    "tiny",
                    path,
                    headers={"Upgrade": "SPDY/3.1", "Connection": "Upgrade"},
                )
                assert status == 403 and json.loads(body)["reason"] == "Forbidden"
                assert (
                    json.loads(body)["message"] == 'pods "shell" is forbidden: exec is not allowed'
                )
                # ProxyServer bridges SPDY upgrades: the upstream's own answer comes back
                status, _, body = await client.request(
                    "POST",
                    "tiny",
                    path,
                    headers={"Upgrade": "SPDY/3.1", "Connection": "Upgrade"},
                )
                assert status == 403


async def test_log_follow_is_streamed(tmp_path: Path) -> None:
    async with TinyUpstream() as tiny:
        kubeconfig = write_kubeconfig(tmp_path / "config", {"tiny": FakeContext(cluster=tiny.url)})
        async with running_proxy(kubeconfig) as (_, client):
            url = client.url("tiny", "/api/v1/namespaces/default/pods/shell/log?follow=true")
            with anyio.fail_after(20):
                async with client.session.get(url, headers=client.auth, ssl=client.ssl) as resp:
                    assert resp.status == 200
                    assert await resp.content.readline() == b"line 1\n"  # before the end
                    tiny.release_log.set()
                    assert await resp.content.readline() == b"line 2\n"
                    assert await resp.content.read() == b""


async def test_upstream_streams_per_context_are_capped(tmp_path: Path) -> None:
    from kubemux.proxy import ProxySettings

    async with TinyUpstream() as tiny:
        kubeconfig = write_kubeconfig(tmp_path / "config", {"tiny": FakeContext(cluster=tiny.url)})
        settings = ProxySettings(max_upstream_streams=1)
        async with running_proxy(kubeconfig, settings=settings) as (_, client):
            url = client.url("tiny", "/api/v1/namespaces/default/pods/shell/log?follow=true")
            with anyio.fail_after(20):
                async with client.session.get(url, headers=client.auth, ssl=client.ssl) as held:
                    assert await held.content.readline() == b"line 1\n"
                    status, headers, body = await client.request(
                        "GET", "tiny", "/api/v1/namespaces/default/pods/shell/log?follow=true"
                    )
                    assert status == 429 and headers["Retry-After"] == "1"
                    assert json.loads(body)["reason"] == "TooManyRequests"
                    # what is not a stream is not counted
                    status, _, _ = await client.request(
                        "GET", "tiny", "/api/v1/namespaces/default/pods/shell"
                    )
                    assert status == 200
                    tiny.release_log.set()
                    await held.read()
                # the slot is free again
                status, _, body = await client.request(
                    "GET", "tiny", "/api/v1/namespaces/default/pods/shell/log?follow=true"
                )
                assert status == 200 and body == b"line 1\nline 2\n"


async def test_a_failed_informer_does_not_cut_the_streams_of_its_context(tmp_path: Path) -> None:
    # the tiny upstream answers LIST pods with 404: the informer's first sync fails and
    # its slot goes; the context's generation must stay, with the log stream it serves
    async with TinyUpstream() as tiny:
        kubeconfig = write_kubeconfig(tmp_path / "config", {"tiny": FakeContext(cluster=tiny.url)})
        async with running_proxy(kubeconfig) as (_, client):
            url = client.url("tiny", "/api/v1/namespaces/default/pods/shell/log?follow=true")
            with anyio.fail_after(20):
                async with client.session.get(url, headers=client.auth, ssl=client.ssl) as held:
                    assert await held.content.readline() == b"line 1\n"
                    status, _, _ = await client.request("GET", "tiny", "/api/v1/pods")
                    assert status == 404  # the API server's answer, passed through
                    tiny.release_log.set()
                    assert await held.read() == b"line 2\n"


async def test_stopping_a_context_ends_its_streams(tmp_path: Path) -> None:
    async with TinyUpstream() as tiny:
        kubeconfig = write_kubeconfig(tmp_path / "config", {"tiny": FakeContext(cluster=tiny.url)})
        async with running_proxy(kubeconfig) as (server, client):
            url = client.url("tiny", "/api/v1/namespaces/default/pods/shell/log?follow=true")
            with anyio.fail_after(20):
                async with client.session.get(url, headers=client.auth, ssl=client.ssl) as held:
                    assert await held.content.readline() == b"line 1\n"
                    assert await server.registry.stop_watcher("tiny")
                    with pytest.raises(aiohttp.ClientPayloadError):
                        await held.read()  # cut off, not complete
