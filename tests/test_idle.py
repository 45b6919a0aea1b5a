"""Idle reaping: a context nobody uses is stopped, and starts again when it is used."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest

from kubemux import WatcherRegistry
from kubemux.testing import FakeCluster, FakeContext, make_pod, write_kubeconfig
from support import TIMEOUT, wait_until


@pytest.fixture
async def cluster() -> AsyncIterator[FakeCluster]:
    async with FakeCluster() as fake:
        for i in range(3):
            fake.create("pods", make_pod(f"p-{i}"))
        yield fake


def idle(registry: WatcherRegistry, now: float) -> set[str]:
    return {e.key for e in registry._generations.idle(now)}


async def test_an_unused_context_is_stopped_and_starts_again(
    tmp_path: Path, cluster: FakeCluster
) -> None:
    path = write_kubeconfig(tmp_path / "config", {"c": cluster, "d": cluster})
    async with WatcherRegistry.from_kubeconfig(str(path), idle_timeout=0.5) as registry:
        async with registry.subscribe("pods", snapshot=False) as changes:
            with anyio.fail_after(TIMEOUT):
                first = await registry.watch("c", "pods")
                async for change in changes:  # nobody reads the store: it goes
                    if change.type == "REMOVED":
                        break
                await cluster.wait_for(lambda: cluster.open_watches == 0)
        assert change.context == "c" and registry.live_contexts == []
        assert registry.status().contexts["c"].state == "idle"
        assert len(first) == 0 and not first.has_synced  # a stopped context's store is empty
        with anyio.fail_after(TIMEOUT):
            again = await registry.watch("c", "pods")  # not ContextRemoved: it starts again
        assert again is not first and len(again) == 3
        assert registry.status().contexts["c"].generation == 2


async def test_reads_calls_and_named_subscriptions_count_as_use(
    tmp_path: Path, cluster: FakeCluster
) -> None:
    path = write_kubeconfig(tmp_path / "config", {"a": cluster, "b": cluster})
    async with WatcherRegistry.from_kubeconfig(str(path), idle_timeout=100) as registry:
        with anyio.fail_after(TIMEOUT):
            store_a = await registry.watch("a", "pods")
            await registry.watch("b", "pods")
        now = time.monotonic()
        assert idle(registry, now + 50) == set()
        assert idle(registry, now + 150) == {"a", "b"}
        store_a.get("default", "p-1")  # a read: "a" was in use when last looked at
        assert idle(registry, now + 150) == {"b"}
        assert idle(registry, now + 240) == {"b"}
        assert idle(registry, now + 260) == {"a", "b"}  # 110 s after that look
        async with registry.subscribe("pods", ["b"]):  # names "b": keeps it
            assert idle(registry, now + 1000) == {"a"}
        async with registry.subscribe("pods"):  # every context, names none: keeps nothing
            assert idle(registry, now + 2000) == {"a", "b"}
        entry = registry._generations.gens["a"]
        entry.last_used = 0.0
        assert registry.store("a", "pods") is store_a  # a registry call is a use
        assert entry.last_used >= now
        entry.last_used = 0.0
        with anyio.fail_after(TIMEOUT):
            assert await registry.watch("a", "pods") is store_a  # so is watch()
        assert entry.last_used >= now


async def test_autowatched_and_starting_contexts_are_never_idle(
    tmp_path: Path, cluster: FakeCluster
) -> None:
    path = write_kubeconfig(tmp_path / "config", {"auto": cluster})
    async with WatcherRegistry.from_kubeconfig(
        str(path), autowatch=["pods"], idle_timeout=100
    ) as registry:
        with anyio.fail_after(TIMEOUT):
            await registry.watch("auto", "pods")
        assert idle(registry, time.monotonic() + 10_000) == set()

    path = write_kubeconfig(tmp_path / "config2", {"lazy": cluster})
    async with (
        WatcherRegistry.from_kubeconfig(str(path), idle_timeout=100) as registry,
        anyio.create_task_group() as tg,
    ):
        with anyio.fail_after(TIMEOUT):
            await registry.watch("lazy", "pods")
            cluster.stall()  # the next LIST hangs: a store still syncing is in use
            tg.start_soon(registry.watch, "lazy", "configmaps")
            await cluster.wait_for(
                lambda: any(r.path.endswith("/configmaps") for r in cluster.requests)
            )
            assert idle(registry, time.monotonic() + 10_000) == set()
            cluster.unstall()


def test_idle_timeout_must_be_positive() -> None:
    with pytest.raises(ValueError, match="idle_timeout"):
        WatcherRegistry({}, idle_timeout=0)


async def test_a_reloaded_context_can_still_go_idle(tmp_path: Path, cluster: FakeCluster) -> None:
    path = write_kubeconfig(tmp_path / "config", {"c": cluster})
    async with WatcherRegistry.from_kubeconfig(str(path), idle_timeout=100) as registry:
        with anyio.fail_after(TIMEOUT):
            await registry.watch("c", "pods")
            before = registry.kubeconfig_syncs
            write_kubeconfig(path, {"c": FakeContext(cluster=cluster, namespace="other")})
            await registry.wait_kubeconfig_sync(before)  # a reload: a new generation
            assert await registry.watch("c", "pods") is not None  # handed over: at once
            await wait_until(lambda: registry._generations.gens["c"].is_running, registry=registry)
        assert registry.status().contexts["c"].generation == 2
        assert idle(registry, time.monotonic() + 1000) == {"c"}
