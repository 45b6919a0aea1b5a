"""LIST and GET through the proxy with kube-apiserver's semantics, from the cache: selectors,
resourceVersion and resourceVersionMatch, pages from one snapshot while objects change,
continue tokens (forged, another context's, expired), namespaces from the cluster-wide store
or a limited user's fallback, read your writes, and the freshness header."""

from __future__ import annotations

import json
import urllib.parse
from pathlib import Path
from typing import Any

import aiohttp
import anyio
import pytest

from kubemux.proxy import ProxySettings
from kubemux.testing import FakeCluster, FakeContext, make_pod, write_kubeconfig
from proxy_support import running_proxy

TOKEN = "upstream-token"
TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"


@pytest.fixture
async def cluster() -> Any:
    async with FakeCluster(tokens={TOKEN}, tls=True, name="up") as fake:
        fake.create("pods", make_pod("web-1", size=600, labels={"app": "web", "tier": "a"}))
        fake.create("pods", make_pod("web-2", size=600, node="node-2", phase="Pending"))
        fake.create("pods", make_pod("db-1", "data", size=600, labels={"app": "db"}))
        fake.create("pods", make_pod("db-2", "data", size=600, node="node-2", labels={}))
        yield fake


@pytest.fixture
def kubeconfig(cluster: FakeCluster, tmp_path: Path) -> Path:
    return write_kubeconfig(tmp_path / "config", {"prod": cluster, "other": cluster})


def upstream_reads(cluster: FakeCluster) -> int:
    return cluster.request_count(("list", "get"), "pods")


def names(doc: dict[str, Any]) -> list[str]:
    return [f"{i['metadata']['namespace']}/{i['metadata']['name']}" for i in doc["items"]]


async def direct(cluster: FakeCluster, path: str) -> Any:
    async with aiohttp.ClientSession() as session:
        headers = {"Authorization": f"Bearer {TOKEN}"}
        ssl = cluster.client_ssl_context()
        async with session.get(cluster.server + path, headers=headers, ssl=ssl) as resp:
            assert resp.status == 200, await resp.text()
            return await resp.json()


def q(**params: str) -> str:
    return "?" + urllib.parse.urlencode(params)


SELECTIONS = [
    q(labelSelector="app=web"),
    q(labelSelector="app in (web,db),tier!=a"),
    q(labelSelector="!app"),
    q(labelSelector="app,app notin (db)"),
    q(fieldSelector="spec.nodeName=node-2"),
    q(fieldSelector="status.phase!=Running"),
    q(fieldSelector="metadata.name=web-1"),
    q(fieldSelector="metadata.namespace=data,spec.nodeName=node-1"),
    q(labelSelector="app=db", fieldSelector="metadata.namespace=data"),
]


async def test_selectors_are_evaluated_on_the_cache(cluster: FakeCluster, kubeconfig: Path) -> None:
    async with running_proxy(kubeconfig) as (_, client):
        with anyio.fail_after(30):
            await client.get_json("prod", "/api/v1/pods")
            before = upstream_reads(cluster)
            for query in SELECTIONS:
                for path in ("/api/v1/pods", "/api/v1/namespaces/data/pods"):
                    status, mine = await client.get_json("prod", path + query)
                    assert status == 200, mine
                    theirs = await direct(cluster, path + query)
                    assert names(mine) == names(theirs), path + query
                    assert mine["metadata"]["resourceVersion"] == cluster.resource_version
                    assert "remainingItemCount" not in mine["metadata"]
            assert upstream_reads(cluster) == before + 2 * len(SELECTIONS)  # the direct ones


BAD = [
    (
        q(labelSelector="a in (b"),
        "unable to parse requirement: found '', expected: ',' or ')'",
    ),
    (q(labelSelector="a b"), "found 'b', expected: in, notin, =, ==, !=, gt, lt"),
    (q(fieldSelector="spec.foo=bar"), "field label not supported: spec.foo"),
    (q(fieldSelector="a"), "invalid selector: 'a'; can't understand 'a'"),
    (q(limit="ten"), 'strconv.ParseInt: parsing "ten": invalid syntax'),
    (q(labelSelector="a=" + "b" * 60_000), "must be no more than 63 bytes"),
    (q(labelSelector=",".join(f"k{i}" for i in range(200))), "labelSelector: Too many"),
]


