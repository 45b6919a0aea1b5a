"""Shared watches through a real redis-server, with real replica processes (issue 13).

Each replica (tests/share_replica.py) runs a share session over a real informer against one
FakeCluster served by this process. Skipped without redis-server, unless CI=true.
"""

from __future__ import annotations

import base64
import signal
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import orjson
import pytest

from kubemux._cache.store import Store
from kubemux._informer.informer import InformerKey
from kubemux._kubeconfig.load import load_kubeconfig
from kubemux._resources import parse_resource
from kubemux._settings import Backoff, WatchSettings
from kubemux._wire.codec import Entry
from kubemux.share import Redis, SlotStatus, informer_lead, share_key
from kubemux.testing import FakeCluster, make_pod, write_kubeconfig
from share_support import STARTUP, RedisServer, Replica, require_redis_server
from support import TIMEOUT, listen

pytest.importorskip("redis")


@pytest.fixture
async def cluster() -> AsyncIterator[FakeCluster]:
    async with FakeCluster(tokens={"t0ken-never-in-redis"}, bookmark_period=0.5) as c:
        c.create_many("pods", (make_pod(f"web-{i}", size=600) for i in range(100)))
        yield c


@pytest.fixture
def kubeconfig(tmp_path: Path, cluster: FakeCluster) -> Path:
    return write_kubeconfig(tmp_path / "config", {"fake": cluster})


def lists(cluster: FakeCluster, plural: str = "pods") -> int:
    """LISTs (plain or streaming) of one resource the cluster received."""
    return sum(
        1
        for r in cluster.requests
        if r.path.endswith("/" + plural)
        and (not r.is_watch or r.query.get("sendInitialEvents") == "true")
    )


def truth(cluster: FakeCluster, plural: str = "pods") -> dict[str, str]:
    return {
        f"{o['metadata'].get('namespace', '')}/{o['metadata']['name']}": o["metadata"][
            "resourceVersion"
        ]
        for o in cluster.objects(plural)
    }


async def converge(cluster: FakeCluster, reps: list[Replica], timeout: float = 5.0) -> None:  # noqa: ASYNC109
    """Wait until every replica's store equals the server's objects."""
    with anyio.fail_after(timeout):
        while True:
            want = truth(cluster)
            dumps = [await r.dump() for r in reps]
            if all(d["objects"] == want for d in dumps):
                return
            await anyio.sleep(0.1)


def started(r: Replica) -> Callable[[], bool]:
    return lambda: any(e["op"] == "started" for e in r.events)


def start_args(redis: RedisServer, kubeconfig: Path, *extra: str) -> list[str]:
    return [redis.url, str(kubeconfig), "fake", "pods", *extra]


async def churn(cluster: FakeCluster, n: int, tag: str, on_step: Any = None) -> None:
    """n changes: updates, creates and deletes, at about 500 per second."""
    for i in range(n):
        if i % 5 == 4:
            cluster.delete("pods", "default", f"web-{i % 100}")
        elif i % 5 == 3:
            cluster.apply("pods", make_pod(f"new-{tag}-{i}", size=600))
        else:
            pod = cluster.get("pods", "default", f"web-{i % 100}")
            if pod is not None:
                pod["metadata"].setdefault("labels", {})["step"] = str(i)
                cluster.update("pods", pod)
        if on_step is not None:
            on_step(i)
        await anyio.sleep(0.002)


