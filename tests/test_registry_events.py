"""Events grouped by object through the registry: buckets live and die with their events."""

from __future__ import annotations

import itertools
from pathlib import Path

import anyio
import anyio.lowlevel
import pytest

from kubemux import Backoff, EventIndex, WatcherRegistry, WatchSettings
from kubemux.testing import FakeCluster, make_pod, write_kubeconfig
from kubemux.testing._cluster.workload import make_event
from support import TIMEOUT

FAST = WatchSettings(backoff=Backoff(initial_delay=0.02, max_delay=0.1), min_healthy_watch=0.0)
EVENTS = "events.events.k8s.io"
_seq = itertools.count()


def emit(
    cluster: FakeCluster, pod: dict[str, object], reason: str = "Started"
) -> dict[str, object]:
    return cluster.create(
        EVENTS, make_event(pod, reason=reason, note=f"{reason} it", seq=next(_seq))
    )


async def test_events_for_an_object_newest_first(tmp_path: Path) -> None:
    async with FakeCluster() as c:
        pod = c.create("pods", make_pod("web-1"))
        first = emit(c, pod, "Scheduled")
        path = write_kubeconfig(tmp_path / "config", {"c": c})
        async with WatcherRegistry.from_kubeconfig(str(path), settings=FAST) as reg:
            with anyio.fail_after(TIMEOUT):
                events = await reg.events_for("c", "Pod", "default", "web-1")
            assert [e["metadata"]["name"] for e in events] == [first["metadata"]["name"]]
            index = await reg.event_index("c")
            assert isinstance(index, EventIndex) and len(index) == 1
            second = emit(c, pod, "Pulled")
            await c.wait_for(
                lambda: len(index.events_for("Pod", "default", "web-1")) == 2, timeout=TIMEOUT
            )
            events = await reg.events_for("c", "Pod", "default", "web-1")
            assert events[0]["metadata"]["name"] == second["metadata"]["name"]
            assert await reg.events_for("c", "Pod", "default", "nope") == []


async def test_bucket_dropped_with_last_event_and_on_relist(tmp_path: Path) -> None:
    async with FakeCluster() as c:
        pods = [c.create("pods", make_pod(f"p-{i}")) for i in range(20)]
        evs = [emit(c, p) for p in pods]
        path = write_kubeconfig(tmp_path / "config", {"c": c})
        async with WatcherRegistry.from_kubeconfig(str(path), settings=FAST) as reg:
            with anyio.fail_after(TIMEOUT):
                index = await reg.event_index("c")
            assert len(index) == 20
            for ev in evs[:10]:  # deleted while watching
                c.delete(EVENTS, "default", ev["metadata"]["name"])  # type: ignore[index]
            await c.wait_for(lambda: len(index) == 10, timeout=TIMEOUT)
            # deleted while the watch is down and the history is gone: found by the relist
            await c.wait_for(lambda: c.open_watches == 1, timeout=TIMEOUT)
            c.drop_watches()
            for ev in evs[10:15]:
                c.delete(EVENTS, "default", ev["metadata"]["name"])  # type: ignore[index]
            c.compact()
            await c.wait_for(lambda: len(index) == 5, timeout=TIMEOUT)
            assert sorted(n for _, _, n in index.objects()) == [f"p-{i}" for i in range(15, 20)]


async def test_core_v1_fallback(tmp_path: Path) -> None:
    async with FakeCluster() as c:
        pod = c.create("pods", make_pod("web-1"))
        c.create(
            "events",
            {
                "metadata": {"name": "web-1.1", "namespace": "default"},
                "involvedObject": {"kind": "Pod", "namespace": "default", "name": "web-1"},
                "reason": "Started",
                "message": "core event",
                "lastTimestamp": "2026-11-30T00:00:00Z",
            },
        )
        assert pod
        c.fail_next(1, status=404, reason="NotFound", path_prefix="/apis/events.k8s.io")
        path = write_kubeconfig(tmp_path / "config", {"c": c})
        async with WatcherRegistry.from_kubeconfig(str(path), settings=FAST) as reg:
            with anyio.fail_after(TIMEOUT):
                events = await reg.events_for("c", "Pod", "default", "web-1")
            assert [e["message"] for e in events] == ["core event"]


async def test_stop_watcher_during_heavy_event_traffic(tmp_path: Path) -> None:
    async with FakeCluster() as c:
        pod = c.create("pods", make_pod("busy"))
        path = write_kubeconfig(tmp_path / "config", {"c": c})
        async with WatcherRegistry.from_kubeconfig(str(path), settings=FAST) as reg:
            with anyio.fail_after(TIMEOUT):
                index = await reg.event_index("c")
            stop_traffic = anyio.Event()

            async def traffic() -> None:
                while not stop_traffic.is_set():
                    for _ in range(50):
                        emit(c, pod)
                    await anyio.lowlevel.checkpoint()

            async with anyio.create_task_group() as tg:
                tg.start_soon(traffic)
                await c.wait_for(
                    lambda: len(index.events_for("Pod", "default", "busy")) > 100, timeout=TIMEOUT
                )
                assert await reg.stop_watcher("c") is True
                stop_traffic.set()
            assert len(index) == 0  # the index was dropped with the context
            assert reg.live_contexts == []
            assert reg._structure_sizes() == {
                "entries": 0,
                "failures": 0,
                "subscribers": 0,
                "slots": 0,
                "locks": 0,
            }
            await c.wait_for(lambda: c.open_watches == 0, timeout=TIMEOUT)
            with anyio.fail_after(TIMEOUT):  # a new generation gets a new, full index
                again = await reg.event_index("c")
            assert again is not index and len(again) == 1


@pytest.mark.parametrize("cap", [2])
async def test_event_cap_per_object(tmp_path: Path, cap: int) -> None:
    async with FakeCluster() as c:
        pod = c.create("pods", make_pod("web-1"))
        for _ in range(5):
            emit(c, pod)
        path = write_kubeconfig(tmp_path / "config", {"c": c})
        async with WatcherRegistry.from_kubeconfig(str(path), settings=FAST, event_cap=cap) as reg:
            with anyio.fail_after(TIMEOUT):
                events = await reg.events_for("c", "Pod", "default", "web-1")
            assert len(events) == cap


async def test_events_are_cached_once(tmp_path: Path) -> None:
    """The index holds the very entries the event store caches (bytes), not decoded copies."""
    async with FakeCluster() as c:
        pod = c.create("pods", make_pod("web-1"))
        emit(c, pod, "Scheduled")
        path = write_kubeconfig(tmp_path / "config", {"c": c})
        async with WatcherRegistry.from_kubeconfig(str(path), settings=FAST) as reg:
            with anyio.fail_after(TIMEOUT):
                index = await reg.event_index("c")
            emit(c, pod, "Pulled")
            await c.wait_for(
                lambda: len(index.events_for("Pod", "default", "web-1")) == 2, timeout=TIMEOUT
            )
            store = reg.store("c", EVENTS)
            assert store is not None
            cached = {id(e.raw) for e in store._entries(None)}  # the store keeps the bytes
            held = [h.event for h in index._entries.values()]
            assert len(held) == 2 and all(id(e.raw) in cached for e in held)
            events = index.events_for("Pod", "default", "web-1")
            assert [e["reason"] for e in events] == ["Pulled", "Scheduled"]