async def test_bad_options_get_the_api_servers_answers_without_going_upstream(
    cluster: FakeCluster, kubeconfig: Path
) -> None:
    async with running_proxy(kubeconfig) as (_, client):
        with anyio.fail_after(30):
            await client.get_json("prod", "/api/v1/pods")
            cluster.clear_requests()
            for query, message in BAD:
                status, doc = await client.get_json("prod", "/api/v1/pods" + query)
                assert status == 400, query
                assert doc["kind"] == "Status" and doc["reason"] == "BadRequest"
                assert message in doc["message"], (query, doc["message"])
            status, doc = await client.get_json(
                "prod", "/api/v1/pods" + q(resourceVersionMatch="Exact")
            )
            assert status == 422 and doc["reason"] == "Invalid"
            assert doc["message"] == (
                'ListOptions.meta.k8s.io "" is invalid: resourceVersionMatch: Forbidden: '
                "resourceVersionMatch is forbidden unless resourceVersion is provided"
            )
            status, doc = await client.get_json("prod", "/api/v1/pods" + q(resourceVersion="x"))
            assert status == 500 and "invalid syntax" in doc["message"]
            # past what the HTTP parser takes (about 64 KiB of URL): refused before parsing
            status, _, _ = await client.request(
                "GET", "prod", "/api/v1/pods" + q(labelSelector="a=" + "b" * (1 << 20))
            )
            assert status in (400, 431)
    assert upstream_reads(cluster) == 0


async def test_resource_versions(cluster: FakeCluster, kubeconfig: Path) -> None:
    settings = ProxySettings(wait_timeout=0.5)
    async with running_proxy(kubeconfig, settings=settings) as (_, client):
        with anyio.fail_after(30):
            await client.get_json("prod", "/api/v1/pods")
            now = int(cluster.resource_version)
            before = upstream_reads(cluster)
            for query in (
                q(resourceVersion="0"),
                q(resourceVersion=""),
                q(resourceVersion=str(now)),
                q(resourceVersion=str(now - 2)),  # not older than: the cache is newer
                q(resourceVersion=str(now), resourceVersionMatch="Exact"),
                q(resourceVersion=str(now), limit="2"),  # legacy exact
                q(resourceVersion="0", resourceVersionMatch="NotOlderThan"),
            ):
                status, doc = await client.get_json("prod", "/api/v1/pods" + query)
                assert status == 200, (query, doc)
                assert doc["metadata"]["resourceVersion"] == str(now)
            status, _ = await client.get_json(
                "prod", f"/api/v1/namespaces/default/pods/web-1?resourceVersion={now}"
            )
            assert status == 200
            assert upstream_reads(cluster) == before
            # an exact version older than the cache: the API server has it
            query = q(resourceVersion=str(now - 1), resourceVersionMatch="Exact")
            status, doc = await client.get_json("prod", "/api/v1/pods" + query)
            assert status == 200 and doc["metadata"]["resourceVersion"] == str(now - 1)
            assert upstream_reads(cluster) == before + 1
            # newer than the cache: a bounded wait, then the watch cache's 504
            for path in ("/api/v1/pods", "/api/v1/namespaces/default/pods/web-1"):
                status, headers, body = await client.request(
                    "GET", "prod", path + q(resourceVersion=str(now + 5))
                )
                doc = json.loads(body)
                assert status == 504 and headers["Retry-After"] == "1"
                assert doc["message"] == (
                    f"Timeout: Too large resource version: {now + 5}, current: {now}"
                )
                assert doc["details"]["causes"][0]["reason"] == "ResourceVersionTooLarge"
            # newer than the cache, and the cache gets there within the wait
            async with anyio.create_task_group() as tg:
                result: list[Any] = []

                async def read() -> None:
                    result.append(
                        await client.get_json(
                            "prod", "/api/v1/pods" + q(resourceVersion=str(now + 1))
                        )
                    )

                tg.start_soon(read)
                cluster.create("pods", make_pod("late-1", size=600))
            status, doc = result[0]
            assert status == 200 and doc["metadata"]["resourceVersion"] == str(now + 1)
            assert "default/late-1" in names(doc)
            assert upstream_reads(cluster) == before + 1


