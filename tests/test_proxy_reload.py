"""Issue 29, point 4: ``kubectl get -w`` through the proxy outlives a reload that keeps the
cluster (a rotated token), and ends on one that changes it. kubectl 1.27 and 1.33, each
compared with what it prints against the server."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import anyio
import anyio.from_thread
import anyio.to_thread
import pytest

from kubectl_support import kubectl_process, kubectl_version, kubectl_versions
from kubemux import WatcherRegistry
from kubemux.testing import FakeCluster, FakeContext, rewrite_kubeconfig, write_kubeconfig
from proxy_support import running_proxy
from support import TIMEOUT
from test_proxy_kubectl import five_hours_ago, old_pod
from test_proxy_kubectl_writes import no_age

VERSIONS = kubectl_versions("1.27", "1.33")


@pytest.fixture
async def clusters() -> tuple[FakeCluster, FakeCluster]:
    created = five_hours_ago()
    async with (
        FakeCluster(tokens={"tok-1", "tok-2", "direct"}, tls=True, name="one") as one,
        FakeCluster(tokens={"tok-other"}, tls=True, name="other") as other,
    ):
        for name in ("web-1", "web-2"):
            one.create("pods", old_pod(name, created=created))
        other.create("pods", old_pod("elsewhere", created=created))
        yield one, other


async def _header_and_rows(stream: asyncio.StreamReader, rows: int) -> list[str]:
    return [no_age(await stream.readline()) for _ in range(1 + rows)]


@pytest.mark.parametrize("version", VERSIONS)
async def test_kubectl_get_watch_outlives_a_token_rotation(
    clusters: tuple[FakeCluster, FakeCluster], tmp_path: Path, version: str
) -> None:
    one, _ = clusters
    kubectl = kubectl_version(version)
    assert kubectl is not None
    direct_config = write_kubeconfig(
        tmp_path / "direct" / "config", {"prod": FakeContext(cluster=one, token="direct")}
    )
    source = write_kubeconfig(
        tmp_path / "source" / "config", {"prod": FakeContext(cluster=one, token="tok-1")}
    )
    out = tmp_path / "proxied" / "config"
    async with (
        WatcherRegistry.from_kubeconfig(str(source), transform=None) as registry,
        running_proxy(registry) as (server, _),
    ):
        server.write_kubeconfig(out)
        proxy = server.app.state.proxy
        with anyio.fail_after(60):
            async with (
                kubectl_process(kubectl, direct_config, "get", "pods", "-w") as direct,
                kubectl_process(kubectl, out, "get", "pods", "-w") as proxied,
            ):
                assert direct.stdout is not None and proxied.stdout is not None
                streams = (direct.stdout, proxied.stdout)
                first = [await _header_and_rows(s, 2) for s in streams]
                await one.wait_for(
                    lambda: (
                        one.open_watches_for("direct") == 1
                        and sum(s.watches for s in proxy.status()) == 1
                    ),
                    timeout=20,
                )
                # what changes while the context reloads reaches no informer's watch: the
                # new generation's LIST finds it, and sends it as the watch would have
                one.stall()
                one.create("pods", old_pod("web-3", phase="Pending"))
                one.delete("pods", "default", "web-2")
                await rewrite_kubeconfig(
                    registry, source, {"prod": FakeContext(cluster=one, token="tok-2")}
                )
                one.unstall()
                during = [sorted([no_age(await s.readline()) for _ in range(2)]) for s in streams]
                await one.wait_for(
                    lambda: one.open_watches_for("tok-1") == 0 and one.open_watches_for("tok-2"),
                    timeout=20,
                )
                # and what changes afterwards comes from the new credential's watch
                one.create("pods", old_pod("web-4"))
                after = [no_age(await s.readline()) for s in streams]
                assert proxied.returncode is None  # kubectl never noticed
    assert first[0] == first[1]
    assert during[0] == during[1]
    assert [line.split()[0] for line in during[1]] == ["web-2", "web-3"]
    assert after[0] == after[1] and after[1].split()[0] == "web-4"


@pytest.mark.parametrize("version", VERSIONS)
async def test_kubectl_get_watch_ends_when_the_context_moves_to_another_cluster(
    clusters: tuple[FakeCluster, FakeCluster], tmp_path: Path, version: str
) -> None:
    one, other = clusters
    kubectl = kubectl_version(version)
    assert kubectl is not None
    source = write_kubeconfig(
        tmp_path / "source" / "config", {"prod": FakeContext(cluster=one, token="tok-1")}
    )
    out = tmp_path / "proxied" / "config"
    async with (
        WatcherRegistry.from_kubeconfig(str(source), transform=None) as registry,
        running_proxy(registry) as (server, _),
    ):
        server.write_kubeconfig(out)
        proxy = server.app.state.proxy
        with anyio.fail_after(60):
            async with kubectl_process(kubectl, out, "get", "pods", "-w") as proxied:
                assert proxied.stdout is not None
                await _header_and_rows(proxied.stdout, 2)
                await one.wait_for(lambda: sum(s.watches for s in proxy.status()) == 1, timeout=20)
                await rewrite_kubeconfig(
                    registry, source, {"prod": FakeContext(cluster=other, token="tok-other")}
                )
                rest = await proxied.stdout.read()  # the watch ends: kubectl exits
                assert await proxied.wait() == 0
    assert b"elsewhere" not in rest  # never the other cluster's objects on this watch


async def test_a_watch_resumes_across_a_token_rotation_from_the_history(
    clusters: tuple[FakeCluster, FakeCluster], tmp_path: Path
) -> None:
    """The event history goes with the store: a client that resumes its watch after the
    reload, from a resourceVersion it saw before, gets what it missed (no 410, no relist)."""
    one, _ = clusters
    source = write_kubeconfig(
        tmp_path / "source" / "config", {"prod": FakeContext(cluster=one, token="tok-1")}
    )
    async with (
        WatcherRegistry.from_kubeconfig(str(source), transform=None) as registry,
        running_proxy(registry) as (_, client),
        registry.subscribe("pods", ["prod"], snapshot=False) as changes,
    ):
        pods = "/api/v1/namespaces/default/pods"
        with anyio.fail_after(TIMEOUT):
            await registry.watch("prod", "pods")
            status, listed = await client.get_json("prod", pods)
            assert status == 200
            before = listed["metadata"]["resourceVersion"]
            one.create("pods", old_pod("web-3"))
            while (await changes.__anext__()).name != "web-3":  # the first list's go first
                pass
            await rewrite_kubeconfig(
                registry, source, {"prod": FakeContext(cluster=one, token="tok-2")}
            )
            await one.wait_for(lambda: one.open_watches_for("tok-2") == 1, timeout=TIMEOUT)
            one.create("pods", old_pod("web-4"))
            assert (await changes.__anext__()).name == "web-4"
            status, _, body = await client.request(
                "GET", "prod", f"{pods}?watch=1&resourceVersion={before}&timeoutSeconds=1"
            )
        assert status == 200
        events = [json.loads(line) for line in body.splitlines()]
        assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [
            ("ADDED", "web-3"),
            ("ADDED", "web-4"),
        ]


async def test_the_official_python_client_watch_outlives_a_token_rotation(
    clusters: tuple[FakeCluster, FakeCluster], tmp_path: Path
) -> None:
    kubernetes = pytest.importorskip("kubernetes")
    one, _ = clusters
    source = write_kubeconfig(
        tmp_path / "source" / "config", {"prod": FakeContext(cluster=one, token="tok-1")}
    )
    out = tmp_path / "proxied" / "config"

    async def rotate_then_create() -> None:
        await rewrite_kubeconfig(
            registry, source, {"prod": FakeContext(cluster=one, token="tok-2")}
        )
        await one.wait_for(lambda: one.open_watches_for("tok-2") == 1, timeout=TIMEOUT)
        one.create("pods", old_pod("web-3"))

    def use_client() -> list[tuple[str, str]]:
        api_client = kubernetes.config.new_client_from_config(config_file=str(out))
        try:
            core = kubernetes.client.CoreV1Api(api_client)
            seen: list[tuple[str, str]] = []
            stream = kubernetes.watch.Watch().stream(
                core.list_namespaced_pod, "default", timeout_seconds=20
            )
            for event in stream:
                seen.append((event["type"], event["object"].metadata.name))
                if len(seen) == 2:  # the initial ADDED events: now reload the context
                    anyio.from_thread.run(rotate_then_create)
                if len(seen) == 3:
                    break
            return seen
        finally:
            api_client.close()

    async with (
        WatcherRegistry.from_kubeconfig(str(source), transform=None) as registry,
        running_proxy(registry) as (server, _),
    ):
        server.write_kubeconfig(out)
        with anyio.fail_after(60):
            await registry.watch("prod", "pods")  # served from the cache from the start
            seen = await anyio.to_thread.run_sync(use_client)
    assert sorted(seen[:2]) == [("ADDED", "web-1"), ("ADDED", "web-2")]
    assert seen[2] == ("ADDED", "web-3")  # the same stream: it never ended
