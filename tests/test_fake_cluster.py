"""kubemux.testing.FakeCluster over real HTTP: protocol, faults, observation, kubeconfig."""

from __future__ import annotations

import asyncio
import ssl
import stat
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest
import yaml
from kubernetes_asyncio import client as k8s_client
from kubernetes_asyncio import config as k8s_config
from kubernetes_asyncio import watch as k8s_watch

import kubemux.testing
from kubemux import Resource
from kubemux.testing import (
    FakeCluster,
    FakeContext,
    RecordedRequest,
    kubeconfig_dict,
    make_pod,
    write_kubeconfig,
)

TOKEN = "good-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
WIDGETS = Resource(group="example.com", version="v1", plural="widgets", kind="Widget")

Json = dict[str, Any]
MAX_LINE = 16 * 1024 * 1024  # aiohttp's readline() stops at 512 KiB by default


@pytest.fixture
async def cluster() -> AsyncIterator[FakeCluster]:
    async with FakeCluster(tokens={TOKEN}, bookmark_period=0.05) as fake:
        yield fake


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(headers=AUTH) as session:
        yield session


async def get_json(http: aiohttp.ClientSession, url: str, status: int = 200, **params: str) -> Json:
    async with asyncio.timeout(5), http.get(url, params=params) as resp:
        assert resp.status == status, await resp.text()
        assert resp.content_type == "application/json"
        body: Json = await resp.json()
        return body


@asynccontextmanager
async def open_watch(
    http: aiohttp.ClientSession, url: str, **params: str
) -> AsyncIterator[aiohttp.ClientResponse]:
    async with asyncio.timeout(5):
        resp = await http.get(url, params={"watch": "true", **params})
    try:
        assert resp.status == 200, await resp.text()
        yield resp
    finally:
        resp.release()  # returns or closes the connection; the server sees the stream end


async def next_event(resp: aiohttp.ClientResponse) -> Json | None:
    """The next watch event, or None at the clean end of the stream."""
    async with asyncio.timeout(5):
        line = await resp.content.readline(max_line_length=MAX_LINE)
    return orjson.loads(line) if line else None


async def events(resp: aiohttp.ClientResponse, n: int) -> list[tuple[str, str, str]]:
    """``n`` events as (type, name, resourceVersion)."""
    out: list[tuple[str, str, str]] = []
    for _ in range(n):
        event = await next_event(resp)
        assert event is not None, f"stream ended after {out}"
        meta = event["object"]["metadata"]
        out.append((event["type"], meta.get("name", ""), meta["resourceVersion"]))
    return out


def names(body: Json) -> list[str]:
    return [item["metadata"]["name"] for item in body["items"]]


def pods_url(cluster: FakeCluster, namespace: str | None = None) -> str:
    return cluster.server + Resource(group="", version="v1", plural="pods").path(namespace)


# ------------------------------------------------------------------------------ objects (sync)
def test_object_operations_fill_metadata_and_share_one_counter() -> None:
    fake = FakeCluster()
    pod = fake.create("pods", {"metadata": {"name": "a"}, "spec": {"x": 1}})
    meta = pod["metadata"]
    assert (pod["kind"], pod["apiVersion"]) == ("Pod", "v1")
    assert meta["namespace"] == "default"
    assert meta["resourceVersion"] == "1" == fake.resource_version
    assert meta["generation"] == 1 and meta["uid"] and meta["creationTimestamp"].endswith("Z")
    deploy = fake.create("deployments.apps", {"metadata": {"name": "d", "namespace": "x"}})
    assert (deploy["apiVersion"], deploy["metadata"]["resourceVersion"]) == ("apps/v1", "2")
    node = fake.create("nodes", {"metadata": {"name": "n1", "namespace": "ignored"}})
    assert "namespace" not in node["metadata"]
    assert fake.get("nodes", None, "n1") == node

    with pytest.raises(ValueError, match="already exists"):
        fake.create("pods", {"metadata": {"name": "a"}})
    with pytest.raises(KeyError):
        fake.update("pods", {"metadata": {"name": "missing"}})

    pod["status"] = {"phase": "Failed"}
    updated = fake.update("pods", pod)
    assert updated["metadata"]["uid"] == meta["uid"]
    assert updated["metadata"]["resourceVersion"] == "4"
    assert updated["metadata"]["generation"] == 1  # status changes keep the generation
    pod["spec"] = {"x": 2}
    assert fake.apply("pods", pod)["metadata"]["generation"] == 2
    assert fake.apply("pods", {"metadata": {"name": "b"}})["metadata"]["resourceVersion"] == "6"

    # callers get copies: editing them does not touch the cluster
    fake.objects("pods")[0]["metadata"]["name"] = "changed"
    assert [p["metadata"]["name"] for p in fake.objects("pods")] == ["a", "b"]

    deleted = fake.delete("pods", "default", "a")
    assert deleted is not None and deleted["metadata"]["resourceVersion"] == "7"
    assert fake.delete("pods", "default", "a") is None
    assert fake.get("pods", "default", "a") is None
    generated = fake.create("configmaps", {"metadata": {"generateName": "cfg-"}})
    assert generated["metadata"]["name"].startswith("cfg-")
    assert fake.create_many("pods", (make_pod(f"m-{i}", "bulk") for i in range(3))) == "11"
    assert len(fake.objects("pods", "bulk")) == 3