async def test_pages_are_one_snapshot_while_objects_change(
    cluster: FakeCluster, kubeconfig: Path
) -> None:
    cluster.create_many("pods", [make_pod(f"p-{i:03}", f"ns-{i % 3}", size=300) for i in range(60)])
    async with running_proxy(kubeconfig) as (_, client):
        with anyio.fail_after(60):
            await client.get_json("prod", "/api/v1/pods")
            before = upstream_reads(cluster)
            status, page = await client.get_json("prod", "/api/v1/pods?limit=7")
            assert status == 200
            first_rv = page["metadata"]["resourceVersion"]
            total = len(page["items"]) + page["metadata"]["remainingItemCount"]
            listed = names(page)
            churn = 0
            while page["metadata"].get("continue"):
                # churn between pages: new objects, deletions, updates
                cluster.create("pods", make_pod(f"new-{churn}", "ns-0", size=300))
                cluster.delete("pods", f"ns-{churn % 3}", f"p-{59 - churn:03}")
                changed = cluster.get("pods", "ns-1", "p-001")
                assert changed is not None
                changed["metadata"]["labels"] = {"churn": str(churn)}
                cluster.update("pods", changed)
                churn += 1
                token = urllib.parse.quote(page["metadata"]["continue"])
                status, page = await client.get_json(
                    "prod", f"/api/v1/pods?limit=7&continue={token}"
                )
                assert status == 200, page
                assert page["metadata"]["resourceVersion"] == first_rv
                if page["metadata"].get("continue"):
                    left = page["metadata"]["remainingItemCount"]
                    assert len(listed) + len(page["items"]) + left == total
                listed += names(page)
            assert churn >= 8
            assert upstream_reads(cluster) == before
    at_first = await direct(
        cluster, f"/api/v1/pods?resourceVersion={first_rv}&resourceVersionMatch=Exact"
    )
    assert listed == names(at_first)  # exactly the set of the first page, in order
    assert len(listed) == len(set(listed)) == total


async def test_table_pages_and_selectors(cluster: FakeCluster, kubeconfig: Path) -> None:
    async with running_proxy(kubeconfig) as (_, client):
        with anyio.fail_after(30):
            headers = {"Accept": TABLE}
            _, whole = await client.get_json("prod", "/api/v1/pods", headers=headers)
            rows: list[Any] = []
            token = ""
            while True:
                _, page = await client.get_json(
                    "prod", f"/api/v1/pods?limit=3&continue={token}", headers=headers
                )
                rows += page["rows"]
                token = urllib.parse.quote(page["metadata"].get("continue", ""))
                if not token:
                    break
            assert rows == whole["rows"]
            cluster.clear_requests()
            for query in (q(labelSelector="app=web"), q(fieldSelector="spec.nodeName=node-2")):
                _, mine = await client.get_json("prod", "/api/v1/pods" + query, headers=headers)
                theirs = await direct(cluster, "/api/v1/pods" + query)
                assert [r["object"]["metadata"]["name"] for r in mine["rows"]] == [
                    i["metadata"]["name"] for i in theirs["items"]
                ]
            _, full = await client.get_json(
                "prod", "/api/v1/pods?includeObject=Object", headers=headers
            )
            assert [r["object"]["kind"] for r in full["rows"]] == ["Pod"] * 4
    assert upstream_reads(cluster) == 2  # the direct ones


async def test_continue_tokens_are_bound_and_checked(
    cluster: FakeCluster, kubeconfig: Path
) -> None:
    async with running_proxy(kubeconfig) as (server, client):
        with anyio.fail_after(30):
            _, page = await client.get_json("prod", "/api/v1/pods?limit=1")
            token = page["metadata"]["continue"]
            before = upstream_reads(cluster)
            forged = token[:-4] + ("AAAA" if not token.endswith("AAAA") else "BBBB")
            for context, path, bad in (
                ("prod", "/api/v1/pods", forged),
                ("prod", "/api/v1/pods", "not-base64!"),
                ("other", "/api/v1/pods", token),  # another context's (same cluster)
                ("prod", "/api/v1/namespaces/default/pods", token),  # another scope
                ("prod", "/api/v1/configmaps", token),  # another resource
            ):
                status, doc = await client.get_json(
                    context, f"{path}?limit=1&continue={urllib.parse.quote(bad)}"
                )
                assert status == 400, (context, path)
                assert doc["message"].startswith(
                    "invalid continue token: continue key is not valid"
                )
            status, doc = await client.get_json(
                "prod", f"/api/v1/pods?limit=1&resourceVersion=5&continue={token}"
            )
            assert status == 400
            assert doc["message"] == (
                "specifying resource version is not allowed when using continue"
            )
            # past its snapshot's life: 410, with a token that continues at the latest
            server.app.state.proxy.cached.pins.ttl = 0.0
            status, doc = await client.get_json(
                "prod", f"/api/v1/pods?limit=1&continue={urllib.parse.quote(token)}"
            )
            assert status == 410 and doc["reason"] == "Expired"
            assert doc["message"].startswith("The provided continue parameter is too old")
            fresh = doc["metadata"]["continue"]
            status, page2 = await client.get_json(
                "prod", f"/api/v1/pods?limit=10&continue={urllib.parse.quote(fresh)}"
            )
            assert status == 200
            assert names(page2) == names(await direct(cluster, "/api/v1/pods"))[1:]
    assert upstream_reads(cluster) == before + 1  # the direct one


