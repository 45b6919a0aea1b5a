"""Values forged in Redis (issue 18, point 6): anyone who can write to Redis.

A follower reads every value as the informer reads an object from the API server: one that
fails (not an object, too deep, not UTF-8, under a field that is not its name, too large)
is skipped alone, counted and named in status, never cached, on every path (a load of the
object hash, the stream, a promoted leader's catch-up). A forged meta or lease is a clear
error and is repaired, never a crash or a stuck slot. With ``secret_key`` every value is
authenticated, so a writer without the key cannot make a follower cache anything; without
it, write access to Redis is write access to every follower's cache (as documented).
Real registries, one FakeCluster, a real redis-server. Skipped without one, unless CI=true.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import orjson
import pytest

from kubemux import WatcherRegistry
from kubemux._informer.informer import InformerStatus
from kubemux._settings import Backoff, WatchSettings
from kubemux.share import Redis
from kubemux.testing import FakeCluster, make_pod, write_kubeconfig
from share_support import RedisServer

pytest.importorskip("redis")

FAST = WatchSettings(backoff=Backoff(initial_delay=0.05, max_delay=0.5))
KEY = bytes(range(32))
EVIL = b'{"metadata":{"name":"evil","namespace":"default","resourceVersion":"7"},"x":1}'
APISERVER = orjson.dumps(
    {"metadata": {"name": "kube-apiserver", "namespace": "kube-system", "resourceVersion": "7"}}
)
DEEP = (
    b'{"metadata":{"name":"evil","namespace":"default","resourceVersion":"7"},"x":'
    + b"[" * 6000
    + b"]" * 6000
    + b"}"
)
FORGED = {
    "a JSON array": b"7\n[1,2,3]",
    "nested 6,000 deep": b"7\n" + DEEP,
    "invalid UTF-8": b'7\n{"metadata":{"name":"evil","namespace":"default"},"x":"\xff\xfe"}',
    "another object's bytes": b"7\n" + APISERVER,
    "no resourceVersion line": EVIL,
}
WHY = {
    "a JSON array": "Expected `object`, got `array`",
    "nested 6,000 deep": "maximum recursion depth exceeded",
    "invalid UTF-8": "not valid UTF-8",
    "another object's bytes": "the object it holds is 'kube-system/kube-apiserver'",
    "no resourceVersion line": "no resourceVersion",
}


@pytest.fixture
async def cluster() -> AsyncIterator[FakeCluster]:
    async with FakeCluster(tokens={"tok"}, bookmark_period=0.5) as c:
        c.create_many("pods", (make_pod(f"web-{i}") for i in range(5)))
        yield c


def engine(redis: RedisServer, **kwargs: Any) -> Redis:
    return Redis(redis.url, prefix="t", lease_ttl=1.5, acquire_period=0.25, **kwargs)


def registry(kubeconfig: Path, share: Redis, *, lead: bool = True) -> WatcherRegistry:
    return WatcherRegistry.from_kubeconfig(
        str(kubeconfig), settings=FAST, share=share, share_lead=lead
    )


def informer(registry: WatcherRegistry, view: str = "objects") -> InformerStatus:
    (st,) = [i for i in registry.status().contexts["fake"].informers if i.view == view]
    return st


async def until(pred: Callable[[], bool], timeout: float = 10.0) -> None:  # noqa: ASYNC109
    """Until ``pred()`` (share state moves without a status change), checked every 20 ms."""
    with anyio.fail_after(timeout):
        while True:
            if pred():
                return
            await anyio.sleep(0.02)


async def until_redis(
    read: Callable[[], Awaitable[Any]],
    pred: Callable[[Any], bool],
    timeout: float = 10.0,  # noqa: ASYNC109
) -> None:
    """Until ``pred(await read())`` (state in Redis), checked every 20 ms."""
    with anyio.fail_after(timeout):
        while True:
            if pred(await read()):
                return
            await anyio.sleep(0.02)


def labels(obj: dict[str, Any] | None) -> Any:
    return (obj or {}).get("metadata", {}).get("labels")


def lists(cluster: FakeCluster) -> int:
    """LISTs (plain or streaming) of pods the cluster received."""
    return sum(
        1
        for r in cluster.requests
        if r.path.endswith("/pods")
        and (not r.is_watch or r.query.get("sendInitialEvents") == "true")
    )


class Slot:
    """The pods slot's keys in Redis, written to as an attacker would."""

    def __init__(self, client: Any, base: bytes) -> None:
        self.client = client
        self.objs, self.meta, self.log = base + b"objs", base + b"meta", base + b"log"
        self.lease = base + b"lease"

    @classmethod
    async def find(cls, client: Any) -> Slot:
        """The one slot, once its leader wrote a snapshot (a moment after it synced)."""
        with anyio.fail_after(10):
            while True:
                found = [k async for k in client.scan_iter(match="t:*:objs")]
                if found:
                    break
                await anyio.sleep(0.02)
        (objs,) = found
        return cls(client, objs[: -len(b"objs")])

    async def reload(self) -> None:
        """Make every follower load the hash again (a RESET in the stream)."""
        await self.client.xadd(self.log, {"t": "RESET"})

    async def append(self, etype: str, field: bytes, value: bytes, **extra: Any) -> None:
        """A stream entry that comes next in the followers' sequence."""
        epoch, seq = await self.client.hmget(self.meta, ["epoch", "seq"])
        entry = {"t": etype, "f": field, "v": value, "n": int(seq) + 1, "e": epoch}
        await self.client.xadd(self.log, {**entry, "ts": f"{time.time():.6f}", **extra})


