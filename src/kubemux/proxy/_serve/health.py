"""``/livez``, ``/readyz`` and ``/healthz`` (and ``.../ping``) at the proxy's root.

kpt and cli-utils probe the host root of the server in a kubeconfig (``GET /livez/ping``)
before they decide on client-side throttling; through the proxy that host is the proxy's,
so it answers as kube-apiserver does: ``200``, ``text/plain``, ``ok``; with ``verbose``,
the check list (the proxy has one check: it serves). HEAD too (no body). Behind
:class:`~kubemux.proxy.ProxyServer` these need the token, as everything else.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from .._api.responses import StatusError, send_error
from .._query.params import parse_query
from .._upstream.upgrade import deny

__all__ = ["HEALTH_PATHS", "health", "not_found"]

HEALTH_PATHS = (
    "/livez",
    "/readyz",
    "/healthz",
    "/livez/ping",
    "/readyz/ping",
    "/healthz/ping",
)


async def health(request: Request) -> Response:
    """Answer one health check (see the module docstring)."""
    path = request.url.path
    body = b"ok"
    if "verbose" in parse_query(request.scope.get("query_string", b"")) and not path.endswith(
        "/ping"
    ):
        body = f"[+]ping ok\n{path.strip('/')} check passed\n".encode()
    headers = {"X-Content-Type-Options": "nosniff", "Cache-Control": "no-cache, private"}
    return Response(body, media_type="text/plain; charset=utf-8", headers=headers)


async def not_found(scope: Scope, receive: Receive, send: Send) -> None:
    """The 404 ``Status`` of a path outside ``/clusters/`` and the health paths."""
    error = StatusError(404, "the server could not find the requested resource")
    if scope["type"] == "websocket":
        await receive()
        await deny(scope, send, error)
    elif scope["type"] == "http":
        await send_error(send, error)
