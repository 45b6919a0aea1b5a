"""Expensive reads a client can send in a loop (issue 28, points 3 and 4).

- 3: a selector LIST scans the snapshot in slices, yielding the event loop between them,
  and only ``max_concurrent_scans`` scans run at once (the others wait their turn);
- 4: pages pin snapshots that share structure: pinning a changing namespace costs what
  changed, not a copy of the namespace's bucket and sorted names per pin; pages stay exact.

Sizes are scaled down (a few thousand pods); bench/hostile_proxy.py has the full-size figures
(20k pods, 100-requirement selectors, 1,024 pins).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import tracemalloc
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import anyio

from kubemux.proxy import ProxySettings
from kubemux.testing import FakeCluster, make_pod
from proxy_support import (  # the fixtures cluster and kubeconfig
    ProxyClient,
    running_proxy,
    upstream_cluster,  # noqa: F401
    upstream_kubeconfig,  # noqa: F401
)
from support import TIMEOUT

# 100 requirements (the most a selector may have): 99 that hold for every pod, then one
# that holds for none, so every pod is evaluated in full and the answer is empty
HEAVY = ",".join([*(f"k{i:02d}!%3Dv" for i in range(99)), "zz%3Dnothing"])


class Ticker:
    """Counts the event loop's turns (one per iteration while it runs)."""

    def __init__(self) -> None:
        self.ticks = 0
        self.samples: list[Any] = []
        self.sample: Any = None

    async def run(self) -> None:
        while True:
            self.ticks += 1
            if self.sample is not None:
                self.samples.append(self.sample())
            await asyncio.sleep(0)


@contextlib.asynccontextmanager
async def ticking() -> AsyncIterator[Ticker]:
    ticker = Ticker()
    async with anyio.create_task_group() as tg:
        tg.start_soon(ticker.run)
        try:
            yield ticker
        finally:
            tg.cancel_scope.cancel()


def many_pods(cluster: FakeCluster, n: int, namespace: str, size: int = 400) -> None:
    for start in range(0, n, 2000):
        cluster.create_many(
            "pods",
            [
                make_pod(f"p-{i:05d}", namespace, size=size)
                for i in range(start, min(n, start + 2000))
            ],
        )


async def ticks_during(ticker: Ticker, client: ProxyClient, path: str) -> int:
    before = ticker.ticks
    status, doc = await client.get_json("prod", path)
    assert status == 200 and doc["items"] == []
    return ticker.ticks - before


async def test_a_selector_scan_yields_the_loop_as_it_goes(
    cluster: FakeCluster, kubeconfig: Path
) -> None:
    many_pods(cluster, 8000, "big")
    settings = ProxySettings(scan_slice=0.0005)
    async with running_proxy(kubeconfig, settings=settings) as (_, client):
        with anyio.fail_after(TIMEOUT * 2):
            assert (await client.get_json("prod", "/api/v1/pods?limit=1"))[0] == 200  # synced
            async with ticking() as ticker:
                small = await ticks_during(
                    ticker, client, f"/api/v1/namespaces/data/pods?labelSelector={HEAVY}"
                )
                large = await ticks_during(
                    ticker, client, f"/api/v1/namespaces/big/pods?labelSelector={HEAVY}"
                )
    # 8,000 pods at 100 requirements take tens of milliseconds: scanned in slices of half a
    # millisecond, others ran between them; in one step, nobody would have
    assert large - small >= 15, (small, large)


async def test_concurrent_scans_are_bounded(cluster: FakeCluster, kubeconfig: Path) -> None:
    many_pods(cluster, 4000, "big")
    settings = ProxySettings(scan_slice=0.0005, max_concurrent_scans=1)
    async with running_proxy(kubeconfig, settings=settings) as (server, client):
        with anyio.fail_after(TIMEOUT * 2):
            assert (await client.get_json("prod", "/api/v1/pods?limit=1"))[0] == 200
            async with ticking() as ticker:
                ticker.sample = server.proxy.statistics
                path = f"/api/v1/namespaces/big/pods?labelSelector={HEAVY}"
                async with anyio.create_task_group() as tg:
                    for _ in range(3):
                        tg.start_soon(ticks_during, ticker, client, path)
                ticker.sample = None
    running = max(s.scans_running for s in ticker.samples)
    waiting = max(s.scans_waiting for s in ticker.samples)
    assert running == 1  # never two at once
    assert waiting >= 1  # the others waited their turn (and were answered: no 429)
    assert ticker.samples[-1].scans_running == 0


# ------------------------------------------------------------------ 4: pins
def _changed(cluster: FakeCluster, namespace: str, name: str, tick: int) -> None:
    pod = cluster.get("pods", namespace, name)
    assert pod is not None
    pod["metadata"].setdefault("labels", {})["tick"] = str(tick)
    cluster.update("pods", pod)


@contextlib.contextmanager
def traced() -> Iterator[list[int]]:
    """The memory allocated and still held at the end of the block (tracemalloc)."""
    held: list[int] = []
    gc.collect()
    tracemalloc.start()
    try:
        yield held
        gc.collect()
        held.append(tracemalloc.get_traced_memory()[0])
    finally:
        tracemalloc.stop()