@pytest.fixture
async def raw(redis_server: RedisServer) -> AsyncIterator[Any]:
    import redis.asyncio as aioredis

    client = aioredis.Redis.from_url(redis_server.url)
    try:
        yield client
    finally:
        await client.aclose()


# ---------------------------------------------------------------------- loads and the stream
@pytest.mark.parametrize("case", sorted(FORGED))
async def test_a_forged_value_is_skipped_alone_in_a_load_and_in_the_stream(
    redis_server: RedisServer, cluster: FakeCluster, tmp_path: Path, raw: Any, case: str
) -> None:
    kubeconfig = write_kubeconfig(tmp_path / "config", {"fake": cluster})
    lead, follow = (
        registry(kubeconfig, engine(redis_server)),
        registry(kubeconfig, engine(redis_server), lead=False),
    )
    async with lead, follow:
        await lead.watch("fake", "pods")
        store = await follow.watch("fake", "pods")
        slot = await Slot.find(raw)
        before = store.list()
        assert len(before) == 5

        # the object hash, as a follower loads it
        await raw.hset(slot.objs, "default/evil", FORGED[case])
        await slot.reload()
        await until(lambda: informer(follow).skipped_lines == 1)
        st = informer(follow)
        assert st.last_error is not None and WHY[case] in st.last_error
        assert st.last_error.startswith("skipped the value of 'default/evil' in Redis: ")
        assert store.list() == before  # every other object cached, readable
        assert store.get("default", "evil") is None
        assert store.get("kube-system", "kube-apiserver") is None
        assert st.share_role == "follower" and st.stale_since is None

        # the stream: skipped, and the leader's next change still applies
        await slot.append("MODIFIED", b"default/evil", FORGED[case])
        await until(lambda: informer(follow).skipped_lines == 2)
        assert store.list() == before
        cluster.create("pods", make_pod("web-new"))
        await until(lambda: store.get("default", "web-new") is not None)
        assert len(store) == 6 and store.get("default", "evil") is None
        assert informer(follow).share_role == "follower"

        # the leader's next snapshot replaces the hash: a clean load clears the name
        await raw.hdel(slot.objs, "default/evil")
        await slot.reload()
        await until(lambda: informer(follow).last_error is None)
        assert informer(follow).skipped_lines == 2  # counted for good


