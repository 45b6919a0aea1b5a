"""Scale in contexts: what do thousands of kubeconfig contexts cost when few are used?

A kubeconfig with N contexts (100, 1,000, 5,000: Headlamp's users run thousands). Ten of them
point at a FakeCluster holding P pods (10 or 5,000) and are watched; of the rest, half point at
two more FakeClusters and half at a server that refuses connections (contexts start lazily, so
none of those is ever contacted). The registry does not follow the file (``follow=False``):
every sync is an explicit ``registry.sync_kubeconfig()``, timed from the call until the
registry has reconciled the diff. Times are the best of ``--repeat`` runs (the least disturbed
by the rest of the machine).

Measured for each (N, P):

* enter: ``async with WatcherRegistry.from_kubeconfig(path)`` (read, parse, fingerprint every
  context, first sync), and the idle registry's heap under tracemalloc;
* load: ``KubeconfigLoader(path).load()`` alone, the file read + parse + fingerprint floor;
* sync when nothing changed, when one idle context's token changed, and when one watched
  context's token changed (that one restarts; its successor relists in the background);
* reconcile: the registry's own share of a sync (``_reconcile`` timed around the call);
* status(): one ``registry.status()`` call.

The sync cost should grow with the file (it is re-read and re-parsed) and not with the size of
the caches: the ratios at the end compare 5,000 with 100 contexts, and 5,000 with 10 pods per
watched context.

A last table probes unreachable contexts once each (``watch()`` fails) and counts what stays.

Usage: python bench/scale_contexts.py [--contexts 100,1000,5000] [--pods 10,5000]
                                      [--repeat 5] [--probe 500]
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import yaml

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "src"))

from _common import table

from kubemux import ClusterUnreachable, WatcherRegistry
from kubemux._kubeconfig.load import KubeconfigLoader
from kubemux._kubeconfig.source import ContextDiff
from kubemux.testing import FakeCluster, make_pod

WATCHED = 10
REFUSED = "https://127.0.0.1:1"  # nothing listens on port 1: connections are refused at once
WAIT = 120.0


def rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def ms(seconds: float) -> str:
    if seconds < 1e-3:
        return f"{seconds * 1e6:,.0f} us"
    return f"{seconds * 1e3:,.1f} ms"


def mb(n: float) -> str:
    if abs(n) < 1e6:
        return f"{n / 1e3:,.0f} KB"
    return f"{n / 1e6:,.1f} MB"


# ---------------------------------------------------------------- the kubeconfig
def kubeconfig(n: int, hot: FakeCluster, warm: list[FakeCluster], tokens: dict[int, str]) -> Any:
    """N contexts: the first WATCHED on ``hot``, the rest on ``warm`` or refusing servers.

    Built here rather than with ``kubemux.testing.write_kubeconfig``, whose entry
    de-duplication is quadratic (1.2 s for 5,000 contexts) and whose pure-Python YAML dump
    takes another 1.6 s: this keeps the writes out of the measurements' way.
    """
    clusters, users, contexts = [], [], []
    for i in range(n):
        if i < WATCHED:
            server = hot.server
        elif i % 2:
            server = warm[i % len(warm)].server
        else:
            server = REFUSED
        name = f"ctx-{i}"
        clusters.append({"name": f"{name}-cluster", "cluster": {"server": server}})
        users.append({"name": f"{name}-user", "user": {"token": tokens.get(i, f"token-{i}")}})
        contexts.append(
            {
                "name": name,
                "context": {
                    "cluster": f"{name}-cluster",
                    "user": f"{name}-user",
                    "namespace": "default",
                },
            }
        )
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "preferences": {},
        "clusters": clusters,
        "users": users,
        "contexts": contexts,
        "current-context": "ctx-0",
    }


def write(path: Path, data: Any) -> int:
    """Write the kubeconfig atomically; returns its size in bytes."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".config.")
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        yaml.dump(data, handle, Dumper=yaml.CSafeDumper, sort_keys=False)
    os.replace(tmp, path)
    return os.path.getsize(path)


