"""The informer against FakeCluster faults: after each, the store equals the server's truth."""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import orjson
import pytest

from kubemux import Backoff, WatcherRegistry, WatchSettings
from kubemux.testing import FakeCluster, make_pod, write_kubeconfig
from support import TIMEOUT, wait_until

FAST = WatchSettings(
    backoff=Backoff(initial_delay=0.02, max_delay=0.1),
    inactivity_timeout=0.5,
    page_size=3,
    min_healthy_watch=0.0,
    streaming_list=False,
)
STREAMING = dataclasses.replace(FAST, streaming_list=True)
_sentinels = itertools.count()


@pytest.fixture
def cluster(fake_cluster: FakeCluster) -> FakeCluster:
    return fake_cluster


@contextlib.asynccontextmanager
async def watching(tmp_path: Path, cluster: FakeCluster) -> AsyncIterator[WatcherRegistry]:
    """A registry watching pods in context "c". (Not a fixture: pytest-asyncio may finish a
    fixture in another task, and a registry's task group must exit where it was entered.)"""
    path = write_kubeconfig(tmp_path / "config", {"c": cluster})
    async with WatcherRegistry.from_kubeconfig(str(path), settings=FAST) as reg:
        with anyio.fail_after(TIMEOUT):
            await reg.watch("c", "pods")
        yield reg


def truth(cluster: FakeCluster) -> dict[tuple[str, str], str]:
    return {
        (o["metadata"]["namespace"], o["metadata"]["name"]): o["metadata"]["resourceVersion"]
        for o in cluster.objects("pods")
    }


def cached(registry: WatcherRegistry) -> dict[tuple[str, str], str]:
    store = registry.store("c", "pods")
    assert store is not None
    return {(e.namespace, e.name): e.resource_version for e in store._entries(None)}


async def converge(registry: WatcherRegistry, cluster: FakeCluster) -> None:
    """Create a sentinel and wait until the informer delivers it; then compare with truth."""
    name = f"sentinel-{next(_sentinels)}"
    async with registry.subscribe("pods", ["c"], snapshot=False) as changes:
        cluster.create("pods", make_pod(name))
        with anyio.fail_after(TIMEOUT):
            async for change in changes:
                if change.name == name:
                    break
    assert cached(registry) == truth(cluster)


def watches(cluster: FakeCluster) -> int:
    return sum(1 for r in cluster.requests if r.is_watch)


def lists(cluster: FakeCluster) -> int:
    return sum(1 for r in cluster.requests if not r.is_watch and r.path.endswith("/pods"))


async def test_initial_list_is_paginated(tmp_path: Path, cluster: FakeCluster) -> None:
    async with watching(tmp_path, cluster) as registry:
        assert lists(cluster) == 4  # 10 objects, pages of 3
        assert cached(registry) == truth(cluster)
        store = registry.store("c", "pods")
        assert store is not None and store.get("default", "p-1")["kind"] == "Pod"  # type: ignore[index]


async def test_mid_stream_drop_rewatches_without_relist(
    tmp_path: Path, cluster: FakeCluster
) -> None:
    async with watching(tmp_path, cluster) as registry:
        before = lists(cluster)
        with anyio.fail_after(TIMEOUT):
            await cluster.wait_for(lambda: cluster.open_watches == 1)
        assert cluster.drop_watches() == 1
        cluster.delete("pods", "default", "p-1")
        cluster.update("pods", {**cluster.get("pods", "other", "p-0"), "spec": {"x": 1}})  # type: ignore[dict-item]
        await converge(registry, cluster)
        assert lists(cluster) == before  # resumed from the last resourceVersion
        watch_rvs = [r.query.get("resourceVersion") for r in cluster.requests if r.is_watch]
        assert all(watch_rvs)  # every watch resumed from a resourceVersion


async def test_objects_deleted_while_server_down_come_back_as_deleted(
    tmp_path: Path, cluster: FakeCluster
) -> None:
    async with watching(tmp_path, cluster) as registry:
        await cluster.stop()
        async with registry.subscribe("pods", ["c"], snapshot=False) as changes:
            # while it is down: history is compacted, so the informer must relist
            cluster.delete("pods", "default", "p-3")
            cluster.delete("pods", "other", "p-4")
            cluster.compact()
            await cluster.start()  # same port
            seen = set()
            with anyio.fail_after(TIMEOUT):
                async for change in changes:
                    if change.type == "DELETED":
                        seen.add(change.name)
                    if seen == {"p-3", "p-4"}:
                        break
        await converge(registry, cluster)
        st = registry.status().contexts["c"].informers[0]
        assert st.relists >= 1


