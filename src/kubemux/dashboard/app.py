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
``GET /api/contexts/{context}/{resource}/table?namespace=``
    The server's columns for the resource (``kubectl get``'s) and one row of cells per
    object. A name the cluster does not serve: 404 with ``suggestions``.
``GET /api/contexts/{context}/events/{kind}/{namespace}/{name}``
    The Kubernetes Events about one object, newest first.
``GET /api/stream``
    Server-sent events, see :mod:`.streams`.
``GET /metrics``
    The registry's Prometheus metrics (:mod:`kubemux.metrics`), when ``prometheus-client``
    is installed (the ``metrics`` extra).

Safety: the server binds 127.0.0.1 unless told otherwise and only answers requests whose
``Host`` is one of ``allowed_hosts`` (so a web page cannot reach it by DNS rebinding); a
strict Content-Security-Policy allows no inline script; Secrets are redacted; the
registry's status never holds a token, key or password; and the page builds its DOM with
``textContent`` only.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import math
import re
import time
import urllib.parse
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator, Mapping, Sequence
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

import anyio
import orjson
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import FileResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from kubemux import (
    ApiError,
    ClusterUnreachable,
    ContextNotFound,
    ContextRemoved,
    KubemuxError,
    NotSynced,
    Resource,
    ResourceNotFound,
    Store,
    UnknownResource,
    WatcherRegistry,
    parse_resource,
)

from .._redact import redact_text
from .streams import SnapshotCache, Stream
from .views import event_payload, redact, status_payload

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

__all__ = ["LOCAL_HOSTS", "Dashboard", "Problem", "create_app"]

log = logging.getLogger(__name__)


def _metrics_module() -> ModuleType | None:
    """:mod:`kubemux.metrics` if ``prometheus-client`` is installed."""
    try:
        import kubemux.metrics
    except ImportError:
        return None
    return kubemux.metrics


STATIC = Path(__file__).resolve().parent / "static"
LOCAL_HOSTS = ("127.0.0.1", "localhost", "::1")
CONTEXTS_TTL = 0.05  # seconds a contexts panel is shared before it is built again
ADMISSION_RATE = 200.0  # event streams started per second, at most, after a burst of
ADMISSION_BURST = 20
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


class Problem(Exception):
    """An API error: answered as JSON ``{"error": message, "status": status}``."""

    def __init__(self, status: int, message: str, *, retry_after: float | None = None) -> None:
        message = redact_text(message)  # a server URL in an error keeps no password
        super().__init__(message)
        self.status = status
        self.message = message
        self.retry_after = retry_after

    def response(self) -> Response:
        headers = {}
        if self.retry_after is not None:
            headers["Retry-After"] = str(max(1, math.ceil(self.retry_after)))
        body = {"error": self.message, "status": self.status}
        return _json(body, status=self.status, headers=headers)