async def test_namespaces_come_from_the_cluster_wide_store(
    cluster: FakeCluster, kubeconfig: Path
) -> None:
    async with running_proxy(kubeconfig) as (_, client):
        with anyio.fail_after(30):
            for namespace in ("default", "data", "nope"):
                status, doc = await client.get_json("prod", f"/api/v1/namespaces/{namespace}/pods")
                assert status == 200
                assert names(doc) == [
                    n
                    for n in names(await direct(cluster, "/api/v1/pods"))
                    if n.startswith(namespace + "/")
                ]
            assert cluster.open_watches == 1  # one informer, cluster-wide
    assert not [r for r in cluster.requests if r.resource == "pods" and r.namespace]


async def test_a_limited_user_is_served_from_its_namespaces(
    cluster: FakeCluster, tmp_path: Path
) -> None:
    cluster.restrict("jane-token", user="jane", namespaces=["default"])
    config = write_kubeconfig(
        tmp_path / "jane",
        {"jane": FakeContext(cluster=cluster, token="jane-token", namespace="default")},
    )
    async with running_proxy(config) as (_, client):
        with anyio.fail_after(30):
            status, doc = await client.get_json("jane", "/api/v1/namespaces/default/pods")
            assert status == 200 and names(doc) == ["default/web-1", "default/web-2"]
            served = cluster.request_count(("list", "get"), "pods", token="jane-token")
            status, doc = await client.get_json("jane", "/api/v1/namespaces/default/pods")
            assert status == 200 and names(doc) == ["default/web-1", "default/web-2"]
            assert cluster.request_count(("list", "get"), "pods", token="jane-token") == served
            status, doc = await client.get_json("jane", "/api/v1/pods")
            assert status == 403 and doc["reason"] == "Forbidden"  # the API server's own


async def test_read_your_writes(cluster: FakeCluster, kubeconfig: Path) -> None:
    settings = ProxySettings(read_your_writes_timeout=0.5)
    async with running_proxy(kubeconfig, settings=settings) as (server, client):
        proxy = server.app.state.proxy
        with anyio.fail_after(30):
            await client.get_json("prod", "/api/v1/configmaps")
            cm = {"metadata": {"name": "cfg"}, "data": {"a": "1"}}
            for step in range(5):
                cm["data"]["a"] = str(step)
                method = "POST" if step == 0 else "PUT"
                path = "/api/v1/namespaces/default/configmaps" + ("/cfg" if step else "")
                status, _, body = await client.request(
                    "PUT" if step else method, "prod", path, data=json.dumps(cm).encode()
                )
                assert status in (200, 201), body
                cm = json.loads(body)
                mark = proxy.cached.marks.get("prod", "", "configmaps")
                assert mark.resource_version == int(cm["metadata"]["resourceVersion"])
                status, doc = await client.get_json("prod", "/api/v1/namespaces/default/configmaps")
                assert [c["data"]["a"] for c in doc["items"]] == [str(step)]
            status, _, _ = await client.request(
                "DELETE", "prod", "/api/v1/namespaces/default/configmaps/cfg"
            )
            assert status == 200
            status, doc = await client.get_json("prod", "/api/v1/configmaps")
            assert doc["items"] == []
            assert cluster.request_count(("list", "get"), "configmaps") == 0  # a streaming list
            # a cache that does not reach the write in time: the read goes upstream
            proxy.cached.marks.record("prod", "", "configmaps", int(cluster.resource_version) + 9)
            status, doc = await client.get_json("prod", "/api/v1/configmaps")
            assert status == 200
            assert cluster.request_count(("list", "get"), "configmaps") == 1


async def test_freshness_is_in_a_header_and_in_status(
    cluster: FakeCluster, kubeconfig: Path
) -> None:
    async with running_proxy(kubeconfig) as (server, client):
        with anyio.fail_after(30):
            status, headers, _ = await client.request("GET", "prod", "/api/v1/pods")
            assert status == 200 and headers["X-Kubemux-Cache"] == "hit"
            assert 0.0 <= float(headers["X-Kubemux-Cache-Lag"]) < 30
            (served,) = server.app.state.proxy.status()
            assert (served.context, served.resource, served.view) == ("prod", "pods", "objects")
            assert served.resource_version == cluster.resource_version
            assert served.lag >= 0 and served.watches == 0