def test_make_pod_is_realistic_and_sized() -> None:
    pod = make_pod("web-7", "shop", labels={"app": "web"}, node="n2", phase="Pending")
    assert abs(len(orjson.dumps(pod)) - 2000) <= 50
    assert pod["metadata"]["labels"] == {"app": "web"}
    assert pod["metadata"]["ownerReferences"][0]["kind"] == "ReplicaSet"
    assert pod["metadata"]["managedFields"]
    assert pod["spec"]["nodeName"] == "n2" and pod["status"]["phase"] == "Pending"
    assert make_pod("web-7", "shop") == make_pod("web-7", "shop")
    assert len(orjson.dumps(make_pod("big", size=10_000))) == 10_000
    assert "managedFields" not in make_pod("lean", managed_fields=False)["metadata"]


def test_public_names() -> None:
    public = {n for n in dir(kubemux.testing) if not n.startswith("_")} - {"annotations"}
    assert set(kubemux.testing.__all__) == public
    assert kubemux.testing.__all__ == sorted(kubemux.testing.__all__)


# ------------------------------------------------------------------------------ LIST / GET
async def test_list_get_and_not_found(cluster: FakeCluster, http: aiohttp.ClientSession) -> None:
    cluster.create("pods", make_pod("b", "ns1"))
    cluster.create("pods", make_pod("a", "ns2"))
    cluster.create("pods", make_pod("a", "ns1"))
    body = await get_json(http, pods_url(cluster))
    assert (body["kind"], body["apiVersion"]) == ("PodList", "v1")
    assert body["metadata"] == {"resourceVersion": "3"}
    assert [(i["metadata"]["namespace"], i["metadata"]["name"]) for i in body["items"]] == [
        ("ns1", "a"),
        ("ns1", "b"),
        ("ns2", "a"),
    ]
    assert names(await get_json(http, pods_url(cluster, "ns2"))) == ["a"]
    one = await get_json(http, pods_url(cluster, "ns1") + "/b")
    assert one == cluster.get("pods", "ns1", "b")

    cluster.create("namespaces", {"metadata": {"name": "ns1"}})
    namespace = await get_json(http, cluster.server + "/api/v1/namespaces/ns1")
    assert (namespace["kind"], namespace["metadata"]["name"]) == ("Namespace", "ns1")
    await get_json(http, cluster.server + "/api/v1/pods/b", status=404)  # namespaced: needs one
    missing = await get_json(http, pods_url(cluster, "ns1") + "/zzz", status=404)
    assert missing["kind"] == "Status" and missing["reason"] == "NotFound"
    assert missing["message"] == 'pods "zzz" not found'
    unknown = await get_json(http, cluster.server + "/api/v1/gizmos", status=404)
    assert (unknown["kind"], unknown["code"]) == ("Status", 404)
    await get_json(http, cluster.server + "/apis/nope.io/v1/things", status=404)
    async with http.put(pods_url(cluster, "ns1"), json={}) as resp:
        assert resp.status == 405
        assert (await resp.json())["reason"] == "MethodNotAllowed"


async def test_pagination_is_a_consistent_snapshot(
    cluster: FakeCluster, http: aiohttp.ClientSession
) -> None:
    cluster.create_many("pods", (make_pod(f"p{i}", size=300) for i in range(5)))
    first = await get_json(http, pods_url(cluster), limit="2")
    assert names(first) == ["p0", "p1"]
    assert first["metadata"]["remainingItemCount"] == 3
    snapshot = first["metadata"]["resourceVersion"]
    # changes between pages do not show up in later pages
    cluster.delete("pods", "default", "p2")
    cluster.create("pods", make_pod("p25", size=300))
    pod3 = cluster.get("pods", "default", "p3")
    assert pod3 is not None
    pod3["metadata"]["labels"] = {"changed": "yes"}
    cluster.update("pods", pod3)
    second = await get_json(
        http, pods_url(cluster), limit="2", **{"continue": first["metadata"]["continue"]}
    )
    assert names(second) == ["p2", "p3"]
    assert second["items"][1]["metadata"]["labels"] != {"changed": "yes"}
    assert second["metadata"]["resourceVersion"] == snapshot
    third = await get_json(
        http, pods_url(cluster), limit="2", **{"continue": second["metadata"]["continue"]}
    )
    assert names(third) == ["p4"] and "continue" not in third["metadata"]

    # a continue token from before a compaction has expired
    cluster.compact()
    expired = await get_json(
        http,
        pods_url(cluster),
        status=410,
        limit="2",
        **{"continue": first["metadata"]["continue"]},
    )
    assert (expired["reason"], expired["code"]) == ("Expired", 410)
    assert "too old to display a consistent list result" in expired["message"]
    # the "inconsistent" token in the 410 continues from the latest state
    rest = await get_json(http, pods_url(cluster), **{"continue": expired["metadata"]["continue"]})
    assert names(rest) == ["p25", "p3", "p4"]
    bad = await get_json(http, pods_url(cluster), status=400, **{"continue": "garbage"})
    assert bad["reason"] == "BadRequest"


