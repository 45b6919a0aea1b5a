"""The proxy as an ASGI app: ``/clusters/{context}/...`` -> that context's Kubernetes API.

Every request is routed by its raw path: the context segment (see :mod:`.._api.paths`), then
the API path below it. Then, in this order:

1. WebSocket requests (exec, attach, port-forward) are bridged upstream (:mod:`.._upstream.upgrade`);
   SPDY upgrades are piped upstream when the server hands over the connection
   (:mod:`.._upstream.raw_upgrade`; ``ProxyServer`` does), else get the refusal of the WebSocket
   attempt before them, or a 400;
2. discovery and OpenAPI GETs are answered from the per-context :class:`DiscoveryCache`;
3. LIST, GET and WATCH that :func:`plan_read` accepts are answered from the informers'
   stores (:mod:`.._reads.reads`);
4. everything else is forwarded upstream with the context's credential (:mod:`.._upstream.passthrough`).

An unknown context, a malformed context segment and an API path that could mean something
else upstream (``..``, an encoded ``/``) get a 404 ``Status``; a context that cannot start
gets a 503 naming why (within the registry's ``start_timeout``). The app does no
authentication of its own: :class:`~kubemux.proxy.ProxyServer` adds TLS, a bearer token and
a Host check; mounted in your app, yours applies. With ``ProxySettings(user_tokens=True)``
each request is its user's (:mod:`.._users`): authenticated, authorized, sent upstream as them.
"""

from __future__ import annotations

import contextlib
import functools
import logging
from collections.abc import AsyncIterator, Iterator

import anyio
from starlette.applications import Starlette
from starlette.routing import Mount, Route
from starlette.types import Receive, Scope, Send

from ..._errors import KubemuxError
from ..._http.upstream import Upstream
from ..._registry.registry import WatcherRegistry
from ..._resources import Resource
from .._api.paths import ApiPath, decode_context, parse_api_path, split_raw_path
from .._api.responses import StatusError, send_error, status_for_error
from .._query.params import Query, parse_query
from .._reads.cached import CachedReads, CachedSettings, credential_key
from .._reads.freshness import read_version
from .._reads.marks import written_version
from .._reads.reads import ReadRequest, classify
from .._reads.served import ServedStatus
from .._upstream.discovery_cache import DiscoveryCache
from .._upstream.passthrough import forward, read_body, request_headers
from .._upstream.raw_upgrade import bridge as bridge_raw
from .._upstream.raw_upgrade import is_streaming, raw_connection
from .._upstream.upgrade import RefusedUpgrades, bridge, deny, spdy_refusal
from .._users.gate import Caller
from .._users.mode import UserMode
from .._watch.flow import DETACH
from .health import HEALTH_PATHS, health, not_found
from .metrics_page import metrics_routes
from .resources import ResourceTable
from .settings import ProxySettings, ProxyStatistics
from .slots import StreamSlots

__all__ = ["Proxy", "ProxySettings", "ProxyStatistics", "create_app"]

log = logging.getLogger(__name__)

_BODY_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
_API_WRITES = frozenset({"POST", "PUT", "PATCH", "DELETE"})
_API_DEFINITIONS = frozenset(
    {
        ("apiextensions.k8s.io", "customresourcedefinitions"),
        ("apiregistration.k8s.io", "apiservices"),
    }
)
_CAPTURE = 4 * 1024 * 1024  # a write's answer kept for its resourceVersion, at most
_READ_HEAD = 256 * 1024  # a passed-through read's answer kept (its head, if longer)