async def test_three_replicas_one_watch_and_failover_without_list(
    redis_server: RedisServer, cluster: FakeCluster, kubeconfig: Path
) -> None:
    async with anyio.create_task_group() as tg:
        reps = [Replica(f"r{i}", start_args(redis_server, kubeconfig)) for i in range(3)]
        try:
            for r in reps:
                await r.start(tg)
            for r in reps:
                await r.wait(started(r), STARTUP)
            assert sorted(r.role() or "" for r in reps) == ["follower", "follower", "leader"]
            await cluster.wait_for(lambda: cluster.open_watches == 1)
            assert lists(cluster) == 1
            await converge(cluster, reps)

            leader = next(r for r in reps if r.role() == "leader")
            others = [r for r in reps if r is not leader]
            killed_at: list[float] = []

            def kill(i: int) -> None:
                if i == 150:
                    leader.signal(signal.SIGKILL)
                    killed_at.append(time.time())

            await churn(cluster, 400, "a", kill)
            await others[0].wait(lambda: any(r.role() == "leader" for r in others), 10)
            new = next(r for r in others if r.role() == "leader")
            took = (new.role_at("leader") or 0) - killed_at[0]
            assert took <= 5.0, f"new leader after {took:.1f} s"
            await converge(cluster, others)
            assert lists(cluster) == 1  # the new leader resumed its WATCH, no LIST
            await cluster.wait_for(lambda: cluster.open_watches == 1)
        finally:
            for r in reps:
                await r.close()


async def test_failover_after_compaction_relists_once_and_delivers_missed_deletes(
    redis_server: RedisServer, cluster: FakeCluster, kubeconfig: Path
) -> None:
    async with anyio.create_task_group() as tg:
        lead_ok = start_args(redis_server, kubeconfig)
        a = Replica("a", lead_ok)
        b = Replica("b", lead_ok)
        c = Replica("c", [*lead_ok, "--no-lead"])
        try:
            await a.start(tg)
            await a.wait(lambda: a.role() == "leader")
            for r in (b, c):
                await r.start(tg)
                await r.wait(lambda r=r: r.role() == "follower")
            await converge(cluster, [a, b, c])
            # b may not take the lease before the deletes: its 1.5 s lease against the dead
            # watch's detection raced under load (b's watch opened before a's was seen gone)
            b.signal(signal.SIGSTOP)
            a.signal(signal.SIGKILL)
            # the dead watch is seen gone at a write (a bookmark each 0.5 s) failing: under a
            # load of 12 that took more than the helper's default 5 s
            await cluster.wait_for(lambda: cluster.open_watches == 0, TIMEOUT)
            for i in range(5):  # nobody watches: these deletes are missed...
                cluster.delete("pods", "default", f"web-{i}")
            cluster.compact()  # ...and the history that holds them is gone
            b.signal(signal.SIGCONT)
            await b.wait(lambda: b.role() == "leader")
            await converge(cluster, [b, c])
            assert lists(cluster) == 2  # the first start, then exactly one relist
            missed = {f"default/web-{i}" for i in range(5)}
            assert missed <= set((await c.dump())["deleted"])  # followers see them DELETED
            assert missed <= set((await b.dump())["deleted"])
        finally:
            for r in (a, b, c):
                await r.close()


async def test_leader_paused_past_its_lease_is_fenced(
    redis_server: RedisServer, cluster: FakeCluster, kubeconfig: Path
) -> None:
    async with anyio.create_task_group() as tg:
        a = Replica("a", start_args(redis_server, kubeconfig, "--lease-ttl", "1.0"))
        b = Replica("b", start_args(redis_server, kubeconfig, "--lease-ttl", "1.0"))
        try:
            await a.start(tg)
            await a.wait(lambda: a.role() == "leader")
            await b.start(tg)
            await b.wait(lambda: b.role() == "follower")
            a.signal(signal.SIGSTOP)
            await b.wait(lambda: b.role() == "leader", 10)
            await churn(cluster, 50, "p")  # a's open watch queues these while it sleeps
            a.signal(signal.SIGCONT)
            await a.wait(lambda: a.role() == "follower", 10)
            await converge(cluster, [a, b])
            status = (await a.dump())["status"]
            assert status["fenced_writes"] >= 1  # its writes were refused, then it demoted
            assert b.role() == "leader"
            await cluster.wait_for(lambda: cluster.open_watches == 1)
        finally:
            for r in (a, b):
                await r.close()