async def test_list_at_exact_resource_version(
    cluster: FakeCluster, http: aiohttp.ClientSession
) -> None:
    cluster.create("pods", make_pod("a"))
    old = cluster.resource_version
    cluster.create("pods", make_pod("b"))
    cluster.delete("pods", "default", "a")
    exact = await get_json(
        http, pods_url(cluster), resourceVersion=old, resourceVersionMatch="Exact"
    )
    assert names(exact) == ["a"] and exact["metadata"]["resourceVersion"] == old
    latest = await get_json(
        http, pods_url(cluster), resourceVersion=old, resourceVersionMatch="NotOlderThan"
    )
    assert names(latest) == ["b"]
    too_new = await get_json(http, pods_url(cluster), status=504, resourceVersion="999")
    assert "Too large resource version" in too_new["message"]
    cluster.compact()
    gone = await get_json(
        http, pods_url(cluster), status=410, resourceVersion=old, resourceVersionMatch="Exact"
    )
    assert gone["reason"] == "Expired"


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        ("app=web", ["web-1", "web-2"]),
        ("app==web,tier=front", ["web-1"]),
        ("app!=web", ["db-1", "plain"]),
        ("tier", ["db-1", "web-1"]),
        ("!tier", ["plain", "web-2"]),
        ("app in (web, db)", ["db-1", "web-1", "web-2"]),
        ("app notin (web)", ["db-1", "plain"]),
        ("", ["db-1", "plain", "web-1", "web-2"]),
    ],
)
async def test_label_selectors(
    cluster: FakeCluster, http: aiohttp.ClientSession, selector: str, expected: list[str]
) -> None:
    cluster.create("pods", make_pod("web-1", labels={"app": "web", "tier": "front"}))
    cluster.create("pods", make_pod("web-2", labels={"app": "web"}))
    cluster.create("pods", make_pod("db-1", labels={"app": "db", "tier": "back"}))
    cluster.create("pods", make_pod("plain", labels={}))
    body = await get_json(http, pods_url(cluster), labelSelector=selector)
    assert names(body) == expected


async def test_field_selectors_and_bad_selectors(
    cluster: FakeCluster, http: aiohttp.ClientSession
) -> None:
    cluster.create("pods", make_pod("a", "ns1", node="n1"))
    cluster.create("pods", make_pod("b", "ns1", node="n2", phase="Pending"))
    cluster.create("pods", make_pod("a", "ns2", node="n1"))

    async def select(field_selector: str) -> list[tuple[str, str]]:
        body = await get_json(http, pods_url(cluster), fieldSelector=field_selector)
        return [(i["metadata"]["namespace"], i["metadata"]["name"]) for i in body["items"]]

    assert await select("metadata.name=a") == [("ns1", "a"), ("ns2", "a")]
    assert await select("metadata.namespace==ns2") == [("ns2", "a")]
    assert await select("status.phase!=Running") == [("ns1", "b")]
    assert await select("spec.nodeName=n1,metadata.namespace=ns1") == [("ns1", "a")]
    assert await select("spec.missing=") == [("ns1", "a"), ("ns1", "b"), ("ns2", "a")]
    bad = await get_json(http, pods_url(cluster), status=400, fieldSelector="nonsense")
    assert bad["reason"] == "BadRequest"
    await get_json(http, pods_url(cluster), status=400, labelSelector="a=b=c=")


async def test_custom_resources_appear_in_discovery(
    cluster: FakeCluster, http: aiohttp.ClientSession
) -> None:
    cluster.register_resource(WIDGETS)
    groups = await get_json(http, cluster.server + "/apis")
    by_name = {g["name"]: g for g in groups["groups"]}
    assert {"apps", "events.k8s.io", "example.com"} <= by_name.keys()
    assert by_name["example.com"]["preferredVersion"]["groupVersion"] == "example.com/v1"
    listing = await get_json(http, cluster.server + "/apis/example.com/v1")
    assert listing["resources"][0]["name"] == "widgets"
    assert listing["resources"][0]["kind"] == "Widget"
    core = await get_json(http, cluster.server + "/api/v1")
    pods = next(r for r in core["resources"] if r["name"] == "pods")
    assert {"get", "list", "watch"} <= set(pods["verbs"]) and pods["namespaced"]
    assert (await get_json(http, cluster.server + "/api"))["versions"] == ["v1"]
    assert (await get_json(http, cluster.server + "/version"))["major"] == "1"

    cluster.create("widgets.example.com", {"metadata": {"name": "w1"}, "spec": {"size": 3}})
    body = await get_json(http, cluster.server + WIDGETS.path("default"))
    assert (body["kind"], names(body)) == ("WidgetList", ["w1"])
    assert body["items"][0]["apiVersion"] == "example.com/v1"


