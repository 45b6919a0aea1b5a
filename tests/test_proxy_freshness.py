"""Reads through the proxy that never go back in time, consistent reads on request, Exact
LISTs from the cache's history, and the counters that show which (issue 29).

Real clients (kubectl 1.33 with WatchList and client-go's consistency detectors on, kubectl
1.32, the official Python client) through the proxy, beside the same client straight
against FakeCluster, whose watch delivery lags behind its writes
(:meth:`FakeCluster.delay_watches`).
"""

from __future__ import annotations

import json
import os
import shutil
import urllib.parse
from pathlib import Path
from typing import Any

import aiohttp
import anyio
import anyio.from_thread
import anyio.to_thread
import pytest

from kubectl_support import run_kubectl
from kubemux.proxy import ProxySettings
from kubemux.proxy._reads.freshness import Probes, read_version
from kubemux.testing import FakeCluster, FakeContext, make_pod, write_kubeconfig
from proxy_support import running_proxy

TOKEN = "fresh-token"
DETECTORS = {
    "KUBE_WATCHLIST_INCONSISTENCY_DETECTOR": "true",
    "KUBE_LIST_FROM_CACHE_INCONSISTENCY_DETECTOR": "true",
}


def kubectl_version(version: str) -> str | None:
    found = shutil.which("kubectl")
    if not found:
        return None
    path = os.path.join(os.path.dirname(os.path.realpath(found)), f"kubectl.{version}")
    return path if os.access(path, os.X_OK) else None


@pytest.fixture
async def cluster() -> Any:
    async with FakeCluster(tokens={TOKEN}, tls=True, name="fresh") as fake:
        fake.create("pods", make_pod("web-1", size=400))
        yield fake


def reads_of(server: Any, resource: str = "pods") -> Any:
    found = [r for r in server.app.state.proxy.statistics().reads if r.resource == resource]
    return found[0] if found else None


def names(doc: dict[str, Any]) -> list[str]:
    return sorted(i["metadata"]["name"] for i in doc["items"])


async def direct(cluster: FakeCluster, path: str) -> Any:
    async with aiohttp.ClientSession() as session:
        headers = {"Authorization": f"Bearer {TOKEN}"}
        ssl = cluster.client_ssl_context()
        async with session.get(cluster.server + path, headers=headers, ssl=ssl) as resp:
            assert resp.status == 200, await resp.text()
            return await resp.json()


# ------------------------------------------------------------------ monotonic reads
@pytest.mark.parametrize(
    ("version", "env"),
    [("1.33", {"KUBE_FEATURE_WatchListClient": "true", **DETECTORS}), ("1.32", DETECTORS)],
)
async def test_kubectl_wait_for_a_pod_the_watch_has_not_brought_yet(
    cluster: FakeCluster, tmp_path: Path, version: str, env: dict[str, str]
) -> None:
    """kubectl wait GETs the pod (the cache lacks it: upstream, found), then watches: the
    watch from the cache waits until the cache has the pod, as the server's would."""
    kubectl = kubectl_version(version)
    if kubectl is None:
        pytest.skip(f"kubectl {version} not installed")
    source = write_kubeconfig(tmp_path / "direct" / "config", {"prod": cluster})
    out = tmp_path / "proxied" / "config"
    async with running_proxy(source) as (server, client):
        server.write_kubeconfig(out)
        with anyio.fail_after(60):
            await client.get_json("prod", "/api/v1/pods")  # the informer runs
            cluster.delay_watches(2.0)  # the server's watch lags behind its writes (kubectl starts)
            cluster.create("pods", make_pod("late"))
            args = ("wait", "--for=condition=Ready", "pod/late", "--timeout=20s")
            proxied = await run_kubectl(kubectl, out, *args, env=env, run_timeout=40)
            straight = await run_kubectl(kubectl, source, *args, env=env, run_timeout=40)
    assert straight[:2] == (0, "pod/late condition met\n"), straight
    assert proxied[:2] == straight[:2], proxied
    reads = reads_of(server)
    assert reads.waited >= 1 and reads.floor >= 2  # the late pod's version
    assert reads.upstream_floor == 0  # the cache caught up within the wait