class Proxy:
    """The raw ASGI app behind :func:`create_app` (``app.state.proxy``)."""

    def __init__(self, registry: WatcherRegistry, settings: ProxySettings | None = None) -> None:
        if not isinstance(registry, WatcherRegistry):
            raise TypeError(f"a WatcherRegistry is needed, not {type(registry).__name__}")
        self.registry = registry
        self.settings = settings or ProxySettings()
        self.discovery = DiscoveryCache(ttl=self.settings.discovery_ttl)
        self.refused = RefusedUpgrades()
        self.resources = ResourceTable(self.discovery, self.settings.response_timeout)
        self.streams = StreamSlots(self.settings.max_upstream_streams)
        self.ending = anyio.Event()  # set by close(): streams passed through end
        s = self.settings
        self.users = (
            UserMode(registry, start_timeout=s.start_timeout, audit_log=s.audit_log)
            if s.user_tokens
            else None
        )
        self.cached = CachedReads(
            registry,
            CachedSettings(
                store_timeout=s.start_timeout + s.response_timeout,
                wait_timeout=s.wait_timeout,
                read_your_writes_timeout=s.read_your_writes_timeout,
                consistent_reads=s.consistent_reads,
                consistent_wait_timeout=s.consistent_wait_timeout,
                max_watches_per_credential=s.max_watches_per_credential,
                watch_write_timeout=s.watch_write_timeout,
                max_concurrent_scans=s.max_concurrent_scans,
                scan_slice=s.scan_slice,
                watch=s.watch,
            ),
        )

    def status(self) -> tuple[ServedStatus, ...]:
        """The stores reads are served from: version, lag (seconds since the cache last
        heard from its API server), downstream watches."""
        return self.cached.status()

    def statistics(self) -> ProxyStatistics:
        """What the proxy is doing now (see :class:`ProxyStatistics`)."""
        cached = self.cached
        return ProxyStatistics(
            watches=cached.watching,
            upstream_streams=self.streams.total,
            scans_running=cached.scans.running,
            scans_waiting=cached.scans.waiting,
            pins=len(cached.pins),
            reads=cached.freshness.statistics(),
        )

    def close(self) -> None:
        """End every watch served from the cache and every stream passed through (each
        client sees its stream end cleanly, with its last chunk: it re-watches). New
        watches end at once. Idempotent."""
        self.ending.set()
        self.cached.close()

    # ------------------------------------------------------------------ entry point
    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind not in ("http", "websocket"):
            return
        if self.users is not None:
            await self.users.serve(scope, receive, send, self._handle)
            return
        try:
            await self._handle(scope, receive, send)
        except StatusError as error:
            if kind == "websocket":
                await deny(scope, send, error)
            else:
                await send_error(send, error)

    async def _handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        raw = scope.get("raw_path") or scope["path"].encode("utf-8")
        raw = raw.partition(b"?")[0]
        below = split_raw_path(raw, scope.get("root_path", ""))
        if below is None:
            raise StatusError(404, "the server could not find the requested resource")
        _, segment, rest = below.split(b"/", 2) if below.count(b"/") >= 2 else (b"", below[1:], b"")
        context = decode_context(segment)
        if context is None:
            raise StatusError(404, "kubemux proxy: malformed context name in the path")
        self.discovery.prune(self.registry.contexts)
        if context not in self.registry.contexts:
            raise StatusError(
                404, f"kubemux proxy: context {context!r} not found in the kubeconfig"
            )
        api_raw = b"/" + rest
        path = parse_api_path(api_raw)
        if path is None:
            raise StatusError(404, "the server could not find the requested resource")
        caller = await self.users.admit(context, path, scope) if self.users else None
        if caller is not None and self.users is not None and self.users.watches(caller, scope):
            scope.pop(DETACH, None)  # a user's watch keeps its task: its revocation follows it
            run = functools.partial(self._route, context, path, api_raw, scope, receive, send)
            await self.users.until_revoked(caller, run, send)
            return
        await self._route(context, path, api_raw, scope, receive, send)

    async def _route(
        self,
        context: str,
        path: ApiPath,
        api_raw: bytes,
        scope: Scope,
        receive: Receive,
        send: Send,
    ) -> None:
        caller = _caller(self.users)
        who = caller.key if caller is not None else ""
        query = scope.get("query_string", b"")
        target = api_raw.decode("latin-1") + ("?" + query.decode("latin-1") if query else "")
        if scope["type"] == "websocket":
            await self._websocket(context, target, scope, receive, send)
            return
        method = scope["method"]
        headers = dict(request_headers(scope))
        if headers.get("upgrade", "").lower().startswith("spdy/") or _upgrade_header(scope):
            raw = raw_connection(scope)
            if raw is not None and is_streaming(target):
                with self._stream_slot(context):
                    async with self._upstream(context) as up:
                        await bridge_raw(
                            up,
                            scope,
                            raw,
                            target,
                            handshake_timeout=self.settings.response_timeout,
                        )
                return
            raise self.refused.recall(context, target) or spdy_refusal()
        impersonating = any(name.startswith("impersonate-") for name in headers)
        if method == "GET" and path.kind == "discovery" and not impersonating:
            async with self._upstream(context, own=True) as up:
                await self.discovery.serve(
                    up,
                    send,
                    target,
                    request_headers(scope),
                    response_timeout=self.settings.response_timeout,
                )
            if self.users is not None:
                self.users.answered_from_cache()
            return
        # read once, as the API server reads it: the caps, the timeouts and the cache agree
        params = parse_query(query)
        watching = method == "GET" and params.is_watch
        slot = who or credential_key(scope)  # per user with --user-tokens
        with self.cached.watch_slot(slot, context) if watching else _no_slot():
            if method == "GET" and self.settings.cache_reads:
                read = classify(path, params, headers)
                if read is not None and await self._serve_read(
                    context, path, read, scope, receive, send, who
                ):
                    if self.users is not None:
                        self.users.answered_from_cache()
                    return
            await self._forward(context, path, target, params, scope, receive, send)

    # ------------------------------------------------------------------ upstream
    @contextlib.asynccontextmanager
    async def _upstream(self, context: str, *, own: bool = False) -> AsyncIterator[Upstream]:
        """The context's upstream, or a StatusError (404 unknown, 503 cannot start); with
        ``--user-tokens`` the user's (their token), unless ``own`` (the proxy's cache)."""
        async with contextlib.AsyncExitStack() as stack:
            try:
                with anyio.fail_after(self.settings.start_timeout):
                    up = await stack.enter_async_context(self.registry.upstream(context))
            except TimeoutError:
                raise StatusError(
                    503,
                    f"kubemux proxy: context {context!r} did not start within "
                    f"{self.settings.start_timeout:g}s",
                    headers={"Retry-After": "5"},
                ) from None
            except KubemuxError as exc:
                raise status_for_error(exc, context) from None
            yield up if own or self.users is None else self.users.upstream(up)

    @contextlib.contextmanager
    def _stream_slot(self, context: str) -> Iterator[None]:
        """Count one upstream stream of ``context`` (and of the user); a 429 past a cap."""
        caller = _caller(self.users)
        with self.streams.slot(context, caller.key if caller is not None else ""):
            yield

    async def _forward(
        self,
        context: str,
        path: ApiPath,
        target: str,
        query: Query,
        scope: Scope,
        receive: Receive,
        send: Send,
    ) -> None:
        method = scope["method"]
        body: bytes | None = None
        if method in _BODY_METHODS:
            body = await read_body(
                scope,
                receive,
                limit=self.settings.max_body_size,
                body_timeout=self.settings.body_timeout,
            )
        streaming = method == "GET" and query.is_stream
        write = method in _API_WRITES and path.kind == "resource"
        read = method == "GET" and path.kind == "resource" and not streaming
        with self._stream_slot(context) if streaming else contextlib.nullcontext():
            async with self._upstream(context) as up:
                answer = await forward(
                    up,
                    scope,
                    receive,
                    send,
                    target,
                    body=body,
                    streaming=streaming,
                    response_timeout=self.settings.response_timeout,
                    read_timeout=self.settings.read_timeout,
                    capture=_CAPTURE if write and not streaming else _READ_HEAD if read else 0,
                    head=read,
                    ending=self.ending if streaming else None,
                )
        # a write that was refused or only tried (dryRun) changed nothing upstream
        accepted = answer.status is not None and 200 <= answer.status < 300
        accepted = accepted and "dryRun" not in query
        if write and answer.body is not None and accepted:
            self._mark_write(context, path, method, answer.body)
        if read and answer.body is not None and answer.status == 200:
            # monotonic reads: later reads never show older than this answer
            shown = read_version(answer.body, complete=not answer.truncated)
            # not when it went upstream for freshness: a quiet resource would chase the
            # server for ever (its answer is fresher than the cache can prove to be)
            chased = scope.get("kubemux.upstream") in ("floor", "probe")
            marks = self.cached.marks
            if path.is_object:
                marks.record(context, path.group, path.plural, shown, namespace=path.namespace)
            elif not chased:
                marks.record(context, path.group, path.plural, None, listed=shown)
        if write and accepted and (path.group, path.plural) in _API_DEFINITIONS:
            self.discovery.invalidate(context)  # an API appeared or went: discovery again

    def _mark_write(self, context: str, path: ApiPath, method: str, answer: bytes) -> None:
        """Read your writes: later reads of the resource wait for what this write did."""
        version = written_version(answer)
        gone = None
        if version is None and method == "DELETE" and path.is_object:
            assert path.name is not None
            gone = (path.namespace or "", path.name)
        self.cached.marks.record(
            context, path.group, path.plural, version, gone, namespace=path.namespace
        )

    async def _websocket(
        self, context: str, target: str, scope: Scope, receive: Receive, send: Send
    ) -> None:
        message = await receive()
        if message["type"] != "websocket.connect":
            return
        with self._stream_slot(context):
            async with self._upstream(context) as up:
                await bridge(
                    up,
                    scope,
                    receive,
                    send,
                    target,
                    self.refused,
                    handshake_timeout=self.settings.response_timeout,
                )

    # ------------------------------------------------------------------ reads
    async def resource_for(self, context: str, path: ApiPath) -> Resource | None:
        """The resource a path names, from the built-in table or the group version's
        discovery document (cached); None if the cluster does not serve it (or not for
        list and watch)."""
        builtin = self.resources.builtin(path)
        if builtin is not None:
            return builtin
        async with self._upstream(context, own=True) as up:
            return await self.resources.find(up, path)

    async def _serve_read(
        self,
        context: str,
        path: ApiPath,
        read: ReadRequest,
        scope: Scope,
        receive: Receive,
        send: Send,
        who: str = "",
    ) -> bool:
        """Answer a read from the cache; False if it must go upstream after all."""
        resource = await self.resource_for(context, path)
        if resource is None:
            return False
        return await self.cached.serve(context, resource, read, scope, receive, send, who)