# ---------------------------------------------------------------- measurements
@dataclass
class Result:
    contexts: int
    pods: int
    file_bytes: int = 0
    enter: float = 0.0
    idle_heap: int = 0
    load: float = 0.0
    sync_same: float = 0.0
    sync_idle: float = 0.0
    reconcile_idle: float = 0.0
    sync_watched: float = 0.0
    reconcile_watched: float = 0.0
    status: float = 0.0
    cached: int = 0


async def best_of(repeat: int, step: Callable[[int], Awaitable[float]]) -> float:
    return min([await step(i) for i in range(repeat)])


def timed_reconcile(registry: WatcherRegistry, spent: list[float]) -> None:
    """Time every ``_reconcile`` call (the registry's share of a sync)."""
    original = registry._reconcile

    async def reconcile(diff: ContextDiff) -> None:
        started = time.perf_counter()
        await original(diff)
        spent.append(time.perf_counter() - started)

    registry._reconcile = reconcile  # type: ignore[method-assign]


async def measure(
    path: Path, n: int, pods: int, hot: FakeCluster, warm: list[FakeCluster], repeat: int
) -> Result:
    r = Result(n, pods)
    tokens: dict[int, str] = {}
    r.file_bytes = write(path, kubeconfig(n, hot, warm, tokens))

    loads = []
    for _ in range(repeat):
        started = time.perf_counter()
        KubeconfigLoader(str(path)).load()
        loads.append(time.perf_counter() - started)
    r.load = min(loads)

    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    async with WatcherRegistry.from_kubeconfig(str(path), follow=False) as registry:
        gc.collect()
        r.idle_heap = tracemalloc.get_traced_memory()[0] - before
        tracemalloc.stop()

    enters = []
    for _ in range(repeat):
        started = time.perf_counter()
        async with WatcherRegistry.from_kubeconfig(str(path), follow=False) as registry:
            enters.append(time.perf_counter() - started)
    r.enter = min(enters)

    async with WatcherRegistry.from_kubeconfig(str(path), follow=False) as registry:
        spent: list[float] = []
        timed_reconcile(registry, spent)
        with anyio.fail_after(WAIT):
            async with anyio.create_task_group() as tg:
                for i in range(WATCHED):
                    tg.start_soon(registry.watch, f"ctx-{i}", "pods")
        r.cached = sum(len(registry.store(f"ctx-{i}", "pods") or ()) for i in range(WATCHED))

        async def sync_same(_: int) -> float:
            started = time.perf_counter()
            with anyio.fail_after(WAIT):
                await registry.sync_kubeconfig()
            return time.perf_counter() - started

        async def sync_changed(i: int, which: int) -> float:
            tokens[which] = f"rotated-{i}"
            write(path, kubeconfig(n, hot, warm, tokens))
            spent.clear()
            started = time.perf_counter()
            with anyio.fail_after(WAIT):
                await registry.sync_kubeconfig()
            took = time.perf_counter() - started
            assert registry.contexts[f"ctx-{which}"].fingerprint, "synced"
            return took

        r.sync_same = await best_of(repeat, sync_same)

        idle, reconcile_idle = [], []
        for i in range(repeat):
            idle.append(await sync_changed(i, n - 1))
            reconcile_idle.append(sum(spent))
        r.sync_idle, r.reconcile_idle = min(idle), min(reconcile_idle)

        watched, reconcile_watched = [], []
        for i in range(repeat):
            watched.append(await sync_changed(i, 0))
            reconcile_watched.append(sum(spent))
            with anyio.fail_after(WAIT):  # let the successor relist before the next round
                await registry.watch("ctx-0", "pods")
        r.sync_watched = min(watched)
        r.reconcile_watched = min(reconcile_watched)

        statuses = []
        for _ in range(repeat):
            started = time.perf_counter()
            registry.status()
            statuses.append(time.perf_counter() - started)
        r.status = min(statuses)
    return r