async def test_kubectl_wait_goes_upstream_when_the_cache_does_not_catch_up(
    cluster: FakeCluster, tmp_path: Path
) -> None:
    kubectl = kubectl_version("1.33")
    if kubectl is None:
        pytest.skip("kubectl 1.33 not installed")
    source = write_kubeconfig(tmp_path / "direct" / "config", {"prod": cluster})
    out = tmp_path / "proxied" / "config"
    env = {"KUBE_FEATURE_WatchListClient": "true", **DETECTORS}
    settings = ProxySettings(read_your_writes_timeout=0.2)
    async with running_proxy(source, settings=settings) as (server, client):
        server.write_kubeconfig(out)
        with anyio.fail_after(60):
            await client.get_json("prod", "/api/v1/pods")
            cluster.delay_watches(3.0)
            cluster.create("pods", make_pod("late"))
            args = ("wait", "--for=condition=Ready", "pod/late", "--timeout=20s")
            proxied = await run_kubectl(kubectl, out, *args, env=env, run_timeout=40)
    assert proxied[:2] == (0, "pod/late condition met\n"), proxied
    assert reads_of(server).upstream_floor >= 1


async def test_the_python_client_never_reads_older_than_it_was_shown(
    cluster: FakeCluster, tmp_path: Path
) -> None:
    kubernetes = pytest.importorskip("kubernetes")
    source = write_kubeconfig(tmp_path / "direct" / "config", {"prod": cluster})
    out = tmp_path / "proxied" / "config"

    def read(config: Path, create: bool) -> tuple[str, list[str]]:
        api_client = kubernetes.config.new_client_from_config(config_file=str(config))
        try:
            core = kubernetes.client.CoreV1Api(api_client)
            if create:  # once the client is ready: its start takes no time from the delay
                anyio.from_thread.run_sync(cluster.create, "pods", make_pod("late"))
            pod = core.read_namespaced_pod("late", "default")
            listed = core.list_namespaced_pod("default")
            return pod.metadata.name, sorted(p.metadata.name for p in listed.items)
        finally:
            api_client.close()

    settings = ProxySettings(read_your_writes_timeout=10.0)
    async with running_proxy(source, settings=settings) as (server, client):
        server.write_kubeconfig(out)
        with anyio.fail_after(60):
            await client.get_json("prod", "/api/v1/pods")
            cluster.delay_watches(1.5)
            proxied = await anyio.to_thread.run_sync(read, out, True)
            straight = await anyio.to_thread.run_sync(read, source, False)
    assert proxied == straight == ("late", ["late", "web-1"])
    reads = reads_of(server)
    assert reads.upstream_unsupported == 1  # the GET: not in the cache yet
    assert reads.waited == 1 and reads.from_cache >= 2  # the LIST waited for the pod


async def test_a_store_never_answers_below_what_it_showed(
    cluster: FakeCluster, tmp_path: Path
) -> None:
    """A relist that brings the cache back below what it showed sends reads upstream."""
    source = write_kubeconfig(tmp_path / "config", {"prod": cluster})
    settings = ProxySettings(read_your_writes_timeout=0.2)
    async with running_proxy(source, settings=settings) as (server, client):
        with anyio.fail_after(30):
            await client.get_json("prod", "/api/v1/pods")
            (served,) = list(server.app.state.proxy.cached.stores)
            assert served.shown == int(cluster.resource_version)
            cluster.clear_requests()
            served.shown += 5  # as after a relist against a server that lags behind
            status, doc = await client.get_json("prod", "/api/v1/pods")
            assert status == 200 and names(doc) == ["web-1"]
            assert cluster.request_count("list", "pods") == 1
            assert reads_of(server).upstream_floor == 1


