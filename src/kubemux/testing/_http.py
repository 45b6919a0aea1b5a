"""The HTTP side of the fake: the request entry point, faults, routing and discovery.

The handlers live in their own modules: ``_rest`` (GET, LIST, POST, DELETE), ``_watch_stream``
(WATCH), ``_table_http`` (Table negotiation), ``_rbac`` (credentials and RBAC),
``_responses`` (Status bodies) and ``_chunked`` (Go's chunked framing).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import Mapping

import orjson
from aiohttp import hdrs, web
from aiohttp.web_protocol import RequestHandler

from ._auth import AuthState
from ._discovery import (
    DISCOVERY_VERSIONS,
    VERSION_INFO,
    aggregated,
    api_versions,
    group_list,
    groups,
    resource_list,
)
from ._protocol import BadRequest, Selector
from ._rbac import Access, bearer, forbidden, peercert, self_subject_review
from ._resource_state import Watch
from ._responses import (
    JSON,
    abort,
    is_json,
    json_response,
    media_types,
    method_not_allowed,
    not_found,
    status_response,
)
from ._rest import create_object, delete_object, get_object, list_objects
from ._state import ObjectStore
from ._table_http import table_printer
from ._watch_stream import StreamingList, serve_watch

__all__ = ["Access", "ApiServer", "Fault", "RecordedRequest", "StreamingList", "TrackingServer"]


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class RecordedRequest:
    """One request as the fake cluster received it.

    Attributes:
        method: ``GET``, ``POST``, ...
        path: The URL path, percent-decoded.
        query: Query parameters (the last value wins when one repeats).
        token: The bearer token sent, or None.
        is_watch: True for ``watch=true`` / ``watch=1`` requests.
    """

    method: str
    path: str
    query: dict[str, str]
    token: str | None
    is_watch: bool


@dataclasses.dataclass(slots=True)
class Fault:
    remaining: int
    status: int
    reason: str
    path_prefix: str | None
    watch: bool | None
    query_has: tuple[str, ...] = ()

    def matches(self, path: str, is_watch: bool, query: Mapping[str, str]) -> bool:
        if self.path_prefix is not None and not path.startswith(self.path_prefix):
            return False
        if any(key not in query for key in self.query_has):
            return False
        return self.watch is None or self.watch == is_watch


class ApiServer:
    """Serves one :class:`ObjectStore` over the kube-apiserver HTTP protocol."""

    def __init__(
        self,
        store: ObjectStore,
        *,
        tokens: set[str] | None,
        bookmark_period: float,
        streaming_list: StreamingList,
        expired_as_http: bool,
        chunk_buffer: int = 2048,
        aggregated_discovery: bool = True,
        table_format: bool = True,
        auth: AuthState | None = None,
    ) -> None:
        if chunk_buffer < 1:
            raise ValueError(f"chunk_buffer must be positive, not {chunk_buffer}")
        self.store = store
        self.chunk_buffer = chunk_buffer
        self.auth = auth if auth is not None else AuthState(tokens)
        self.auth_required = self.auth.required
        self.tokens: set[str] = self.auth.tokens
        self.bookmark_period = bookmark_period
        self.streaming_list = streaming_list
        self.expired_as_http = expired_as_http
        self.aggregated_discovery = aggregated_discovery
        self.table_format = table_format
        self.access: dict[str, Access] = {}  # token -> its limits (absent: everything)
        # versions of POST /apis/authentication.k8s.io/<v>/selfsubjectreviews served (else 404)
        self.self_subject_review: frozenset[str] = frozenset(("v1", "v1beta1"))
        self.requests: list[RecordedRequest] = []
        self.watches: set[Watch] = set()
        self.faults: list[Fault] = []
        self.stalled = False
        self.stopping = False
        self._gate = asyncio.Event()
        self._gate.set()
        self._waiters: list[asyncio.Future[None]] = []

    # ------------------------------------------------------------------ change notification
    def notify(self) -> None:
        """Wake every :meth:`wait_changed` caller."""
        if self._waiters:
            waiters, self._waiters = self._waiters, []
            for fut in waiters:
                if not fut.done():
                    fut.set_result(None)

    async def wait_changed(self, max_delay: float) -> None:
        """Return after the next notification, or after ``max_delay`` seconds."""
        fut = asyncio.get_running_loop().create_future()
        self._waiters.append(fut)
        try:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(max_delay):
                    await fut
        finally:
            if fut in self._waiters:
                self._waiters.remove(fut)

    # ------------------------------------------------------------------ faults
    def stall(self) -> None:
        """Hold new requests and silence watch streams until :meth:`unstall`."""
        if not self.stalled:
            self.stalled = True
            self._gate = asyncio.Event()

    def unstall(self) -> None:
        """Release held requests; queued watch events flow again."""
        self.stalled = False
        self._gate.set()
        for watch in self.watches:
            watch.wake.set()

    def release(self) -> None:
        """Stop serving: end any stall; held requests and watch streams close their connections."""
        self.stopping = True
        self.stalled = False
        self._gate.set()
        for watch in self.watches:
            watch.wake.set()

    def drop_watches(self) -> int:
        """Abort every open watch stream; return how many."""
        for watch in self.watches:
            watch.dropped = True
            watch.wake.set()
        return len(self.watches)

    def compact(self) -> None:
        """Expire all history; open watches send what they had queued, then a 410, and end."""
        for watch in self.store.compact():
            watch.state.watchers.discard(watch)  # nothing after the compaction reaches it
            watch.expired = "The resourceVersion for the provided watch is too old."
            watch.wake.set()
        self.notify()

    def _take_fault(self, path: str, is_watch: bool, query: Mapping[str, str]) -> Fault | None:
        for fault in self.faults:
            if fault.matches(path, is_watch, query):
                fault.remaining -= 1
                if fault.remaining <= 0:
                    self.faults.remove(fault)
                return fault
        return None

    # ------------------------------------------------------------------ entry point
    async def handle(self, request: web.BaseRequest) -> web.StreamResponse:
        """Serve one request (the aiohttp low-level server's handler)."""
        query = dict(request.query.items())
        is_watch = query.get("watch", "").lower() in ("true", "1")
        token = bearer(request.headers.get(hdrs.AUTHORIZATION))
        path = request.path
        self.requests.append(
            RecordedRequest(
                method=request.method, path=path, query=query, token=token, is_watch=is_watch
            )
        )
        self.notify()
        try:
            while self.stalled and not self.stopping:
                await self._gate.wait()
            if self.stopping:
                return abort(request)
            fault = self._take_fault(path, is_watch, query)
            if fault is not None:
                headers = {"Retry-After": "1"} if fault.status in (429, 503) else None
                return status_response(
                    fault.status,
                    fault.reason,
                    f"fault injected by FakeCluster.fail_next ({fault.reason})",
                    headers=headers,
                )
            user = None
            if self.auth.required:
                user = self.auth.authenticate(token, peercert(request))
                if user is None:
                    return status_response(401, "Unauthorized", "Unauthorized")
            if request.method not in ("GET", "POST", "DELETE"):
                return method_not_allowed()
            if request.method == "POST" and self._is_review(path):
                access = self.access.get(token) if token is not None else None
                version = path.split("/")[3]
                review = self_subject_review(access, token, user, version)
                return json_response(review, status=201)
            return await self._route(request, path, query, is_watch, token)
        except BadRequest as exc:
            return status_response(400, "BadRequest", str(exc))
        finally:
            self.notify()

    def _is_review(self, path: str) -> bool:
        """``/apis/authentication.k8s.io/<served version>/selfsubjectreviews``?"""
        parts = path.split("/")
        return (
            len(parts) == 5
            and parts[:3] == ["", "apis", "authentication.k8s.io"]
            and parts[3] in self.self_subject_review
            and parts[4] == "selfsubjectreviews"
        )

    async def _route(
        self,
        request: web.BaseRequest,
        path: str,
        query: dict[str, str],
        is_watch: bool,
        token: str | None,
    ) -> web.StreamResponse:
        parts = [p for p in path.split("/") if p]
        method = request.method
        if method != "GET" and (not parts or parts[0] not in ("api", "apis") or is_watch):
            return method_not_allowed()
        if not parts:
            return json_response({"paths": ["/api", "/api/v1", "/apis", "/healthz", "/version"]})
        head = parts[0]
        if len(parts) == 1 and head in ("healthz", "livez", "readyz"):
            return web.Response(text="ok")
        if parts == ["version"]:
            return json_response(VERSION_INFO)
        if head == "api":
            if len(parts) == 1:
                return self._discovery(request, core=True)
            group, version, rest = "", parts[1], parts[2:]
        elif head == "apis":
            if len(parts) == 1:
                return self._discovery(request, core=False)
            if len(parts) == 2:
                group_info = groups(self.store).get(parts[1])
                return json_response(group_info) if group_info else not_found()
            group, version, rest = parts[1], parts[2], parts[3:]
        else:
            return not_found()
        if not rest:
            listing = resource_list(self.store, group, version)
            return json_response(listing) if listing else not_found()
        namespace: str | None = None
        if rest[0] == "namespaces" and len(rest) >= 3:
            namespace, rest = rest[1], rest[2:]
        if len(rest) > 2:
            return not_found()
        plural, name = rest[0], (rest[1] if len(rest) == 2 else None)
        state = self.store.lookup(group, version, plural)
        if state is None:
            return not_found()
        namespaced = state.resource.namespaced
        if (namespace is not None and not namespaced) or (
            name is not None and namespaced and namespace is None
        ):
            return not_found()
        if (method == "POST" and name is not None) or (method == "DELETE" and name is None):
            return method_not_allowed()
        verb = {"POST": "create", "DELETE": "delete"}.get(method) or (
            "watch" if is_watch else "get" if name is not None else "list"
        )
        access = self.access.get(token) if token is not None else None
        if access is not None and not access.allows(state.resource, namespace):
            return forbidden(access.user, verb, state.resource, namespace, name)
        if method == "POST":
            return await create_object(request, self.store, state, namespace)
        if method == "DELETE":
            return delete_object(self.store, state, namespace, name or "")
        table = (
            table_printer(request, self.store, state, version, query) if self.table_format else None
        )
        field_selector = query.get("fieldSelector", "")
        if name is not None:
            if not is_watch:
                return get_object(state, namespace, name)
            extra = f"metadata.name={name}"
            field_selector = f"{field_selector},{extra}" if field_selector else extra
        selector = Selector.parse(namespace, query.get("labelSelector", ""), field_selector)
        if is_watch:
            return await serve_watch(self, request, state, selector, query, token, table)
        return list_objects(self.store, state, selector, query, table)

    # ------------------------------------------------------------------ discovery
    def _discovery(self, request: web.BaseRequest, *, core: bool) -> web.Response:
        """``/api`` or ``/apis``: aggregated when the Accept header asks for it and it is on."""
        accept = request.headers.get(hdrs.ACCEPT, "")
        for media_type, params in media_types(accept) or [("*/*", {})]:
            if not is_json(media_type):
                continue
            kind = params.get("as")
            if kind is None:
                break  # plain JSON: legacy discovery
            if (
                self.aggregated_discovery
                and kind == "APIGroupDiscoveryList"
                and params.get("g") == "apidiscovery.k8s.io"
                and params.get("v") in DISCOVERY_VERSIONS
            ):
                version = params["v"]
                body = aggregated(self.store, core=core, version=version)
                content_type = (
                    f"application/json;g=apidiscovery.k8s.io;v={version};as=APIGroupDiscoveryList"
                )
                return web.Response(
                    body=orjson.dumps(body), headers={hdrs.CONTENT_TYPE: content_type}
                )
        else:
            if accept:
                return status_response(
                    406, "NotAcceptable", f"only the following media types are accepted: {JSON}"
                )
        return json_response(api_versions(request.host) if core else group_list(self.store))


class TrackingServer(web.Server):
    """aiohttp's low-level server, counting live connections and their handler tasks."""

    def __init__(self, api: ApiServer) -> None:
        super().__init__(api.handle, handler_cancellation=True, access_log=None)
        self._api = api
        self.live: dict[RequestHandler, asyncio.Transport] = {}
        self.finishing: set[asyncio.Task[None]] = set()

    def connection_made(self, handler: RequestHandler, transport: asyncio.Transport) -> None:
        super().connection_made(handler, transport)
        self.live[handler] = transport
        self._api.notify()

    def connection_lost(self, handler: RequestHandler, exc: BaseException | None = None) -> None:
        task = handler._task_handler  # aiohttp's per-connection task, still winding down
        if task is not None and not task.done():
            self.finishing.add(task)
            task.add_done_callback(self.finishing.discard)
        super().connection_lost(handler, exc)
        self.live.pop(handler, None)
        self._api.notify()