async def test_in_stream_410_relists(tmp_path: Path, cluster: FakeCluster) -> None:
    async with watching(tmp_path, cluster) as registry:
        before = lists(cluster)
        with anyio.fail_after(TIMEOUT):
            await cluster.wait_for(lambda: cluster.open_watches == 1)
        cluster.delete("pods", "default", "p-5")
        cluster.compact()  # open watches get an in-stream 410
        await converge(registry, cluster)
        assert lists(cluster) > before


async def test_http_410_relists(tmp_path: Path) -> None:
    async with FakeCluster(expired_as_http=True) as c:
        for i in range(4):
            c.create("pods", make_pod(f"p-{i}"))
        path = write_kubeconfig(tmp_path / "config", {"c": c})
        async with WatcherRegistry.from_kubeconfig(str(path), settings=FAST) as reg:
            with anyio.fail_after(TIMEOUT):
                await reg.watch("c", "pods")
                await c.wait_for(lambda: c.open_watches == 1)
            c.drop_watches()
            c.delete("pods", "default", "p-2")
            c.compact()  # the resume point is gone: HTTP 410 on the next watch
            await converge(reg, c)
            assert reg.store("c", "pods") is not None
            assert ("default", "p-2") not in cached(reg)


async def test_burst_of_5xx_backs_off_and_recovers(tmp_path: Path, cluster: FakeCluster) -> None:
    async with watching(tmp_path, cluster) as registry:
        with anyio.fail_after(TIMEOUT):
            await cluster.wait_for(lambda: cluster.open_watches == 1)
        before = watches(cluster)
        cluster.fail_next(5, status=503, reason="ServiceUnavailable")
        cluster.drop_watches()
        await converge(registry, cluster)
        # five failed attempts plus the one that worked, nothing more: no spinning
        assert watches(cluster) - before <= 7
        st = registry.status().contexts["c"].informers[0]
        assert st.errors_by_type.get("ApiError", 0) >= 1  # recorded while it held,
        assert st.last_error is None  # and not shown as current once it no longer does


async def test_stalled_stream_reconnects_on_inactivity(
    tmp_path: Path, cluster: FakeCluster
) -> None:
    async with watching(tmp_path, cluster) as registry:
        with anyio.fail_after(TIMEOUT):
            await cluster.wait_for(lambda: cluster.open_watches == 1)
        before = watches(cluster)
        cluster.stall()
        with anyio.fail_after(TIMEOUT):  # the informer gives up on the silent stream and retries
            await cluster.wait_for(lambda: watches(cluster) > before)
        cluster.unstall()
        await converge(registry, cluster)
        st = registry.status().contexts["c"].informers[0]
        assert sum(st.errors_by_type.values()) >= 1  # the dead stream was a failure,
        assert st.last_error is None  # which no longer holds once the watch is back


async def test_two_mib_object(tmp_path: Path, cluster: FakeCluster) -> None:
    async with watching(tmp_path, cluster) as registry:
        big = make_pod("big", size=2 * 1024 * 1024)
        cluster.create("pods", big)
        await converge(registry, cluster)
        store = registry.store("c", "pods")
        assert store is not None
        obj = store.get("default", "big")
        assert obj is not None and len(store.get_raw("default", "big") or b"") > 2_000_000


async def test_expired_continue_token_falls_back_to_full_list(
    tmp_path: Path, cluster: FakeCluster
) -> None:
    path = write_kubeconfig(tmp_path / "config", {"c": cluster})
    cluster.fail_next(1, status=410, reason="Expired", query_has=("continue",))
    async with WatcherRegistry.from_kubeconfig(str(path), settings=FAST) as reg:
        with anyio.fail_after(TIMEOUT):
            # the first page is fine, the continuation expires: one full list instead
            store = await reg.watch("c", "pods")
        assert len(store) == 10
        assert cached(reg) == truth(cluster)
        pages = [r.query for r in cluster.requests if not r.is_watch]
        assert pages[1].get("continue") and "limit" not in pages[2]