# ------------------------------------------------------------------ consistent reads
async def test_consistent_reads_see_what_was_written_straight_to_the_server(
    cluster: FakeCluster, tmp_path: Path
) -> None:
    source = write_kubeconfig(tmp_path / "config", {"prod": cluster})
    path = "/api/v1/namespaces/default/configmaps"
    for consistent in (False, True):
        settings = ProxySettings(consistent_reads=consistent)
        async with running_proxy(source, settings=settings) as (server, client):
            with anyio.fail_after(30):
                await client.get_json("prod", path)
                cluster.delay_watches(0.25)  # longer than a read takes, even under load
                stale = 0
                for i in range(5):
                    name = f"cm-{consistent}-{i}"
                    cluster.create("configmaps", {"metadata": {"name": name}})
                    status, doc = await client.get_json("prod", path)
                    assert status == 200
                    stale += name not in names(doc)
                cluster.delay_watches(0)
        if consistent:
            assert stale == 0
            reads = reads_of(server, "configmaps")
            assert reads.probes >= 5 and reads.from_cache + reads.upstream_probe >= 5
        else:
            assert stale > 0  # as fresh as the watch only: the documented difference


async def test_concurrent_consistent_reads_share_their_probes(
    cluster: FakeCluster, tmp_path: Path
) -> None:
    source = write_kubeconfig(tmp_path / "config", {"prod": cluster})
    settings = ProxySettings(consistent_reads=True, consistent_wait_timeout=1.0)
    async with running_proxy(source, settings=settings) as (server, client):
        with anyio.fail_after(30):
            await client.get_json("prod", "/api/v1/pods")
            cluster.clear_requests()
            before = reads_of(server).probes
            statuses: list[int] = []

            async def one() -> None:
                status, _, _ = await client.request("GET", "prod", "/api/v1/pods")
                statuses.append(status)

            async with anyio.create_task_group() as tg:
                for _ in range(50):
                    tg.start_soon(one)
    assert statuses == [200] * 50
    probes = [r for r in cluster.requests if r.query.get("limit") == "1"]
    assert 1 <= len(probes) <= 3
    assert reads_of(server).probes - before == len(probes)


async def test_a_probe_joins_the_next_round_not_the_one_in_flight() -> None:
    sent: list[int] = []
    release = anyio.Event()

    async def probe(_key: Any) -> int:
        sent.append(len(sent) + 1)
        if len(sent) == 1:
            await release.wait()
        return len(sent) * 100

    probes = Probes(probe)
    got: dict[str, int | None] = {}

    async def ask(name: str) -> None:
        got[name] = await probes.current("k")

    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(ask, "first")
            await anyio.wait_all_tasks_blocked()
            for name in ("second", "third"):
                tg.start_soon(ask, name)
            await anyio.wait_all_tasks_blocked()
            assert sent == [1]  # the others wait for the next probe
            release.set()
    assert got == {"first": 100, "second": 200, "third": 200}
    assert probes.sent == 2


async def test_a_quiet_resource_goes_upstream_at_once(tmp_path: Path) -> None:
    async with FakeCluster(tokens={TOKEN}, tls=True, bookmark_period=60) as cluster:
        cluster.create("pods", make_pod("web-1"))
        source = write_kubeconfig(tmp_path / "config", {"prod": cluster})
        settings = ProxySettings(consistent_reads=True)
        async with running_proxy(source, settings=settings) as (server, client):
            with anyio.fail_after(30):
                await client.get_json("prod", "/api/v1/pods")
                cluster.create("configmaps", {"metadata": {"name": "elsewhere"}})
                await anyio.sleep(0.2)  # nothing happens to pods: quiet for longer than the wait
                started = anyio.current_time()
                status, doc = await client.get_json("prod", "/api/v1/pods")
                took = anyio.current_time() - started
    assert status == 200 and names(doc) == ["web-1"]
    assert took < 1.0
    assert reads_of(server).upstream_probe >= 1


