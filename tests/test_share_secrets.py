"""Secrets shared encrypted (issue 13): ``kubemux.share.Redis(url, secret_key=KEY)``.

Real registries against one FakeCluster and a real redis-server: what reaches Redis is
ciphertext, followers decrypt it, replicas with another key do not share, a tampered value
is reported and never cached. Skipped without redis-server, unless CI=true.
"""

from __future__ import annotations

import base64
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from kubemux import WatcherRegistry
from kubemux._cache.store import Store
from kubemux._informer.informer import InformerStatus
from kubemux._settings import Backoff, WatchSettings
from kubemux.share import Redis
from kubemux.testing import FakeCluster, make_pod, write_kubeconfig
from share_support import RedisServer
from support import wait_until

pytest.importorskip("redis")
pytest.importorskip("cryptography")

FAST = WatchSettings(backoff=Backoff(initial_delay=0.05, max_delay=0.5))
KEY = bytes(range(32))
PLAIN = b"hunter2-the-plaintext-password"
B64 = base64.b64encode(PLAIN)


def engine(redis: RedisServer, **kwargs: Any) -> Redis:
    return Redis(redis.url, prefix="t", lease_ttl=1.5, acquire_period=0.25, **kwargs)


def secret(name: str, value: bytes = B64) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": {"name": name, "namespace": "default"},
        "data": {"password": value.decode()},
    }


@pytest.fixture
async def cluster() -> AsyncIterator[FakeCluster]:
    async with FakeCluster(tokens={"tok"}) as c:
        c.create("secrets", secret("s1"))
        c.create("pods", make_pod("p1"))
        yield c


def informer(registry: WatcherRegistry, resource: str, view: str = "objects") -> InformerStatus:
    (st,) = [
        i
        for i in registry.status().contexts["fake"].informers
        if i.resource == resource and i.view == view
    ]
    return st


def contents(store: Store) -> dict[tuple[str, str], tuple[str, bytes]]:
    return {(e.namespace, e.name): (e.resource_version, e.raw) for e in store._entries(None)}


async def redis_dump(redis: RedisServer) -> bytes:
    """Every key, field and value in Redis, raw (hashes, streams, strings); taken again while
    a key goes between SCAN and TYPE (a snapshot's stage is renamed as it commits)."""
    for _ in range(20):
        dump = await _dump_once(redis)
        if dump is not None:
            return dump
    raise AssertionError("Redis never held still for a dump")


async def _dump_once(redis: RedisServer) -> bytes | None:
    import redis.asyncio as aioredis

    out: list[bytes] = []
    async with aioredis.Redis.from_url(redis.url) as client:
        async for key in client.scan_iter():
            out.append(key)
            kind = await client.type(key)
            if kind == b"hash":
                for f, v in (await client.hgetall(key)).items():
                    out += (f, v)
            elif kind == b"stream":
                for eid, fields in await client.xrange(key):
                    out.append(eid)
                    for f, v in fields.items():
                        out += (f, v)
            elif kind == b"string":
                out.append(await client.get(key))
            elif kind == b"zset":  # placement's members (issue 22)
                for member, score in await client.zrange(key, 0, -1, withscores=True):
                    out += (member, str(score).encode())
            elif kind == b"set":  # placement's slot sets
                out += sorted(await client.smembers(key))
            elif kind == b"none":
                return None  # gone since the SCAN: what it became may have been missed
            else:
                raise AssertionError(f"unexpected {kind!r} at {key!r}")
    return b"\n".join(out)


def registry(kubeconfig: Path, redis: RedisServer, key: bytes | str | None) -> WatcherRegistry:
    return WatcherRegistry.from_kubeconfig(
        str(kubeconfig), settings=FAST, share=engine(redis, secret_key=key)
    )


async def test_secrets_are_shared_encrypted_with_the_same_key(
    redis_server: RedisServer, cluster: FakeCluster, tmp_path: Path
) -> None:
    kubeconfig = write_kubeconfig(tmp_path / "config", {"fake": cluster})
    # the same key, as bytes and as base64 text
    lead = registry(kubeconfig, redis_server, KEY)
    follow = registry(kubeconfig, redis_server, base64.b64encode(KEY).decode())
    async with lead, follow:
        lstore = await lead.watch("fake", "secrets")
        fstore = await follow.watch("fake", "secrets")
        assert informer(lead, "secrets").share_role == "leader"
        assert informer(follow, "secrets").share_role == "follower"
        await cluster.wait_for(lambda: cluster.open_watches == 1)  # one for both
        assert contents(fstore) == contents(lstore) and len(fstore) == 1
        assert B64 in contents(fstore)[("default", "s1")][1]
        cluster.create("secrets", secret("s2", base64.b64encode(b"second-" + PLAIN)))
        cluster.update("secrets", secret("s1", base64.b64encode(b"changed-" + PLAIN)))
        await wait_until(lambda: contents(fstore) == contents(lstore) and len(fstore) == 2)
        assert base64.b64encode(b"changed-" + PLAIN) in contents(fstore)[("default", "s1")][1]
        assert informer(follow, "secrets").last_error is None
        dump = await redis_dump(redis_server)
        assert b":objs" in dump and b":log" in dump  # the slot is in Redis ...
        for value in (PLAIN, b"changed-" + PLAIN, b"second-" + PLAIN):
            assert value not in dump  # ... but no value, decoded
            assert base64.b64encode(value) not in dump  # or as the Secret holds it
        assert b"hunter2" not in dump and b"password" not in dump  # nor the data's keys
        assert KEY not in dump and base64.b64encode(KEY) not in dump
        assert repr(KEY) not in repr(lead)