async def test_pinned_pages_of_a_changing_namespace_share_structure(
    cluster: FakeCluster, kubeconfig: Path
) -> None:
    pods, pins = 3000, 200
    many_pods(cluster, pods, "big", size=300)
    async with running_proxy(kubeconfig) as (server, client):
        with anyio.fail_after(TIMEOUT * 3):
            assert (await client.get_json("prod", "/api/v1/namespaces/big/pods?limit=1"))[0] == 200
            with traced() as held:
                for i in range(pins):
                    _changed(cluster, "big", f"p-{i % pods:05d}", i)
                    path = (
                        "/api/v1/namespaces/big/pods?limit=1"
                        f"&resourceVersion={cluster.resource_version}"
                    )
                    status, doc = await client.get_json("prod", path)  # waits for the change
                    assert status == 200 and doc["metadata"]["continue"]
                    # a second page reads the pin (its sorted names too)
                    token = doc["metadata"]["continue"]
                    status, doc = await client.get_json(
                        "prod", f"/api/v1/namespaces/big/pods?limit=1&continue={token}"
                    )
                    assert status == 200 and len(doc["items"]) == 1
            # a copy of the bucket (3,000 names) and its sorted names per pin is ~25 MB here
            assert held[0] < 8 * 1024 * 1024, f"{held[0] / 1e6:.1f} MB held by {pins} pins"
            assert len(server.proxy.cached.pins) > pins  # all still pinned (each page pins)


async def _page_names(
    client: ProxyClient, path: str, limit: int, between: Any
) -> tuple[str, list[tuple[str, str]]]:
    status, doc = await client.get_json("prod", f"{path}?limit={limit}")
    assert status == 200
    rv = doc["metadata"]["resourceVersion"]
    got = [(o["metadata"]["name"], o["metadata"]["resourceVersion"]) for o in doc["items"]]
    while token := doc["metadata"].get("continue"):
        between()
        status, doc = await client.get_json("prod", f"{path}?limit={limit}&continue={token}")
        assert status == 200 and doc["metadata"]["resourceVersion"] == rv
        got += [(o["metadata"]["name"], o["metadata"]["resourceVersion"]) for o in doc["items"]]
    return rv, got


async def test_pages_stay_exact_while_the_namespace_changes(
    cluster: FakeCluster, kubeconfig: Path
) -> None:
    many_pods(cluster, 600, "big", size=300)
    async with running_proxy(kubeconfig) as (_, client):
        with anyio.fail_after(TIMEOUT * 2):
            path = "/api/v1/namespaces/big/pods"
            status, whole = await client.get_json("prod", path)
            assert status == 200
            expected = [
                (o["metadata"]["name"], o["metadata"]["resourceVersion"]) for o in whole["items"]
            ]
            step = 0

            def between() -> None:  # every kind of change, before and after the cursor
                nonlocal step
                step += 1
                name = f"p-{(step * 37) % 600:05d}"
                if cluster.get("pods", "big", name) is not None:
                    _changed(cluster, "big", name, step)
                cluster.create("pods", make_pod(f"new-{step:03d}", "big", size=300))
                cluster.create("pods", make_pod(f"a-{step:03d}", "big", size=300))
                if step < 20:
                    cluster.delete("pods", "big", f"p-{(step * 53) % 600:05d}")

            rv, paged = await _page_names(client, path, 25, between)
            assert rv == whole["metadata"]["resourceVersion"]
            assert paged == expected  # the set at the first page, in order, once each


async def test_pages_of_pins_taken_between_changes_are_each_exact(
    cluster: FakeCluster, kubeconfig: Path
) -> None:
    many_pods(cluster, 300, "big", size=300)
    path = "/api/v1/namespaces/big/pods"
    step = 0

    def change() -> None:  # an update, a create before and after most names, a delete
        nonlocal step
        step += 1
        name = f"p-{(step * 37) % 300:05d}"
        if cluster.get("pods", "big", name) is not None:
            _changed(cluster, "big", name, step)
        cluster.create("pods", make_pod(f"a-{step:03d}", "big", size=300))
        cluster.create("pods", make_pod(f"z-{step:03d}", "big", size=300))
        gone = f"p-{(step * 53) % 300:05d}"
        if cluster.get("pods", "big", gone) is not None:
            cluster.delete("pods", "big", gone)

    def names(doc: Any) -> list[tuple[str, str]]:
        return [(o["metadata"]["name"], o["metadata"]["resourceVersion"]) for o in doc["items"]]

    async with running_proxy(kubeconfig) as (_, client):
        with anyio.fail_after(TIMEOUT * 2):
            lists = []  # (expected, first page) of five lists, the store changing between
            for _ in range(5):
                rv = cluster.resource_version
                status, whole = await client.get_json("prod", f"{path}?resourceVersion={rv}")
                assert status == 200 and whole["metadata"]["resourceVersion"] == rv
                status, first = await client.get_json("prod", f"{path}?limit=20")
                assert status == 200 and first["metadata"]["resourceVersion"] == rv
                lists.append((names(whole), first))
                change()
                change()
            for expected, first in lists:  # every one paged to its end, changes between
                got, doc = names(first), first
                while token := doc["metadata"].get("continue"):
                    left = doc["metadata"]["remainingItemCount"]
                    assert left == len(expected) - len(got)  # counted at the pin too
                    change()
                    status, doc = await client.get_json("prod", f"{path}?limit=20&continue={token}")
                    assert status == 200
                    got += names(doc)
                assert got == expected