# ------------------------------------------------------------------ Exact LISTs
async def test_exact_lists_of_a_passed_version_come_from_the_history(
    cluster: FakeCluster, tmp_path: Path
) -> None:
    source = write_kubeconfig(tmp_path / "config", {"prod": cluster})
    async with running_proxy(source) as (server, client):
        with anyio.fail_after(30):
            await client.get_json("prod", "/api/v1/pods")
            versions = [cluster.resource_version]
            for i in range(4):
                cluster.create("pods", make_pod(f"p-{i}"))
                versions.append(cluster.resource_version)
            pod = cluster.get("pods", "default", "p-0")
            assert pod is not None
            pod["metadata"]["labels"] = {"changed": "yes"}
            cluster.update("pods", pod)
            cluster.delete("pods", "default", "web-1")
            await client.get_json(
                "prod", f"/api/v1/pods?resourceVersion={cluster.resource_version}"
            )
            cluster.clear_requests()
            for rv in versions:
                for extra in ({}, {"limit": "2"}):
                    query = {"resourceVersion": rv, "resourceVersionMatch": "Exact", **extra}
                    path = "/api/v1/pods?" + urllib.parse.urlencode(query)
                    status, doc = await client.get_json("prod", path)
                    assert status == 200, doc
                    want = await direct(cluster, path)
                    assert doc["metadata"]["resourceVersion"] == rv
                    assert [i["metadata"] for i in doc["items"]] == [
                        i["metadata"] for i in want["items"]
                    ]
                    assert bool(doc["metadata"].get("continue")) == bool(
                        want["metadata"].get("continue")
                    )
            upstream = cluster.request_count("list", "pods")
    assert upstream == 2 * len(versions)  # the direct reads only
    assert reads_of(server).upstream_unsupported == 0


# ------------------------------------------------------------------ counters and hostile input
async def test_the_reads_counters_are_in_metrics(cluster: FakeCluster, tmp_path: Path) -> None:
    source = write_kubeconfig(tmp_path / "config", {"prod": cluster})
    async with running_proxy(source) as (server, client):
        with anyio.fail_after(30):
            await client.get_json("prod", "/api/v1/pods")
            await client.get_json("prod", "/api/v1/namespaces/default/pods/web-1")
            assert server.url is not None
            async with client.session.get(
                server.url + "/metrics", headers=client.auth, ssl=client.ssl
            ) as resp:
                text = await resp.text()
            async with client.session.get(server.url + "/metrics", ssl=client.ssl) as resp:
                refused = resp.status
    assert refused == 401
    assert 'kubemux_proxy_reads_from_cache_total{context="prod",resource="pods"} 2.0' in text
    assert (
        'kubemux_proxy_reads_upstream_total{context="prod",reason="floor",resource="pods"} 0.0'
        in text
    )
    assert "kubemux_objects{" in text  # the registry's own beside them


@pytest.mark.parametrize(
    ("body", "complete", "expected"),
    [
        (b'{"metadata":{"resourceVersion":"42"}}', True, 42),
        (
            b'{"kind":"PodList","apiVersion":"v1","metadata":{"resourceVersion":"77"},"items":[',
            False,
            77,
        ),
        (b'{"metadata":{"resourceVersion":"-3"}}', True, None),
        (b'{"metadata":{"resourceVersion":"abc"}}', True, None),
        (b'{"metadata":{"resourceVersion":7}}', True, None),
        (b'{"metadata":"x"}', True, None),
        (b"[" * 100_000, True, None),
        (b"\x6b\x38\x73\x00protobuf", True, None),
        (b'{"items":[{"metadata":{"resourceVersion":"99"}}', False, None),
        (
            b'{"kind":"PodList","apiVersion":"v1","metadata":{"resourceVersion":"' + b"9" * 40,
            False,
            None,
        ),
    ],
)
def test_a_broken_or_hostile_answer_raises_no_floor(
    body: bytes, complete: bool, expected: int | None
) -> None:
    assert read_version(body, complete) == expected


async def test_a_floor_is_forgotten_after_its_time(cluster: FakeCluster, tmp_path: Path) -> None:
    """A hostile version far ahead (a server that lies) costs reads a bounded wait, for a
    bounded time: the floor goes after its ttl."""
    source = write_kubeconfig(tmp_path / "config", {"prod": cluster})
    settings = ProxySettings(read_your_writes_timeout=0.1)
    async with running_proxy(source, settings=settings) as (server, client):
        cached = server.app.state.proxy.cached
        with anyio.fail_after(30):
            await client.get_json("prod", "/api/v1/pods")
            cached.marks.ttl = 0.0
            cached.marks.record("prod", "", "pods", None, listed=10**18)
            cluster.clear_requests()
            status, _ = await client.get_json("prod", "/api/v1/pods")
            assert status == 200
            assert cluster.request_count("list", "pods") == 0
    assert reads_of(server).floor == 0


