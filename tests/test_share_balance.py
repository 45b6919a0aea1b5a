"""Shared watches spread over the replicas (issue 22): placement in the Redis engine.

In-process share sessions against a FakeCluster (a handover measured exactly: no LIST, no
gap, no duplicate for a follower), and real replica processes
(tests/share_registry_replica.py, each with its own WatcherRegistry) against twelve
FakeClusters: balance after start, after a SIGKILL, after a join. Real redis-server;
skipped without it, unless CI=true.
"""

from __future__ import annotations

import collections
import contextlib
import signal
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import pytest

from kubemux._cache.store import Store
from kubemux._informer.informer import InformerKey
from kubemux._kubeconfig.load import load_kubeconfig
from kubemux._resources import parse_resource
from kubemux._settings import Backoff, WatchSettings
from kubemux._wire.codec import Entry
from kubemux.share import Redis, informer_lead, share_key
from kubemux.testing import FakeCluster, make_pod, write_kubeconfig
from share_support import STARTUP, RedisServer, Replica
from support import listen, wait_until

pytest.importorskip("redis")

HERE = Path(__file__).resolve().parent
REPLICA = HERE / "share_registry_replica.py"
NAMESPACES = ("ns0", "ns1", "ns2", "ns3")
FAST = WatchSettings(backoff=Backoff(initial_delay=0.05, max_delay=0.5))


def lists(cluster: FakeCluster, plural: str = "pods") -> int:
    """LISTs (plain or streaming) of one resource the cluster received."""
    return sum(
        1
        for r in cluster.requests
        if r.path.endswith("/" + plural)
        and (not r.is_watch or r.query.get("sendInitialEvents") == "true")
    )


# ---------------------------------------------------------------------- in process
@pytest.fixture
async def cluster() -> AsyncIterator[FakeCluster]:
    async with FakeCluster(bookmark_period=0.5) as c:
        for ns in NAMESPACES:
            c.create_many("pods", (make_pod(f"p{i}", ns) for i in range(5)))
        yield c


async def test_a_joining_replica_takes_its_share_by_handover_without_list_gap_or_duplicate(
    redis_server: RedisServer, cluster: FakeCluster, tmp_path: Path
) -> None:
    from kubemux._http.client import open_client

    config = load_kubeconfig(str(write_kubeconfig(tmp_path / "c", {"fake": cluster})))
    config_ = config.contexts["fake"]
    pods = parse_resource("pods")
    keys = {
        ns: share_key(server=config_.server, ca=None, identity="u", resource=pods, namespace=ns)
        for ns in NAMESPACES
    }
    engine = Redis(redis_server.url, prefix="h", lease_ttl=1.5, acquire_period=0.05)
    seen: dict[str, list[tuple[str, str]]] = {ns: [] for ns in NAMESPACES}
    follow_stores = {ns: Store(pods) for ns in NAMESPACES}

    def recorder(ns: str) -> Any:
        def on_change(etype: str, entry: Entry, old: Entry | None) -> None:
            seen[ns].append((etype, entry.name))

        return on_change

    async with (
        open_client(config_) as client,
        engine.open() as first,
        engine.open() as joiner,
        engine.open() as follower,
        anyio.create_task_group() as tg,
    ):

        async def run(session: Any, ns: str, store: Store, *, can_lead: bool = True) -> None:
            lead = informer_lead(
                client, pods, InformerKey("pods", namespace=ns), settings=FAST, store=store
            )
            await tg.start(
                lambda task_status: session.run_slot(
                    key=keys[ns],
                    store=store if can_lead else listen(store, recorder(ns)),
                    lead=lead,
                    task_status=task_status,
                    can_lead=can_lead,
                )
            )

        for ns in NAMESPACES:  # the only member: it leads all four
            await run(first, ns, Store(pods))
        for ns in NAMESPACES:
            await run(follower, ns, follow_stores[ns], can_lead=False)
        assert first.placement_status().leads == 4
        assert lists(cluster) == 4
        for ns in NAMESPACES:
            await run(joiner, ns, Store(pods))

        def names(ns: str) -> set[str]:
            return {
                o["metadata"]["name"]
                for o in cluster.objects("pods")
                if o["metadata"]["namespace"] == ns
            }

        async def changes(*, task_status: anyio.abc.TaskStatus[anyio.CancelScope]) -> None:
            with anyio.CancelScope() as scope:  # objects keep coming through the handovers
                task_status.started(scope)
                n = 0
                while True:
                    for ns in NAMESPACES:
                        cluster.create("pods", make_pod(f"new-{n}", ns))
                    n += 1
                    await anyio.sleep(0.01)

        producer = await tg.start(changes)
        await wait_until(
            lambda: joiner.placement_status().leads == 2 and first.placement_status().leads == 2
        )
        producer.cancel()
        # no gap: every follower store ends up equal to the server's objects
        await wait_until(
            lambda: all({n for _, n in follow_stores[ns]} == names(ns) for ns in NAMESPACES)
        )
        assert first.placement_status().handovers == 2
        assert first.placement_status().prefers == 2
        assert joiner.placement_status().prefers == 2
        assert first.placement_status().members == 2  # the follow-only session is not one
        statuses = [follower.slot_status(k) for k in keys.values()]
        assert [s.rehydrations for s in statuses if s is not None] == [1] * 4  # only the first
        assert lists(cluster) == 4  # the new leaders resumed from the published version
        for ns in NAMESPACES:
            counts = collections.Counter(seen[ns])
            assert all(n == 1 for n in counts.values()), counts.most_common(3)  # no duplicate
            assert {etype for etype, _ in seen[ns]} == {"ADDED"}
            assert len(seen[ns]) == len(names(ns)) > 5
        tg.cancel_scope.cancel()


