"""The Redis share engine under faults found by bench/share.py's 100-cluster runs (issue 22):
a lease lost while a snapshot is being staged, and a replica following more slots than
redis-py's default pool holds. Real redis-server, real FakeClusters, real informers."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from kubemux._cache.store import Store
from kubemux._informer.informer import InformerKey
from kubemux._kubeconfig.load import load_kubeconfig
from kubemux._resources import parse_resource
from kubemux._settings import Backoff, WatchSettings
from kubemux.share import Redis, informer_lead, share_key
from kubemux.share._redis import COMMAND_CONNECTIONS
from kubemux.share._redis_keys import STAGE_CHUNK, slot_digest
from kubemux.testing import FakeCluster, make_pod, write_kubeconfig
from share_support import RedisServer
from support import TIMEOUT, wait_until

pytest.importorskip("redis")

SETTINGS = WatchSettings(backoff=Backoff(initial_delay=0.05, max_delay=0.2))


def lists(cluster: FakeCluster) -> int:
    """LISTs of pods (plain or streaming) the cluster received."""
    return sum(
        1
        for r in cluster.requests
        if r.path.endswith("/pods")
        and (not r.is_watch or r.query.get("sendInitialEvents") == "true")
    )


@pytest.fixture
async def big_cluster() -> AsyncIterator[FakeCluster]:
    """A cluster whose snapshot takes several staging chunks."""
    async with FakeCluster(tokens={"t"}, bookmark_period=0.5) as c:
        n = STAGE_CHUNK * 3 + 1
        c.create_many("pods", (make_pod(f"p-{i}", size=200) for i in range(n)))
        yield c


async def test_lease_lost_while_a_snapshot_is_staged_is_fenced_not_a_crash(
    redis_server: RedisServer, big_cluster: FakeCluster, tmp_path: Path
) -> None:
    """bench/share.py 100x5: the renewal lost the lease (token cleared, then an acquire
    awaited) while the writer staged a snapshot; the writer then met ``assert token is not
    None`` and the AssertionError failed the slot (InternalError, informer restarted).

    Redis holds the staging (CLIENT PAUSE WRITE) until the next renewal is queued behind
    it; that renewal finds another writer's token, and its acquire is held here until the
    writer has finished staging. The snapshot must count as fenced, its stage dropped, and
    the slot follow: no exception, no second LIST."""
    import redis.asyncio as aioredis

    from kubemux._http.client import open_client

    kubeconfig = write_kubeconfig(tmp_path / "config", {"fake": big_cluster})
    config = load_kubeconfig(str(kubeconfig)).contexts["fake"]
    pods = parse_resource("pods")
    key = share_key(server=config.server, ca=None, identity="u", resource=pods)
    engine = Redis(  # placement off: no membership write waits in the pause too
        redis_server.url, prefix="t", lease_ttl=1.5, command_timeout=20.0, placement=False
    )
    admin = aioredis.Redis.from_url(redis_server.url)
    store = Store(pods)
    lease = meta = ""
    renewals: list[str] = []  # "paused" once the first armed renewal paused Redis
    renewal_queued = anyio.Event()
    acquire_held = anyio.Event()
    release_acquire = anyio.Event()
    armed = False

    async def blocked_clients() -> int:
        info = await admin.info("clients")
        return int(info["blocked_clients"])

    try:
        async with open_client(config) as client, engine.open() as session:
            real_renew, real_acquire = session.env.renew, session.env.acquire

            async def renew(*, keys: list[str], args: list[Any]) -> Any:
                if not armed:
                    return await real_renew(keys=keys, args=args)
                if not renewals:
                    res = await real_renew(keys=keys, args=args)
                    if len(res) >= 2:  # a snapshot came first (a renewal in flight saw it)
                        await admin.delete(meta)
                        return res
                    # meta is gone: this renewal asks for a snapshot
                    renewals.append("paused")
                    await admin.set(lease, "5" * 32, xx=True, px=60_000)  # another writer
                    await admin.execute_command("CLIENT", "PAUSE", "30000", "WRITE")
                    return res  # the snapshot's first chunk is held by the pause
                renewals.append("queued")
                renewal_queued.set()
                return await real_renew(keys=keys, args=args)  # held behind that chunk

            async def acquire(*, keys: list[str], args: list[Any]) -> Any:
                if renewals:
                    acquire_held.set()
                    await release_acquire.wait()
                return await real_acquire(keys=keys, args=args)

            session.env = dataclasses.replace(session.env, renew=renew, acquire=acquire)
            lead = informer_lead(client, pods, InformerKey("pods"), settings=SETTINGS, store=store)
            async with anyio.create_task_group() as tg:
                with anyio.fail_after(TIMEOUT * 2):
                    await tg.start(
                        lambda task_status: session.run_slot(
                            key=key, store=store, lead=lead, task_status=task_status
                        )
                    )
                    await wait_until(lambda: session.slot_status(key).epoch is not None, poll=0.02)
                    assert session.slot_status(key).role == "leader"
                    (found,) = [k async for k in admin.scan_iter(match="t:*:lease")]
                    lease = found.decode()
                    meta = lease.removesuffix(":lease") + ":meta"
                    await admin.delete(meta)  # the next renewal sees it gone: a snapshot
                    armed = True
                    await renewal_queued.wait()
                    # the staging's chunk and the renewal both wait in Redis, in that order
                    await wait_until(lambda: _at_least(blocked_clients, 2), poll=0.02)
                    await admin.execute_command("CLIENT", "UNPAUSE")
                    await acquire_held.wait()  # the renewal found the lease taken
                    n = len(store)
                    await wait_until(lambda: session.slot_status(key).fenced_writes >= n, poll=0.02)
                    release_acquire.set()
                    await wait_until(lambda: session.slot_status(key).role == "follower", poll=0.02)
                    assert [k async for k in admin.scan_iter(match="t:*:stage*")] == []
                    assert lists(big_cluster) == 1  # the informer was never restarted
                    assert session.slot_status(key).last_error is None
                    tg.cancel_scope.cancel()
    finally:
        release_acquire.set()
        with anyio.move_on_after(5, shield=True):
            await admin.execute_command("CLIENT", "UNPAUSE")
            await admin.aclose()


async def _at_least(count: Any, n: int) -> bool:
    return bool(await count() >= n)


FOLLOWED = 120  # more than redis-py 8's default pool (100 connections)


async def test_a_replica_follows_more_slots_than_a_connection_pool_holds(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    """bench/share.py 100 clusters: redis-py 8 caps a pool at 100 connections and each
    followed slot held one in its blocking XREAD, so a replica following 100 slots got
    ``MaxConnectionsError: Too many connections`` on every slot. 120 slots followed (their
    streams waited for before any leader exists, then tailed) sync, follow changes, and
    never meet an error; the follower holds a bounded number of connections."""
    import redis.asyncio as aioredis

    from kubemux._http.client import open_client

    async with FakeCluster(tokens={"t"}, bookmark_period=0.5) as cluster:
        for i in range(FOLLOWED):
            cluster.create("pods", make_pod("p", f"ns-{i}", size=200))
        kubeconfig = write_kubeconfig(tmp_path / "config", {"fake": cluster})
        config = load_kubeconfig(str(kubeconfig)).contexts["fake"]
        pods = parse_resource("pods")
        keys = [
            share_key(
                server=config.server, ca=None, identity="u", resource=pods, namespace=f"ns-{i}"
            )
            for i in range(FOLLOWED)
        ]
        engine = Redis(redis_server.url, prefix="m", lease_ttl=3.0, acquire_period=0.25)
        engine_f = Redis(
            redis_server.url + "?client_name=follower",
            prefix="m",
            lease_ttl=3.0,
            acquire_period=0.25,
        )
        admin = aioredis.Redis.from_url(redis_server.url)
        followed = [Store(pods) for _ in keys]
        try:
            async with (
                contextlib.AsyncExitStack() as stack,
                engine.open() as leading,
                engine_f.open() as following,
                anyio.create_task_group() as tg,
            ):
                for key, store in zip(keys, followed, strict=True):
                    tg.start_soon(
                        lambda key=key, store=store: following.run_slot(
                            key=key, store=store, lead=_no_lead, can_lead=False
                        )
                    )
                with anyio.fail_after(TIMEOUT * 4):
                    # every follower waits for a first snapshot (a blocking read) before any
                    # leader: the moment each held a connection of its own
                    await wait_until(
                        lambda: all(following.slot_status(k) is not None for k in keys), poll=0.05
                    )
                    # a client (an HTTP connection pool) per 30 watches
                    clients = [
                        await stack.enter_async_context(open_client(config))
                        for _ in range(0, FOLLOWED, 30)
                    ]
                    for i, key in enumerate(keys):
                        client = clients[i // 30]
                        store = Store(pods)
                        lead = informer_lead(
                            client,
                            pods,
                            InformerKey("pods", namespace=f"ns-{i}"),
                            settings=SETTINGS,
                            store=store,
                        )
                        tg.start_soon(
                            lambda key=key, store=store, lead=lead: leading.run_slot(
                                key=key, store=store, lead=lead
                            )
                        )
                    await wait_until(lambda: all(len(s) == 1 for s in followed), poll=0.05)
                    for i in range(FOLLOWED):
                        pod = cluster.get("pods", f"ns-{i}", "p")
                        assert pod is not None
                        pod["metadata"]["labels"] = {"step": "1"}
                        cluster.update("pods", pod)
                    await wait_until(
                        lambda: all(
                            (s.get(f"ns-{i}", "p") or {}).get("metadata", {}).get("labels")
                            == {"step": "1"}
                            for i, s in enumerate(followed)
                        ),
                        poll=0.05,
                    )
                statuses = [following.slot_status(k) for k in keys]
                assert {s.role for s in statuses if s is not None} == {"follower"}
                errors = {n for s in statuses if s is not None for n in s.errors_by_type}
                assert errors == set(), errors
                assert following.env.tails.readers == 1  # one blocking read for 120 slots
                names = [c["name"] for c in await admin.client_list()]
                assert names.count("follower") <= COMMAND_CONNECTIONS + 1
                tg.cancel_scope.cancel()
        finally:
            await admin.aclose()


async def _no_lead(resume_rv: str | None, publish: Any, task_status: Any) -> None:
    raise AssertionError("a follow-only slot never leads")


async def test_a_slot_that_starts_following_interrupts_the_read_in_flight(
    redis_server: RedisServer, fake_cluster: FakeCluster, tmp_path: Path
) -> None:
    """One blocking read covers every followed stream of a session: a slot that starts
    following while that read blocks (here for 20 s, on another slot's stream) must get
    its changes at once (CLIENT UNBLOCK), not when the read times out."""
    import redis.asyncio as aioredis

    from kubemux._http.client import open_client

    kubeconfig = write_kubeconfig(tmp_path / "config", {"fake": fake_cluster})
    config = load_kubeconfig(str(kubeconfig)).contexts["fake"]
    pods = parse_resource("pods")
    idle, busy = (
        share_key(server=config.server, ca=None, identity="u", resource=pods, namespace=ns)
        for ns in ("nobody-leads", "default")
    )
    # acquire_period 10 s: a follower's read blocks 20 s
    engine = Redis(redis_server.url, prefix="k", lease_ttl=3.0, acquire_period=10.0)
    admin = aioredis.Redis.from_url(redis_server.url)
    leader_store, followed = Store(pods), Store(pods)
    try:
        async with (
            open_client(config) as client,
            engine.open() as leading,
            engine.open() as following,
            anyio.create_task_group() as tg,
        ):
            tg.start_soon(
                lambda: following.run_slot(
                    key=idle, store=Store(pods), lead=_no_lead, can_lead=False
                )
            )
            lead = informer_lead(
                client,
                pods,
                InformerKey("pods", namespace="default"),
                settings=SETTINGS,
                store=leader_store,
            )
            with anyio.fail_after(TIMEOUT):
                await tg.start(
                    lambda task_status: leading.run_slot(
                        key=busy,
                        store=leader_store,
                        lead=lead,
                        task_status=task_status,
                    )
                )
                # the follower's reader blocks on the idle slot's stream
                await wait_until(lambda: _at_least(blocked_clients(admin), 1), poll=0.02)
                await tg.start(
                    lambda task_status: following.run_slot(
                        key=busy,
                        store=followed,
                        lead=_no_lead,
                        task_status=task_status,
                        can_lead=False,
                    )
                )
                assert following.env.tails.readers == 1  # both streams in one read
            pod = fake_cluster.get("pods", "default", "p-1")
            assert pod is not None
            pod["metadata"]["labels"] = {"step": "1"}
            fake_cluster.update("pods", pod)
            with anyio.fail_after(5):  # the read in flight would return after 20 s
                await wait_until(
                    lambda: (
                        (followed.get("default", "p-1") or {})["metadata"].get("labels")
                        == {"step": "1"}
                    ),
                    poll=0.02,
                )
            tg.cancel_scope.cancel()
    finally:
        await admin.aclose()


def blocked_clients(admin: Any) -> Any:
    async def count() -> int:
        return int((await admin.info("clients"))["blocked_clients"])

    return count


async def test_a_forged_stream_key_fails_only_its_own_slot(
    redis_server: RedisServer, fake_cluster: FakeCluster, tmp_path: Path
) -> None:
    """Redis is untrusted input: one slot's stream replaced by a string makes a
    multi-stream XREAD fail as a whole (WRONGTYPE). Only that slot may see the error; the
    other slot read with it keeps tailing (no error, no rehydration)."""
    import redis.asyncio as aioredis

    from kubemux._http.client import open_client

    kubeconfig = write_kubeconfig(tmp_path / "config", {"fake": fake_cluster})
    config = load_kubeconfig(str(kubeconfig)).contexts["fake"]
    pods = parse_resource("pods")
    namespaces = ("default", "other")
    keys = {
        ns: share_key(server=config.server, ca=None, identity="u", resource=pods, namespace=ns)
        for ns in namespaces
    }
    engine = Redis(redis_server.url, prefix="w", lease_ttl=3.0, acquire_period=0.25)
    admin = aioredis.Redis.from_url(redis_server.url)
    followed = {ns: Store(pods) for ns in namespaces}
    try:
        async with (
            open_client(config) as client,
            engine.open() as leading,
            engine.open() as following,
            anyio.create_task_group() as tg,
        ):
            with anyio.fail_after(TIMEOUT):
                for ns in namespaces:
                    store = Store(pods)
                    lead = informer_lead(
                        client,
                        pods,
                        InformerKey("pods", namespace=ns),
                        settings=SETTINGS,
                        store=store,
                    )
                    await tg.start(
                        lambda task_status, ns=ns, store=store, lead=lead: leading.run_slot(
                            key=keys[ns],
                            store=store,
                            lead=lead,
                            task_status=task_status,
                        )
                    )
                    await tg.start(
                        lambda task_status, ns=ns: following.run_slot(
                            key=keys[ns],
                            store=followed[ns],
                            lead=_no_lead,
                            task_status=task_status,
                            can_lead=False,
                        )
                    )
                # the "other" slot's stream becomes a string (its leader writes nothing)
                log_key = f"w:{{{slot_digest(keys['other'])}}}:log"
                assert await admin.exists(log_key)
                await admin.delete(log_key)
                await admin.set(log_key, "forged")
                await wait_until(
                    lambda: "ResponseError" in following.slot_status(keys["other"]).errors_by_type,
                    poll=0.02,
                )
                for step in range(3):  # the healthy slot keeps tailing meanwhile
                    pod = fake_cluster.get("pods", "default", "p-1")
                    assert pod is not None
                    pod["metadata"]["labels"] = {"step": str(step)}
                    fake_cluster.update("pods", pod)
                    await wait_until(
                        lambda step=step: (
                            (followed["default"].get("default", "p-1") or {})["metadata"].get(
                                "labels"
                            )
                            == {"step": str(step)}
                        ),
                        poll=0.02,
                    )
            healthy = following.slot_status(keys["default"])
            assert healthy.errors_by_type == {} and healthy.rehydrations == 1
            tg.cancel_scope.cancel()
    finally:
        await admin.aclose()
