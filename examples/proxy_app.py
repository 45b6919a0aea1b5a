"""Serve every context's Kubernetes API inside your own Starlette app, behind your own auth.

    pip install 'kubemux[proxy]'
    KUBEMUX_API_KEY=secret python examples/proxy_app.py [KUBECONFIG]

Then ``curl -H 'X-API-Key: secret' http://127.0.0.1:8000/k8s/clusters/prod/api/v1/pods``
lists the pods of context ``prod`` from kubemux's cache (a frontend such as Headlamp's asks
``/clusters/{context}/...`` the same way). Writes, logs and exec go to the cluster with the
kubeconfig's credentials, so whoever passes your check acts as that kubeconfig user: put
real authentication where ``RequireApiKey`` stands. ``tests/test_examples.py`` runs it.
"""

from __future__ import annotations

import contextlib
import hmac
import os
import sys
from collections.abc import AsyncIterator

from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Mount, Route
from starlette.types import ASGIApp, Receive, Scope, Send

import kubemux
from kubemux.proxy import create_app


class RequireApiKey:
    """Your authentication: here, one shared key in the ``X-API-Key`` header."""

    def __init__(self, app: ASGIApp, key: str) -> None:
        self.app = app
        self.key = key.encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] in ("http", "websocket"):
            sent = dict(scope["headers"]).get(b"x-api-key", b"")
            if not hmac.compare_digest(sent, self.key):
                if scope["type"] == "websocket":
                    await receive()
                    await send({"type": "websocket.close", "code": 1008})
                    return
                await JSONResponse({"error": "unauthorized"}, 401)(scope, receive, send)
                return
        await self.app(scope, receive, send)


def build_app(kubeconfig: str | None = None, *, api_key: str) -> Starlette:
    registry = kubemux.WatcherRegistry.from_kubeconfig(kubeconfig)
    proxy = create_app(registry)  # mounted: no lifespan of its own; the registry is ours

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with registry:
            yield

    async def contexts(request: object) -> JSONResponse:
        return JSONResponse(sorted(registry.contexts))

    app = Starlette(
        routes=[Route("/contexts", contexts), Mount("/k8s", app=proxy)],
        lifespan=lifespan,
    )
    app.add_middleware(RequireApiKey, key=api_key)
    return app


if __name__ == "__main__":
    import uvicorn

    key = os.environ.get("KUBEMUX_API_KEY")
    if not key:
        sys.exit("set KUBEMUX_API_KEY to the key clients must send")
    uvicorn.run(build_app(sys.argv[1] if len(sys.argv) > 1 else None, api_key=key))