async def test_table_views_of_secrets_are_shared_encrypted(
    redis_server: RedisServer, cluster: FakeCluster, tmp_path: Path
) -> None:
    kubeconfig = write_kubeconfig(tmp_path / "config", {"fake": cluster})
    lead = registry(kubeconfig, redis_server, KEY)
    follow = registry(kubeconfig, redis_server, KEY)
    async with lead, follow:
        ltable = await lead.table("fake", "secrets")
        ftable = await follow.table("fake", "secrets")
        assert informer(follow, "secrets", "table").share_role == "follower"
        assert contents(ftable) == contents(ltable) and len(ftable) == 1
        assert [r.cells for r in ftable.rows()] == [r.cells for r in ltable.rows()]
        cluster.create("secrets", secret("s2"))
        await wait_until(lambda: contents(ftable) == contents(ltable) and len(ftable) == 2)
        dump = await redis_dump(redis_server)
        assert b"Opaque" not in dump  # a row's cells are encrypted too
        assert B64 not in dump and PLAIN not in dump


async def test_replicas_with_other_keys_do_not_share(
    redis_server: RedisServer, cluster: FakeCluster, tmp_path: Path
) -> None:
    kubeconfig = write_kubeconfig(tmp_path / "config", {"fake": cluster})
    one = registry(kubeconfig, redis_server, KEY)
    two = registry(kubeconfig, redis_server, os.urandom(32))
    async with one, two:
        s1 = await one.watch("fake", "secrets")
        s2 = await two.watch("fake", "secrets")
        p1 = await one.watch("fake", "pods")
        p2 = await two.watch("fake", "pods")
        assert informer(one, "secrets").share_role == "leader"
        assert informer(two, "secrets").share_role == "leader"  # its own slot: no sharing
        # nor any other kind: values are authenticated under the key, so a replica with
        # another key could not read what the first writes (nor the first trust its writes)
        assert informer(two, "pods").share_role == "leader"
        await cluster.wait_for(lambda: cluster.open_watches == 4)
        assert contents(s1) == contents(s2) and len(s2) == 1
        cluster.create("secrets", secret("s2"))
        cluster.create("pods", make_pod("p2"))
        await wait_until(lambda: len(s1) == len(s2) == 2 and len(p2) == len(p1) == 2)
        assert informer(one, "secrets").last_error is None
        assert informer(two, "secrets").last_error is None
        assert PLAIN not in await redis_dump(redis_server)


async def test_a_tampered_value_is_reported_and_never_cached(
    redis_server: RedisServer, cluster: FakeCluster, tmp_path: Path
) -> None:
    import redis.asyncio as aioredis

    kubeconfig = write_kubeconfig(tmp_path / "config", {"fake": cluster})
    lead = registry(kubeconfig, redis_server, KEY)
    follow = registry(kubeconfig, redis_server, KEY)
    async with lead, follow:
        await lead.watch("fake", "secrets")
        fstore = await follow.watch("fake", "secrets")
        fpods = await follow.watch("fake", "pods")
        assert informer(follow, "secrets").share_role == "follower"
        before = contents(fstore)
        async with aioredis.Redis.from_url(redis_server.url) as client:
            (objs,) = [
                k
                async for k in client.scan_iter(match="t:*:objs")
                if await client.hexists(k, "default/s1")
            ]
            value = await client.hget(objs, "default/s1")
            assert value is not None and B64 not in value
            tampered = value[:-1] + bytes([value[-1] ^ 1])  # one bit of the ciphertext
            await client.hset(objs, "default/s1", tampered)
            log = objs[: -len(b"objs")] + b"log"
            await client.xadd(log, {"t": "RESET"})  # the follower reloads the hash
        await wait_until(lambda: informer(follow, "secrets").last_error is not None)
        st = informer(follow, "secrets")
        assert st.last_error is not None
        assert st.last_error.startswith("skipped the value of 'default/s1' in Redis: ")
        assert st.last_error.endswith(
            "cannot decrypt: the replicas do not share the same "
            "secret_key (or a value in Redis was tampered with)"
        )
        assert st.skipped_lines == 1 and st.share_role == "follower"
        assert contents(fstore) == before  # the object kept what it had, nothing garbled
        # the other slots of that replica are unaffected
        assert informer(follow, "pods").last_error is None
        cluster.create("pods", make_pod("p2"))
        await wait_until(lambda: fpods.get("default", "p2") is not None)
        assert contents(fstore) == before


async def test_without_a_secret_key_secrets_stay_local(
    redis_server: RedisServer, cluster: FakeCluster, tmp_path: Path
) -> None:
    kubeconfig = write_kubeconfig(tmp_path / "config", {"fake": cluster})
    one = registry(kubeconfig, redis_server, None)
    two = registry(kubeconfig, redis_server, None)
    async with one, two:
        await one.watch("fake", "secrets")
        await two.watch("fake", "secrets")
        assert informer(one, "secrets").share_role == "local"
        assert informer(two, "secrets").share_role == "local"
        await cluster.wait_for(lambda: cluster.open_watches == 2)
        assert b"s1" not in await redis_dump(redis_server)


def test_the_key_is_checked_and_never_shown(redis_server: RedisServer) -> None:
    for bad in (b"short", "not base64!", base64.b64encode(b"x" * 16).decode()):
        with pytest.raises(ValueError, match="secret_key") as info:
            Redis(redis_server.url, secret_key=bad)
        assert str(bad) not in str(info.value)
    with pytest.raises(TypeError):
        Redis(redis_server.url, secret_key=32)  # type: ignore[arg-type]
    text = base64.b64encode(KEY).decode()
    shown = repr(Redis(redis_server.url, secret_key=text))
    assert "secret_key=<set>" in shown and text not in shown and repr(KEY) not in shown
