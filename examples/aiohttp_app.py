"""An aiohttp web app whose ``cleanup_ctx`` owns a WatcherRegistry.

    python examples/aiohttp_app.py [KUBECONFIG]

``GET /pods``: every context's pods from the cache, as JSON. ``GET /changes``: server-sent
events, one per pod change in any context (the current pods first). `tests/test_examples.py`
runs it against FakeClusters.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator

import orjson
from aiohttp import web

import kubemux

REGISTRY = web.AppKey("registry", kubemux.WatcherRegistry)
STREAMS = web.AppKey("streams", set[kubemux.Subscription])


def build_app(kubeconfig: str | None = None) -> web.Application:
    async def registry_ctx(app: web.Application) -> AsyncIterator[None]:
        # The registry owns a task group, which must be entered and left in one task with
        # nothing in between; aiohttp resumes this generator at cleanup from wherever
        # runner.cleanup() is awaited. So one task of its own holds the registry.
        ready, stop = asyncio.Event(), asyncio.Event()

        async def hold() -> None:
            registry = kubemux.WatcherRegistry.from_kubeconfig(kubeconfig, autowatch=["pods"])
            async with registry:
                app[REGISTRY] = registry
                ready.set()
                await stop.wait()

        holder = asyncio.create_task(hold())
        started = asyncio.create_task(ready.wait())
        await asyncio.wait({holder, started}, return_when=asyncio.FIRST_COMPLETED)
        if holder.done():  # it failed to start (a kubeconfig that cannot be loaded)
            started.cancel()
            holder.result()
        try:
            yield
        finally:
            stop.set()
            await holder

    async def end_streams(app: web.Application) -> None:
        # on shutdown, end the open event streams: the server would wait for them
        for subscription in app[STREAMS]:
            subscription.close()

    async def pods(request: web.Request) -> web.Response:
        registry = request.app[REGISTRY]
        rows = []
        for context in registry.contexts:
            store = registry.store(context, "pods")
            for pod in store.list() if store is not None else []:
                meta = pod["metadata"]
                rows.append(
                    {"context": context, "namespace": meta["namespace"], "name": meta["name"]}
                )
        return web.json_response(rows)

    async def changes(request: web.Request) -> web.StreamResponse:
        registry = request.app[REGISTRY]
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        # a subscriber that falls behind is closed (SubscriberOverflow): the informers
        # never wait for a slow browser
        async with registry.subscribe("pods") as subscription:
            request.app[STREAMS].add(subscription)
            try:
                async for change in subscription:
                    event = {
                        "context": change.context,
                        "type": change.type,
                        "namespace": change.namespace,
                        "name": change.name,
                    }
                    await response.write(b"data: " + orjson.dumps(event) + b"\n\n")
            except (ConnectionResetError, kubemux.SubscriberOverflow):
                pass  # the client went away, or could not keep up
            finally:
                request.app[STREAMS].discard(subscription)
        return response

    app = web.Application()
    app[STREAMS] = set()
    app.cleanup_ctx.append(registry_ctx)
    app.on_shutdown.append(end_streams)
    app.router.add_get("/pods", pods)
    app.router.add_get("/changes", changes)
    return app


if __name__ == "__main__":
    web.run_app(build_app(sys.argv[1] if len(sys.argv) > 1 else None), host="127.0.0.1", port=8080)
