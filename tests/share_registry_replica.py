"""One registry replica for tests/test_share_registry.py: a real process running its own
``WatcherRegistry(share=kubemux.share.Redis(...))`` that autowatches one resource in every
context of a kubeconfig (followed: rewriting the file reloads contexts).

Usage: python share_registry_replica.py REDIS_URL KUBECONFIG RESOURCE [--no-lead] [--table]
       [--in-cluster ROOT]

``--table`` autowatches the resource's table view (as the dashboard does) instead.
``--in-cluster ROOT`` ignores KUBECONFIG (pass ``-``) and runs the pod's ``in-cluster``
context from the service-account folder ROOT (``KUBERNETES_SERVICE_HOST``/``_PORT`` set).

Reports JSON lines on stdout: {"op": "roles", "roles": {context: role}, "generations":
{context: n}, "errors": {context: last error}} whenever one of them changes, and answers
"dump" on stdin with {"op": "dump", "stores": {context: {"ns/name": rv}}, "columns":
{context: [name]}}.
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

from kubemux import WatcherRegistry
from kubemux._cache.table import TableStore
from kubemux._settings import Backoff, WatchSettings
from kubemux.share import Redis


def emit(**fields: Any) -> None:
    sys.stdout.buffer.write(orjson.dumps(fields) + b"\n")
    sys.stdout.buffer.flush()


async def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("redis")
    p.add_argument("kubeconfig")
    p.add_argument("resource")
    p.add_argument("--no-lead", action="store_true")
    p.add_argument("--table", action="store_true")
    p.add_argument("--in-cluster", default=None)
    args = p.parse_args()

    if args.in_cluster:
        os.environ.pop("KUBECONFIG", None)
        os.environ["HOME"] = os.getcwd()  # no ~/.kube/config: the in-cluster context
    registry = WatcherRegistry.from_kubeconfig(
        None if args.in_cluster else args.kubeconfig,
        in_cluster_root=args.in_cluster or "/nonexistent",
        debounce_delay=0.05,
        autowatch=[args.resource],
        autowatch_view="table" if args.table else "objects",
        settings=WatchSettings(backoff=Backoff(initial_delay=0.05, max_delay=0.5)),
        start_backoff=Backoff(initial_delay=0.05, max_delay=0.5),
        share=Redis(args.redis, prefix="t", lease_ttl=1.5, acquire_period=0.25),
        share_lead=not args.no_lead,
    )
    async with registry, anyio.create_task_group() as tg:

        async def report() -> None:
            last = None
            while True:
                roles: dict[str, str | None] = {}
                generations: dict[str, int | None] = {}
                errors: dict[str, str | None] = {}
                for name, ctx in registry.status().contexts.items():
                    generations[name] = ctx.generation
                    errors[name] = ctx.last_error
                    for inf in ctx.informers:
                        if inf.has_synced:
                            roles[name] = inf.share_role
                        errors[name] = errors[name] or inf.last_error
                now = (roles, generations, errors)
                if now != last:
                    emit(
                        op="roles", roles=roles, generations=generations, errors=errors,
                        t=time.time(),
                    )  # fmt: skip
                    last = now
                await anyio.sleep(0.02)

        tg.start_soon(report)
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader()
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
        while line := (await reader.readline()).strip():
            if line == b"dump":
                stores = {}
                columns = {}
                view = "table" if args.table else "objects"
                for name in registry.contexts:
                    store = registry.store(name, args.resource, view=view)
                    if isinstance(store, TableStore):
                        columns[name] = [c.name for c in store.columns]
                    if store is not None:
                        stores[name] = {
                            f"{e.namespace}/{e.name}": e.resource_version
                            for e in store._entries(None)
                        }
                emit(op="dump", stores=stores, columns=columns)
        tg.cancel_scope.cancel()


if __name__ == "__main__":
    anyio.run(main)
