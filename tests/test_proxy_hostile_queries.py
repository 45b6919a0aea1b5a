"""Queries and caps a client can play with (issue 28, points 2, 5 and 6), and the root health
paths kpt and cli-utils probe.

- 2: ``watch`` and ``follow`` are read once per request, as kube-apiserver reads them (the
  first value; false only for ``0`` and ``false``): every spelling the API server takes for
  a stream counts toward the stream cap and has no read timeout, and one it takes for a
  LIST is not counted as a watch;
- 5: the watch cap is per (credential, context): one context's watches never refuse
  another context's;
- 6: the discovery cache is keyed on what changes the answer (junk query parameters share
  one entry), and only a write that succeeded flushes it.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import anyio
import pytest

from hostile_upstream import HostileUpstream, go_bool
from kubemux.proxy import ProxySettings
from kubemux.testing import FakeCluster, FakeContext, write_kubeconfig
from proxy_support import (  # the fixtures cluster and kubeconfig
    ProxyClient,
    running_proxy,
    upstream_cluster,  # noqa: F401
    upstream_kubeconfig,  # noqa: F401
)
from support import TIMEOUT

LOG = "/api/v1/namespaces/default/pods/shell/log"


@contextlib.asynccontextmanager
async def opened(
    client: ProxyClient, context: str, path: str
) -> AsyncIterator[aiohttp.ClientResponse]:
    """A response whose body is read by the caller (or not at all)."""
    async with client.session.get(
        client.url(context, path), headers=client.auth, ssl=client.ssl
    ) as resp:
        yield resp


async def status_of(client: ProxyClient, context: str, path: str) -> int:
    """The status of a GET, without waiting for its body (a stream may be held open)."""
    async with opened(client, context, path) as resp:
        return resp.status


@contextlib.asynccontextmanager
async def hostile_proxy(
    tmp_path: Path, settings: ProxySettings
) -> AsyncIterator[tuple[HostileUpstream, ProxyClient]]:
    async with HostileUpstream() as up:
        kubeconfig = write_kubeconfig(tmp_path / "config", {"h": FakeContext(cluster=up.url)})
        async with running_proxy(kubeconfig, settings=settings) as (_, client):
            yield up, client


# ------------------------------------------------------------------ 2: one reading of the query
SPELLINGS = [
    f"{LOG}?follow=yes",
    f"{LOG}?follow=",
    f"{LOG}?follow=TRUE",
    f"{LOG}?follow=true&follow=false",
    f"{LOG}?follow=false&follow=true",
    f"{LOG}?follow=0",
    "/api/v1/pods?watch=yes&pretty=1",
    "/api/v1/pods?watch=&pretty=1",
    "/api/v1/pods?watch=1&watch=0&pretty=1",
]


@pytest.mark.parametrize("path", SPELLINGS)
async def test_every_spelling_of_a_stream_counts_toward_the_stream_cap(
    tmp_path: Path, path: str
) -> None:
    query = path.partition("?")[2]
    stream = go_bool(query, "follow") or go_bool(query, "watch")  # as kube-apiserver reads it
    async with hostile_proxy(tmp_path, ProxySettings(max_upstream_streams=1)) as (up, client):
        with anyio.fail_after(TIMEOUT):
            async with opened(client, "h", path) as first:
                assert first.status == 200
                if stream:
                    await up.wait_streams(1)  # held open upstream
                    # the one slot is taken: any other stream is refused
                    assert await status_of(client, "h", f"{LOG}?follow=true") == 429
                    up.release.set()
                await first.read()  # complete, whatever it was


async def test_a_list_spelled_with_a_later_watch_is_not_a_watch(tmp_path: Path) -> None:
    settings = ProxySettings(max_watches_per_credential=1)
    async with hostile_proxy(tmp_path, settings) as (up, client):
        with anyio.fail_after(TIMEOUT):
            async with opened(client, "h", "/api/v1/pods?watch=yes&pretty=1") as held:
                assert held.status == 200
                await up.wait_streams(1)
                # the credential's one watch is taken; a LIST (first value false) is no watch
                assert await status_of(client, "h", "/api/v1/pods?watch=0&watch=1&pretty=1") == 404
                assert await status_of(client, "h", "/api/v1/pods?watch=1&pretty=2") == 429
                up.release.set()
                await held.read()


@pytest.mark.parametrize("follow", ["yes", "", "true&follow=false"])
async def test_a_follow_stream_in_any_spelling_has_no_read_timeout(
    tmp_path: Path, follow: str
) -> None:
    async with hostile_proxy(tmp_path, ProxySettings(read_timeout=0.3)) as (up, client):
        with anyio.fail_after(TIMEOUT):
            async with opened(client, "h", f"{LOG}?follow={follow}") as resp:
                assert await resp.content.readline() == b"line 1\n"
                await anyio.sleep(1.0)  # quiet for longer than the read timeout: what is tested
                up.release.set()
                assert await resp.content.read() == b"line 2\n"  # complete, not cut


# ------------------------------------------------------------------ 5: caps per context
async def test_one_contexts_watches_never_refuse_anothers(
    cluster: FakeCluster, tmp_path: Path
) -> None:
    kubeconfig = write_kubeconfig(tmp_path / "two", {"prod": cluster, "stage": cluster})
    settings = ProxySettings(max_watches_per_credential=2)
    async with running_proxy(kubeconfig, settings=settings) as (_, client):
        with anyio.fail_after(TIMEOUT):
            for context in ("prod", "stage"):  # both informers synced
                assert (await client.get_json(context, "/api/v1/pods"))[0] == 200
            watch = "/api/v1/pods?watch=1&resourceVersion=0"
            async with contextlib.AsyncExitStack() as stack:
                for _ in range(2):
                    resp = await stack.enter_async_context(opened(client, "prod", watch))
                    assert resp.status == 200
                assert await status_of(client, "prod", watch) == 429  # prod's cap holds
                async with opened(client, "stage", watch) as other:
                    assert other.status == 200  # stage is not prod
                    assert (await other.content.readline()).startswith(b'{"type":"ADDED"')


# ------------------------------------------------------------------ 6: the discovery cache
def _discovery_requests(cluster: FakeCluster, path: str) -> int:
    return sum(1 for r in cluster.requests if r.path == path)


async def test_junk_query_parameters_share_one_discovery_entry(
    cluster: FakeCluster, kubeconfig: Path
) -> None:
    async with running_proxy(kubeconfig) as (server, client):
        with anyio.fail_after(TIMEOUT):
            first = await client.request("GET", "prod", "/api")
            assert first[0] == 200
            for i in range(40):
                again = await client.request("GET", "prod", f"/api?junk={i}&x{i}=1")
                assert again[0] == 200 and again[2] == first[2]
                assert again[1]["X-Kubemux-Cache"] == "hit"
            assert _discovery_requests(cluster, "/api") == 1
            # what does change the answer is its own entry: pretty-printing
            pretty = await client.request("GET", "prod", "/api?pretty=true")
            assert pretty[0] == 200
            again = await client.request("GET", "prod", "/api?pretty=1&junk=2")
            assert again[1]["X-Kubemux-Cache"] == "hit"
            assert _discovery_requests(cluster, "/api") == 2
            assert len(server.proxy.discovery) <= 2


async def test_junk_accept_headers_do_not_evict_the_real_entries(
    cluster: FakeCluster, kubeconfig: Path
) -> None:
    async with running_proxy(kubeconfig) as (server, client):
        with anyio.fail_after(TIMEOUT):
            assert (await client.request("GET", "prod", "/apis"))[0] == 200
            for i in range(40):
                status, _, _ = await client.request(
                    "GET", "prod", "/api", headers={"Accept": f"application/json;junk={i}"}
                )
                assert status == 200
            assert len(server.proxy.discovery) <= 10  # a bounded number of variants per path
            again = await client.request("GET", "prod", "/apis")
            assert again[1]["X-Kubemux-Cache"] == "hit"


CRD: dict[str, Any] = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "gadgets.example.com"},
    "spec": {
        "group": "example.com",
        "names": {"plural": "gadgets", "singular": "gadget", "kind": "Gadget"},
        "scope": "Namespaced",
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "schema": {"openAPIV3Schema": {"type": "object"}},
            }
        ],
    },
}


async def test_only_a_definition_write_that_succeeded_flushes_discovery(
    cluster: FakeCluster, kubeconfig: Path
) -> None:
    crds = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
    async with running_proxy(kubeconfig) as (_, client):
        with anyio.fail_after(TIMEOUT):
            assert (await client.request("GET", "prod", "/apis"))[1]["X-Kubemux-Cache"] == "miss"
            assert (await client.request("GET", "prod", "/apis"))[1]["X-Kubemux-Cache"] == "hit"
            cluster.fail_next(1, 403, reason="Forbidden", path_prefix=crds)
            body = json.dumps(CRD).encode()
            headers = {"Content-Type": "application/json"}
            status, _, _ = await client.request("POST", "prod", crds, data=body, headers=headers)
            assert status == 403
            # refused: nothing changed upstream, so nothing to ask again
            assert (await client.request("GET", "prod", "/apis"))[1]["X-Kubemux-Cache"] == "hit"
            status, _, _ = await client.request("POST", "prod", crds, data=body, headers=headers)
            assert status == 201
            assert (await client.request("GET", "prod", "/apis"))[1]["X-Kubemux-Cache"] == "miss"


# ------------------------------------------------------------------ the root health paths
HEALTH = ["/livez", "/readyz", "/healthz", "/livez/ping"]


@pytest.mark.parametrize("path", HEALTH)
async def test_the_root_health_paths_answer_with_the_token(kubeconfig: Path, path: str) -> None:
    async with running_proxy(kubeconfig) as (server, client):
        url = f"{server.url}{path}"
        with anyio.fail_after(TIMEOUT):
            async with client.session.get(url, headers=client.auth, ssl=client.ssl) as resp:
                assert resp.status == 200
                assert await resp.read() == b"ok"
                assert resp.headers["Content-Type"].startswith("text/plain")
            async with client.session.head(url, headers=client.auth, ssl=client.ssl) as resp:
                assert resp.status == 200
                assert await resp.read() == b""
            async with client.session.get(url, ssl=client.ssl) as resp:
                assert resp.status == 401  # the token, as for everything else
