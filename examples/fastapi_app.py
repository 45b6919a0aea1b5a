"""A FastAPI app that owns a WatcherRegistry in its lifespan and mounts the kubemux dashboard.

    pip install 'kubemux[dashboard]' fastapi
    python examples/fastapi_app.py [KUBECONFIG]

Then ``http://127.0.0.1:8000/pods`` is this app's own endpoint (every context's pods, from
the cache) and ``http://127.0.0.1:8000/dashboard/`` the live dashboard, serving the same
registry. `tests/test_examples.py` runs it against FakeClusters.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import AsyncIterator
from typing import Any

from fastapi import FastAPI, HTTPException

import kubemux
from kubemux.dashboard import create_app


def build_app(kubeconfig: str | None = None) -> FastAPI:
    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        # one registry for the app's lifetime; every context watches pods from the start
        registry = kubemux.WatcherRegistry.from_kubeconfig(kubeconfig, autowatch=["pods"])
        async with registry:
            app.state.registry = registry
            # the dashboard serves our registry: it neither opens nor closes it
            app.mount("/dashboard", create_app(registry, title="my clusters"))
            yield

    app = FastAPI(lifespan=lifespan)

    @app.get("/pods")
    async def pods() -> list[dict[str, Any]]:
        """Every synced context's pods, straight from the cache (no API call)."""
        registry: kubemux.WatcherRegistry = app.state.registry
        rows = []
        for context in registry.contexts:
            store = registry.store(context, "pods")
            for pod in store.list() if store is not None else []:
                rows.append(
                    {
                        "context": context,
                        "namespace": pod["metadata"]["namespace"],
                        "name": pod["metadata"]["name"],
                        "phase": pod.get("status", {}).get("phase"),
                    }
                )
        return rows

    @app.get("/pods/{context}/{namespace}/{name}")
    async def pod(context: str, namespace: str, name: str) -> dict[str, Any]:
        """One pod; starts the context's watcher if needed and waits for its first LIST."""
        registry: kubemux.WatcherRegistry = app.state.registry
        try:
            store = await registry.watch(context, "pods")
        except kubemux.ContextNotFound as exc:
            raise HTTPException(404, str(exc)) from exc
        except kubemux.KubemuxError as exc:
            raise HTTPException(503, str(exc)) from exc
        found = store.get(namespace, name)
        if found is None:
            raise HTTPException(404, f"pod {namespace}/{name} not found in {context!r}")
        return found

    return app


if __name__ == "__main__":
    import uvicorn

    uvicorn.run(build_app(sys.argv[1] if len(sys.argv) > 1 else None), port=8000)