async def _ghost_case(
    redis_server: RedisServer, cluster: FakeCluster, tmp_path: Path, *, flapping: bool
) -> None:
    """One real session and a member record of a replica that never takes a lease."""
    import redis.asyncio as aioredis

    from kubemux._http.client import open_client
    from kubemux.share._placement import Membership
    from kubemux.share._redis_keys import slot_digest

    config = load_kubeconfig(str(write_kubeconfig(tmp_path / "c", {"fake": cluster})))
    config_ = config.contexts["fake"]
    pods = parse_resource("pods")
    keys = {
        ns: share_key(server=config_.server, ca=None, identity="u", resource=pods, namespace=ns)
        for ns in NAMESPACES
    }
    digests = [slot_digest(k) for k in keys.values()]
    engine = Redis(redis_server.url, prefix="g", lease_ttl=0.6, acquire_period=0.05)
    raw = aioredis.Redis.from_url(redis_server.url)
    ghost = Membership(raw, prefix="g", member_id="ghost", ttl=0.6)
    ghost.set_slots(digests)
    reserved: list[Any] = []
    renewals = 0
    try:
        async with (
            open_client(config_) as client,
            engine.open() as session,
            anyio.create_task_group() as tg,
        ):

            async def keep_ghost() -> None:  # renews, on time or (flapping) after expiry
                nonlocal renewals
                while True:
                    await ghost.join()
                    renewals += 1
                    await anyio.sleep(0.9 if flapping else ghost.renew_period)

            async def watch_reservations() -> None:
                while True:
                    for d in digests:
                        value = await raw.get(f"g:{{{d}}}:next")
                        if value is not None:
                            reserved.append(value)
                    await anyio.sleep(0.02)

            tg.start_soon(keep_ghost)
            await wait_until(lambda: renewals >= 1)
            tg.start_soon(watch_reservations)
            started = time.monotonic()
            for ns in NAMESPACES:
                store = Store(pods)
                lead = informer_lead(
                    client, pods, InformerKey("pods", namespace=ns), settings=FAST, store=store
                )
                await tg.start(
                    lambda task_status, ns=ns, store=store, lead=lead: session.run_slot(
                        key=keys[ns], store=store, lead=lead,
                        task_status=task_status,
                    )
                )  # fmt: skip
            # every slot has a leader within about the grace period, though the ghost is
            # preferred for some of them and never takes one
            await wait_until(lambda: session.placement_status().leads == 4)
            assert time.monotonic() - started < 4 * engine.lease_ttl + 2.0
            if flapping:  # its age starts again at every renewal: nothing is reserved for it
                await wait_until(lambda: renewals >= 6, timeout=30)
                assert reserved == []
            else:  # reserved for it, not taken: the reservation expires, nothing moved
                await wait_until(lambda: bool(reserved))
                assert set(reserved) == {b"ghost"}
                assert session.placement_status().prefers == 2  # the ghost the others
                n = renewals
                await wait_until(lambda: renewals >= n + 8, timeout=30)  # > 2 lease periods
            st = session.placement_status()
            assert st.leads == 4 and st.handovers == 0
            statuses = [session.slot_status(k) for k in keys.values()]
            assert [x.promotions for x in statuses if x is not None] == [1] * 4  # kept the lead
            assert lists(cluster) == 4
            tg.cancel_scope.cancel()
    finally:
        await raw.aclose()