async def test_redis_restarted_empty_followers_stale_then_rehydrate(
    redis_server: RedisServer, cluster: FakeCluster, kubeconfig: Path
) -> None:
    async with anyio.create_task_group() as tg:
        a = Replica("a", start_args(redis_server, kubeconfig, "--lease-ttl", "1.0"))
        b = Replica("b", start_args(redis_server, kubeconfig, "--lease-ttl", "1.0"))
        try:
            await a.start(tg)
            await a.wait(lambda: a.role() == "leader")
            await b.start(tg)
            await b.wait(lambda: b.role() == "follower")
            await converge(cluster, [a, b])
            epoch = (await b.dump())["status"]["epoch"]
            redis_server.stop()
            await churn(cluster, 20, "r")
            with anyio.fail_after(10):
                while (dump := await b.dump())["status"]["stale_since"] is None:  # noqa: ASYNC110
                    await anyio.sleep(0.05)  # polls another process
            assert len(dump["objects"]) >= 90  # still serving what it had
            redis_server.start()  # same port, empty
            await converge(cluster, [a, b], timeout=15)
            status = (await b.dump())["status"]
            assert status["stale_since"] is None
            assert status["epoch"] != epoch  # rehydrated from a fresh snapshot
            assert a.role() == "leader"
            assert lists(cluster) == 1  # the leader kept its informer
        finally:
            for r in (a, b):
                await r.close()


async def test_secrets_stay_local_and_never_reach_redis(
    redis_server: RedisServer, cluster: FakeCluster, kubeconfig: Path
) -> None:
    import redis.asyncio as aioredis

    value = "hunter2-very-secret-value"
    cluster.create(
        "secrets",
        {
            "metadata": {"name": "db", "namespace": "default"},
            "data": {"password": base64.b64encode(value.encode()).decode()},
            "stringData": {"plain": value},
        },
    )
    async with anyio.create_task_group() as tg:
        sec = [
            Replica(
                f"s{i}", [redis_server.url, str(kubeconfig), "fake", "secrets", "--kind", "Secret"]
            )
            for i in range(2)
        ]
        pods = Replica("p", start_args(redis_server, kubeconfig))
        try:
            for r in (*sec, pods):
                await r.start(tg)
                await r.wait(started(r), STARTUP)
            assert [r.role() for r in sec] == ["local", "local"]
            assert [set((await r.dump())["objects"]) for r in sec] == [{"default/db"}] * 2
            client = aioredis.Redis.from_url(redis_server.url)
            try:
                with anyio.fail_after(10):  # the leader writes its snapshot after it synced
                    while not [k async for k in client.scan_iter(match="*:objs")]:  # noqa: ASYNC110
                        await anyio.sleep(0.05)
                blob = b""
                async for key in client.scan_iter(count=1000):
                    blob += key + b"\n"
                    kind = await client.type(key)
                    if kind == b"hash":
                        for f, v in (await client.hgetall(key)).items():
                            blob += f + v
                    elif kind == b"stream":
                        for _, fields in await client.xrange(key):
                            blob += b"".join(k + v for k, v in fields.items())
                    elif kind == b"string":
                        blob += await client.get(key) or b""
            finally:
                await client.aclose()
            assert b"web-1" in blob  # the scan saw the shared pods
            for needle in (value, base64.b64encode(value.encode()).decode(), "t0ken-never"):
                assert needle.encode() not in blob
            assert cluster.server.encode() not in blob  # keys are hashes
            assert b"fake" not in blob.split(b"{")[0]
        finally:
            for r in (*sec, pods):
                await r.close()


# --------------------------------------------------------------------------- in-process


def _recorder() -> tuple[list[tuple[str, str]], Any]:
    seen: list[tuple[str, str]] = []

    def on_change(etype: str, entry: Entry, old: Entry | None) -> None:
        seen.append((etype, entry.name))

    return seen, on_change