# ------------------------------------------------------------------------------ WATCH
async def test_watch_sends_current_state_then_live_events(
    cluster: FakeCluster, http: aiohttp.ClientSession
) -> None:
    cluster.create("pods", make_pod("a"))
    async with open_watch(http, pods_url(cluster)) as resp:
        assert resp.headers["Content-Type"] == "application/json"
        assert resp.headers["Transfer-Encoding"] == "chunked"
        assert await events(resp, 1) == [("ADDED", "a", "1")]
        assert cluster.open_watches == 1
        pod = cluster.get("pods", "default", "a")
        assert pod is not None
        cluster.update("pods", pod)
        cluster.create("pods", make_pod("b"))
        cluster.delete("pods", "default", "a")
        assert await events(resp, 3) == [
            ("MODIFIED", "a", "2"),
            ("ADDED", "b", "3"),
            ("DELETED", "a", "4"),
        ]
    await cluster.wait_for(lambda: cluster.open_watches == 0)


async def test_watch_resumes_from_a_resource_version(
    cluster: FakeCluster, http: aiohttp.ClientSession
) -> None:
    cluster.create("pods", make_pod("a"))
    resume = cluster.resource_version
    cluster.create("pods", make_pod("b"))
    cluster.create("configmaps", {"metadata": {"name": "other-resource"}})
    cluster.delete("pods", "default", "a")
    async with open_watch(http, pods_url(cluster), resourceVersion=resume) as resp:
        assert await events(resp, 2) == [("ADDED", "b", "2"), ("DELETED", "a", "4")]
        cluster.create("pods", make_pod("c"))
        assert await events(resp, 1) == [("ADDED", "c", "5")]


async def test_watch_selector_sends_entering_and_leaving_objects(
    cluster: FakeCluster, http: aiohttp.ClientSession
) -> None:
    cluster.create("pods", make_pod("web", labels={"app": "web"}))
    cluster.create("pods", make_pod("db", "other", labels={"app": "db"}))
    async with open_watch(http, pods_url(cluster), labelSelector="app=web") as resp:
        assert await events(resp, 1) == [("ADDED", "web", "1")]
        db = cluster.get("pods", "other", "db")
        web = cluster.get("pods", "default", "web")
        assert db is not None and web is not None
        db["metadata"]["labels"] = {"app": "web"}
        cluster.update("pods", db)  # enters the selection
        web["metadata"]["labels"] = {"app": "gone"}
        cluster.update("pods", web)  # leaves it
        cluster.update("pods", web)  # still outside: nothing
        cluster.delete("pods", "other", "db")
        assert await events(resp, 3) == [
            ("ADDED", "db", "3"),
            ("DELETED", "web", "4"),
            ("DELETED", "db", "6"),
        ]
    async with open_watch(http, pods_url(cluster), fieldSelector="metadata.name=web") as resp:
        assert await events(resp, 1) == [("ADDED", "web", "5")]


async def test_bookmarks_carry_the_current_resource_version(
    cluster: FakeCluster, http: aiohttp.ClientSession
) -> None:
    cluster.create("pods", make_pod("a"))
    cluster.create("configmaps", {"metadata": {"name": "c"}})
    async with open_watch(
        http, pods_url(cluster), resourceVersion="2", allowWatchBookmarks="true"
    ) as resp:
        event = await next_event(resp)
        assert event == {
            "type": "BOOKMARK",
            "object": {"kind": "Pod", "apiVersion": "v1", "metadata": {"resourceVersion": "2"}},
        }
        cluster.create("configmaps", {"metadata": {"name": "d"}})
        event = await next_event(resp)
        assert event is not None and event["object"]["metadata"]["resourceVersion"] == "3"


async def test_timeout_seconds_ends_the_stream_cleanly(
    cluster: FakeCluster, http: aiohttp.ClientSession
) -> None:
    async with open_watch(http, pods_url(cluster), timeoutSeconds="1") as resp:
        assert await next_event(resp) is None  # clean end of the chunked stream
        assert resp.content.at_eof()
    await cluster.wait_for(lambda: cluster.open_watches == 0)


async def test_expired_resource_version_in_stream_and_as_http() -> None:
    expected = {
        "type": "ERROR",
        "object": {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": "too old resource version: 1 (3)",
            "reason": "Expired",
            "code": 410,
        },
    }
    for as_http in (False, True):
        async with (
            FakeCluster(history_limit=2, expired_as_http=as_http) as fake,
            aiohttp.ClientSession() as http,
        ):
            fake.create_many("pods", [make_pod(f"p{i}", size=200) for i in range(5)])
            if as_http:
                status = await get_json(http, pods_url(fake), 410, watch="1", resourceVersion="1")
                assert status == expected["object"]
            else:
                async with open_watch(http, pods_url(fake), resourceVersion="1") as resp:
                    assert await next_event(resp) == expected
                    assert await next_event(resp) is None
            # a resume point inside the history still works
            async with open_watch(http, pods_url(fake), resourceVersion="3") as resp:
                assert [e[1] for e in await events(resp, 2)] == ["p3", "p4"]


