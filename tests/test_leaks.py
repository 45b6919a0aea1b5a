"""Bounded memory: no per-object, per-context or per-subscriber structure outlives its use.

Small versions of the leak probes in ``bench/`` (``context_churn.py``, ``scale_contexts.py``)
that assert the structural numbers, plus one test per leak pattern found in the core. Those
were found by these probes and are fixed; each test below keeps it fixed.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import gc
import os
import sys
import warnings
import weakref
from collections.abc import AsyncIterator, Iterable, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any

import aiohttp
import anyio
import anyio.lowlevel
import pytest
import yaml

from kubemux import (
    Backoff,
    ClusterUnreachable,
    Forbidden,
    KubeconfigError,
    Store,
    SubscriberOverflow,
    Unauthorized,
    WatcherRegistry,
    parse_resource,
)
from kubemux.testing import (
    FakeCluster,
    FakeContext,
    kubeconfig_dict,
    make_pod,
    rewrite_kubeconfig,
    write_kubeconfig,
)
from kubemux.testing._cluster.workload import make_event
from support import TIMEOUT

EMPTY = {"entries": 0, "failures": 0, "subscribers": 0, "slots": 0, "locks": 0}
NEVER_RETRY = Backoff(initial_delay=3600, max_delay=3600, jitter=False)
Specs = Mapping[str, FakeCluster | FakeContext]


# ------------------------------------------------------------------------------ helpers
@contextlib.asynccontextmanager
async def following(path: Path, **kwargs: Any) -> AsyncIterator[WatcherRegistry]:
    """A registry following ``path`` (entered in the test's own task, never in a fixture)."""
    async with WatcherRegistry.from_kubeconfig(str(path), debounce_delay=0.02, **kwargs) as reg:
        yield reg


def live_tasks() -> set[asyncio.Task[Any]]:
    me = asyncio.current_task()
    return {t for t in asyncio.all_tasks() if t is not me and not t.done()}


async def settled_tasks(baseline: set[asyncio.Task[Any]]) -> set[asyncio.Task[Any]]:
    """Tasks beyond ``baseline``, once the ones already finishing have run to their end."""
    extra = live_tasks() - baseline
    for _ in range(50):
        if not extra:
            break
        await anyio.lowlevel.checkpoint()
        extra = live_tasks() - baseline
    return extra


def open_sessions() -> list[aiohttp.ClientSession]:
    gc.collect()
    return [o for o in gc.get_objects() if isinstance(o, aiohttp.ClientSession) and not o.closed]


def failure_records(registry: WatcherRegistry) -> int:
    """Every failure the registry holds, per context and per informer."""
    return registry._structure_sizes()["failures"]


def b64(path: str | Path) -> str:
    return base64.b64encode(Path(path).read_bytes()).decode()


def existing(paths: Iterable[str]) -> list[str]:
    return [p for p in paths if os.path.exists(p)]


def traceback_depth(tb: TracebackType | None) -> int:
    depth = 0
    while tb is not None:
        depth += 1
        tb = tb.tb_next
    return depth


# ------------------------------------------------------------------------------ churn
async def test_context_churn_through_kubeconfig_leaves_nothing(tmp_path: Path) -> None:
    """50 contexts added, watched, subscribed to and removed through kubeconfig rewrites."""
    path = tmp_path / "config"
    async with FakeCluster(name="a") as a, FakeCluster(name="b") as b:
        for c in (a, b):
            c.create_many("pods", [make_pod(f"web-{i}") for i in range(3)])
        base: dict[str, FakeCluster | FakeContext] = {"anchor": a}
        write_kubeconfig(path, base)
        async with following(path) as registry:
            baseline = live_tasks()
            for start in range(0, 50, 10):
                batch = {f"ctx-{k}": (a, b)[k % 2] for k in range(start, start + 10)}
                await rewrite_kubeconfig(registry, path, {**base, **batch}, present=batch)
                with anyio.fail_after(TIMEOUT):
                    async with anyio.create_task_group() as tg:
                        for name in batch:
                            tg.start_soon(registry.watch, name, "pods")
                    await a.wait_for(lambda: a.open_watches + b.open_watches == 10)
                assert len(registry.live_contexts) == 10
                async with registry.subscribe("pods", batch, snapshot=False) as changes:
                    await rewrite_kubeconfig(registry, path, base, absent=batch)
                    removed: set[str] = set()
                    with anyio.fail_after(TIMEOUT):
                        while len(removed) < len(batch):
                            change = await changes.__anext__()
                            assert change.type == "REMOVED"
                            removed.add(change.context)
                assert removed == set(batch)
                assert registry._structure_sizes() == EMPTY

            with anyio.fail_after(TIMEOUT):
                await a.wait_for(lambda: a.open_connections + b.open_connections == 0)
                await a.wait_for(lambda: a.open_watches + b.open_watches == 0)
            assert await settled_tasks(baseline) == set()
            assert registry._structure_sizes() == EMPTY
            assert registry.live_contexts == []
            assert list(registry.contexts) == ["anchor"]
            assert set(registry.status().contexts) == {"anchor"}
            assert open_sessions() == []


async def test_subscribe_unsubscribe_cycles_leave_no_subscriber(tmp_path: Path) -> None:
    async with FakeCluster() as c:
        c.create_many("pods", [make_pod(f"web-{i}") for i in range(3)])
        path = write_kubeconfig(tmp_path / "config", {"c": c})
        async with following(path) as registry:
            with anyio.fail_after(TIMEOUT):
                await registry.watch("c", "pods")
            for i in range(10_000):
                async with registry.subscribe("pods", snapshot=i % 2 == 0) as changes:
                    if i % 100 == 0:  # some read part of their snapshot and stop early
                        async for _ in changes:
                            break
            with pytest.raises(RuntimeError, match="boom"):  # a body that raises
                async with registry.subscribe("pods"):
                    raise RuntimeError("boom")
            assert len(registry._fanout) == 0
            assert registry._structure_sizes()["subscribers"] == 0
            # publishing still works with nobody listening, and to a new subscriber
            async with registry.subscribe("pods", snapshot=False) as changes:
                c.create("pods", make_pod("web-new"))
                with anyio.fail_after(TIMEOUT):
                    change = await changes.__anext__()
                assert (change.type, change.name) == ("ADDED", "web-new")
            assert len(registry._fanout) == 0


async def test_overflowing_subscriber_is_removed_and_raises(tmp_path: Path) -> None:
    async with FakeCluster() as c:
        path = write_kubeconfig(tmp_path / "config", {"c": c})
        async with following(path) as registry:
            with anyio.fail_after(TIMEOUT):
                await registry.watch("c", "pods")
            names = [f"web-{i:02d}" for i in range(50)]
            async with registry.subscribe("pods", snapshot=False, buffer_size=5) as slow:
                async with registry.subscribe("pods", snapshot=False, buffer_size=100) as witness:
                    assert len(registry._fanout) == 2
                    for name in names:
                        c.create("pods", make_pod(name))
                    seen: list[str] = []
                    with anyio.fail_after(TIMEOUT):  # every change was offered to both
                        while len(seen) < len(names):
                            seen.append((await witness.__anext__()).name)
                    assert seen == names
                    assert len(registry._fanout) == 1  # the slow one is gone already
                assert len(registry._fanout) == 0
                assert slow.pending == 5  # its memory stays bounded by its buffer
                drained: list[str] = []

                async def drain() -> None:
                    async for change in slow:
                        drained.append(change.name)

                with anyio.fail_after(TIMEOUT), pytest.raises(SubscriberOverflow):
                    await drain()
                assert drained == names[:5]
                assert slow.pending == 0
            assert registry._structure_sizes()["subscribers"] == 0


async def test_failed_starts_then_removal_leave_no_failure(tmp_path: Path) -> None:
    path = tmp_path / "config"
    async with FakeCluster(tokens={"good"}) as c:
        contexts: dict[str, FakeCluster | FakeContext] = {
            "ok": FakeContext(cluster=c, token="good"),
            "denied": FakeContext(cluster=c, token="wrong"),  # the LIST fails: 401
            "no-ca": FakeContext(cluster="https://127.0.0.1:1"),  # the client cannot be built
            "no-ca-2": FakeContext(cluster="https://127.0.0.1:1"),
        }
        data = kubeconfig_dict(contexts)
        for entry in data["clusters"]:
            if entry["name"].startswith("no-ca"):
                entry["cluster"]["certificate-authority"] = str(tmp_path / "missing-ca.crt")
        path.write_text(yaml.safe_dump(data))
        async with following(path, start_backoff=NEVER_RETRY) as registry:
            with anyio.fail_after(TIMEOUT):
                await registry.watch("ok", "pods")
                with pytest.raises(Unauthorized):
                    await registry.watch("denied", "pods")
                for name in ("no-ca", "no-ca-2"):
                    with pytest.raises(KubeconfigError):
                        await registry.watch(name, "pods")
            assert failure_records(registry) == 3
            states = {n: s.state for n, s in registry.status().contexts.items()}
            assert states == {
                "ok": "running",
                "denied": "backing off",
                "no-ca": "backing off",
                "no-ca-2": "backing off",
            }

            assert await registry.stop_watcher("no-ca-2") is False  # no entry, but ...
            assert failure_records(registry) == 2  # ... its failure is gone

            keep = {"ok": contexts["ok"], "no-ca-2": contexts["no-ca-2"]}
            data = kubeconfig_dict(keep)
            data["clusters"][1]["cluster"]["certificate-authority"] = str(
                tmp_path / "missing-ca.crt"
            )
            before = registry.kubeconfig_syncs
            path.write_text(yaml.safe_dump(data))
            with anyio.fail_after(TIMEOUT):
                while "denied" in registry.contexts or "no-ca" in registry.contexts:
                    before = await registry.wait_kubeconfig_sync(before)
            assert registry._structure_sizes() == {**EMPTY, "entries": 1, "slots": 1}
            assert failure_records(registry) == 0
            assert registry.live_contexts == ["ok"]
            assert set(registry.status().contexts) == {"ok", "no-ca-2"}
            assert registry.status().contexts["no-ca-2"].state == "idle"


# ------------------------------------------------------------------------------ stores
def _pod(name: str, namespace: str, node: str, rv: int) -> dict[str, Any]:
    pod = make_pod(name, namespace, node=node, size=0, managed_fields=False)
    pod["metadata"]["resourceVersion"] = str(rv)
    return pod


def test_store_buckets_are_dropped_when_emptied() -> None:
    store = Store(
        parse_resource("pods"),
        indexers={
            "node": lambda o: [o["spec"]["nodeName"]],
            "app": lambda o: list((o["metadata"].get("labels") or {}).values()),
        },
    )
    rv = 1
    pods = [_pod(f"p-{i}", f"ns-{i % 7}", f"node-{i % 5}", rv + i) for i in range(300)]
    for pod in pods:
        store._apply_object("ADDED", pod)
    rv += 300
    assert len(store.namespaces()) == 7 and len(store.index_values("node")) == 5

    # an object moving to another node leaves no empty bucket behind
    moved = _pod("p-0", "ns-0", "node-moved", rv)
    store._apply_object("MODIFIED", moved)
    alone = _pod("p-0", "ns-0", "node-elsewhere", rv + 1)
    store._apply_object("MODIFIED", alone)
    assert "node-moved" not in store.index_values("node")
    assert "node-elsewhere" in store.index_values("node")

    # deleted one by one (watch events): every bucket goes with its last object
    for pod in pods:
        store._apply_object("DELETED", pod)
    assert len(store) == 0
    assert store.namespaces() == []
    assert store.index_values("node") == [] and store.index_values("app") == []
    assert store._items == {} and store._keyvals == {}
    assert store._by_index == {"node": {}, "app": {}}

    # a relist that drops whole namespaces and nodes drops their buckets too
    for pod in pods:
        store._apply_object("ADDED", pod)
    survivors = [p for p in pods if p["metadata"]["namespace"] == "ns-3"]
    store._replace([store._prepare_object(p) for p in survivors], "999")
    assert store.namespaces() == ["ns-3"]
    assert store.index_values("node") == sorted({p["spec"]["nodeName"] for p in survivors})
    assert len(store._keyvals) == len(survivors)
    store._replace([], "1000")
    assert store._items == {} and store._keyvals == {}
    assert store._by_index == {"node": {}, "app": {}}


async def test_live_store_namespace_buckets_follow_deletes(tmp_path: Path) -> None:
    async with FakeCluster() as c:
        path = write_kubeconfig(tmp_path / "config", {"c": c})
        async with following(path) as registry:
            with anyio.fail_after(TIMEOUT):
                store = await registry.watch("c", "pods")
            pods = [c.create("pods", make_pod(f"p-{i}", f"ns-{i % 10}")) for i in range(100)]
            with anyio.fail_after(TIMEOUT):
                await c.wait_for(lambda: len(store) == 100)
            assert len(store.namespaces()) == 10
            for pod in pods:
                c.delete("pods", pod["metadata"]["namespace"], pod["metadata"]["name"])
            with anyio.fail_after(TIMEOUT):
                await c.wait_for(lambda: len(store) == 0)
            assert store.namespaces() == [] and store._items == {}


async def test_stopping_a_context_drops_its_event_index(tmp_path: Path) -> None:
    async with FakeCluster() as c:
        for i in range(20):
            pod = c.create("pods", make_pod(f"p-{i}"))
            c.create("events.events.k8s.io", make_event(pod, reason="Started", note="x", seq=i))
        path = write_kubeconfig(tmp_path / "config", {"c": c})
        async with following(path) as registry:
            with anyio.fail_after(TIMEOUT):
                index = await registry.event_index("c")
            assert len(index) == 20
            assert await registry.stop_watcher("c") is True
            assert len(index) == 0 and index.statistics().events == 0
            assert registry._structure_sizes() == EMPTY


# ------------------------------------------------------------------------------ found leaks
async def test_inline_credentials_leave_no_temp_files(tmp_path: Path) -> None:
    trustme = pytest.importorskip("trustme")
    from kubernetes_asyncio.config import kube_config

    before = dict(kube_config._temp_files)
    async with FakeCluster(tls=True) as c:
        assert c.ca_file is not None
        leaf = trustme.CA().issue_cert("user.kubemux.test")
        data = kubeconfig_dict({"kind": c})
        cluster = data["clusters"][0]["cluster"]
        cluster.pop("certificate-authority")
        cluster["certificate-authority-data"] = b64(c.ca_file)
        data["users"][0]["user"] = {
            "client-certificate-data": base64.b64encode(leaf.cert_chain_pems[0].bytes()).decode(),
            "client-key-data": base64.b64encode(leaf.private_key_pem.bytes()).decode(),
        }
        path = tmp_path / "config"
        path.write_text(yaml.safe_dump(data))
        try:
            async with following(path) as registry:
                with anyio.fail_after(TIMEOUT):
                    await registry.watch("kind", "pods")
                assert await registry.stop_watcher("kind") is True
            left = {k: v for k, v in kube_config._temp_files.items() if k not in before}
            assert existing(left.values()) == []
            assert left == {}
        finally:  # clean up what the leak left in the shared temp folder
            for content, name in list(kube_config._temp_files.items()):
                if content not in before:
                    del kube_config._temp_files[content]
                    with contextlib.suppress(OSError):
                        os.remove(name)


async def test_reraised_start_errors_do_not_grow(tmp_path: Path) -> None:
    async with FakeCluster(tokens={"good"}) as c:
        contexts: dict[str, FakeCluster | FakeContext] = {
            "denied": FakeContext(cluster=c, token="wrong"),
            "no-ca": FakeContext(cluster="https://127.0.0.1:1"),
        }
        data = kubeconfig_dict(contexts)
        data["clusters"][1]["cluster"]["certificate-authority"] = str(tmp_path / "missing.crt")
        path = tmp_path / "config"
        path.write_text(yaml.safe_dump(data))
        async with following(path, start_backoff=NEVER_RETRY) as registry:
            for name, error in (("denied", Unauthorized), ("no-ca", KubeconfigError)):
                depths = []
                for _ in range(200):
                    with anyio.fail_after(TIMEOUT), pytest.raises(error) as caught:
                        await registry.watch(name, "pods")
                    depths.append(traceback_depth(caught.value.__traceback__))
                assert depths[-1] == depths[1], (name, depths[1], depths[-1])
            assert len(c.requests) == 1  # backoff held: one request for 200 calls


async def test_failed_watch_leaves_no_idle_entry(tmp_path: Path) -> None:
    path = write_kubeconfig(
        tmp_path / "config", {"down": FakeContext(cluster="http://127.0.0.1:1")}
    )
    async with following(path, start_backoff=NEVER_RETRY) as registry:
        with anyio.fail_after(TIMEOUT), pytest.raises(ClusterUnreachable):
            await registry.watch("down", "pods")
        status = registry.status().contexts["down"]
        assert status.state == "backing off" and status.last_error  # still visible
        with anyio.fail_after(TIMEOUT), pytest.raises(ClusterUnreachable):
            await registry.watch("down", "pods")  # and still backing off
        assert registry.live_contexts == []
        assert open_sessions() == []


async def test_failure_records_keep_no_entry_session_or_caller_frame(tmp_path: Path) -> None:
    contexts = {f"down-{i}": FakeContext(cluster="http://127.0.0.1:1") for i in range(5)}
    path = write_kubeconfig(tmp_path / "config", contexts)
    markers: list[weakref.ref[object]] = []
    causes: list[str] = []

    class Marker:
        pass

    async def call(registry: WatcherRegistry, name: str) -> None:
        marker = Marker()  # a local of a caller frame that has finished: must not be kept
        markers.append(weakref.ref(marker))
        with anyio.fail_after(TIMEOUT), pytest.raises(ClusterUnreachable) as caught:
            await registry.watch(name, "pods")
        causes.append(str(caught.value.__cause__))

    async with following(path, start_backoff=NEVER_RETRY) as registry:
        for name in contexts:
            await call(registry, name)  # the failed start
            await call(registry, name)  # the record raised again
        assert failure_records(registry) == 5  # the backoff records are kept ...
        assert all("127.0.0.1" in cause for cause in causes)  # ... with what caused them
        gc.collect()
        alive = gc.get_objects()
        assert [m for m in markers if m() is not None] == []
        assert not [o for o in alive if isinstance(o, aiohttp.ClientSession)]
        assert not [o for o in alive if type(o).__name__ == "ContextEntry"]


async def test_abandoned_subscription_is_not_kept(tmp_path: Path) -> None:
    async with FakeCluster() as c:
        path = write_kubeconfig(tmp_path / "config", {"c": c})
        async with following(path) as registry:
            try:
                sub = registry.subscribe("pods", ["gone"])  # never entered
                ref = weakref.ref(sub)
                with warnings.catch_warnings():  # its unclosed streams are the caller's bug
                    warnings.simplefilter("ignore", ResourceWarning)
                    del sub
                    gc.collect()
                assert len(registry._fanout) == 0
                assert ref() is None
            finally:
                for leftover in list(registry._fanout._subs.values()):
                    await leftover.aclose()


async def test_expired_informer_failures_are_dropped(tmp_path: Path) -> None:
    async with FakeCluster() as c:
        path = write_kubeconfig(tmp_path / "config", {"c": c})
        no_wait = Backoff(initial_delay=0.0, max_delay=0.0, jitter=False)
        async with following(path, start_backoff=no_wait) as registry:
            with anyio.fail_after(TIMEOUT):
                await registry.watch("c", "pods", namespace="allowed")
            for i in range(20):
                c.fail_next(1, 403, reason="Forbidden", path_prefix=f"/api/v1/namespaces/ns-{i}/")
                with anyio.fail_after(TIMEOUT), pytest.raises(Forbidden):
                    await registry.watch("c", "pods", namespace=f"ns-{i}")
            assert failure_records(registry) <= 1


def test_store_tables_shrink_after_mass_delete() -> None:
    store = Store(parse_resource("pods"), indexers={"node": lambda o: [o["spec"]["nodeName"]]})
    pods = [_pod(f"p-{i}", "batch", "node-1", i + 1) for i in range(20_000)]
    entries = [store._prepare_object(p) for p in pods]
    for entry in entries:
        store._apply("ADDED", entry)
    for entry in entries[1:]:  # a burst of Jobs is cleaned up; one survivor
        store._apply("DELETED", entry)
    assert len(store) == 1
    assert sys.getsizeof(store._items["batch"]) < 10_000
    assert sys.getsizeof(store._by_index["node"]["node-1"]) < 10_000
