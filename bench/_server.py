"""A FakeCluster in its own process, so benchmarks measure the client and not the server.

Usage: ``python bench/_server.py N SIZE [CHUNK_BUFFER]``: creates N pods of about SIZE bytes
(watch streams framed with FakeCluster's ``chunk_buffer``, Go's 2048 by default), prints
``READY <server> <rv_before> <rv_after>`` on stdout, and serves until stdin closes.
"""

from __future__ import annotations

import sys

import anyio

from kubemux.testing import FakeCluster, make_pod


async def main(n: int, size: int, chunk_buffer: int) -> None:
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
        stdin = anyio.wrap_file(sys.stdin)
        await stdin.read()  # until the parent closes our stdin


if __name__ == "__main__":
    anyio.run(main, int(sys.argv[1]), int(sys.argv[2]), int((sys.argv[3:] or ["2048"])[0]))