async def test_compact_ends_open_watches_with_410(
    cluster: FakeCluster, http: aiohttp.ClientSession
) -> None:
    cluster.create("pods", make_pod("a"))
    cluster.create("pods", make_pod("gone"))
    async with open_watch(http, pods_url(cluster), resourceVersion="2") as resp:
        await cluster.wait_for(lambda: cluster.open_watches == 1)
        cluster.delete("pods", "default", "gone")
        cluster.compact()
        cluster.create("pods", make_pod("after"))
        # what was queued before the compaction still arrives, then the 410, then the end
        assert await events(resp, 1) == [("DELETED", "gone", "3")]
        event = await next_event(resp)
        assert event is not None and event["type"] == "ERROR"
        assert (event["object"]["code"], event["object"]["reason"]) == (410, "Expired")
        assert await next_event(resp) is None
    cluster.create("pods", make_pod("b"))
    async with open_watch(http, pods_url(cluster), resourceVersion="3") as resp:
        assert await events(resp, 2) == [("ADDED", "after", "4"), ("ADDED", "b", "5")]
    cluster.compact()
    async with open_watch(http, pods_url(cluster), resourceVersion="3") as resp:
        event = await next_event(resp)
        assert event is not None
        assert event["object"]["message"] == "too old resource version: 3 (5)"
    async with open_watch(http, pods_url(cluster), resourceVersion="0") as resp:
        assert [e[1] for e in await events(resp, 3)] == ["a", "after", "b"]


async def test_streaming_list_ends_initial_events_with_a_bookmark(
    cluster: FakeCluster, http: aiohttp.ClientSession
) -> None:
    cluster.create_many("pods", [make_pod(f"p{i}") for i in range(3)])
    cluster.create("configmaps", {"metadata": {"name": "moves-the-rv"}})
    params = {
        "sendInitialEvents": "true",
        "resourceVersionMatch": "NotOlderThan",
        "allowWatchBookmarks": "true",
    }
    async with open_watch(http, pods_url(cluster), **params) as resp:
        assert await events(resp, 3) == [("ADDED", f"p{i}", str(i + 1)) for i in range(3)]
        marker = await next_event(resp)
        assert marker == {
            "type": "BOOKMARK",
            "object": {
                "kind": "Pod",
                "apiVersion": "v1",
                "metadata": {
                    "resourceVersion": "4",
                    "annotations": {"k8s.io/initial-events-end": "true"},
                },
            },
        }
        cluster.delete("pods", "default", "p0")
        assert await events(resp, 1) == [("DELETED", "p0", "5")]

    # without allowWatchBookmarks the real watch cache sends no end marker either
    del params["allowWatchBookmarks"]
    async with open_watch(http, pods_url(cluster), **params) as resp:
        assert [e[1] for e in await events(resp, 2)] == ["p1", "p2"]
        cluster.create("pods", make_pod("p3"))
        assert await events(resp, 1) == [("ADDED", "p3", "6")]

    invalid = await get_json(http, pods_url(cluster), 422, watch="1", sendInitialEvents="true")
    assert invalid["reason"] == "Invalid"
    assert "sendInitialEvents requires setting resourceVersionMatch" in invalid["message"]
    await get_json(http, pods_url(cluster), 422, watch="1", resourceVersionMatch="NotOlderThan")


async def test_streaming_list_on_servers_without_it(http: aiohttp.ClientSession) -> None:
    params = {
        "watch": "1",
        "sendInitialEvents": "true",
        "resourceVersionMatch": "NotOlderThan",
        "allowWatchBookmarks": "true",
    }
    async with FakeCluster(streaming_list=False) as fake:
        refused = await get_json(http, pods_url(fake), 422, **params)
        assert refused["message"] == (
            'ListOptions.meta.k8s.io "" is invalid: sendInitialEvents: Forbidden: '
            "sendInitialEvents is forbidden for watch unless the WatchList feature gate is enabled"
        )
        assert refused["details"]["causes"][0]["field"] == "sendInitialEvents"
    async with FakeCluster(streaming_list="ignore", bookmark_period=60) as fake:
        fake.create("pods", make_pod("a"))
        async with http.get(pods_url(fake), params=params) as resp:
            assert await events(resp, 1) == [("ADDED", "a", "1")]
            fake.create("pods", make_pod("b"))  # live event, no initial-events-end marker
            assert await events(resp, 1) == [("ADDED", "b", "2")]


async def test_large_object_and_bulk_events_through_one_watch(
    cluster: FakeCluster, http: aiohttp.ClientSession
) -> None:
    big = {"metadata": {"name": "big"}, "data": {"blob": "x" * (2 * 1024 * 1024)}}
    async with open_watch(http, cluster.server + "/api/v1/configmaps") as resp:
        cluster.create("configmaps", big)
        event = await next_event(resp)
        assert event is not None
        assert event["type"] == "ADDED" and len(event["object"]["data"]["blob"]) == 2 * 1024 * 1024
    async with open_watch(
        http, pods_url(cluster), resourceVersion=cluster.resource_version
    ) as resp:
        rv = cluster.create_many("pods", (make_pod(f"p{i:05}") for i in range(5000)))
        seen = 0
        async with asyncio.timeout(10):
            while seen < 5000:
                line = await resp.content.readline()
                assert line.startswith(b'{"type":"ADDED"')
                seen += 1
        assert orjson.loads(line)["object"]["metadata"]["resourceVersion"] == rv


