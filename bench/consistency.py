"""Monotonic (default) and consistent reads through ``kubemux proxy`` (issue 29, point 2),
beside the same reads straight to the upstream.

For a busy resource (configmaps in ``busy``: one changes every 10 ms, 100 events/s) and a
quiet one (services in ``quiet``: nothing changes, while configmaps keep moving the
cluster's resourceVersion), in both modes:

- ``from cache``: the fraction of 200 sequential LISTs answered from the cache (the proxy's
  own counters: ``Proxy.statistics().reads``);
- ``p50``/``p99``: their latency, and ``added p99``: over the monotonic mode's (the price
  of consistency: a probe round trip, and the wait for the watch);
- ``probes/100``: probes per 100 sequential reads; ``probes/50c``: the most probes 50
  concurrent reads caused (5 rounds);
- ``stale``: of 200 cycles "write straight to the server, then read through the proxy"
  with the upstream's watch delivery delayed by 20 ms, the reads that missed the write;
- ``direct``: the same LISTs straight to the upstream, p50/p99, and the proxy's p50 as a
  ratio of it.

The upstream is FakeCluster with bookmarks every 60 s, as kube-apiserver's; it, the proxy
(two :class:`kubemux.proxy.ProxyServer`, one per mode, on one registry) and the client
share one process and event loop (the latencies include each other's work: compare the
rows, not the absolute values, with a real cluster).

Targets: busy, consistent: >= 80 % from the cache, added p99 <= 110 ms; <= 3 probes per 50
concurrent reads; 0 stale in 200 cycles.

Usage: ``python bench/consistency.py [--reads 200] [--cycles 200]``
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import aiohttp
import anyio
from _common import table

from kubemux import WatcherRegistry
from kubemux.proxy import ProxyServer, ProxySettings, encode_context
from kubemux.testing import FakeCluster, write_kubeconfig

TOKEN = "bench-token"
BUSY = ("configmaps", "busy")
QUIET = ("services", "quiet")


def _service(name: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "quiet"}, "spec": {"ports": [{"port": 80}]}}


async def _churn(cluster: FakeCluster, stop: anyio.Event) -> None:
    """One configmap of ``busy`` changes every 10 ms."""
    i = 0
    while not stop.is_set():
        name = f"cm-{i % 50}"
        obj = cluster.get("configmaps", "busy", name)
        if obj is None:
            cluster.create("configmaps", {"metadata": {"name": name, "namespace": "busy"}})
        else:
            obj["data"] = {"i": str(i)}
            cluster.update("configmaps", obj)
        i += 1
        await anyio.sleep(0.01)


class Reader:
    def __init__(self, session: aiohttp.ClientSession, cluster: FakeCluster) -> None:
        self.session = session
        self.cluster = cluster
        self.direct_ssl = cluster.client_ssl_context()
        self.contexts: dict[int, Any] = {}

    async def via(self, server: ProxyServer, resource: tuple[str, str]) -> tuple[float, Any]:
        plural, namespace = resource
        url = (
            f"{server.url}/clusters/{encode_context('prod')}/api/v1/namespaces/{namespace}/{plural}"
        )
        headers = {"Authorization": f"Bearer {server.token}"}
        ssl = self.contexts.get(id(server))
        if ssl is None:  # one per server, kept: a new one per read is a new connection
            ssl = self.contexts[id(server)] = server.certificates.client_context()
        started = time.perf_counter()
        async with self.session.get(url, headers=headers, ssl=ssl) as resp:
            body = await resp.read()  # read as the direct reads are: parsed only for stale
            assert resp.status == 200, body[:200]
        return time.perf_counter() - started, body

    async def direct(self, resource: tuple[str, str]) -> float:
        plural, namespace = resource
        url = f"{self.cluster.server}/api/v1/namespaces/{namespace}/{plural}"
        started = time.perf_counter()
        headers = {"Authorization": f"Bearer {TOKEN}"}
        async with self.session.get(url, headers=headers, ssl=self.direct_ssl) as resp:
            await resp.read()
            assert resp.status == 200
        return time.perf_counter() - started


def _counts(server: ProxyServer, plural: str) -> Any:
    for r in server.app.state.proxy.statistics().reads:
        if r.resource == plural:
            return r
    return None


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def measure(
    reader: Reader, server: ProxyServer, resource: tuple[str, str], reads: int, cycles: int
) -> dict[str, float]:
    plural, namespace = resource
    cluster = reader.cluster
    before = _counts(server, plural)
    times = [(await reader.via(server, resource))[0] for _ in range(reads)]
    after = _counts(server, plural)
    cached = (after.from_cache - before.from_cache) / reads
    waited = (after.waited_seconds - before.waited_seconds) / reads
    probes = (after.probes - before.probes) * 100 / reads
    most = 0
    for _ in range(5):
        first = _counts(server, plural).probes
        async with anyio.create_task_group() as tg:
            for _ in range(50):
                tg.start_soon(reader.via, server, resource)
        most = max(most, _counts(server, plural).probes - first)
    stale = 0
    cluster.delay_watches(0.02)
    try:
        for i in range(cycles):
            name = f"stale-{id(server)}-{i}"
            if plural == "configmaps":
                cluster.create("configmaps", {"metadata": {"name": name, "namespace": namespace}})
            else:
                cluster.create("services", {**_service(name)})
            _, body = await reader.via(server, resource)
            stale += name not in {item["metadata"]["name"] for item in json.loads(body)["items"]}
            if plural == "services":
                cluster.delete("services", namespace, name)  # stays quiet-sized
    finally:
        cluster.delay_watches(0)
    return {
        "cached": cached,
        "waited": waited,
        "p50": statistics.median(times),
        "p99": _pct(times, 0.99),
        "probes": probes,
        "concurrent": most,
        "stale": stale,
    }


@contextlib.asynccontextmanager
async def proxies(registry: WatcherRegistry) -> AsyncIterator[dict[str, ProxyServer]]:
    servers = {
        "monotonic": ProxyServer(registry, port=0),
        "consistent": ProxyServer(registry, port=0, settings=ProxySettings(consistent_reads=True)),
    }
    async with anyio.create_task_group() as tg:
        for s in servers.values():
            await tg.start(s.serve)
        try:
            yield servers
        finally:
            for s in servers.values():
                s.shutdown()


async def main(reads: int, cycles: int) -> None:
    rows: list[list[str]] = []
    async with FakeCluster(tokens={TOKEN}, tls=True, bookmark_period=60.0) as cluster:
        for i in range(50):
            cluster.create("services", _service(f"svc-{i}"))
        stop = anyio.Event()
        with tempfile.TemporaryDirectory() as tmp:
            config = write_kubeconfig(Path(tmp) / "config", {"prod": cluster})
            async with (
                WatcherRegistry.from_kubeconfig(str(config)) as registry,
                aiohttp.ClientSession() as session,
                proxies(registry) as servers,
                anyio.create_task_group() as tg,
            ):
                tg.start_soon(_churn, cluster, stop)
                reader = Reader(session, cluster)
                for s in servers.values():  # the informers start, the caches fill
                    for resource in (BUSY, QUIET):
                        await reader.via(s, resource)
                await anyio.sleep(1.0)
                for label, resource in (("busy", BUSY), ("quiet", QUIET)):
                    direct = [await reader.direct(resource) for _ in range(reads)]
                    d50, d99 = statistics.median(direct), _pct(direct, 0.99)
                    found = {
                        m: await measure(reader, s, resource, reads, cycles)
                        for m, s in servers.items()
                    }
                    base99 = found["monotonic"]["p99"]
                    for mode, f in found.items():
                        rows.append(
                            [
                                f"{label} {mode}",
                                f"{f['cached']:.0%}",
                                f"{f['p50'] * 1e3:.1f}",
                                f"{f['p99'] * 1e3:.1f}",
                                f"{(f['p99'] - base99) * 1e3:+.1f}",
                                f"{f['waited'] * 1e3:.1f}",
                                f"{f['probes']:.0f}",
                                f"{f['concurrent']:.0f}",
                                f"{f['stale']:.0f}/{cycles}",
                                f"{d50 * 1e3:.1f}/{d99 * 1e3:.1f}",
                                f"{f['p50'] / d50:.2f}",
                            ]
                        )
                stop.set()
    header = [
        "resource, mode",
        "from cache",
        "p50 ms",
        "p99 ms",
        "added p99",
        "waited ms/read",
        "probes/100",
        "probes/50c",
        "stale",
        "direct p50/p99",
        "p50 / direct",
    ]
    print(
        table(
            f"Consistency of reads through the proxy ({reads} reads, {cycles} cycles)", header, rows
        )
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--reads", type=int, default=200)
    parser.add_argument("--cycles", type=int, default=200)
    args = parser.parse_args()
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(main(args.reads, args.cycles))