async def test_the_consistency_detectors_exact_lists_come_from_the_history(
    cluster: FakeCluster, tmp_path: Path
) -> None:
    """kubectl 1.33's WatchList reflector checks its store with an Exact LIST at the
    version it synced to; pods keep changing meanwhile, so the cache has passed it."""
    kubectl = kubectl_version("1.33")
    if kubectl is None:
        pytest.skip("kubectl 1.33 not installed")
    source = write_kubeconfig(tmp_path / "direct" / "config", {"prod": cluster})
    out = tmp_path / "proxied" / "config"
    env = {"KUBE_FEATURE_WatchListClient": "true", **DETECTORS}
    stop = anyio.Event()

    async def churn() -> None:
        i = 0
        while not stop.is_set():
            cluster.create("pods", make_pod(f"churn-{i}", "churn"))
            i += 1
            await anyio.sleep(0.005)

    async with running_proxy(source) as (server, client):
        server.write_kubeconfig(out)
        with anyio.fail_after(60):
            await client.get_json("prod", "/api/v1/pods")
            cluster.clear_requests()
            async with anyio.create_task_group() as tg:
                tg.start_soon(churn)
                args = ("wait", "--for=condition=Ready", "pod/web-1", "--timeout=20s")
                proxied = await run_kubectl(kubectl, out, *args, env=env, run_timeout=40)
                stop.set()
    assert proxied[:2] == (0, "pod/web-1 condition met\n"), proxied
    exact = [r for r in cluster.requests if r.query.get("resourceVersionMatch") == "Exact"]
    assert exact == []  # answered by the proxy, from its history
    assert reads_of(server).upstream_unsupported == 0


@pytest.mark.parametrize("version", ["1.33", "1.27"])
async def test_kubectl_get_with_consistent_reads_shows_a_write_made_around_the_proxy(
    cluster: FakeCluster, tmp_path: Path, version: str
) -> None:
    kubectl = kubectl_version(version)
    if kubectl is None:
        pytest.skip(f"kubectl {version} not installed")
    source = write_kubeconfig(tmp_path / "direct" / "config", {"prod": cluster})
    out = tmp_path / "proxied" / "config"
    settings = ProxySettings(consistent_reads=True, consistent_wait_timeout=1.0)
    async with running_proxy(source, settings=settings) as (server, client):
        server.write_kubeconfig(out)
        with anyio.fail_after(60):
            await client.get_json("prod", "/api/v1/pods")
            cluster.delay_watches(0.3)
            cluster.create("pods", make_pod("around"))
            args = ("get", "pods", "-o", "name")
            proxied = await run_kubectl(kubectl, out, *args, run_timeout=30)
            straight = await run_kubectl(kubectl, source, *args, run_timeout=30)
    assert straight[:2] == (0, "pod/around\npod/web-1\n"), straight
    assert proxied[:2] == straight[:2], proxied
    reads = reads_of(server)
    assert reads.probes >= 2 and reads.waited >= 1


