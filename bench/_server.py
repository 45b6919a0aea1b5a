"""A FakeCluster in its own process, so benchmarks measure the client and not the server.

Usage: ``python bench/_server.py N SIZE [CHUNK_BUFFER [CHURN]]``: creates N pods of about
SIZE bytes (watch streams framed with FakeCluster's ``chunk_buffer``, Go's 2048 by default),
prints ``READY <server> <rv_before> <rv_after>`` on stdout, and serves until stdin closes.
With CHURN > 0, one of 200 ``churn-*`` pods in ``default`` is created or changed every CHURN
seconds meanwhile.
"""

from __future__ import annotations

import sys

import anyio

from kubemux.testing import FakeCluster, make_pod


def churn_step(cluster: FakeCluster, i: int) -> None:
    """Change 1 of 200 ``churn-*`` pods (create it the first time); ``i`` counts the steps."""
    pod = make_pod(f"churn-{i % 200}")
    pod["status"]["phase"] = ("Running", "Pending")[i % 2]
    if cluster.get("pods", "default", pod["metadata"]["name"]) is None:
        cluster.create("pods", pod)
    else:
        cluster.update("pods", pod)


async def churn(cluster: FakeCluster, period: float) -> None:
    i = 0
    while True:
        churn_step(cluster, i)
        i += 1
        await anyio.sleep(period)


async def main(n: int, size: int, chunk_buffer: int, period: float) -> None:
    async with FakeCluster(
        history_limit=n + 10, bookmark_period=3600, chunk_buffer=chunk_buffer
    ) as cluster:
        before = cluster.resource_version
        batch = 5000
        for start in range(0, n, batch):
            pods = [
                make_pod(f"web-{i:07d}", f"ns-{i % 20}", size=size)
                for i in range(start, min(n, start + batch))
            ]
            cluster.create_many("pods", pods)
        print("READY", cluster.server, before, cluster.resource_version, flush=True)
        async with anyio.create_task_group() as tg:
            if period > 0:
                tg.start_soon(churn, cluster, period)
            stdin = anyio.wrap_file(sys.stdin)
            await stdin.read()  # until the parent closes our stdin
            tg.cancel_scope.cancel()


if __name__ == "__main__":
    args = sys.argv[1:]
    anyio.run(
        main,
        int(args[0]),
        int(args[1]),
        int((args[2:] or ["2048"])[0]),
        float((args[3:] or ["0"])[0]),
    )