async def raw_watch_chunks(cluster: FakeCluster, path: str) -> list[bytes]:
    """The HTTP chunks of a watch response exactly as they arrive on the socket."""
    reader, writer = await asyncio.open_connection("127.0.0.1", cluster.port)
    try:
        writer.write(
            f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {TOKEN}\r\n"
            "Connection: close\r\n\r\n".encode()
        )
        async with asyncio.timeout(10):
            head = await reader.readuntil(b"\r\n\r\n")
            assert head.startswith(b"HTTP/1.1 200") and b"Transfer-Encoding: chunked" in head
            chunks = []
            while True:
                size = int(await reader.readuntil(b"\r\n"), 16)
                data = await reader.readexactly(size + 2)
                assert data.endswith(b"\r\n")
                if size == 0:
                    return chunks
                chunks.append(data[:-2])
    finally:
        writer.close()
        await writer.wait_closed()


async def test_watch_streams_are_chunked_as_the_api_server_chunks_them(
    cluster: FakeCluster,
) -> None:
    # Go's net/http keeps 2 KiB before the chunked encoder: an event above that is one
    # chunk; small events are packed into 2 KiB chunks, cut mid-line; a flush ends a chunk
    start = cluster.resource_version
    cluster.create_many("pods", (make_pod(f"big-{i}", size=3000) for i in range(5)))
    cluster.create_many("configmaps", ({"metadata": {"name": f"c{i}"}} for i in range(40)))
    query = f"?watch=true&resourceVersion={start}&timeoutSeconds=0.3"
    pods = await raw_watch_chunks(cluster, "/api/v1/pods" + query)
    assert len(pods) == 5
    assert all(c.startswith(b'{"type":"ADDED"') and c.endswith(b"}\n") for c in pods)
    assert all(len(c) > 2048 for c in pods)

    small = await raw_watch_chunks(cluster, "/api/v1/configmaps" + query)
    body = b"".join(small)
    lines = body.splitlines()
    assert len(lines) == 40 and all(orjson.loads(line)["type"] == "ADDED" for line in lines)
    assert all(len(c) == 2048 for c in small[:-1]) and 0 < len(small[-1]) <= 2048
    assert any(not c.endswith(b"\n") for c in small)  # lines cut across chunks


async def test_a_larger_chunk_buffer_packs_events_into_fewer_chunks() -> None:
    async with FakeCluster(chunk_buffer=64 * 1024) as cluster:
        start = cluster.resource_version
        cluster.create_many("pods", (make_pod(f"p-{i}", size=3000) for i in range(50)))
        query = f"?watch=true&resourceVersion={start}&timeoutSeconds=0.3"
        chunks = await raw_watch_chunks(cluster, "/api/v1/pods" + query)
        assert len(chunks) < 5 and len(b"".join(chunks).splitlines()) == 50
    with pytest.raises(ValueError, match="chunk_buffer"):
        FakeCluster(chunk_buffer=0)


async def test_client_going_away_closes_the_watch(
    cluster: FakeCluster, http: aiohttp.ClientSession
) -> None:
    resp = await http.get(pods_url(cluster), params={"watch": "1"})
    await cluster.wait_for(lambda: cluster.open_watches == 1)
    resp.close()  # drops the connection
    await cluster.wait_for(lambda: cluster.open_watches == 0 and cluster.open_connections == 0)


# ------------------------------------------------------------------------------ auth, faults
async def test_bearer_token_auth_follows_runtime_changes(cluster: FakeCluster) -> None:
    url = pods_url(cluster)
    async with aiohttp.ClientSession() as anonymous:
        status = await get_json(anonymous, url, 401)
        assert status == {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": "Unauthorized",
            "reason": "Unauthorized",
            "code": 401,
        }
    async with aiohttp.ClientSession(headers={"Authorization": "Bearer rotated"}) as rotated:
        await get_json(rotated, url, 401)
        cluster.tokens.add("rotated")
        await get_json(rotated, url)
        cluster.tokens.discard("rotated")
        await get_json(rotated, url, 401)
    assert len(cluster.requests_for("rotated")) == 3
    assert cluster.requests_for(None) == [
        RecordedRequest(method="GET", path="/api/v1/pods", query={}, token=None, is_watch=False)
    ]
    cluster.clear_requests()
    assert cluster.requests == []


async def test_fail_next_matches_path_and_watch(
    cluster: FakeCluster, http: aiohttp.ClientSession
) -> None:
    cluster.fail_next(2, 503, reason="ServiceUnavailable", path_prefix="/api/v1/pods", watch=False)
    cluster.fail_next(1, 500, watch=True)
    async with http.get(pods_url(cluster)) as resp:
        assert resp.status == 503 and resp.headers["Retry-After"] == "1"
        body = await resp.json()
        assert (body["kind"], body["reason"], body["code"]) == ("Status", "ServiceUnavailable", 503)
    await get_json(http, cluster.server + "/api/v1/configmaps")  # other path: fine
    await get_json(http, pods_url(cluster), 503)
    await get_json(http, pods_url(cluster))
    failed = await get_json(http, pods_url(cluster), 500, watch="true")
    assert failed["reason"] == "InternalError"
    async with open_watch(http, pods_url(cluster), timeoutSeconds="5"):
        pass