async def test_a_skipped_object_keeps_what_the_follower_had(
    redis_server: RedisServer, cluster: FakeCluster, tmp_path: Path, raw: Any
) -> None:
    kubeconfig = write_kubeconfig(tmp_path / "config", {"fake": cluster})
    lead, follow = (
        registry(kubeconfig, engine(redis_server)),
        registry(kubeconfig, engine(redis_server), lead=False),
    )
    async with lead, follow:
        await lead.watch("fake", "pods")
        store = await follow.watch("fake", "pods")
        slot = await Slot.find(raw)
        web1 = store.get("default", "web-1")
        await raw.hset(slot.objs, "default/web-1", b"9\n[1,2,3]")  # overwrites a real one
        await slot.reload()
        await until(lambda: informer(follow).skipped_lines == 1)
        assert store.get("default", "web-1") == web1  # stale at worst, never forged
        assert len(store) == 5


async def test_oversize_values_and_counts_are_refused(
    redis_server: RedisServer, cluster: FakeCluster, tmp_path: Path, raw: Any
) -> None:
    kubeconfig = write_kubeconfig(tmp_path / "config", {"fake": cluster})
    small = engine(redis_server, max_value_size=16 * 1024)
    lead, follow = (
        registry(kubeconfig, engine(redis_server)),
        registry(kubeconfig, small, lead=False),
    )
    big = b"7\n" + EVIL[:-1] + b',"pad":"' + b"x" * 100_000 + b'"}'
    async with lead, follow:
        await lead.watch("fake", "pods")
        store = await follow.watch("fake", "pods")
        slot = await Slot.find(raw)
        await raw.hset(slot.objs, "default/evil", big)
        await slot.reload()
        await until(lambda: informer(follow).skipped_lines == 1)
        assert "100" in (informer(follow).last_error or "")
        assert f"more than {16 * 1024}" in (informer(follow).last_error or "")
        await slot.append("ADDED", b"default/evil", big)
        await until(lambda: informer(follow).skipped_lines == 2)
        assert store.get("default", "evil") is None and len(store) == 5
        await raw.hdel(slot.objs, "default/evil")

    # a slot holding more objects than max_objects is not loaded at all: a clear error
    few = registry(kubeconfig, engine(redis_server, max_objects=3), lead=False)
    lead = registry(kubeconfig, engine(redis_server))
    async with lead, few, anyio.create_task_group() as tg:
        await lead.watch("fake", "pods")
        tg.start_soon(few.watch, "fake", "pods")
        await until(lambda: "max_objects" in (informer_or_none(few) or ""))
        st = informer(few)
        assert st.last_error is not None
        assert "it holds 5 objects, more than max_objects" in st.last_error
        assert not st.has_synced and st.stale_since is not None
        tg.cancel_scope.cancel()


def informer_or_none(registry: WatcherRegistry) -> str | None:
    ctx = registry.status().contexts.get("fake")
    errors = [i.last_error for i in ctx.informers] if ctx is not None else []
    return next((e for e in errors if e), None)


async def test_numbers_beyond_a_double_are_read_as_the_informer_reads_them(
    redis_server: RedisServer, cluster: FakeCluster, tmp_path: Path, raw: Any
) -> None:
    kubeconfig = write_kubeconfig(tmp_path / "config", {"fake": cluster})
    lead, follow = (
        registry(kubeconfig, engine(redis_server)),
        registry(kubeconfig, engine(redis_server), lead=False),
    )
    async with lead, follow:
        await lead.watch("fake", "pods")
        store = await follow.watch("fake", "pods")
        slot = await Slot.find(raw)
        await raw.hset(slot.objs, "default/evil", b"7\n" + EVIL[:-2] + b"1" * 5000 + b"}")
        await slot.reload()
        await until(lambda: store.get("default", "evil") is not None)
        assert store.get("default", "evil") == {  # written without a key: cached, readable
            "metadata": {"name": "evil", "namespace": "default", "resourceVersion": "7"},
            "x": float("inf"),
        }
        assert len(store.list()) == 6