async def test_a_slot_preferred_by_an_absent_member_is_led_after_the_grace_period(
    redis_server: RedisServer, cluster: FakeCluster, tmp_path: Path
) -> None:
    await _ghost_case(redis_server, cluster, tmp_path, flapping=False)


async def test_a_flapping_member_is_never_handed_a_slot(
    redis_server: RedisServer, cluster: FakeCluster, tmp_path: Path
) -> None:
    await _ghost_case(redis_server, cluster, tmp_path, flapping=True)


# ---------------------------------------------------------------------- replica processes
@contextlib.asynccontextmanager
async def fake_clusters(n: int) -> AsyncIterator[list[FakeCluster]]:
    async with contextlib.AsyncExitStack() as stack:
        out = []
        for _ in range(n):
            c = await stack.enter_async_context(FakeCluster(bookmark_period=0.5))
            c.create_many("pods", (make_pod(f"web-{i}") for i in range(5)))
            out.append(c)
        yield out


async def one_watch(cluster: FakeCluster) -> None:
    await cluster.wait_for(lambda: cluster.open_watches == 1)


def leaders(reps: list[Replica]) -> list[int]:
    """Contexts each replica leads, by its last report."""
    out = []
    for r in reps:
        reports = [e["roles"] for e in r.events if e["op"] == "roles"]
        out.append(sum(role == "leader" for role in (reports[-1] if reports else {}).values()))
    return out


def balanced(reps: list[Replica], total: int) -> bool:
    counts = leaders(reps)
    return sum(counts) == total and max(counts) - min(counts) <= 1