async def test_malformed_lines_and_unknown_types_are_skipped(
    tmp_path: Path, cluster: FakeCluster
) -> None:
    async with watching(tmp_path, cluster) as registry:
        with anyio.fail_after(TIMEOUT):
            await cluster.wait_for(lambda: cluster.open_watches == 1)
        assert cluster.inject_watch_line("pods", b'{"type":"ADDED","object":{"metadata":') == 1
        cluster.inject_watch_line("pods", b"not json at all")
        cluster.inject_watch_line("pods", b'{"type":"SURPRISE","object":{}}')
        cluster.inject_watch_line(
            "pods", b'{"type":"ADDED","object":{"metadata":{"name":"x"}},"extra":1}'
        )
        cluster.delete("pods", "default", "p-1")
        await converge(registry, cluster)
        st = registry.status().contexts["c"].informers[0]
        assert st.skipped_lines == 4
        assert st.state == "watching"


async def test_unusual_envelope_is_decoded_properly(tmp_path: Path, cluster: FakeCluster) -> None:
    async with watching(tmp_path, cluster) as registry:
        with anyio.fail_after(TIMEOUT):
            await cluster.wait_for(lambda: cluster.open_watches == 1)
        odd = (
            b'{"object": {"metadata": {"name": "odd", "namespace": "default", '
            b'"resourceVersion": "999"}}, "type": "ADDED"}'
        )
        cluster.inject_watch_line("pods", odd)
        extra = (
            b'{"type":"ADDED","object":{"metadata":{"name":"extra","namespace":"default",'
            b'"resourceVersion":"998"}},"note":{"x":1}}'
        )
        cluster.inject_watch_line("pods", extra)
        async with registry.subscribe("pods", ["c"], snapshot=False) as changes:
            cluster.create("pods", make_pod("after"))
            names = []
            with anyio.fail_after(TIMEOUT):
                async for change in changes:
                    names.append(change.name)
                    if change.name == "after":
                        break
        store = registry.store("c", "pods")
        assert store is not None
        assert store.get("default", "odd") is not None
        assert store.get("default", "extra") is not None
        assert registry.status().contexts["c"].informers[0].skipped_lines == 0


async def test_opaque_resource_versions_reach_subscribers_and_the_next_watch_verbatim(
    tmp_path: Path, cluster: FakeCluster
) -> None:
    """The cache keeps etcd's decimal resourceVersions as ints: others ("abc", "007") must
    come back exactly as sent, in the objects, the store and the resumed WATCH."""
    async with watching(tmp_path, cluster) as registry:
        with anyio.fail_after(TIMEOUT):
            await cluster.wait_for(lambda: cluster.open_watches == 1)
        store = registry.store("c", "pods")
        assert store is not None
        async with registry.subscribe("pods", ["c"], snapshot=False) as changes:
            for name, rv in (("abc", "abc"), ("zeros", "007"), ("plain", "8")):
                obj = make_pod(name, size=600)
                obj["metadata"]["resourceVersion"] = rv
                cluster.inject_watch_line("pods", orjson.dumps({"type": "ADDED", "object": obj}))
            seen = {}
            with anyio.fail_after(TIMEOUT):
                async for change in changes:
                    assert change.object is not None
                    seen[change.name] = change.object["metadata"]["resourceVersion"]
                    if change.name == "plain":
                        break
            assert seen == {"abc": "abc", "zeros": "007", "plain": "8"}
            assert store.get("default", "zeros")["metadata"]["resourceVersion"] == "007"  # type: ignore[index]
            assert cached(registry)[("default", "abc")] == "abc"
            # the last event's resourceVersion is where the next WATCH starts: "007", not "7"
            obj = make_pod("zeros", size=600)
            obj["metadata"]["resourceVersion"] = "007"
            cluster.inject_watch_line("pods", orjson.dumps({"type": "MODIFIED", "object": obj}))
            with anyio.fail_after(TIMEOUT):
                async for change in changes:
                    if change.name == "zeros":
                        break
            assert store.resource_version == "007"
            cluster.clear_requests()
            assert cluster.drop_watches() == 1
            with anyio.fail_after(TIMEOUT):
                await cluster.wait_for(lambda: any(r.is_watch for r in cluster.requests))
            resumed = next(r for r in cluster.requests if r.is_watch)
            assert resumed.query.get("resourceVersion") == "007"