async def test_fenced_write_demotes_and_lease_is_released(
    redis_server: RedisServer, cluster: FakeCluster, kubeconfig: Path
) -> None:
    import redis.asyncio as aioredis

    from kubemux._http.client import open_client

    config = load_kubeconfig(str(kubeconfig)).contexts["fake"]
    pods = parse_resource("pods")
    key = share_key(server=config.server, ca=None, identity="u", resource=pods)
    engine = Redis(redis_server.url, prefix="t", lease_ttl=1.0, acquire_period=0.1)
    raw = aioredis.Redis.from_url(redis_server.url)
    settings = WatchSettings(backoff=Backoff(initial_delay=0.05, max_delay=0.2))
    lead_store, follow_store = Store(pods), Store(pods)
    seen, on_change = _recorder()
    try:
        async with (
            open_client(config) as client,
            engine.open() as leader,
            engine.open() as follower,
            anyio.create_task_group() as tg,
        ):
            lead = informer_lead(
                client, pods, InformerKey("pods"), settings=settings, store=lead_store
            )

            async def status(session: Any) -> SlotStatus:
                s = session.slot_status(key)
                assert s is not None
                return s  # type: ignore[no-any-return]

            await tg.start(
                lambda task_status: leader.run_slot(
                    key=key, store=lead_store, lead=lead, task_status=task_status
                )
            )
            assert (await status(leader)).role == "leader"
            await tg.start(
                lambda task_status: follower.run_slot(
                    key=key,
                    store=listen(follow_store, on_change),
                    lead=lead,
                    task_status=task_status,
                    can_lead=False,
                )
            )
            assert (await status(follower)).role == "follower"
            assert len(follow_store) == 100

            lease_keys = [k async for k in raw.scan_iter(match="t:*:lease")]
            assert len(lease_keys) == 1
            await raw.set(lease_keys[0], "5" * 32, px=60_000)  # another replica's token
            cluster.delete("pods", "default", "web-7")
            await cluster.wait_for(lambda: leader.slot_status(key).role == "follower")
            assert leader.slot_status(key).fenced_writes >= 1
            await raw.delete(lease_keys[0])  # that leader is gone: ours takes over again
            await cluster.wait_for(lambda: leader.slot_status(key).role == "leader")
            await cluster.wait_for(lambda: ("default", "web-7") not in follow_store)
            assert ("DELETED", "web-7") in seen
            assert lists(cluster) == 1
            tg.cancel_scope.cancel()
        assert [k async for k in raw.scan_iter(match="t:*:lease")] == []  # released
    finally:
        await raw.aclose()


async def test_cancelled_command_never_answers_the_next_request(
    redis_server: RedisServer,
) -> None:
    """redis-py #2624: a command cancelled mid-flight must not leave its reply on the
    connection for the next command to read."""
    import redis.asyncio as aioredis

    engine = Redis(redis_server.url)
    admin = aioredis.Redis.from_url(redis_server.url)
    try:
        async with engine.open() as session:
            client = session.client
            await client.set("a", b"A")
            await client.set("b", b"B")
            for _ in range(3):
                await admin.execute_command("CLIENT", "PAUSE", "300", "ALL")
                with anyio.move_on_after(0.1) as scope:
                    await client.get("a")  # sent; its reply is held back by the pause
                assert scope.cancelled_caught
                with anyio.fail_after(5):
                    assert await client.get("b") == b"B"
                    assert await client.get("a") == b"A"
    finally:
        await admin.aclose()


