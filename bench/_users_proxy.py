"""The proxy rows of bench/users.py: ``kubemux proxy --user-tokens`` against the same proxy
in single-identity mode, in one run, over one FakeCluster (in this process).

4. a cached 100-item LIST for a namespace-limited user (``--user-tokens``) against the same
   LIST with the proxy's own token (target <= 1.3x), both proxies warmed and alternated
   round by round;
5. what the user mode adds per cached read, measured in the app (authentication from the
   TokenReview cache, the request's attributes, the local decision; target <= 10 us p50);
6. SubjectAccessReviews sent per 1,000 cached reads: a user RBAC allows (target 0), a user
   only a webhook authorizer allows (one review, then its cached answer).
"""

from __future__ import annotations

import contextlib
import statistics
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import anyio
from _common import table

from kubemux import WatcherRegistry
from kubemux.proxy import ProxyServer, ProxySettings, encode_context
from kubemux.proxy._api.paths import parse_api_path
from kubemux.testing import FakeCluster, make_pod, write_kubeconfig
from kubemux.testing._state.state import RBAC_RESOURCES

RBAC = "rbac.authorization.k8s.io"
LIST = "/api/v1/namespaces/ns-1/pods"


def _grant(cluster: FakeCluster) -> None:
    cluster.create(
        RBAC_RESOURCES["rolebindings"],
        {
            "metadata": {"namespace": "ns-1", "name": "alice"},
            "roleRef": {"apiGroup": RBAC, "kind": "ClusterRole", "name": "view"},
            "subjects": [{"kind": "User", "name": "alice", "apiGroup": RBAC}],
        },
    )


@contextlib.asynccontextmanager
async def _proxy(registry: WatcherRegistry, settings: ProxySettings) -> AsyncIterator[ProxyServer]:
    server = ProxyServer(registry, port=0, settings=settings)
    async with anyio.create_task_group() as tg:
        await tg.start(server.serve)
        try:
            yield server
        finally:
            server.shutdown()


async def _timed(session: aiohttp.ClientSession, url: str, token: str, ssl: Any) -> float:
    headers = {"Authorization": f"Bearer {token}"}
    start = time.perf_counter()
    async with session.get(url, headers=headers, ssl=ssl) as resp:
        await resp.read()
        assert resp.status == 200, resp.status
    return time.perf_counter() - start


async def proxy_tables(rounds: int, reads: int, tmp: Path) -> str:
    async with FakeCluster(tokens={"admin"}, rbac=True, tls=True, name="prod") as cluster:
        for ns in ("ns-1", "ns-2"):
            for i in range(100):
                cluster.create("pods", make_pod(f"{ns}-{i}", ns))
        _grant(cluster)
        alice = cluster.add_user("alice")
        eve = cluster.add_user("eve")
        cluster.webhook = lambda caller, req: getattr(caller, "name", "") == "eve"
        kubeconfig = write_kubeconfig(tmp / "config", {"prod": cluster})
        async with (
            WatcherRegistry.from_kubeconfig(str(kubeconfig), transform=None) as registry,
            _proxy(registry, ProxySettings()) as single,
            _proxy(registry, ProxySettings(user_tokens=True)) as users,
            aiohttp.ClientSession() as session,
        ):
            path = f"/clusters/{encode_context('prod')}{LIST}"
            targets = {
                "single identity (the proxy's token)": (
                    f"{single.url}{path}",
                    single.token,
                    single.certificates.client_context(),
                ),
                "--user-tokens, a namespace-limited user": (
                    f"{users.url}{path}",
                    alice,
                    users.certificates.client_context(),
                ),
            }
            samples: dict[str, list[float]] = {name: [] for name in targets}
            for target in targets.values():  # warm: informers, TokenReview, sets
                for _ in range(20):
                    await _timed(session, *target)
            for _ in range(rounds):
                for name, target in targets.items():
                    samples[name].extend([await _timed(session, *target) for _ in range(20)])
            p50 = {name: statistics.median(s) * 1e6 for name, s in samples.items()}
            base = next(iter(p50.values()))
            rows = [[name, f"{v:.0f}", f"{v / base:.2f}x"] for name, v in p50.items()]
            list_table = table(
                "4. a cached 100-item LIST through the proxy (us per request, p50, "
                f"{rounds * 20} each; target <= 1.3x)",
                ["mode", "p50 us", "ratio"],
                rows,
            )
            added = await _added_per_read(users, alice)
            reviews = await _reviews_per_reads(users, session, path, alice, eve, reads)
    return f"{list_table}\n\n{added}\n\n{reviews}"


async def _added_per_read(server: ProxyServer, token: str) -> str:
    """The user mode's own work per cached read: admission (authentication from the
    cache, attributes, the local decision), in the app, without HTTP."""
    users = server.proxy.users
    assert users is not None
    api_path = parse_api_path(LIST.encode())
    assert api_path is not None
    scope = {
        "type": "http",
        "method": "GET",
        "headers": [(b"authorization", f"Bearer {token}".encode())],
        "query_string": b"",
    }
    caller = await users.admit("prod", api_path, scope)
    attrs = caller.attrs
    assert attrs is not None
    gate, authz, user = users.gate, caller.authz, caller.user

    async def admission() -> None:
        await users.admit("prod", api_path, scope)

    async def authentication() -> None:
        await gate.authenticate("prod", scope)

    async def attributes() -> None:
        gate.attributes("GET", api_path, b"")

    async def decision() -> None:
        await authz.decide(user, attrs)

    steps = [
        ("admission, all of it", admission),
        ("  authentication (the TokenReview cache)", authentication),
        ("  the request's attributes (RequestInfo)", attributes),
        ("  authorization (local RBAC; no review)", decision),
    ]
    samples: dict[str, list[float]] = {label: [] for label, _ in steps}
    for _ in range(25):
        for label, step in steps:
            start = time.perf_counter_ns()
            for _ in range(2000):
                await step()
            samples[label].append((time.perf_counter_ns() - start) / 2000 / 1000)
    rows = [[label, f"{statistics.median(v):.2f}"] for label, v in samples.items()]
    return table(
        "5. what --user-tokens adds per cached read (us, p50; target: authorization <= 10)",
        ["step", "p50 us"],
        rows,
    )


async def _reviews_per_reads(
    server: ProxyServer,
    session: aiohttp.ClientSession,
    path: str,
    alice: str,
    eve: str,
    reads: int,
) -> str:
    authz = await server.registry.authorizer("prod")
    ssl = server.certificates.client_context()
    rows = []
    for label, token in (
        ("namespace-limited user, allowed by RBAC", alice),
        ("a user only a webhook authorizer allows", eve),
    ):
        before = authz.reviews_sent
        for _ in range(reads):
            await _timed(session, f"{server.url}{path}", token, ssl)
        sent = authz.reviews_sent - before
        rows.append([label, str(reads), str(sent), f"{sent * 1000 / reads:g}"])
    return table(
        "6. SubjectAccessReviews sent by the proxy (target: 0 where RBAC allows)",
        ["reads by", "reads", "reviews", "per 1,000 reads"],
        rows,
    )