@pytest.mark.parametrize("mode", [True, False, "ignore"])
async def test_streaming_list_or_fallback(tmp_path: Path, mode: bool | str) -> None:
    async with FakeCluster(streaming_list=mode, bookmark_period=0.2) as c:  # type: ignore[arg-type]
        for i in range(7):
            c.create("pods", make_pod(f"p-{i}"))
        path = write_kubeconfig(tmp_path / "config", {"c": c})
        async with WatcherRegistry.from_kubeconfig(str(path), settings=STREAMING) as reg:
            with anyio.fail_after(TIMEOUT):
                store = await reg.watch("c", "pods")
                await reg.watch("c", "pods", "default")  # a second informer, same client
            assert len(store) == 7
            await converge(reg, c)
            streamed = [r for r in c.requests if r.query.get("sendInitialEvents") == "true"]
            if mode is True:
                assert lists(c) == 0 and len(streamed) == 2
            else:  # refused (422) or ignored: tried once per client, then LIST
                assert len(streamed) == 1 and lists(c) == 2 * 3  # pages of 3


async def test_429_is_retried_with_backoff(tmp_path: Path, cluster: FakeCluster) -> None:
    async with watching(tmp_path, cluster) as registry:
        with anyio.fail_after(TIMEOUT):
            await cluster.wait_for(lambda: cluster.open_watches == 1)
        before = watches(cluster)
        cluster.fail_next(3, status=429, reason="TooManyRequests", watch=True)
        cluster.drop_watches()
        await converge(registry, cluster)
        assert watches(cluster) - before == 4  # three refused, then one that worked


async def test_a_failing_server_is_not_hammered(tmp_path: Path, cluster: FakeCluster) -> None:
    slow = dataclasses.replace(
        FAST, backoff=Backoff(initial_delay=0.05, max_delay=0.2, jitter=False)
    )
    path = write_kubeconfig(tmp_path / "config", {"c": cluster})
    async with WatcherRegistry.from_kubeconfig(str(path), settings=slow) as registry:
        with anyio.fail_after(TIMEOUT):
            await registry.watch("c", "pods")
            await cluster.wait_for(lambda: cluster.open_watches == 1)
        before = watches(cluster)
        start = time.monotonic()
        cluster.fail_next(10_000, status=500, watch=True)
        cluster.drop_watches()
        with anyio.fail_after(TIMEOUT):  # it does retry
            await cluster.wait_for(lambda: watches(cluster) - before >= 2)
        await anyio.sleep(1.0)  # time passing is what is measured here, not a synchronisation
        attempts = watches(cluster) - before
        elapsed = time.monotonic() - start  # a loaded machine may sleep longer: count it
        # delays 0.05, 0.1, 0.2, 0.2, ...: the attempts that fit in ``elapsed`` at most
        fit, spent, delay = 1, 0.05, 0.05
        while spent <= elapsed:
            fit += 1
            delay = min(delay * 2, 0.2)
            spent += delay
        assert attempts <= fit, f"{attempts} attempts in {elapsed:.2f}s (at most {fit})"
        st = registry.status().contexts["c"]
        assert st.state == "backing off"
        assert registry.store("c", "pods") is not None  # the cache is kept meanwhile


async def test_watches_that_end_at_once_count_as_failures(tmp_path: Path) -> None:
    async with FakeCluster(bookmark_period=3600) as c:
        c.create("pods", make_pod("p"))
        quick = dataclasses.replace(
            FAST,
            watch_timeout_range=(1.0, 1.0),
            min_healthy_watch=5.0,
            inactivity_timeout=30.0,
        )
        path = write_kubeconfig(tmp_path / "config", {"c": c})
        async with WatcherRegistry.from_kubeconfig(str(path), settings=quick) as reg:
            with anyio.fail_after(TIMEOUT):
                await reg.watch("c", "pods")
                # the server ends each watch after 1 s having sent nothing: a failure each time
                await c.wait_for(lambda: watches(c) >= 2, timeout=TIMEOUT)
            st = reg.status().contexts["c"].informers[0]
            assert st.last_error is not None and "closed at once" in st.last_error