def test_share_key_counts_identity_and_scope_not_context_names() -> None:
    pods = parse_resource("pods")
    base = {"server": "https://10.0.0.1:6443", "ca": b"CA", "resource": pods}
    a = share_key(identity="alice;groups=dev", **base)  # type: ignore[arg-type]
    assert a == share_key(identity="alice;groups=dev", **base)  # type: ignore[arg-type]
    assert a != share_key(identity="bob;groups=dev", **base)  # type: ignore[arg-type]
    assert a != share_key(identity="alice;groups=dev", namespace="x", **base)  # type: ignore[arg-type]
    assert a != share_key(identity="alice;groups=dev", label_selector="a=b", **base)  # type: ignore[arg-type]
    assert "10.0.0.1" not in a and "alice" not in a and len(a) == 64
    table = share_key(identity="alice;groups=dev", view="table", **base)  # type: ignore[arg-type]
    assert table != a  # a table view and an object view of one resource: two keys
    assert a == share_key(identity="alice;groups=dev", view="objects", **base)  # type: ignore[arg-type]


async def _status_is(session: Any, key: str, **want: Any) -> None:
    with anyio.fail_after(10):
        while True:
            status = session.slot_status(key)
            if status is not None and all(getattr(status, k) == v for k, v in want.items()):
                return
            await anyio.sleep(0.02)


async def test_gap_in_the_stream_rehydrates_the_follower(
    redis_server: RedisServer, cluster: FakeCluster, kubeconfig: Path
) -> None:
    import redis.asyncio as aioredis

    from kubemux._http.client import open_client

    config = load_kubeconfig(str(kubeconfig)).contexts["fake"]
    pods = parse_resource("pods")
    key = share_key(server=config.server, ca=None, identity="u", resource=pods)
    engine = Redis(redis_server.url, prefix="g", lease_ttl=1.0, acquire_period=0.1)
    raw = aioredis.Redis.from_url(redis_server.url)
    lead_store, follow_store = Store(pods), Store(pods)
    seen, on_change = _recorder()
    try:
        async with (
            open_client(config) as client,
            engine.open() as leader,
            engine.open() as follower,
            anyio.create_task_group() as tg,
        ):
            lead = informer_lead(
                client, pods, InformerKey("pods"), settings=WatchSettings(), store=lead_store
            )
            await tg.start(
                lambda task_status: leader.run_slot(
                    key=key, store=lead_store, lead=lead, task_status=task_status
                )
            )
            await tg.start(
                lambda task_status: follower.run_slot(
                    key=key,
                    store=listen(follow_store, on_change),
                    lead=lead,
                    task_status=task_status,
                    can_lead=False,
                )
            )
            before = follower.slot_status(key).rehydrations
            [log_key] = [k async for k in raw.scan_iter(match="g:*:log")]
            [meta_key] = [k async for k in raw.scan_iter(match="g:*:meta")]
            epoch, seq = await raw.hmget(meta_key, ["epoch", "seq"])
            # an entry as if some were trimmed away before this follower read them
            await raw.xadd(
                log_key,
                {
                    "t": "MODIFIED",
                    "f": "default/web-1",
                    "v": b"1\n{}",
                    "n": int(seq) + 5,
                    "e": epoch,
                },
            )
            await _status_is(follower, key, rehydrations=before + 1)
            cluster.delete("pods", "default", "web-3")
            await cluster.wait_for(lambda: ("default", "web-3") not in follow_store)
            assert follow_store.get("default", "web-1") == lead_store.get("default", "web-1")
            assert ("DELETED", "web-3") in seen
            assert sorted(follow_store.keys()) == sorted(lead_store.keys())
            tg.cancel_scope.cancel()
    finally:
        await raw.aclose()