# ---------------------------------------------------------------------- meta and lease
async def test_a_forged_sequence_number_is_a_clear_error_then_repaired(
    redis_server: RedisServer, cluster: FakeCluster, tmp_path: Path, raw: Any
) -> None:
    kubeconfig = write_kubeconfig(tmp_path / "config", {"fake": cluster})
    follow = registry(kubeconfig, engine(redis_server), lead=False)
    async with follow:
        async with registry(kubeconfig, engine(redis_server)) as lead:
            await lead.watch("fake", "pods")
            store = await follow.watch("fake", "pods")
            slot = await Slot.find(raw)
            epoch = await raw.hget(slot.meta, "epoch")
            # with a leader: its next lease renewal finds the forged meta and replaces it
            await raw.hset(slot.meta, "seq", "9" * 5000)
            await until_redis(lambda: raw.hget(slot.meta, "epoch"), lambda e: e != epoch)
            assert (await raw.hget(slot.meta, "seq")).isdigit()
            cluster.create("pods", make_pod("after-repair"))
            await until(lambda: store.get("default", "after-repair") is not None)
        # without a leader: the follower says what is wrong, keeps serving, never crashes
        await raw.hset(slot.meta, "seq", "9" * 5000)
        await slot.reload()
        await until(lambda: "meta.seq" in (informer(follow).last_error or ""))
        st = informer(follow)
        assert st.last_error is not None and "forged?" in st.last_error
        assert st.stale_since is not None and len(store.list()) == 6
        # a leader again: it lists (the data in Redis cannot be trusted) and repairs it
        async with registry(kubeconfig, engine(redis_server)) as lead:
            await lead.watch("fake", "pods")
            await until(lambda: informer(follow).last_error is None, 15)
            assert informer(follow).stale_since is None
            cluster.create("pods", make_pod("after-leader"))
            await until(lambda: store.get("default", "after-leader") is not None)


async def test_a_forged_lease_is_replaced_with_a_clear_error(
    redis_server: RedisServer, cluster: FakeCluster, tmp_path: Path, raw: Any
) -> None:
    kubeconfig = write_kubeconfig(tmp_path / "config", {"fake": cluster})
    async with registry(kubeconfig, engine(redis_server)) as first:
        await first.watch("fake", "pods")
        slot = await Slot.find(raw)
    assert not await raw.exists(slot.lease)  # released on close
    for forged in ("9" * 5000, "a" * 32):  # not a token; a token without an expiry
        await raw.set(slot.lease, forged)  # no expiry: nobody would ever lead again
        async with registry(kubeconfig, engine(redis_server)) as second:
            await second.watch("fake", "pods")
            await until(lambda: informer(second).share_role == "leader")
            st = informer(second)
            assert st.errors_by_type.get("ForgedLease") == 1
            assert (await raw.pttl(slot.lease)) > 0  # a lease of ours again
    await raw.delete(slot.lease)
    await raw.hset(slot.lease, "a", "b")  # not even a string
    async with registry(kubeconfig, engine(redis_server)) as third:
        await third.watch("fake", "pods")
        await until(lambda: informer(third).share_role == "leader")
        assert informer(third).errors_by_type.get("ForgedLease") == 1


async def test_a_follower_promoted_over_forged_values_lists_and_replaces_them(
    redis_server: RedisServer, cluster: FakeCluster, tmp_path: Path, raw: Any
) -> None:
    kubeconfig = write_kubeconfig(tmp_path / "config", {"fake": cluster})
    second = registry(kubeconfig, engine(redis_server))
    async with second:
        async with registry(kubeconfig, engine(redis_server)) as first:
            await first.watch("fake", "pods")
            store = await second.watch("fake", "pods")
            assert informer(second).share_role == "follower"
            slot = await Slot.find(raw)
            forged = b"7\n" + APISERVER
            await raw.hset(slot.objs, "default/web-1", forged)
            await slot.reload()
            await until(lambda: informer(second).skipped_lines == 1)
            before = lists(cluster)
        await until(lambda: informer(second).share_role == "leader")
        # the promoted leader met a value it could not trust: it listed, and its snapshot
        # replaced everything in Redis
        await until(lambda: lists(cluster) == before + 1)
        await until_redis(lambda: raw.hget(slot.objs, "default/web-1"), lambda v: v != forged)
        value = await raw.hget(slot.objs, "default/web-1")
        assert value is not None and b'"name":"web-1"' in value
        truth = cluster.get("pods", "default", "web-1")
        assert truth is not None and store.get("default", "web-1") is not None
        rv = truth["metadata"]["resourceVersion"]
        assert store.get("default", "web-1")["metadata"]["resourceVersion"] == rv
        assert len(store) == 5