async def test_stall_freezes_streams_and_requests(
    cluster: FakeCluster, http: aiohttp.ClientSession
) -> None:
    async with open_watch(http, pods_url(cluster), allowWatchBookmarks="true") as resp:
        cluster.stall()
        cluster.create("pods", make_pod("a"))
        pending = asyncio.create_task(get_json(http, pods_url(cluster)))
        try:
            await cluster.wait_for(lambda: len(cluster.requests) == 2)
            # neither the event nor a bookmark (period 0.05 s) gets out while stalled
            with pytest.raises(TimeoutError):
                async with asyncio.timeout(0.2):
                    await resp.content.readline()
            assert not pending.done()
            cluster.unstall()
            assert await events(resp, 1) == [("ADDED", "a", "1")]
            assert names(await pending) == ["a"]
        finally:
            pending.cancel()


async def test_drop_watches_cuts_streams_mid_chunk(
    cluster: FakeCluster, http: aiohttp.ClientSession
) -> None:
    cluster.create("pods", make_pod("a"))
    async with (
        open_watch(http, pods_url(cluster)) as first,
        open_watch(http, cluster.server + "/api/v1/configmaps") as second,
    ):
        assert await events(first, 1) == [("ADDED", "a", "1")]
        await cluster.wait_for(lambda: cluster.open_watches == 2)
        assert cluster.drop_watches() == 2
        for resp in (first, second):
            with pytest.raises(aiohttp.ClientPayloadError):
                await next_event(resp)
    await cluster.wait_for(lambda: cluster.open_watches == 0)


async def test_stop_and_restart_keep_port_and_state(
    cluster: FakeCluster, http: aiohttp.ClientSession
) -> None:
    cluster.create("pods", make_pod("a"))
    port, server = cluster.port, cluster.server
    async with open_watch(http, pods_url(cluster)) as resp:
        await events(resp, 1)
        cluster.stall()
        hanging = asyncio.create_task(get_json(http, pods_url(cluster)))
        await cluster.wait_for(lambda: len(cluster.requests) == 2)
        await cluster.stop()
        assert not cluster.is_running and cluster.open_connections == 0
        with pytest.raises(aiohttp.ClientPayloadError):
            await next_event(resp)
        with pytest.raises(aiohttp.ClientError):
            await hanging
    with pytest.raises(aiohttp.ClientConnectorError):
        await get_json(http, pods_url(cluster))
    cluster.create("pods", make_pod("b"))  # works while stopped
    await cluster.start()
    assert (cluster.port, cluster.server) == (port, server)
    body = await get_json(http, pods_url(cluster))
    assert names(body) == ["a", "b"] and body["metadata"]["resourceVersion"] == "2"
    await cluster.restart()
    assert cluster.is_running and cluster.port == port
    async with open_watch(http, pods_url(cluster), resourceVersion="1") as resp:
        assert await events(resp, 1) == [("ADDED", "b", "2")]
    with pytest.raises(RuntimeError, match="already running"):
        await cluster.start()


async def test_counters_for_connections_watches_and_tokens(cluster: FakeCluster) -> None:
    cluster.tokens.add("other")
    async with aiohttp.ClientSession(headers=AUTH) as first:
        await get_json(first, pods_url(cluster))
        await cluster.wait_for(lambda: cluster.open_connections == 1)  # kept alive
        async with aiohttp.ClientSession(headers={"Authorization": "Bearer other"}) as second:
            async with open_watch(second, pods_url(cluster)), open_watch(first, pods_url(cluster)):
                await cluster.wait_for(lambda: cluster.open_watches == 2)
                assert cluster.open_watches_for("other") == 1
                assert cluster.open_watches_for(TOKEN) == 1
                assert cluster.open_watches_for(None) == 0
                assert cluster.open_connections == 2  # the first session reuses its connection
            assert [r.is_watch for r in cluster.requests_for("other")] == [True]
    await cluster.wait_for(lambda: cluster.open_connections == 0 and cluster.open_watches == 0)
    assert "connections=0" in repr(cluster) and TOKEN not in repr(cluster)


async def test_wait_for_times_out_with_a_clear_message(cluster: FakeCluster) -> None:
    def never() -> bool:
        return False

    with pytest.raises(TimeoutError, match=r"never still false after 0.05 s.*FakeCluster 'fake'"):
        await cluster.wait_for(never, timeout=0.05)


