"""One replica for the shared-watch tests and bench: a real process running a share session.

Usage: python share_replica.py REDIS_URL KUBECONFIG CONTEXT RESOURCE [options]

Reports JSON lines on stdout: {"op": "started"}, {"op": "role", "role": ...} on every role
change, and answers "dump" on stdin with {"op": "dump", "objects": {"ns/name": rv}, ...}.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from typing import Any

import anyio
import orjson

from kubemux._cache.store import Store
from kubemux._http.client import open_client
from kubemux._informer.informer import InformerKey
from kubemux._kubeconfig.load import load_kubeconfig
from kubemux._resources import parse_resource
from kubemux._settings import Backoff, WatchSettings
from kubemux._wire.codec import Entry
from kubemux.share import Redis, informer_lead, share_key
from support import listen


def emit(**fields: Any) -> None:
    sys.stdout.buffer.write(orjson.dumps(fields) + b"\n")
    sys.stdout.buffer.flush()


async def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("redis")
    p.add_argument("kubeconfig")
    p.add_argument("context")
    p.add_argument("resource")
    p.add_argument("--kind", default="")
    p.add_argument("--lease-ttl", type=float, default=1.5)
    p.add_argument("--acquire-period", type=float, default=0.25)
    p.add_argument("--no-lead", action="store_true")
    p.add_argument("--identity", default="test", help="who the API server sees (share key)")
    p.add_argument("--lags", action="store_true", help="keep the lag of every change")
    args = p.parse_args()

    config = load_kubeconfig(args.kubeconfig).contexts[args.context]
    resource = parse_resource(args.resource)
    store = Store(resource)
    deleted: list[str] = []
    lags: list[float] = []
    session: Any = None

    def on_change(etype: str, entry: Entry, old: Entry | None) -> None:
        if etype == "DELETED":
            deleted.append(f"{entry.namespace}/{entry.name}")
        if args.lags and session is not None:
            status = session.slot_status(key)
            if status is not None and status.role == "follower" and status.lag is not None:
                lags.append(status.lag)

    engine = Redis(
        args.redis,
        prefix="test",
        lease_ttl=args.lease_ttl,
        acquire_period=args.acquire_period,
    )
    settings = WatchSettings(backoff=Backoff(initial_delay=0.05, max_delay=0.5))
    key = share_key(server=config.server, ca=None, identity=args.identity, resource=resource)
    async with (
        open_client(config) as client,
        engine.open() as opened,
        anyio.create_task_group() as tg,
    ):
        session = opened
        lead = informer_lead(
            client,
            resource,
            InformerKey(resource.name),
            settings=settings,
            store=listen(store, on_change),
        )

        async def run_slot(*, task_status: anyio.abc.TaskStatus[None]) -> None:
            await session.run_slot(
                key=key,
                store=store,
                lead=lead,
                task_status=task_status,
                can_lead=not args.no_lead,
                kind=args.kind,
            )

        async def roles() -> None:
            last = None
            while True:
                status = session.slot_status(key)
                role = status.role if status else None
                if role != last:
                    emit(op="role", role=role, t=time.time())
                    last = role
                await anyio.sleep(0.01)

        tg.start_soon(roles)
        t0 = time.monotonic()
        await tg.start(run_slot)
        emit(
            op="started",
            role=session.slot_status(key).role,
            elapsed=time.monotonic() - t0,
            rss=_rss(),
        )

        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader()
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
        while line := (await reader.readline()).strip():
            if line == b"dump":
                status = session.slot_status(key)
                emit(
                    op="dump",
                    objects={
                        f"{e.namespace}/{e.name}": e.resource_version for e in store._entries(None)
                    },
                    deleted=deleted,
                    status=None
                    if status is None
                    else {
                        "role": status.role,
                        "stale_since": status.stale_since,
                        "fenced_writes": status.fenced_writes,
                        "rehydrations": status.rehydrations,
                        "epoch": status.epoch,
                        "lag": status.lag,
                    },
                    rss=_rss(),
                    json_bytes=sum(len(e.raw) for e in store._entries(None)),
                    store_bytes=_store_bytes(store),
                    lags=lags,
                )
        tg.cancel_scope.cancel()


def _store_bytes(store: Store) -> int:
    """What the store's entries and tables take (objects, strings, dict slots).

    The store keeps each object's bytes alone (or, pinned, its Entry: then the Entry, its
    bytes and its resourceVersion as kept, ``Entry.rv``). A string is counted once when the
    entry and the dict share it (``is``): the name key, the namespace key; a copy of its own
    is counted with the entry."""
    total = sys.getsizeof(store._items)
    for ns, bucket in store._items.items():
        total += sys.getsizeof(bucket) + sys.getsizeof(ns)
        for name, kept in bucket.items():
            total += sys.getsizeof(name) + sys.getsizeof(kept)
            if isinstance(kept, Entry):
                total += sys.getsizeof(kept.raw) + sys.getsizeof(kept.rv)
                if kept.name is not name:
                    total += sys.getsizeof(kept.name)
                if kept.namespace is not ns:
                    total += sys.getsizeof(kept.namespace)
    return total


def _rss() -> int:
    with open(f"/proc/{os.getpid()}/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


if __name__ == "__main__":
    anyio.run(main)