# ---------------------------------------------------------------------- with and without a key
async def test_with_a_secret_key_a_writer_without_it_injects_nothing(
    redis_server: RedisServer, cluster: FakeCluster, tmp_path: Path, raw: Any
) -> None:
    kubeconfig = write_kubeconfig(tmp_path / "config", {"fake": cluster})
    lead = registry(kubeconfig, engine(redis_server, secret_key=KEY))
    follow = registry(kubeconfig, engine(redis_server, secret_key=KEY), lead=False)
    async with lead, follow:
        await lead.watch("fake", "pods")
        store = await follow.watch("fake", "pods")
        slot = await Slot.find(raw)
        before = store.list()
        real = await raw.hget(slot.objs, "default/web-1")
        assert real is not None
        assert real.partition(b"\n")[2][16:17] == b"{"  # rv, then a 16-byte tag and the JSON

        # a well-formed object, as a kubemux leader without a key writes it
        await raw.hset(slot.objs, "default/evil", b"7\n" + EVIL)
        await slot.reload()
        await until(lambda: informer(follow).skipped_lines == 1)
        assert "fails authentication under secret_key" in (informer(follow).last_error or "")
        # a real value moved to another object, or to another resourceVersion
        await raw.hset(slot.objs, "default/web-2", real)
        await raw.hset(slot.objs, "default/web-3", b"99" + real[real.index(b"\n") :])
        await slot.reload()
        await until(lambda: informer(follow).skipped_lines == 4)
        assert store.list() == before

        # the stream: an unsigned entry, a real value as a DELETED, a replayed entry
        await slot.append("ADDED", b"default/evil", b"7\n" + EVIL)
        await slot.append("DELETED", b"default/web-1", real)
        pod = cluster.get("pods", "default", "web-4")
        assert pod is not None
        pod["metadata"]["labels"] = {"v": "2"}
        cluster.update("pods", pod)
        await until(lambda: labels(store.get("default", "web-4")) == {"v": "2"})
        (_, entry), *_ = reversed(await raw.xrange(slot.log))
        assert entry[b"m"]  # signed
        await slot.append("MODIFIED", entry[b"f"], entry[b"v"], m=entry[b"m"])  # replayed
        await until(lambda: informer(follow).skipped_lines == 7)
        assert store.get("default", "web-1") is not None and store.get("default", "evil") is None
        assert len(store) == 5

        # meta.rv forged: not trusted (a promoted leader would list)
        await raw.hset(slot.meta, "rv", "1")
        await slot.reload()
        await until(lambda: "meta.rv fails authentication" in (informer(follow).last_error or ""))
        assert len(store.list()) == 5


async def test_without_a_secret_key_redis_write_access_writes_the_caches(
    redis_server: RedisServer, cluster: FakeCluster, tmp_path: Path, raw: Any
) -> None:
    """What docs/sharing.md says: a consistent object written to Redis without a key is
    cached by followers (only what no reader could read is refused)."""
    kubeconfig = write_kubeconfig(tmp_path / "config", {"fake": cluster})
    lead, follow = (
        registry(kubeconfig, engine(redis_server)),
        registry(kubeconfig, engine(redis_server), lead=False),
    )
    async with lead, follow:
        await lead.watch("fake", "pods")
        store = await follow.watch("fake", "pods")
        slot = await Slot.find(raw)
        await slot.append("ADDED", b"default/evil", b"7\n" + EVIL)
        await until(lambda: store.get("default", "evil") is not None)
        assert informer(follow).skipped_lines == 0
