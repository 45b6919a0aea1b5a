"""The per-user dashboard (issue 33, ``--user-tokens``): what a user's own stream costs, and
how soon a revocation or a grant reaches it.

Prints two tables, each with its peer measured in the same run:

1. ``--users`` browsers opening the live pods table at once: seconds until every stream has
   its snapshot (its ``synced`` event), and the rows they received by then, per-user mode
   (users who may list pods in one namespace of ``--namespaces``, ``--pods`` pods each; and
   users who may list them all) against the dashboard of one identity (whose streams share
   one view and see every pod);
2. ``--rounds`` revocations and new grants of one user's RoleBinding while their stream is
   open: seconds from the change at the API server to the page's rows leaving (a ``RESET``
   of the context) and coming back, p50 and max, against the 2 s target.

Everything runs in one process (the FakeCluster, the dashboard, the readers): the figures are
for comparing the two modes, not absolute.

    python bench/dashboard_users.py [--users 50] [--namespaces 50] [--pods 40] [--rounds 10]
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import table

from kubemux import Backoff, WatchSettings
from kubemux.dashboard import DashboardServer, create_app
from kubemux.testing import FakeCluster, make_pod, write_kubeconfig
from kubemux.testing._state.state import RBAC_RESOURCES

RBAC = "rbac.authorization.k8s.io"
READ = {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}
FAST = {"settings": WatchSettings(backoff=Backoff(initial_delay=0.02, max_delay=0.1))}


def binding(namespace: str, user: str) -> dict[str, Any]:
    return {
        "metadata": {"namespace": namespace, "name": f"{user}-reads"},
        "roleRef": {"apiGroup": RBAC, "kind": "Role", "name": "reader"},
        "subjects": [{"apiGroup": RBAC, "kind": "User", "name": user}],
    }


class Reader:
    """One stream's rows, as the page keeps them."""

    def __init__(self, response: httpx.Response) -> None:
        self.lines = response.aiter_lines()
        self.rows: set[tuple[str, str]] = set()
        self.received = 0

    async def event(self) -> tuple[str, Any]:
        name, data = "message", ""
        async for line in self.lines:
            if line.startswith("event: "):
                name = line[7:]
            elif line.startswith("data: "):
                data = line[6:]
            elif not line and data:
                parsed = orjson.loads(data)
                if name == "changes":
                    for c in parsed:
                        if c["type"] in ("ADDED", "MODIFIED"):
                            self.rows.add((c["namespace"], c["name"]))
                            self.received += 1
                        elif c["type"] == "RESET":
                            self.rows.clear()
                return name, parsed
        raise EOFError

    async def until(self, name: str) -> None:
        while (await self.event())[0] != name:
            pass


@contextlib.asynccontextmanager
async def dashboard(path: Path, users: bool) -> AsyncIterator[str]:
    app = create_app(kubeconfig=str(path), registry_options=FAST, user_tokens=users)
    server = DashboardServer(app, port=0)
    async with anyio.create_task_group() as tg:
        url: str = await tg.start(server.serve)
        try:
            yield url
        finally:
            server.shutdown()


async def open_streams(
    url: str, tokens: list[str | None], stack: contextlib.AsyncExitStack
) -> tuple[float, list[Reader]]:
    start = time.perf_counter()
    readers: list[Reader] = []
    for token in tokens:
        client = await stack.enter_async_context(httpx.AsyncClient(base_url=url, timeout=60))
        if token is not None:
            await client.post("/login", data={"token": token}, headers={"Origin": url[:-1]})
        response = await stack.enter_async_context(client.stream("GET", "/api/stream"))
        readers.append(Reader(response))
    async with anyio.create_task_group() as tg:
        for reader in readers:
            tg.start_soon(reader.until, "synced")
    return time.perf_counter() - start, readers


async def main(args: argparse.Namespace) -> None:
    async with FakeCluster(tokens={"admin"}, rbac=True) as cluster:
        for n in range(args.namespaces):
            cluster.create(
                RBAC_RESOURCES["roles"],
                {"metadata": {"namespace": f"ns-{n}", "name": "reader"}, "rules": [READ]},
            )
        tokens: list[str | None] = []
        for u in range(args.users):
            cluster.create(
                RBAC_RESOURCES["rolebindings"], binding(f"ns-{u % args.namespaces}", f"user-{u}")
            )
            tokens.append(cluster.add_user(f"user-{u}"))
        cluster.create(
            RBAC_RESOURCES["clusterrolebindings"],
            {
                "metadata": {"name": "readers"},
                "roleRef": {"apiGroup": RBAC, "kind": "ClusterRole", "name": "view"},
                "subjects": [{"apiGroup": RBAC, "kind": "Group", "name": "readers"}],
            },
        )
        wide: list[str | None] = [
            cluster.add_user(f"reader-{u}", groups=("readers",)) for u in range(args.users)
        ]
        for n in range(args.namespaces):
            for p in range(args.pods):
                cluster.create("pods", make_pod(f"pod-{p}", f"ns-{n}"))
        with tempfile.TemporaryDirectory() as folder:
            path = write_kubeconfig(Path(folder) / "config", {"prod": cluster})
            rows = []
            for label, users, who in (
                ("one identity (shared view)", False, [None] * args.users),
                ("per user, one namespace each", True, tokens),
                ("per user, every namespace", True, wide),
            ):
                async with dashboard(path, users) as url, contextlib.AsyncExitStack() as stack:
                    await open_streams(url, [who[0]], stack)  # the table view synced
                    took, readers = await open_streams(url, who, stack)
                    received = sum(r.received for r in readers)
                    rows.append([label, f"{took:.2f}", f"{received:,}"])
            base = float(rows[0][1])
            for row in rows:
                row.append(f"{float(row[1]) / base:.2f}x")
            print(
                table(
                    f"{args.users} streams of the pods table ({args.namespaces} namespaces x "
                    f"{args.pods} pods; all at once)",
                    ["mode", "all synced (s)", "rows by then", "ratio"],
                    rows,
                )
            )

            revoked: list[float] = []
            granted: list[float] = []
            async with dashboard(path, True) as url, contextlib.AsyncExitStack() as stack:
                _, (reader,) = await open_streams(url, [tokens[0]], stack)
                while len(reader.rows) < args.pods:  # the table view's first list
                    await reader.event()
                for _ in range(args.rounds):
                    start = time.perf_counter()
                    cluster.delete(RBAC_RESOURCES["rolebindings"], "ns-0", "user-0-reads")
                    while reader.rows:
                        await reader.event()
                    revoked.append(time.perf_counter() - start)
                    start = time.perf_counter()
                    cluster.create(RBAC_RESOURCES["rolebindings"], binding("ns-0", "user-0"))
                    while len(reader.rows) < args.pods:
                        await reader.event()
                    granted.append(time.perf_counter() - start)
            print(
                table(
                    f"an open stream after a RoleBinding change ({args.rounds} rounds; target 2 s)",
                    ["change", "p50 (ms)", "max (ms)", "max / target"],
                    [
                        [
                            what,
                            f"{statistics.median(t) * 1000:.1f}",
                            f"{max(t) * 1000:.1f}",
                            f"{max(t) / 2:.4f}",
                        ]
                        for what, t in (
                            ("revoked: rows gone", revoked),
                            ("granted: rows back", granted),
                        )
                    ],
                )
            )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--users", type=int, default=50)
    parser.add_argument("--namespaces", type=int, default=50)
    parser.add_argument("--pods", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=10)
    anyio.run(main, parser.parse_args())
