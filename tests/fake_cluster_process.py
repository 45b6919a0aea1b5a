"""FakeClusters in a process of their own, so their sockets do not count against the tested
process's open-file limit (tests of file-descriptor limits, bench/contexts_cost.py).

Usage: ``python fake_cluster_process.py CLUSTERS PODS [--tls] [--churn SECONDS]``

Starts CLUSTERS FakeClusters (no authentication), each with PODS pods ``pod-<i>`` in
``default``, prints one JSON line ``{"servers": [...], "ca_files": [...]}`` on stdout, and
serves until its stdin closes. With ``--churn``, one pod of each cluster changes every
SECONDS.
"""

from __future__ import annotations

import argparse
import sys
from contextlib import AsyncExitStack

import anyio
import orjson

from kubemux.testing import FakeCluster, make_pod


async def churn(clusters: list[FakeCluster], period: float) -> None:
    i = 0
    while True:
        await anyio.sleep(period)
        for cluster in clusters:
            pod = cluster.get("pods", "default", "pod-0")
            if pod is not None:
                pod["metadata"].setdefault("labels", {})["tick"] = str(i)
                cluster.update("pods", pod)
        i += 1


async def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("clusters", type=int)
    p.add_argument("pods", type=int)
    p.add_argument("--tls", action="store_true")
    p.add_argument("--churn", type=float, default=0.0)
    args = p.parse_args()
    async with AsyncExitStack() as stack:
        clusters = []
        for n in range(args.clusters):
            cluster = await stack.enter_async_context(
                FakeCluster(tls=args.tls, name=f"fake-{n}", bookmark_period=3600)
            )
            cluster.create_many("pods", [make_pod(f"pod-{i}", size=500) for i in range(args.pods)])
            clusters.append(cluster)
        ready = {"servers": [c.server for c in clusters], "ca_files": [c.ca_file for c in clusters]}
        sys.stdout.buffer.write(orjson.dumps(ready) + b"\n")
        sys.stdout.buffer.flush()
        async with anyio.create_task_group() as tg:
            if args.churn > 0:
                tg.start_soon(churn, clusters, args.churn)
            await anyio.wrap_file(sys.stdin).read()  # until the parent closes our stdin
            tg.cancel_scope.cancel()


if __name__ == "__main__":
    anyio.run(main)