@contextlib.contextmanager
def _no_slot() -> Iterator[None]:
    yield


def _caller(users: UserMode | None) -> Caller | None:
    return users.caller() if users is not None else None


def _upgrade_header(scope: Scope) -> bool:
    for name, value in scope.get("headers") or ():
        if name == b"upgrade" and value.lower().startswith(b"spdy/"):
            return True
    return False


def create_app(registry: WatcherRegistry, *, settings: ProxySettings | None = None) -> Starlette:
    """The Kubernetes API of every context of ``registry``, as an ASGI app.

    It serves ``/clusters/{context}/...`` (Headlamp's path shape; the context name encoded
    with :func:`kubemux.proxy.encode_context`): discovery from a per-context cache, LIST,
    GET and WATCH from kubemux's informers where it can answer exactly, everything else
    (writes, subresources, logs, exec over WebSocket) forwarded to the context's API
    server with the context's credentials. Mount it in your own Starlette or FastAPI app,
    behind your own authentication (``Mount("/k8s", create_app(registry))``): it checks
    nothing itself, and its clients act with the kubeconfig's credentials (with
    ``user_tokens``, each with their own token instead). It also answers
    ``/livez``, ``/readyz``, ``/healthz`` (and ``.../ping``) as kube-apiserver does, and
    ``/metrics`` (with prometheus-client: the registry's and the reads'). It needs no
    lifespan; the registry is yours to open and close. ``app.state.proxy`` is its
    :class:`Proxy`.

    Raises:
        TypeError: ``registry`` is not a :class:`~kubemux.WatcherRegistry`.
    """
    proxy = Proxy(registry, settings)
    health_routes = [Route(path, health, methods=["GET", "HEAD"]) for path in HEALTH_PATHS]
    routes = [Mount("/clusters", app=proxy), *health_routes, *metrics_routes(proxy)]
    app = Starlette(routes=routes)
    app.router.default = not_found
    app.state.proxy = proxy
    return app