async def test_skipped_lines_do_not_log_object_data(
    tmp_path: Path, cluster: FakeCluster, caplog: pytest.LogCaptureFixture
) -> None:
    async with watching(tmp_path, cluster) as registry:
        with anyio.fail_after(TIMEOUT):
            await cluster.wait_for(lambda: cluster.open_watches == 1)
        secret = b"c3VwZXItc2VjcmV0LXBhc3N3b3Jk"
        cluster.inject_watch_line(
            "pods", b'{"type":"ADDED","object":{"kind":"Secret","data":{"password":"' + secret
        )
        await converge(registry, cluster)
        assert registry.status().contexts["c"].informers[0].skipped_lines == 1
    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert "malformed watch line" in logged
    assert secret.decode() not in logged


@pytest.mark.parametrize("settings", [FAST, STREAMING], ids=["list", "streaming-list"])
async def test_transforms_apply_to_lists_and_watch_events(
    tmp_path: Path, cluster: FakeCluster, settings: WatchSettings
) -> None:
    def strip_status(obj: dict[str, Any]) -> dict[str, Any]:
        obj.pop("status", None)
        obj["metadata"].pop("managedFields", None)
        return obj

    cluster.create("configmaps", {"metadata": {"name": "cm", "managedFields": [{"manager": "k"}]}})
    path = write_kubeconfig(tmp_path / "config", {"c": cluster})
    async with WatcherRegistry.from_kubeconfig(
        str(path), settings=settings, transform=None, transforms={"pods": strip_status}
    ) as registry:
        with anyio.fail_after(TIMEOUT):
            pods = await registry.watch("c", "pods")
            maps = await registry.watch("c", "configmaps")
        async with registry.subscribe("pods", ["c"], snapshot=False) as changes:
            cluster.create("pods", make_pod("late"))
            with anyio.fail_after(TIMEOUT):
                change = await changes.__anext__()
        assert change.name == "late" and "status" not in change.object
        assert len(pods) == 11
        assert all("status" not in o and "managedFields" not in o["metadata"] for o in pods.list())
        assert all(o["spec"]["containers"] for o in pods.list())  # the rest is intact
        cm = maps.get("default", "cm")
        assert cm is not None and cm["metadata"]["managedFields"] == [{"manager": "k"}]


def _widget(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "example.com/v1",
        "kind": "Widget",
        "metadata": {"name": name, "namespace": "default"},
    }


async def test_a_deleted_crd_is_reported_and_its_return_resumes_the_informer(
    tmp_path: Path, cluster: FakeCluster
) -> None:
    cluster.add_crd("example.com", "widgets", "Widget")
    cluster.create("widgets.example.com", _widget("w-1"))
    settings = dataclasses.replace(FAST, gone_retry=0.3)
    path = write_kubeconfig(tmp_path / "config", {"c": cluster})
    async with WatcherRegistry.from_kubeconfig(str(path), settings=settings) as reg:

        def informer() -> Any:
            (status,) = reg.status().contexts["c"].informers
            return status

        with anyio.fail_after(TIMEOUT):
            store = await reg.watch("c", "widgets")
        cluster.delete_crd("widgets.example.com")
        await wait_until(lambda: informer().state == "error", registry=reg)
        message = informer().last_error or ""
        assert message.startswith("the server no longer serves widgets.example.com")
        assert reg.status().contexts["c"].state == "backing off"

        # looked at again every gone_retry (0.3 s), not in a backoff loop (FAST: 20-100 ms)
        def looks() -> int:
            return sum(1 for r in cluster.requests if r.path.endswith("/widgets"))

        seen, t0 = looks(), time.monotonic()
        await cluster.wait_for(lambda: looks() >= seen + 2, timeout=TIMEOUT)
        assert time.monotonic() - t0 >= 0.5
        async with reg.subscribe("widgets", ["c"], snapshot=False) as changes:
            cluster.add_crd("example.com", "widgets", "Widget")
            cluster.create("widgets.example.com", _widget("w-2"))
            with anyio.fail_after(TIMEOUT):
                async for change in changes:
                    if change.name == "w-2":
                        break
        assert store.get("default", "w-2") is not None
        assert store.get("default", "w-1") is None  # gone with its CRD
        await wait_until(lambda: informer().state == "watching" and len(store) == 1, registry=reg)