async def test_twelve_clusters_three_replicas_balance_after_start_kill_and_join(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    async with fake_clusters(12) as clusters:
        kubeconfig = write_kubeconfig(
            tmp_path / "config", {f"c{i}": c for i, c in enumerate(clusters)}
        )

        def replica(name: str) -> Replica:
            return Replica(name, [redis_server.url, str(kubeconfig), "pods"], script=REPLICA)

        reps = [replica(f"r{i}") for i in range(3)]
        joiner = replica("r3")
        async with anyio.create_task_group() as tg:
            try:
                for r in reps:
                    await r.start(tg)
                await reps[0].wait(lambda: balanced(reps, 12), 4 * STARTUP)
                assert sorted(leaders(reps)) == [4, 4, 4]
                for c in clusters:
                    await one_watch(c)
                    assert lists(c) == 1  # handovers resume: never a LIST

                victim = max(reps, key=lambda r: leaders([r])[0])
                victim.signal(signal.SIGKILL)
                killed = time.monotonic()
                survivors = [r for r in reps if r is not victim]
                await survivors[0].wait(lambda: sum(leaders(survivors)) == 12, 10)
                assert time.monotonic() - killed <= 5.0  # every slot led again (failover)
                await survivors[0].wait(lambda: balanced(survivors, 12), 20)
                assert sorted(leaders(survivors)) == [6, 6]

                await joiner.start(tg)
                everyone = [*survivors, joiner]
                await joiner.wait(lambda: balanced(everyone, 12), STARTUP + 30)
                assert sorted(leaders(everyone)) == [4, 4, 4]
                for c in clusters:
                    await one_watch(c)
                    assert lists(c) == 1
            finally:
                for r in [*reps, joiner]:
                    await r.close()


async def test_status_and_metrics_show_what_a_replica_leads_and_prefers(
    redis_server: RedisServer, cluster: FakeCluster, tmp_path: Path
) -> None:
    from prometheus_client import CollectorRegistry, generate_latest

    import kubemux.metrics
    from kubemux import WatcherRegistry

    kubeconfig = write_kubeconfig(tmp_path / "config", {"fake": cluster})
    engine = Redis(redis_server.url, prefix="m", lease_ttl=0.6, acquire_period=0.05)
    lead = WatcherRegistry.from_kubeconfig(str(kubeconfig), settings=FAST, share=engine)
    follow = WatcherRegistry.from_kubeconfig(
        str(kubeconfig), settings=FAST, share=engine, share_lead=False
    )
    prom = CollectorRegistry()
    async with WatcherRegistry.from_kubeconfig(str(kubeconfig)) as plain:
        assert plain.status().share is None
        assert "share" not in plain.status().to_json()
    async with lead, follow:
        for ns in NAMESPACES:
            await lead.watch("fake", "pods", namespace=ns)
            await follow.watch("fake", "pods", namespace=ns)
        await wait_until(lambda: lead.status().share.prefers == 4, registry=lead, poll=0.05)
        st = lead.status().share
        assert (st.leads, st.prefers, st.members, st.handovers) == (4, 4, 1, 0)
        assert st.member_id is not None
        fst = follow.status().share
        assert (fst.member_id, fst.leads, fst.prefers, fst.members) == (None, 0, 0, 1)
        assert lead.status().to_json()["share"]["leads"] == 4
        with kubemux.metrics.registered(lead, prom):
            text = await anyio.to_thread.run_sync(generate_latest, prom)
    lines = text.decode().splitlines()
    assert "kubemux_share_slots_led 4.0" in lines
    assert "kubemux_share_slots_preferred 4.0" in lines
    assert "kubemux_share_handovers_total 0.0" in lines


async def test_status_shows_every_replicas_leads_and_prefers(
    redis_server: RedisServer, cluster: FakeCluster, tmp_path: Path
) -> None:
    """Issue 22: status shows, per replica, how many slots it leads and prefers: every
    registry's ``status().share.replicas`` lists the live members from their records
    (a follow-only one too), sorted by id, and the JSON form carries them."""
    from kubemux import WatcherRegistry
    from kubemux.share import MemberStatus

    kubeconfig = write_kubeconfig(tmp_path / "config", {"fake": cluster})
    engine = Redis(redis_server.url, prefix="r", lease_ttl=1.5, acquire_period=0.1)
    one, two = (
        WatcherRegistry.from_kubeconfig(str(kubeconfig), settings=FAST, share=engine)
        for _ in range(2)
    )
    follow = WatcherRegistry.from_kubeconfig(
        str(kubeconfig), settings=FAST, share=engine, share_lead=False
    )

    def figures(registry: WatcherRegistry) -> list[tuple[int, int]]:
        return [(r.leads, r.prefers) for r in registry.status().share.replicas]

    async with one, two, follow:
        for ns in NAMESPACES:
            for registry in (one, two, follow):
                await registry.watch("fake", "pods", namespace=ns)
        with anyio.fail_after(30):
            for registry in (one, two, follow):  # handovers spread them; records follow
                await wait_until(lambda r=registry: figures(r) == [(2, 2), (2, 2)], poll=0.05)
        ids = sorted(str(r.status().share.member_id) for r in (one, two))
        for registry in (one, two, follow):
            replicas = registry.status().share.replicas
            assert [r.member_id for r in replicas] == ids
            assert all(isinstance(r, MemberStatus) and 0 < r.age < 60 for r in replicas)
        st = one.status().share
        (mine,) = [r for r in st.replicas if r.member_id == st.member_id]
        assert (mine.leads, mine.prefers) == (st.leads, st.prefers)
        assert follow.status().share.member_id is None  # it lists them, it is not one
        shown = follow.status().to_json()["share"]["replicas"]
        assert sorted(r["member_id"] for r in shown) == ids
        assert {(r["leads"], r["prefers"]) for r in shown} == {(2, 2)}
