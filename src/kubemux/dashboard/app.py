"""The dashboard: a Starlette app that owns one :class:`kubemux.WatcherRegistry` in its lifespan.

Pages (plain HTML, CSS and a little JavaScript in ``static/``, no build step):

``/``
    The contexts with their live state, and a table of one resource across every context.
    ``?resource=deployments.apps&namespace=web&q=text`` picks what it shows.
``/object?context=C&resource=R&namespace=N&name=X``
    One object and its Kubernetes Events.

JSON API (errors are ``{"error": message, "status": code}``):

``GET /api/contexts``
    Every context's state (the registry's ``status()``).
``GET /api/contexts/{context}/{resource}?namespace=``
    The cached objects. Unknown context: 404. Not synced yet: 503 with ``Retry-After``.
``GET /api/contexts/{context}/{resource}/{namespace}/{name}``
    One object (``_`` as namespace for cluster-scoped objects).
``GET /api/contexts/{context}/resources``
    What the context's cluster serves (discovery), for a resource picker.
``GET /api/resources``
    What every context serves, merged (each resource with the contexts serving it);
    ``errors`` and ``pending`` (not answered within ``sync_timeout``) name the others.
``GET /api/namespaces``
    Every context's namespaces, merged by name (each with the contexts that have it).
``GET /api/contexts/{context}/{resource}/table?namespace=``
    The server's columns for the resource (``kubectl get``'s) and one row of cells per
    object. A name the cluster does not serve: 404 with ``suggestions``.
``GET /api/contexts/{context}/events/{kind}/{namespace}/{name}``
    The Kubernetes Events about one object, newest first.
``GET /api/contexts/{context}/pods/{namespace}/{name}/log?container=&previous=&follow=&tailLines=``
    A container's log, streamed as the API server sends it, bounded (see :mod:`._logs`).
``GET /api/stream``
    Server-sent events, see :mod:`.streams`.
``GET /metrics``
    The registry's Prometheus metrics (:mod:`kubemux.metrics`), when ``prometheus-client``
    is installed (the ``metrics`` extra).

Per user (``user_tokens=True``, ``kubemux dashboard --user-tokens``): ``/login``,
``/logout`` and ``/api/session`` (:mod:`._login`), and every answer above is what the
logged-in user's token may list (:mod:`._viewer`, :mod:`._user_streams`).

Safety: the server binds 127.0.0.1 unless told otherwise and only answers requests whose
``Host`` is one of ``allowed_hosts`` (so a web page cannot reach it by DNS rebinding); a
strict Content-Security-Policy allows no inline script; Secrets are redacted; the
registry's status never holds a token, key or password; and the page builds its DOM with
``textContent`` only.
"""

from __future__ import annotations

import re
import urllib.parse
from collections.abc import Mapping, Sequence
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from kubemux import WatcherRegistry

from .._authz.authorizer import AuthorizerSettings
from ._api import (
    STATIC,
    api_all_resources,
    api_contexts,
    api_events,
    api_list,
    api_namespaces,
    api_not_found,
    api_object,
    api_resources,
    api_table,
    page,
    problem_handler,
)
from ._login import SessionGate, api_session, login, login_page, logout
from ._logs import api_logs
from ._responses import Problem, json_response
from ._sse import api_stream
from ._state import Dashboard, dashboard_of

__all__ = ["LOCAL_HOSTS", "Dashboard", "Problem", "create_app"]

LOCAL_HOSTS = ("127.0.0.1", "localhost", "::1")
SECURITY_HEADERS = (
    (
        b"content-security-policy",
        (
            b"default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
            b"connect-src 'self'; object-src 'none'; base-uri 'none'; frame-ancestors 'none'"
        ),
    ),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"x-frame-options", b"DENY"),
)