async def test_tls_with_the_generated_ca() -> None:
    async with FakeCluster(tls=True) as fake:
        assert fake.server.startswith("https://127.0.0.1:")
        assert fake.ca_file is not None
        assert Path(fake.ca_file).read_bytes().startswith(b"-----BEGIN")  # noqa: ASYNC240
        fake.create("pods", make_pod("a"))
        context = ssl.create_default_context(cafile=fake.ca_file)
        async with aiohttp.ClientSession() as http:
            async with http.get(pods_url(fake), ssl=context) as resp:
                assert names(await resp.json()) == ["a"]
            with pytest.raises(aiohttp.ClientConnectorCertificateError):
                await http.get(pods_url(fake))
            async with http.get(pods_url(fake), params={"watch": "1"}, ssl=context) as resp:
                assert await events(resp, 1) == [("ADDED", "a", "1")]
                fake.drop_watches()
                with pytest.raises(aiohttp.ClientPayloadError):
                    await next_event(resp)


# ------------------------------------------------------------------------------ kubeconfig
@contextmanager
def no_temp_files(folder: Path) -> Iterator[None]:
    yield
    assert not [p for p in folder.iterdir() if p.name.endswith(".tmp")]


async def test_kubeconfig_works_with_kubernetes_asyncio(tmp_path: Path) -> None:
    async with (
        FakeCluster(tokens={"t-plain"}, name="plain") as plain,
        FakeCluster(tokens={"t-tls"}, tls=True, name="secure") as secure,
    ):
        plain.create("pods", make_pod("p1", "team"))
        secure.create("pods", make_pod("s1"))
        path = tmp_path / "kube" / "config"
        with no_temp_files(tmp_path):
            written = write_kubeconfig(
                path, {"plain": plain, "secure": FakeContext(cluster=secure, namespace="ops")}
            )
        assert written == path and stat.S_IMODE(path.stat().st_mode) == 0o600
        doc = yaml.safe_load(path.read_text())
        assert doc["current-context"] == "plain"
        clusters = {c["name"]: c["cluster"] for c in doc["clusters"]}
        assert clusters["secure-cluster"]["certificate-authority"] == secure.ca_file

        for context, fake, expected in (("plain", plain, "p1"), ("secure", secure, "s1")):
            api = await k8s_config.new_client_from_config(config_file=str(path), context=context)
            async with api:
                v1 = k8s_client.CoreV1Api(api)
                pods = await v1.list_pod_for_all_namespaces()
                assert [p.metadata.name for p in pods.items] == [expected]
                assert pods.metadata.resource_version == "1"
                stream = k8s_watch.Watch().stream(
                    v1.list_namespaced_pod, "default", resource_version="0", timeout_seconds=5
                )
                fake.create("pods", make_pod("new"))
                wanted = {"new"} if context == "plain" else {"new", "s1"}
                seen = set()
                async with stream, asyncio.timeout(5):
                    async for event in stream:
                        assert event["type"] == "ADDED"
                        seen.add(event["object"].metadata.name)
                        if seen == wanted:
                            break
        assert {r.token for r in plain.requests} == {"t-plain"}
        assert {r.token for r in secure.requests} == {"t-tls"}


def test_kubeconfig_dict_options(tmp_path: Path) -> None:
    fake = FakeCluster(tokens={"b-token", "a-token"}, port=6443)
    token_file = tmp_path / "token"
    doc = kubeconfig_dict(
        {
            "one": fake,
            "two": FakeContext(
                cluster=fake, token="explicit", cluster_name="shared", user_name="u2"
            ),
            "three": FakeContext(cluster=fake, token_file=str(token_file), cluster_name="shared"),
            "url": FakeContext(cluster="http://127.0.0.1:1", namespace="ns"),
        },
        current_context="two",
    )
    assert doc["current-context"] == "two"
    users = {u["name"]: u["user"] for u in doc["users"]}
    assert users["one-user"] == {"token": "a-token"}  # the first token, sorted
    assert users["u2"] == {"token": "explicit"}
    assert users["three-user"] == {"tokenFile": str(token_file)}
    assert users["url-user"] == {}
    assert token_file.read_text() == "a-token"
    assert [c["name"] for c in doc["clusters"]] == ["one-cluster", "shared", "url-cluster"]
    assert doc["clusters"][1]["cluster"] == {"server": "http://127.0.0.1:6443"}
    contexts = {c["name"]: c["context"] for c in doc["contexts"]}
    assert contexts["url"] == {"cluster": "url-cluster", "user": "url-user", "namespace": "ns"}
    assert "explicit" not in repr(FakeContext(cluster=fake, token="explicit"))

    token_file.write_text("kept")
    kubeconfig_dict({"three": FakeContext(cluster=fake, token_file=str(token_file))})
    assert token_file.read_text() == "kept"  # the default token never overwrites
    with pytest.raises(ValueError, match="not one of the contexts"):
        kubeconfig_dict({"one": fake}, current_context="nope")
    with pytest.raises(ValueError, match="two different cluster entries"):
        kubeconfig_dict(
            {
                "a": FakeContext(cluster="http://x:1", cluster_name="c"),
                "b": FakeContext(cluster="http://y:1", cluster_name="c"),
            }
        )
    with pytest.raises(RuntimeError, match="start it first"):
        kubeconfig_dict({"x": FakeCluster()})