async def test_pages_and_resumed_watches_do_not_wait_for_a_floor(
    cluster: FakeCluster, tmp_path: Path
) -> None:
    """A continue token reads what its first page pinned (upstream could not read the
    proxy's token), and a watch resumed from N sends what followed N: neither waits."""
    cluster.create("pods", make_pod("web-2"))
    source = write_kubeconfig(tmp_path / "config", {"prod": cluster})
    settings = ProxySettings(read_your_writes_timeout=5.0)
    async with running_proxy(source, settings=settings) as (_, client):
        with anyio.fail_after(30):
            status, first = await client.get_json("prod", "/api/v1/pods?limit=1")
            assert status == 200 and first["metadata"]["continue"]
            rv = first["metadata"]["resourceVersion"]
            cluster.delay_watches(10.0)
            body = json.dumps({"metadata": {"name": "late"}, "spec": {"containers": []}})
            status, _, _ = await client.request(
                "POST", "prod", "/api/v1/namespaces/default/pods", data=body.encode()
            )
            assert status == 201  # the floor is now past the cache, for 10 s
            started = anyio.current_time()
            token = urllib.parse.quote(first["metadata"]["continue"])
            status, second = await client.get_json("prod", f"/api/v1/pods?limit=1&continue={token}")
            assert status == 200 and second["metadata"]["resourceVersion"] == rv
            status, headers, _ = await client.request(
                "GET", "prod", f"/api/v1/pods?watch=true&resourceVersion={rv}&timeoutSeconds=1"
            )
            assert status == 200 and headers.get("X-Kubemux-Cache") == "hit"
            assert anyio.current_time() - started < 3.0
            cluster.delay_watches(0)
    assert [i["metadata"]["name"] for i in first["items"] + second["items"]] == ["web-1", "web-2"]


async def test_a_limited_users_namespaces_wait_only_for_their_own_floors(
    tmp_path: Path,
) -> None:
    """A limited user's stores watch one namespace each: a version shown in one is never
    brought by another's watch (bookmarks aside: once a minute), so only that namespace's
    reads wait for it."""
    async with FakeCluster(tokens={TOKEN}, tls=True, bookmark_period=60) as cluster:
        cluster.create("pods", make_pod("web-1"))
        await _limited_user_reads(cluster, tmp_path)


async def _limited_user_reads(cluster: FakeCluster, tmp_path: Path) -> None:
    cluster.restrict("jane-token", user="jane", namespaces=["default", "data"])
    config = write_kubeconfig(
        tmp_path / "jane",
        {"jane": FakeContext(cluster=cluster, token="jane-token", namespace="default")},
    )
    settings = ProxySettings(read_your_writes_timeout=1.5)
    mine = "/api/v1/namespaces/default/pods"
    async with running_proxy(config, settings=settings) as (server, client):
        with anyio.fail_after(30):
            while True:  # until the namespace's store serves
                status, headers, _ = await client.request("GET", "jane", mine)
                assert status == 200
                if headers.get("X-Kubemux-Cache") == "hit":
                    break
                await anyio.sleep(0.05)
            cluster.delay_watches(10.0)
            cluster.create("pods", make_pod("late", "data"))
            status, _ = await client.get_json("jane", "/api/v1/namespaces/data/pods/late")
            assert status == 200  # upstream: data is not cached for jane
            started = anyio.current_time()
            status, headers, _ = await client.request("GET", "jane", mine)
            assert status == 200 and headers.get("X-Kubemux-Cache") == "hit"
            assert anyio.current_time() - started < 1.0  # no wait for data's pod
            cluster.create("pods", make_pod("late"))
            status, _ = await client.get_json("jane", "/api/v1/namespaces/default/pods/late")
            assert status == 200
            status, doc = await client.get_json("jane", mine)
            assert status == 200 and names(doc) == ["late", "web-1"]  # waited, then upstream
            cluster.delay_watches(0)
    assert reads_of(server).upstream_floor == 1


async def test_a_failed_probe_sends_the_read_upstream(cluster: FakeCluster, tmp_path: Path) -> None:
    source = write_kubeconfig(tmp_path / "config", {"prod": cluster})
    settings = ProxySettings(consistent_reads=True, consistent_wait_timeout=1.0)
    async with running_proxy(source, settings=settings) as (server, client):
        with anyio.fail_after(30):
            await client.get_json("prod", "/api/v1/pods")
            before = reads_of(server)
            cluster.fail_next(1, 500, query_has=("limit",))  # the probe, not the read
            status, doc = await client.get_json("prod", "/api/v1/pods")
    assert status == 200 and names(doc) == ["web-1"]
    after = reads_of(server)
    assert after.upstream_probe == before.upstream_probe + 1
    assert after.probes == before.probes + 1