async def test_redis_down_at_start_runs_locally_then_leads(
    cluster: FakeCluster, kubeconfig: Path
) -> None:
    require_redis_server()
    from kubemux._http.client import open_client

    server = RedisServer()  # a free port, nothing listening yet
    config = load_kubeconfig(str(kubeconfig)).contexts["fake"]
    pods = parse_resource("pods")
    key = share_key(server=config.server, ca=None, identity="u", resource=pods)
    engine = Redis(server.url, prefix="d", lease_ttl=0.6, acquire_period=0.1, command_timeout=1)
    store = Store(pods)
    try:
        async with (
            open_client(config) as client,
            engine.open() as session,
            anyio.create_task_group() as tg,
        ):
            lead = informer_lead(
                client, pods, InformerKey("pods"), settings=WatchSettings(), store=store
            )
            await tg.start(
                lambda task_status: session.run_slot(
                    key=key, store=store, lead=lead, task_status=task_status
                )
            )
            assert session.slot_status(key).role == "local"  # serving without Redis
            assert len(store) == 100
            server.start()
            await _status_is(session, key, role="leader", last_error=None)
            assert session.slot_status(key).epoch is not None  # its snapshot is written
            # one watch (it opens a moment after the LIST, later still on a loaded machine)
            await cluster.wait_for(lambda: cluster.open_watches == 1)
            assert lists(cluster) == 1 and cluster.open_watches == 1
            tg.cancel_scope.cancel()
    finally:
        server.stop()


def test_share_all_is_sorted_and_complete_and_imports_no_redis() -> None:
    import subprocess
    import sys
    import types

    import kubemux
    import kubemux.share

    names = kubemux.share.__all__
    assert names == sorted(names)
    public = {
        n
        for n, v in vars(kubemux.share).items()
        if not n.startswith("_") and not isinstance(v, types.ModuleType) and n != "annotations"
    }
    assert set(names) == public
    assert issubclass(kubemux.share.ShareError, kubemux.KubemuxError)
    assert "secret" not in repr(Redis("redis://:secret@127.0.0.1:1/0"))
    code = "import sys, kubemux; kubemux.share.Redis('redis://x'); print('redis' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


async def test_lead_failing_before_sync_raises_itself_and_releases_the_lease(
    redis_server: RedisServer,
) -> None:
    import redis.asyncio as aioredis

    from kubemux import Unauthorized

    async def lead(resume_rv: str | None, publish: Any, task_status: Any) -> None:
        raise Unauthorized(401, "Unauthorized", "bad token")

    raw = aioredis.Redis.from_url(redis_server.url)
    try:
        async with Redis(redis_server.url, prefix="e").open() as session:
            with pytest.raises(Unauthorized):
                await session.run_slot(key="k", store=Store(parse_resource("pods")), lead=lead)
            assert session.slot_status("k") is None
        assert [k async for k in raw.scan_iter(match="e:*")] == []
    finally:
        await raw.aclose()


async def test_two_identities_one_watch_each(
    redis_server: RedisServer, cluster: FakeCluster, kubeconfig: Path
) -> None:
    async with anyio.create_task_group() as tg:
        reps = [
            Replica(f"{who}{i}", start_args(redis_server, kubeconfig, "--identity", who))
            for who in ("alice", "bob")
            for i in range(2)
        ]
        try:
            for r in reps:
                await r.start(tg)
            for r in reps:
                await r.wait(started(r), STARTUP)
            assert sorted(r.role() or "" for r in reps[:2]) == ["follower", "leader"]
            assert sorted(r.role() or "" for r in reps[2:]) == ["follower", "leader"]
            await cluster.wait_for(lambda: cluster.open_watches == 2)
            await converge(cluster, reps)
        finally:
            for r in reps:
                await r.close()