def create_app(
    registry: WatcherRegistry | None = None,
    *,
    kubeconfig: str | Sequence[str] | None = None,
    resource: str = "pods",
    registry_options: Mapping[str, Any] | None = None,
    sync_timeout: float = 2.0,
    status_period: float = 1.0,
    title: str = "kubemux dashboard",
    allowed_hosts: Sequence[str] | None = LOCAL_HOSTS,
    max_streams: int = 200,
    stream_send_timeout: float = 15.0,
    user_tokens: bool = False,
    max_sessions: int = 1000,
    session_ttl: float = 8 * 3600.0,
    authorizer_settings: AuthorizerSettings | None = None,
) -> Starlette:
    """The dashboard as an ASGI app; ``app.state.dashboard`` is its :class:`Dashboard`.

    Mount it in your own Starlette or FastAPI app with a registry you own
    (``Mount("/dashboard", create_app(registry))``: a mounted app's lifespan does not run,
    and it needs none then), or serve it on its own without one: it then opens a registry
    from the kubeconfig in its lifespan and closes it on shutdown.

    Args:
        registry: See :class:`Dashboard`, as are ``kubeconfig``, ``resource``,
            ``registry_options``, ``sync_timeout``, ``status_period``, ``title``,
            ``max_streams`` and ``stream_send_timeout``.
        allowed_hosts: Host names the app answers to (``None``: any; only sensible behind
            an authenticating proxy, or with ``user_tokens``).
        user_tokens: Each user logs in with their own bearer token and sees only what it
            may list (see :mod:`._login`, :mod:`._viewer` and ``docs/many-users.md``);
            ``max_sessions`` and ``session_ttl`` bound the sessions, and
            ``authorizer_settings`` are the contexts' authorizers' (see
            :class:`Dashboard`). ``/metrics`` then needs a session too.

    Raises:
        TypeError: ``registry`` is not a :class:`~kubemux.WatcherRegistry`.
        ValueError: An unknown ``resource`` name, or ``kubeconfig`` given with a registry.
    """
    dashboard = Dashboard(
        registry,
        kubeconfig=kubeconfig,
        resource=resource,
        registry_options=registry_options,
        sync_timeout=sync_timeout,
        status_period=status_period,
        title=title,
        max_streams=max_streams,
        stream_send_timeout=stream_send_timeout,
        user_tokens=user_tokens,
        max_sessions=max_sessions,
        session_ttl=session_ttl,
        authorizer_settings=authorizer_settings,
    )
    routes: list[BaseRoute] = []
    if user_tokens:
        routes += [
            Route("/login", login_page, methods=["GET"]),
            Route("/login", login, methods=["POST"]),
            Route("/logout", logout, methods=["POST"]),
        ]
    routes += [
        Route("/api/session", api_session),  # {"user": null} for a dashboard of one identity
        Route("/", page),
        Route("/object", page),
        Mount("/static", StaticFiles(directory=STATIC), name="static"),
        Route("/api/contexts", api_contexts),
        Route("/api/resources", api_all_resources),
        Route("/api/namespaces", api_namespaces),
        Route("/api/contexts/{context}/resources", api_resources),
        Route("/api/contexts/{context}/{resource}/table", api_table),
        Route("/api/contexts/{context}/events/{kind}/{namespace}/{name}", api_events),
        Route("/api/contexts/{context}/pods/{namespace}/{name}/log", api_logs),
        Route("/api/contexts/{context}/{resource}", api_list),
        Route("/api/contexts/{context}/{resource}/{namespace}/{name}", api_object),
        Route("/api/stream", api_stream),
        Route("/api/{rest:path}", api_not_found),
    ]
    if dashboard.metrics is not None:
        routes.append(Route("/metrics", _metrics))
    app = Starlette(
        routes=routes,
        lifespan=dashboard.lifespan,
        exception_handlers={Problem: problem_handler},
    )
    app.state.dashboard = dashboard
    if user_tokens:
        app.add_middleware(SessionGate, dashboard=dashboard)  # inside the guard
    app.add_middleware(_Guard, allowed_hosts=allowed_hosts)
    return app


class _Guard:
    """Reject unknown Host headers (DNS rebinding) and add security headers."""

    def __init__(self, app: ASGIApp, allowed_hosts: Sequence[str] | None) -> None:
        self.app = app
        self.allowed = None if allowed_hosts is None else {h.lower() for h in allowed_hosts}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if self.allowed is not None:
            host = _host(dict(scope["headers"]).get(b"host", b"").decode("latin-1"))
            if host not in self.allowed:
                response = json_response(
                    {"error": f"host {host!r} is not allowed", "status": 400}, status=400
                )
                await response(scope, receive, send)
                return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), *SECURITY_HEADERS]}
            await send(message)

        raw = scope.get("raw_path")
        if raw and b"%2" in raw:  # an escaped "/" or "%" in a path segment: keep them escaped
            scope = {**scope, "path": _decode_keeping_slashes(raw)}
        await self.app(scope, receive, send_with_headers)


_KEPT_ESCAPES = re.compile(rb"%2[fF5]")


def _decode_keeping_slashes(raw_path: bytes) -> str:
    """The request path decoded, except ``%2F`` and ``%25``.

    Context names often hold a "/" (EKS names its contexts by ARN: ``...:cluster/prod``). The
    server decodes the path before routing, so an escaped "/" would split a segment; keeping
    it (and "%", to stay unambiguous) escaped lets the router match segments, and the API
    handlers decode their parameters once more (:func:`._api._param`).
    """
    pieces = _KEPT_ESCAPES.split(raw_path)
    kept = _KEPT_ESCAPES.findall(raw_path)
    out = [urllib.parse.unquote_to_bytes(pieces[0])]
    for escape, piece in zip(kept, pieces[1:], strict=True):
        out += (escape.upper(), urllib.parse.unquote_to_bytes(piece))
    return b"".join(out).decode("utf-8", "replace")


def _host(header: str) -> str:
    header = header.strip().lower()
    if header.startswith("["):  # [::1]:8000
        return header[1:].partition("]")[0]
    return header.rpartition(":")[0] if header.count(":") == 1 else header


async def _metrics(request: Request) -> Response:
    body = dashboard_of(request).scrape()
    return Response(body, media_type="text/plain; version=0.0.4; charset=utf-8")