class Dashboard:
    """The app's state: settings, and the registry while the app runs.

    Args:
        registry: A running registry to serve; the app neither opens nor closes it. ``None``:
            the app opens its own from ``kubeconfig`` in its lifespan.
        kubeconfig: Kubeconfig path(s) for an own registry; ``None``: ``$KUBECONFIG`` or
            ``~/.kube/config``.
        resource: The default resource; an own registry watches it in every context.
        registry_options: More keyword arguments for ``WatcherRegistry.from_kubeconfig``.
        sync_timeout: How long an API call waits for a first LIST before answering 503.
        status_period: Longest delay before a change of state reaches the contexts panel.
        title: Shown in the page header.
        max_streams: Event streams served at once; one more is answered 503.
        stream_send_timeout: A stream whose client has not taken what was sent for this
            long is closed (a client that stopped reading holds nothing for ever).
    """

    def __init__(
        self,
        registry: WatcherRegistry | None = None,
        *,
        kubeconfig: str | Sequence[str] | None = None,
        resource: str = "pods",
        registry_options: Mapping[str, Any] | None = None,
        sync_timeout: float = 2.0,
        status_period: float = 1.0,
        title: str = "kubemux dashboard",
        max_streams: int = 200,
        stream_send_timeout: float = 15.0,
    ) -> None:
        if registry is not None and not isinstance(registry, WatcherRegistry):
            raise TypeError(
                f"registry must be a WatcherRegistry or None, not {type(registry).__name__} "
                "(a kubeconfig path goes in kubeconfig=...)"
            )
        if registry is not None and (kubeconfig is not None or registry_options):
            raise ValueError("kubeconfig and registry_options are for an own registry only")
        self.kubeconfig = kubeconfig
        self.resource = parse_resource(resource)
        self.registry_options = dict(registry_options or {})
        self.sync_timeout = sync_timeout
        self.status_period = status_period
        self.title = title
        self.max_streams = max_streams
        self.stream_send_timeout = stream_send_timeout
        self.streams = 0  # open event streams
        self.stream_scopes: set[anyio.CancelScope] = set()  # cancelled by close_streams()
        self._next_admission = 0.0
        self.metrics = _metrics_module()
        # /metrics: the registry's collector is registered here for the lifespan
        self.prom: CollectorRegistry | None = None
        if self.metrics is not None:
            import prometheus_client

            self.prom = prometheus_client.CollectorRegistry()
        self._metrics_registered = False
        self.snapshots = SnapshotCache()
        self._contexts_cache: tuple[int, float, bytes] | None = None
        self._external = registry
        self._registry: WatcherRegistry | None = registry
        self._closing: anyio.Event | None = None
        self._close_requested = False
        self._listeners: list[Callable[[BaseException | None], None]] = []

    @property
    def registry(self) -> WatcherRegistry:
        """The running registry (an own one between lifespan startup and shutdown)."""
        if self._registry is None:
            raise Problem(503, "the dashboard is not running", retry_after=1)
        return self._registry

    def on_startup(self, callback: Callable[[BaseException | None], None]) -> None:
        """Call ``callback(None)`` once the registry runs, or ``callback(error)`` if it fails."""
        self._listeners.append(callback)

    def close_streams(self) -> None:
        """End every open event stream (before a server shutdown: they would hold it up)."""
        self._close_requested = True
        self._end_streams()

    def _end_streams(self) -> None:
        if self._closing is not None:
            self._closing.set()
        for scope in list(self.stream_scopes):
            scope.cancel("dashboard shutting down")

    async def admit(self) -> None:
        """Wait for a new event stream's turn to start.

        Streams start at most ``ADMISSION_RATE`` a second after a burst of
        ``ADMISSION_BURST``: a thousand browsers connecting at once are spread over a few
        seconds, and the event loop keeps turning meanwhile (a queue of timers, no task).
        """
        now = time.monotonic()
        turn = max(self._next_admission, now - ADMISSION_BURST / ADMISSION_RATE)
        self._next_admission = turn + 1 / ADMISSION_RATE
        if turn > now:
            await anyio.sleep(turn - now)
        if self._close_requested:
            raise Problem(503, "the dashboard is shutting down", retry_after=1)

    async def wait_closing(self) -> None:
        """Return once :meth:`close_streams` was called or the app shuts down."""
        if self._closing is None:
            self._closing = anyio.Event()
        if self._close_requested:
            self._closing.set()
        await self._closing.wait()

    @contextlib.asynccontextmanager
    async def lifespan(self, app: Starlette) -> AsyncIterator[None]:
        """Open the registry for the app's lifetime (unless it was given one)."""
        self._closing = anyio.Event()
        self._close_requested = False
        if self._external is not None:
            for callback in self._listeners:
                callback(None)
            try:
                with self._registered(self._external):
                    yield
            finally:
                self._end_streams()
            return
        options: dict[str, Any] = {"autowatch": [self.resource], **self.registry_options}
        started = False
        try:
            async with WatcherRegistry.from_kubeconfig(self.kubeconfig, **options) as registry:
                self._registry = registry
                started = True
                for callback in self._listeners:
                    callback(None)
                try:
                    with self._registered(registry):
                        yield
                finally:
                    self._end_streams()
                    self._registry = None
                    self.snapshots.clear()
        except BaseException as exc:
            if not started:
                for callback in self._listeners:
                    callback(exc)
            raise

    @contextlib.contextmanager
    def _registered(self, registry: WatcherRegistry) -> Iterator[None]:
        """Report ``registry`` in :attr:`prom` (if ``prometheus-client`` is installed)."""
        if self.metrics is None or self.prom is None:
            yield
            return
        with self.metrics.registered(registry, self.prom):
            self._metrics_registered = True
            try:
                yield
            finally:
                self._metrics_registered = False

    def scrape(self) -> bytes:
        """The Prometheus text exposition of the registry's metrics.

        A mounted app has no lifespan: the registry is then registered for the scrape.
        """
        from prometheus_client import generate_latest as generate

        assert self.prom is not None
        if self._metrics_registered:
            return bytes(generate(self.prom))
        with self._registered(self.registry):
            return bytes(generate(self.prom))

    def contexts_json(self, version: int) -> bytes:
        """``status_payload`` encoded, shared by every stream and ``/api/contexts``.

        Recomputed when the registry's ``status_version`` moved, or after ``CONTEXTS_TTL``
        (object counts change without it).
        """
        now = time.monotonic()
        cached = self._contexts_cache
        if cached is not None and cached[0] == version and now - cached[1] < CONTEXTS_TTL:
            return cached[2]
        raw = orjson.dumps(status_payload(self.registry.status()))
        self._contexts_cache = (version, now, raw)
        return raw

    async def ready_store(self, context: str, resource: Resource) -> Store:
        """The context's synced store of ``resource``, starting its watcher if needed.

        Raises:
            Problem: 404 (unknown context or resource type), 503 (not synced within
                ``sync_timeout``, unreachable, reloading) or 502 (the API server refused).
        """
        registry = self.registry
        store = registry.store(context, resource)
        if store is not None:
            return store
        with anyio.move_on_after(self.sync_timeout):
            try:
                return await registry.watch(context, resource)
            except KubemuxError as exc:
                raise self.problem(exc, context) from exc
        raise Problem(
            503, f"{resource.name} in context {context!r} is not synced yet", retry_after=1
        )

    def problem(self, exc: KubemuxError, context: str) -> Problem:
        """The HTTP answer to a kubemux error."""
        message = str(exc)
        if isinstance(exc, ContextNotFound | ResourceNotFound):
            return Problem(404, message)
        if isinstance(exc, ContextRemoved | NotSynced):
            return Problem(503, message, retry_after=1)
        if isinstance(exc, ClusterUnreachable):
            return Problem(503, message, retry_after=self._retry_in(context))
        if isinstance(exc, ApiError):
            return Problem(502, message)
        return Problem(502, message)

    def _retry_in(self, context: str) -> float:
        ctx = self.registry.status().contexts.get(context)
        return ctx.retry_in if ctx is not None and ctx.retry_in else 1.0


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
            an authenticating proxy).

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
    )
    routes = [
        Route("/", _page),
        Route("/object", _page),
        Mount("/static", StaticFiles(directory=STATIC), name="static"),
        Route("/api/contexts", _api_contexts),
        Route("/api/contexts/{context}/resources", _api_resources),
        Route("/api/contexts/{context}/{resource}/table", _api_table),
        Route("/api/contexts/{context}/events/{kind}/{namespace}/{name}", _api_events),
        Route("/api/contexts/{context}/{resource}", _api_list),
        Route("/api/contexts/{context}/{resource}/{namespace}/{name}", _api_object),
        Route("/api/stream", _api_stream),
        Route("/api/{rest:path}", _api_not_found),
    ]
    if dashboard.metrics is not None:
        routes.append(Route("/metrics", _metrics))
    app = Starlette(
        routes=routes,
        lifespan=dashboard.lifespan,
        exception_handlers={Problem: _problem_handler},
    )
    app.state.dashboard = dashboard
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
                response = _json(
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
    handlers decode their parameters once more (:func:`_param`).
    """
    pieces = _KEPT_ESCAPES.split(raw_path)
    kept = _KEPT_ESCAPES.findall(raw_path)
    out = [urllib.parse.unquote_to_bytes(pieces[0])]
    for escape, piece in zip(kept, pieces[1:], strict=True):
        out += (escape.upper(), urllib.parse.unquote_to_bytes(piece))
    return b"".join(out).decode("utf-8", "replace")


def _param(request: Request, name: str) -> str:
    """A path parameter of the JSON API, decoded (see :func:`_decode_keeping_slashes`)."""
    return urllib.parse.unquote(request.path_params[name])


def _host(header: str) -> str:
    header = header.strip().lower()
    if header.startswith("["):  # [::1]:8000
        return header[1:].partition("]")[0]
    return header.rpartition(":")[0] if header.count(":") == 1 else header


def _json(body: object, *, status: int = 200, headers: Mapping[str, str] | None = None) -> Response:
    return Response(
        orjson.dumps(body), status_code=status, headers=headers, media_type="application/json"
    )


async def _problem_handler(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, Problem)
    return exc.response()


def _dashboard(request: Request) -> Dashboard:
    dashboard = request.app.state.dashboard
    assert isinstance(dashboard, Dashboard)
    return dashboard


def _resource(name: str) -> Resource:
    try:
        return parse_resource(name)
    except ValueError as exc:
        raise Problem(400, str(exc)) from exc


def _namespace(segment: str) -> str:
    return "" if segment in ("_", "-") else segment


async def _page(request: Request) -> Response:
    return FileResponse(STATIC / "index.html", headers={"Cache-Control": "no-cache"})


async def _metrics(request: Request) -> Response:
    body = _dashboard(request).scrape()
    return Response(body, media_type="text/plain; version=0.0.4; charset=utf-8")


async def _api_not_found(request: Request) -> Response:
    raise Problem(404, f"no such API endpoint: {request.url.path}")


async def _api_contexts(request: Request) -> Response:
    dashboard = _dashboard(request)
    raw = dashboard.contexts_json(dashboard.registry.status_version)
    return Response(raw, media_type="application/json")


async def _api_list(request: Request) -> Response:
    dashboard = _dashboard(request)
    context = _param(request, "context")
    resource = _resource(_param(request, "resource"))
    namespace = request.query_params.get("namespace") or None
    store = await dashboard.ready_store(context, resource)
    raws = store.list_raw(namespace if resource.namespaced else None)
    if resource.kind == "Secret":
        raws = [orjson.dumps(redact(resource, orjson.loads(raw))) for raw in raws]
    head = orjson.dumps(
        {
            "context": context,
            "resource": resource.name,
            "namespace": namespace,
            "resourceVersion": store.resource_version,
        }
    )
    body = head[:-1] + b',"items":[' + b",".join(raws) + b"]}"  # no decode, no re-encode
    return Response(body, media_type="application/json")


async def _api_resources(request: Request) -> Response:
    dashboard = _dashboard(request)
    context = _param(request, "context")
    with anyio.move_on_after(dashboard.sync_timeout):
        try:
            served = await dashboard.registry.resources(context)
        except KubemuxError as exc:
            raise dashboard.problem(exc, context) from exc
        resources = [
            {
                "name": r.name,
                "kind": r.kind,
                "namespaced": r.namespaced,
                "short_names": list(r.short_names),
            }
            for r in served
        ]
        return _json({"context": context, "resources": resources})
    raise Problem(503, f"discovery of context {context!r} is not done yet", retry_after=1)


async def _api_table(request: Request) -> Response:
    dashboard = _dashboard(request)
    context = _param(request, "context")
    name = _param(request, "resource")  # as typed: discovery resolves it, as kubectl does
    namespace = request.query_params.get("namespace") or None
    with anyio.move_on_after(dashboard.sync_timeout):
        try:
            table = await dashboard.registry.table(context, name, namespace)
        except UnknownResource as exc:
            problem = dashboard.problem(exc, context)
            body = {"error": problem.message, "status": 404, "suggestions": list(exc.suggestions)}
            return _json(body, status=404)
        except KubemuxError as exc:
            raise dashboard.problem(exc, context) from exc
        except ValueError as exc:
            raise Problem(400, str(exc)) from exc
        columns = [
            {
                "name": c.name,
                "type": c.type,
                "format": c.format,
                "description": c.description,
                "priority": c.priority,
            }
            for c in table.columns
        ]
        rows = [
            {"namespace": r.namespace, "name": r.name, "cells": list(r.cells)}
            for r in table.rows(namespace)
        ]
        return _json(
            {
                "context": context,
                "resource": table.resource.name,
                "namespace": namespace,
                "columns": columns,
                "rows": rows,
            }
        )
    raise Problem(503, f"{name} in context {context!r} is not synced yet", retry_after=1)


async def _api_object(request: Request) -> Response:
    dashboard = _dashboard(request)
    context = _param(request, "context")
    resource = _resource(_param(request, "resource"))
    namespace = _namespace(_param(request, "namespace"))
    name = _param(request, "name")
    store = await dashboard.ready_store(context, resource)
    obj = store.get(namespace if resource.namespaced else "", name)
    if obj is None:
        where = f"{namespace}/{name}" if namespace else name
        raise Problem(404, f"{resource.name} {where} not found in context {context!r}")
    return _json(redact(resource, obj))


async def _api_events(request: Request) -> Response:
    dashboard = _dashboard(request)
    registry = dashboard.registry
    context = _param(request, "context")
    kind = _param(request, "kind")
    if kind[:1].islower():  # "pods" -> "Pod"
        kind = _resource(kind).kind or kind
    namespace = _namespace(_param(request, "namespace"))
    name = _param(request, "name")
    with anyio.move_on_after(dashboard.sync_timeout):
        try:
            events = await registry.events_for(context, kind, namespace or None, name)
        except KubemuxError as exc:
            raise dashboard.problem(exc, context) from exc
        return _json(
            {
                "context": context,
                "kind": kind,
                "namespace": namespace,
                "name": name,
                "events": [event_payload(e) for e in events],
            }
        )
    raise Problem(503, f"the events of context {context!r} are not synced yet", retry_after=1)


async def _api_stream(request: Request) -> Response:
    dashboard = _dashboard(request)
    if dashboard.streams >= dashboard.max_streams:
        log.warning("refused an event stream: %d are open (max_streams)", dashboard.streams)
        raise Problem(
            503, f"too many event streams (at most {dashboard.max_streams})", retry_after=5
        )
    dashboard.registry  # noqa: B018 - 503 now if the dashboard is not running
    query = request.query_params
    try:
        resource = parse_resource(query.get("resource") or dashboard.resource)
    except ValueError as exc:
        return _EventStream(dashboard, functools.partial(_fail, str(exc)))
    context, name = query.get("context"), query.get("name")
    if context and name:
        ns = query.get("namespace") or ""
        return _EventStream(dashboard, lambda stream: stream.object(context, resource, ns, name))
    namespace = query.get("namespace") or None
    return _EventStream(dashboard, lambda stream: stream.table(resource, namespace))


async def _fail(message: str, stream: Stream) -> None:
    await stream.fail(message)


class _EventStream(Response):
    """An event stream, counted against ``max_streams``: a plain ASGI response.

    No helper task per stream but one that notices the client leaving: the
    :class:`~.streams.Stream` writes straight into the connection, each write bounded by
    ``stream_send_timeout`` (a client that stopped reading is disconnected, quietly: that is
    a client's business), and :meth:`Dashboard.close_streams` cancels every stream at once.
    At most ``ADMIT_PER_TICK`` streams start per turn of the event loop; the others wait
    their turn (a burst of connections is spread over a few turns, never one long one).
    """

    media_type = "text/event-stream"

    def __init__(
        self, dashboard: Dashboard, run: Callable[[Stream], Coroutine[None, None, None]]
    ) -> None:
        super().__init__()
        self.raw_headers = [
            (b"content-type", b"text/event-stream; charset=utf-8"),
            (b"cache-control", b"no-store"),
            (b"x-accel-buffering", b"no"),
        ]
        self._dashboard = dashboard
        self._run = run
        dashboard.streams += 1  # counted from now: the handler may not reach __call__
        self._counted = True

    def _uncount(self) -> None:
        if self._counted:
            self._counted = False
            self._dashboard.streams -= 1

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        dashboard = self._dashboard
        try:
            await dashboard.admit()
            await send({"type": "http.response.start", "status": 200, "headers": self.raw_headers})
            # An asyncio lock: uncontended (nearly always) it takes no turn of the event
            # loop, where anyio's does; a write costs no timer either (see _Watch).
            lock = asyncio.Lock()
            async with anyio.create_task_group() as tg:
                watch = _Watch(receive, tg.cancel_scope, dashboard.stream_send_timeout)

                async def write(data: bytes) -> None:
                    async with lock:
                        watch.since = time.monotonic()
                        await send({"type": "http.response.body", "body": data, "more_body": True})
                        watch.since = None

                dashboard.stream_scopes.add(tg.cancel_scope)
                try:
                    tg.start_soon(watch.run)
                    await self._run(Stream(dashboard, write))
                    tg.cancel_scope.cancel()
                finally:
                    dashboard.stream_scopes.discard(tg.cancel_scope)
            if watch.stalled:
                log.info(
                    "closed an event stream whose client took nothing for %.0fs",
                    dashboard.stream_send_timeout,
                )
            elif not watch.gone:
                with anyio.move_on_after(1):
                    await send({"type": "http.response.body", "body": b"", "more_body": False})
        except OSError:  # the client went away mid-write
            pass
        finally:
            self._uncount()


class _Watch:
    """A stream's one helper task: it ends the stream when the client disconnects, or when
    a write has waited more than ``timeout`` (looked at every ``timeout / 4``)."""

    def __init__(self, receive: Receive, scope: anyio.CancelScope, timeout: float) -> None:
        self.receive = receive
        self.scope = scope
        self.timeout = timeout
        self.since: float | None = None  # when the pending write began
        self.gone = False
        self.stalled = False

    async def run(self) -> None:
        while True:
            with anyio.move_on_after(self.timeout / 4):
                if (await self.receive())["type"] == "http.disconnect":
                    self.gone = True
                    self.scope.cancel("the client went away")
                    return
                continue
            since = self.since
            if since is not None and time.monotonic() - since > self.timeout:
                self.stalled = True
                self.scope.cancel("the client stopped reading")
                return