async def test_follower_snapshot_matches_what_was_announced_during_a_sliced_hydrate(
    redis_server: RedisServer, cluster: FakeCluster, kubeconfig: Path
) -> None:
    from kubemux._http.client import open_client

    cluster.create_many("pods", (make_pod(f"more-{i}", size=300) for i in range(1400)))
    config = load_kubeconfig(str(kubeconfig)).contexts["fake"]
    pods = parse_resource("pods")
    key = share_key(server=config.server, ca=None, identity="u", resource=pods)
    engine = Redis(redis_server.url, prefix="s")
    lead_store, follow_store = Store(pods), Store(pods)
    sizes: list[int] = []
    async with (
        open_client(config) as client,
        engine.open() as leader,
        engine.open() as follower,
        anyio.create_task_group() as tg,
    ):

        def on_change(etype: str, entry: Entry, old: Entry | None) -> None:
            sizes.append(len(follow_store.writer.announced_entries()))

        lead = informer_lead(
            client, pods, InformerKey("pods"), settings=WatchSettings(), store=lead_store
        )
        await tg.start(
            lambda task_status: leader.run_slot(
                key=key, store=lead_store, lead=lead, task_status=task_status
            )
        )
        await tg.start(
            lambda task_status: follower.run_slot(
                key=key,
                store=listen(follow_store, on_change),
                lead=lead,
                task_status=task_status,
                can_lead=False,
            )
        )
        await cluster.wait_for(lambda: len(sizes) == 1500)
        # a listener hears a slice (1,000) at a time: while it does, the slice is visible,
        # the changes still to come are not
        assert sizes == [1000] * 1000 + [1500] * 500
        assert len(follow_store.writer.announced_entries()) == 1500 == len(follow_store)
        tg.cancel_scope.cancel()


async def test_a_table_follower_never_syncs_without_columns(redis_server: RedisServer) -> None:
    import redis.asyncio as aioredis

    from kubemux._cache.table import TableColumn, TableStore
    from kubemux.share._redis_keys import _digest

    pods = parse_resource("pods")
    key = share_key(server="https://x", ca=None, identity="u", resource=pods, view="table")
    engine = Redis(redis_server.url, prefix="c", lease_ttl=1.0, acquire_period=0.05)
    raw = aioredis.Redis.from_url(redis_server.url)
    store = TableStore(pods)
    digest = _digest(key)
    meta, objs, log = (f"c:{{{digest}}}:{k}" for k in ("meta", "objs", "log"))
    row = b'{"cells":["p1",1],"metadata":{"name":"p1","namespace":"default","resourceVersion":"7"}}'

    async def no_lead(*args: Any) -> None:
        raise AssertionError("a follow-only slot never leads")

    def hydrations() -> int:
        stats = redis_server.command("INFO", "commandstats").decode()
        for line in stats.splitlines():
            if line.startswith("cmdstat_hmget:"):
                return int(line.split("calls=")[1].split(",")[0])
        return 0

    try:
        # rows and meta as a leader without columns would leave them (not a kubemux one)
        await raw.hset(objs, "default/p1", b"7\n" + row)
        await raw.hset(meta, mapping={"epoch": "e1", "seq": 0, "rv": "7"})
        await raw.xadd(log, {"t": "RESET", "n": 0, "e": "e1", "ts": "0"})
        async with engine.open() as session, anyio.create_task_group() as tg:
            synced = anyio.Event()

            async def follow() -> None:
                await tg.start(
                    lambda task_status: session.run_slot(
                        key=key,
                        store=store,
                        lead=no_lead,
                        task_status=task_status,
                        can_lead=False,
                    )
                )
                synced.set()

            base = hydrations()
            tg.start_soon(follow)
            with anyio.fail_after(10):  # it looked twice and found no columns
                while True:
                    if hydrations() >= base + 2:
                        break
                    await anyio.sleep(0.02)
            assert not synced.is_set() and not store.has_synced and store.columns == ()
            columns = [
                {
                    "name": "Name",
                    "type": "string",
                    "format": "name",
                    "description": "",
                    "priority": 0,
                },
                {"name": "Restarts", "type": "integer"},  # missing fields take the defaults
            ]
            await raw.hset(meta, "columns", orjson.dumps(columns))
            with anyio.fail_after(10):
                await synced.wait()
            assert store.columns == (
                TableColumn(name="Name", format="name"),
                TableColumn(name="Restarts", type="integer"),
            )
            assert not store.is_fallback and len(store) == 1
            assert session.slot_status(key).role == "follower"  # type: ignore[union-attr]
            tg.cancel_scope.cancel()
    finally:
        await raw.aclose()