@dataclass
class Probe:
    probed: int
    failed: int
    entries: int
    sessions_open: int
    heap: int
    rss: int
    seconds: float


async def probe_unreachable(path: Path, n: int, probe: int, hot: FakeCluster) -> Probe:
    """watch() once in ``probe`` contexts whose server refuses connections."""
    import aiohttp

    write(path, kubeconfig(n, hot, [hot], {}))
    refused = [f"ctx-{i}" for i in range(WATCHED, n) if i % 2 == 0][:probe]
    sessions: list[aiohttp.ClientSession] = []
    original = aiohttp.ClientSession.__init__

    def tracking(self: aiohttp.ClientSession, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        sessions.append(self)

    failed = 0

    async def one(name: str) -> None:
        nonlocal failed
        try:
            await registry.watch(name, "pods")
        except ClusterUnreachable:
            failed += 1

    aiohttp.ClientSession.__init__ = tracking  # type: ignore[method-assign]
    try:
        async with WatcherRegistry.from_kubeconfig(str(path), follow=False) as registry:
            gc.collect()
            rss_before = rss()
            tracemalloc.start()
            heap_before = tracemalloc.get_traced_memory()[0]
            started = time.perf_counter()
            with anyio.fail_after(WAIT):
                async with anyio.create_task_group() as tg:
                    for name in refused:
                        tg.start_soon(one, name)
            seconds = time.perf_counter() - started
            gc.collect()
            heap = tracemalloc.get_traced_memory()[0] - heap_before
            tracemalloc.stop()
            result = Probe(
                probed=len(refused),
                failed=failed,
                entries=len(registry.live_contexts),
                sessions_open=sum(1 for s in sessions if not s.closed),
                heap=heap,
                rss=rss() - rss_before,
                seconds=seconds,
            )
    finally:
        aiohttp.ClientSession.__init__ = original  # type: ignore[method-assign]
    return result


# ---------------------------------------------------------------- report
def ratio(a: float, b: float) -> str:
    return f"{a / b:,.2f}x" if b > 0 else "-"


async def run(args: argparse.Namespace) -> None:
    sizes = [int(s) for s in args.contexts.split(",")]
    pod_counts = [int(s) for s in args.pods.split(",")]
    results: list[Result] = []
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="kubemux-scale-") as tmp:
        path = Path(tmp) / "config"
        for pods in pod_counts:
            async with (
                FakeCluster(name="hot") as hot,
                FakeCluster(name="warm-1") as w1,
                FakeCluster(name="warm-2") as w2,
            ):
                hot.create_many("pods", [make_pod(f"web-{k}") for k in range(pods)])
                for n in sizes:
                    results.append(await measure(path, n, pods, hot, [w1, w2], args.repeat))
        probe = None
        if args.probe:
            async with FakeCluster(name="hot") as hot:
                probe = await probe_unreachable(path, max(sizes), args.probe, hot)

    header = [
        "contexts",
        "pods cached",
        "file",
        "enter",
        "idle heap",
        "load alone",
        "sync: same",
        "sync: idle ctx",
        "reconcile",
        "sync: watched ctx",
        "reconcile",
        "status()",
    ]
    rows = [
        [
            f"{r.contexts:,}",
            f"{r.cached:,}",
            mb(r.file_bytes),
            ms(r.enter),
            f"{mb(r.idle_heap)} ({r.idle_heap / r.contexts:,.0f} B/ctx)",
            ms(r.load),
            ms(r.sync_same),
            ms(r.sync_idle),
            ms(r.reconcile_idle),
            ms(r.sync_watched),
            ms(r.reconcile_watched),
            ms(r.status),
        ]
        for r in results
    ]
    print(
        table(
            f"scale: N contexts, {WATCHED} watched (P pods each); best of {args.repeat}; "
            "'sync: idle ctx' = one unwatched context's token changed, 'sync: watched ctx' = "
            "one watched context's token changed (it restarts)",
            header,
            rows,
        )
    )

    by = {(r.contexts, r.cached // WATCHED): r for r in results}
    lo_n, hi_n = min(sizes), max(sizes)
    lo_p, hi_p = min(pod_counts), max(pod_counts)
    ratio_rows = []

    def add(what: str, a: Result | None, b: Result | None, get: Callable[[Result], float]) -> None:
        if a is not None and b is not None:
            ratio_rows.append([what, ratio(get(a), get(b))])

    small, big = by.get((hi_n, lo_p)), by.get((lo_n, lo_p))
    if small is not None and big is not None:
        ratio_rows.append([f"contexts {hi_n:,} / {lo_n:,}", f"{hi_n / lo_n:,.0f}x"])
    add(f"  enter, {hi_n:,} / {lo_n:,} contexts", small, big, lambda r: r.enter)
    add(f"  load alone, {hi_n:,} / {lo_n:,} contexts", small, big, lambda r: r.load)
    add(f"  sync: idle ctx, {hi_n:,} / {lo_n:,} contexts", small, big, lambda r: r.sync_idle)
    add(f"  reconcile, {hi_n:,} / {lo_n:,} contexts", small, big, lambda r: r.reconcile_idle)
    add(f"  idle heap, {hi_n:,} / {lo_n:,} contexts", small, big, lambda r: r.idle_heap)
    for n in sizes:
        a, b = by.get((n, hi_p)), by.get((n, lo_p))
        add(f"cache {hi_p:,} / {lo_p:,} pods, {n:,} ctx: sync idle", a, b, lambda r: r.sync_idle)
        add(
            f"cache {hi_p:,} / {lo_p:,} pods, {n:,} ctx: reconcile",
            a,
            b,
            lambda r: r.reconcile_idle,
        )
        add(f"cache {hi_p:,} / {lo_p:,} pods, {n:,} ctx: sync same", a, b, lambda r: r.sync_same)
    for r in results:
        if r.contexts == hi_n:
            ratio_rows.append(
                [
                    f"share of sync: idle ctx in load alone ({r.cached // WATCHED:,} pods)",
                    f"{r.load / r.sync_idle:.0%}" if r.sync_idle else "-",
                ]
            )
    print()
    print(table("scaling ratios", ["ratio", "value"], ratio_rows))

    if probe is not None:
        print()
        print(
            table(
                f"failed probes: watch() once in {probe.probed:,} contexts whose server refuses "
                f"connections ({max(sizes):,}-context kubeconfig)",
                ["measure", "value", "target", "result"],
                [
                    ["watch() raised ClusterUnreachable", f"{probe.failed:,}", "", ""],
                    [
                        "wall time (under tracemalloc)",
                        f"{probe.seconds:.1f} s ({ms(probe.seconds / max(probe.probed, 1))}/ctx)",
                        "",
                        "",
                    ],
                    [
                        "live entries left",
                        f"{probe.entries:,}",
                        "0",
                        "PASS" if probe.entries == 0 else "FAIL",
                    ],
                    [
                        "aiohttp sessions left open",
                        f"{probe.sessions_open:,}",
                        "0",
                        "PASS" if probe.sessions_open == 0 else "FAIL",
                    ],
                    [
                        "heap kept (tracemalloc)",
                        f"{mb(probe.heap)} ({probe.heap / max(probe.probed, 1):,.0f} B/ctx)",
                        "",
                        "",
                    ],
                    [
                        "RSS kept (incl. OpenSSL)",
                        f"{mb(probe.rss)} ({probe.rss / max(probe.probed, 1):,.0f} B/ctx)",
                        "",
                        "",
                    ],
                ],
            )
        )
    print(f"\ntotal {time.perf_counter() - started:.1f} s")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--contexts", default="100,1000,5000", help="kubeconfig sizes")
    parser.add_argument("--pods", default="10,5000", help="pods per watched context")
    parser.add_argument("--repeat", type=int, default=5, help="runs per measurement")
    parser.add_argument("--probe", type=int, default=500, help="unreachable contexts to probe")
    args = parser.parse_args(argv)
    anyio.run(run, args)


if __name__ == "__main__":
    main()
