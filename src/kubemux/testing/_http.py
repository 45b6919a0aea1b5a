"""The HTTP side of the fake: auth, faults, routing, discovery, LIST/GET and WATCH streams."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import math
from collections.abc import Mapping
from typing import Any, Literal

import orjson
from aiohttp import hdrs, web

from .._resources import Resource
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
from ._printers import Printer, crd_printer, printer_for, row_object
from ._protocol import (
    BadRequest,
    Selector,
    decode_continue,
    encode_continue,
    status_body,
)
from ._state import (
    ADDED,
    DELETED,
    INITIAL_END,
    MODIFIED,
    RAW_LINE,
    Event,
    ObjectStore,
    ResourceState,
    Stored,
    Watch,
)

__all__ = ["Access", "ApiServer", "RecordedRequest"]

StreamingList = bool | Literal["ignore"]

_BATCH_BYTES = 256 * 1024
_PREFIX = {
    ADDED: b'{"type":"ADDED","object":',
    MODIFIED: b'{"type":"MODIFIED","object":',
    DELETED: b'{"type":"DELETED","object":',
}
_JSON = "application/json"
_TABLE_TYPE = "application/json;as=Table;v=v1;g=meta.k8s.io"
_INCLUDE_OBJECT = ("Metadata", "Object", "None")
_WATCHLIST_OFF = (
    "sendInitialEvents is forbidden for watch unless the WatchList feature gate is enabled"
)
_MATCH_WITHOUT_INITIAL = (
    "resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided"
)
_CONTINUE_EXPIRED = (
    "The provided continue parameter is too old to display a consistent list result. You can "
    "start a new list without the continue parameter, or use the continue token in this "
    "response to retrieve the remainder of the results. Continuing with the provided token "
    "results in an inconsistent list - objects that were created, modified, or deleted between "
    "the time the first chunk was returned and now may show up in the list."
)


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


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Access:
    """What one bearer token may read: RBAC reduced to namespaces and resources.

    Attributes:
        user: The user name the 403 messages name.
        namespaces: Namespaces it may use (None: all, cluster scope included). When set,
            cluster-wide requests and cluster-scoped resources are forbidden.
        resources: Resources it may use, by full name (``pods``, ``deployments.apps``);
            None: all.
    """

    user: str
    namespaces: frozenset[str] | None = None
    resources: frozenset[str] | None = None

    def allows(self, resource: Resource, namespace: str | None) -> bool:
        """Whether a request for ``resource`` in ``namespace`` (None: all) is allowed."""
        if self.resources is not None and resource.name not in self.resources:
            return False
        if self.namespaces is None:
            return True
        return resource.namespaced and namespace is not None and namespace in self.namespaces


def _media_types(accept: str) -> list[tuple[str, dict[str, str]]]:
    """Parse an Accept header into (media type, parameters), in the order given."""
    out: list[tuple[str, dict[str, str]]] = []
    for part in accept.split(","):
        fields = [f.strip() for f in part.split(";")]
        params: dict[str, str] = {}
        for field in fields[1:]:
            key, _, value = field.partition("=")
            params[key.strip().lower()] = value.strip()
        if fields[0]:
            out.append((fields[0].lower(), params))
    return out


def _is_json(media_type: str) -> bool:
    return media_type in ("application/json", "application/*", "*/*")


@dataclasses.dataclass(slots=True)
class _Fault:
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


_SELF_SUBJECT_REVIEWS = ["apis", "authentication.k8s.io", "v1", "selfsubjectreviews"]


def _json(body: Any, status: int = 200) -> web.Response:
    return web.Response(status=status, body=orjson.dumps(body), content_type=_JSON)


def _status(
    code: int,
    reason: str,
    message: str,
    *,
    details: Mapping[str, Any] | None = None,
    metadata: Mapping[str, Any] | None = None,
    headers: Mapping[str, str] | None = None,
) -> web.Response:
    body = status_body(code, reason, message, details=details, metadata=metadata)
    return web.Response(status=code, body=orjson.dumps(body), content_type=_JSON, headers=headers)


def _method_not_allowed() -> web.Response:
    return _status(
        405, "MethodNotAllowed", "the server does not allow this method on the requested resource"
    )


def _not_found() -> web.Response:
    return _status(404, "NotFound", "the server could not find the requested resource", details={})


def _invalid(causes: list[tuple[str, str, str]]) -> web.Response:
    """A 422 for invalid ListOptions, worded like the real validation errors."""
    texts = [f"{field}: {kind}: {detail}" for field, kind, detail in causes]
    joined = texts[0] if len(texts) == 1 else "[" + ", ".join(texts) + "]"
    reasons = {"Forbidden": "FieldValueForbidden", "Unsupported value": "FieldValueNotSupported"}
    return _status(
        422,
        "Invalid",
        f'ListOptions.meta.k8s.io "" is invalid: {joined}',
        details={
            "group": "meta.k8s.io",
            "kind": "ListOptions",
            "causes": [
                {"reason": reasons[kind], "message": f"{kind}: {detail}", "field": field}
                for field, kind, detail in causes
            ],
        },
    )


def _abort(request: web.BaseRequest) -> web.StreamResponse:
    """Close the connection abruptly; aiohttp then drops the returned response quietly."""
    transport = request.transport
    if transport is not None:
        transport.abort()
    return web.Response(status=503)


class _GoChunkedBody:
    """A watch response body framed the way kube-apiserver's Go ``net/http`` frames it.

    The API server writes each event with one ``Write`` and flushes only when no further
    event is queued. Go's response writer keeps a 2 KiB buffer in front of the chunked
    encoder (``bufferBeforeChunkingSize``): small events are packed into 2 KiB chunks, cut
    anywhere (even mid-line); a write that does not fit an empty buffer goes out as one
    chunk of its own, so an event above 2 KiB is one chunk. Clients therefore see about one
    HTTP chunk per event, and lines split across chunks, as from a real cluster.

    aiohttp frames each ``write()`` as one chunk and has no way to send a body already in
    chunked framing except turning its own framing off on the request's writer, which is
    what this does (a test reads the raw bytes to check the framing).
    """

    __slots__ = ("_buffer", "_buffered", "_out", "_response", "_size")

    def __init__(
        self, request: web.BaseRequest, response: web.StreamResponse, size: int = 2048
    ) -> None:
        request.writer.chunked = False  # type: ignore[attr-defined]  # we frame it ourselves
        self._response = response
        self._size = size
        self._buffer: list[bytes] = []  # Go's 2 KiB bufio.Writer
        self._buffered = 0
        self._out: list[bytes] = []  # framed bytes not yet handed to the transport

    def write(self, data: bytes) -> None:
        """One ``Write`` of the API server (one event line), as ``bufio.Writer.Write`` does it."""
        size = self._size
        while len(data) > size - self._buffered:
            if not self._buffered:  # a large write into an empty buffer goes out directly
                self._chunk(data)
                return
            room = size - self._buffered
            self._buffer.append(data[:room])
            self._buffered = size
            self.flush()
            data = data[room:]
        if data:
            self._buffer.append(data)
            self._buffered += len(data)

    def flush(self) -> None:
        """``Flush``: what is buffered becomes one chunk."""
        if self._buffered:
            self._chunk(b"".join(self._buffer))
            self._buffer.clear()
            self._buffered = 0

    def _chunk(self, data: bytes) -> None:
        self._out += (b"%x\r\n" % len(data), data, b"\r\n")

    async def send(self) -> None:
        """Hand the framed chunks to the transport (with aiohttp's flow control)."""
        if self._out:
            data = b"".join(self._out)
            self._out.clear()
            await self._response.write(data)

    async def end(self) -> None:
        """Flush, send, and end the body with the last, empty chunk."""
        self.flush()
        await self.send()
        await self._response.write_eof(b"0\r\n\r\n")


def _bearer(header: str | None) -> str | None:
    if not header:
        return None
    scheme, _, value = header.partition(" ")
    return value.strip() or None if scheme.lower() == "bearer" else None


def _peercert(request: web.BaseRequest) -> dict[str, Any] | None:
    transport = request.transport
    ssl_object = transport.get_extra_info("ssl_object") if transport is not None else None
    if ssl_object is None:
        return None
    cert: dict[str, Any] | None = ssl_object.getpeercert()
    return cert


def _int_param(query: Mapping[str, str], name: str) -> int:
    text = query.get(name, "")
    if not text:
        return 0
    try:
        return int(text)
    except ValueError:
        raise BadRequest(f"invalid {name}: {text!r}") from None


def _transition(selector: Selector, event: Event) -> str | None:
    """The event type a filtered watcher sees (objects entering or leaving the selection)."""
    now = selector.matches(event.cur.obj)
    if event.type == ADDED:
        return ADDED if now else None
    before = event.prev is not None and selector.matches(event.prev.obj)
    if event.type == DELETED:
        return DELETED if before else None
    if now:
        return MODIFIED if before else ADDED
    return DELETED if before else None


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
        self.self_subject_review = True  # serve POST .../selfsubjectreviews (else 404)
        self.requests: list[RecordedRequest] = []
        self.watches: set[Watch] = set()
        self.faults: list[_Fault] = []
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

    def _take_fault(self, path: str, is_watch: bool, query: Mapping[str, str]) -> _Fault | None:
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
        token = _bearer(request.headers.get(hdrs.AUTHORIZATION))
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
                return _abort(request)
            fault = self._take_fault(path, is_watch, query)
            if fault is not None:
                headers = {"Retry-After": "1"} if fault.status in (429, 503) else None
                return _status(
                    fault.status,
                    fault.reason,
                    f"fault injected by FakeCluster.fail_next ({fault.reason})",
                    headers=headers,
                )
            if self.auth.required and self.auth.authenticate(token, _peercert(request)) is None:
                return _status(401, "Unauthorized", "Unauthorized")
            if request.method not in ("GET", "POST", "DELETE"):
                return _method_not_allowed()
            return await self._route(request, path, query, is_watch, token)
        except BadRequest as exc:
            return _status(400, "BadRequest", str(exc))
        finally:
            self.notify()

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
            return _method_not_allowed()
        if not parts:
            return _json({"paths": ["/api", "/api/v1", "/apis", "/healthz", "/version"]})
        if method == "POST" and parts == _SELF_SUBJECT_REVIEWS and self.self_subject_review:
            return _json(self._self_subject_review(token), status=201)
        head = parts[0]
        if len(parts) == 1 and head in ("healthz", "livez", "readyz"):
            return web.Response(text="ok")
        if parts == ["version"]:
            return _json(VERSION_INFO)
        if head == "api":
            if len(parts) == 1:
                return self._discovery(request, core=True)
            group, version, rest = "", parts[1], parts[2:]
        elif head == "apis":
            if len(parts) == 1:
                return self._discovery(request, core=False)
            if len(parts) == 2:
                group_info = groups(self.store).get(parts[1])
                return _json(group_info) if group_info else _not_found()
            group, version, rest = parts[1], parts[2], parts[3:]
        else:
            return _not_found()
        if not rest:
            listing = resource_list(self.store, group, version)
            return _json(listing) if listing else _not_found()
        namespace: str | None = None
        if rest[0] == "namespaces" and len(rest) >= 3:
            namespace, rest = rest[1], rest[2:]
        if len(rest) > 2:
            return _not_found()
        plural, name = rest[0], (rest[1] if len(rest) == 2 else None)
        state = self.store.lookup(group, version, plural)
        if state is None:
            return _not_found()
        namespaced = state.resource.namespaced
        if (namespace is not None and not namespaced) or (
            name is not None and namespaced and namespace is None
        ):
            return _not_found()
        if (method == "POST" and name is not None) or (method == "DELETE" and name is None):
            return _method_not_allowed()
        verb = {"POST": "create", "DELETE": "delete"}.get(method) or (
            "watch" if is_watch else "get" if name is not None else "list"
        )
        access = self.access.get(token) if token is not None else None
        if access is not None and not access.allows(state.resource, namespace):
            return _forbidden(access.user, verb, state.resource, namespace, name)
        if method == "POST":
            return await self._create(request, state, namespace)
        if method == "DELETE":
            return self._delete(state, namespace, name or "")
        table = self._table_printer(request, state, version, query)
        if isinstance(table, web.Response):
            return table
        field_selector = query.get("fieldSelector", "")
        if name is not None:
            if not is_watch:
                return self._get(state, namespace, name)
            extra = f"metadata.name={name}"
            field_selector = f"{field_selector},{extra}" if field_selector else extra
        selector = Selector.parse(namespace, query.get("labelSelector", ""), field_selector)
        if is_watch:
            return await self._watch(request, state, selector, query, token, table)
        return self._list(state, selector, query, table)

    def _self_subject_review(self, token: str | None) -> dict[str, Any]:
        """Who the token is: its :meth:`FakeCluster.restrict` user, else ``token-<sha8>``
        (``system:anonymous`` without a token)."""
        access = self.access.get(token) if token is not None else None
        if access is not None:
            user = access.user
        elif token is not None:
            user = "token-" + hashlib.sha256(token.encode()).hexdigest()[:8]
        else:
            user = "system:anonymous"
        groups = ["system:unauthenticated"] if token is None else ["system:authenticated"]
        return {
            "kind": "SelfSubjectReview",
            "apiVersion": "authentication.k8s.io/v1",
            "metadata": {"creationTimestamp": None},
            "status": {"userInfo": {"username": user, "groups": groups}},
        }

    # ------------------------------------------------------------------ discovery
    def _discovery(self, request: web.BaseRequest, *, core: bool) -> web.Response:
        """``/api`` or ``/apis``: aggregated when the Accept header asks for it and it is on."""
        accept = request.headers.get(hdrs.ACCEPT, "")
        for media_type, params in _media_types(accept) or [("*/*", {})]:
            if not _is_json(media_type):
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
                return _status(
                    406, "NotAcceptable", f"only the following media types are accepted: {_JSON}"
                )
        return _json(api_versions(request.host) if core else group_list(self.store))

    # ------------------------------------------------------------------ Table
    def _table_printer(
        self, request: web.BaseRequest, state: ResourceState, version: str, query: dict[str, str]
    ) -> tuple[Printer, str] | web.Response | None:
        """(printer, includeObject) when the client asked for a Table; None for objects."""
        if not self.table_format:
            return None
        accept = request.headers.get(hdrs.ACCEPT, "")
        wants_table = False
        for media_type, params in _media_types(accept):
            if not _is_json(media_type):
                continue
            if params.get("as") is None:
                break
            if (
                params.get("as") == "Table"
                and params.get("g") == "meta.k8s.io"
                and (params.get("v") == "v1")
            ):
                wants_table = True
                break
        if not wants_table:
            return None
        include = query.get("includeObject") or "Metadata"
        if include not in _INCLUDE_OBJECT:
            raise BadRequest(
                f'includeObject: Unsupported value: "{include}": supported values: '
                '"Metadata", "None", "Object"'
            )
        res = state.resource
        crd = self.store.crds.get((res.group, res.plural))
        if crd is not None:
            return crd_printer(crd.columns.get(version)), include
        return printer_for(res.group, res.plural), include

    # ------------------------------------------------------------------ writes
    async def _create(
        self, request: web.BaseRequest, state: ResourceState, namespace: str | None
    ) -> web.Response:
        try:
            obj = orjson.loads(await request.read())
        except orjson.JSONDecodeError as exc:
            raise BadRequest(f"the request body is not JSON: {exc}") from None
        if not isinstance(obj, dict):
            raise BadRequest("the request body is not a JSON object")
        meta = dict(obj.get("metadata") or {})
        if namespace is not None:
            meta["namespace"] = namespace
        try:
            created = self.store.create(state.resource, {**obj, "metadata": meta})
        except ValueError as exc:
            name = meta.get("name", "")
            details: dict[str, Any] = {"name": name, "kind": state.resource.plural}
            if state.resource.group:
                details["group"] = state.resource.group
            if "already exists" in str(exc):
                return _status(
                    409,
                    "AlreadyExists",
                    f'{state.resource.name} "{name}" already exists',
                    details=details,
                )
            raise BadRequest(str(exc)) from None
        return _json(created, status=201)

    def _delete(self, state: ResourceState, namespace: str | None, name: str) -> web.Response:
        deleted = self.store.delete(state.resource, namespace, name)
        if deleted is None:
            return self._get(state, namespace, name)  # the 404 a GET would answer
        return _json(deleted)

    # ------------------------------------------------------------------ GET and LIST
    def _get(self, state: ResourceState, namespace: str | None, name: str) -> web.Response:
        stored = state.objects.get((namespace or "", name))
        if stored is None:
            details = {"name": name, "kind": state.resource.plural}
            if state.resource.group:
                details["group"] = state.resource.group
            return _status(
                404, "NotFound", f'{state.resource.name} "{name}" not found', details=details
            )
        return web.Response(body=stored.raw, content_type=_JSON)

    def _list(
        self,
        state: ResourceState,
        selector: Selector,
        query: dict[str, str],
        table: tuple[Printer, str] | None = None,
    ) -> web.Response:
        store = self.store
        limit = max(0, _int_param(query, "limit"))
        rv_text = query.get("resourceVersion", "")
        match = query.get("resourceVersionMatch", "")
        token = query.get("continue", "")
        after = None
        if match not in ("", "Exact", "NotOlderThan"):
            return _invalid(
                [
                    (
                        "resourceVersionMatch",
                        "Unsupported value",
                        f'"{match}": supported values: "Exact", "NotOlderThan"',
                    )
                ]
            )
        if token:
            if rv_text:
                raise BadRequest("specifying resource version is not allowed when using continue")
            snapshot, after = decode_continue(token)
            if snapshot < 0:  # the "inconsistent" token of a 410: continue from the latest
                snapshot = store.rv
            elif snapshot < store.oldest_rv(state):
                return _status(
                    410,
                    "Expired",
                    _CONTINUE_EXPIRED,
                    metadata={"continue": encode_continue(-1, after)},
                )
        else:
            rv = _int_param(query, "resourceVersion")
            exact = match == "Exact" or (not match and rv > 0 and limit > 0)
            if rv > store.rv:
                return _status(
                    504,
                    "Timeout",
                    f"Too large resource version: {rv}, current: {store.rv}",
                    details={
                        "causes": [
                            {
                                "reason": "ResourceVersionTooLarge",
                                "message": "Too large resource version",
                            }
                        ],
                        "retryAfterSeconds": 1,
                    },
                )
            if exact and rv < store.oldest_rv(state):
                return _status(
                    410, "Expired", "The resourceVersion for the provided list is too old."
                )
            snapshot = rv if exact else store.rv
        page, last, remaining = store.list_at(state, snapshot, selector, after, limit)
        meta: dict[str, Any] = {"resourceVersion": str(snapshot)}
        if last is not None:
            meta["continue"] = encode_continue(snapshot, last)
            if not selector.filters_content:
                meta["remainingItemCount"] = remaining
        if table is not None:
            printer, include = table
            doc = _table_doc(printer, include, [stored.obj for stored in page], meta, columns=True)
            return web.Response(body=orjson.dumps(doc), headers={hdrs.CONTENT_TYPE: _TABLE_TYPE})
        body = b"".join(
            (
                b'{"kind":',
                orjson.dumps(state.list_kind),
                b',"apiVersion":',
                orjson.dumps(state.resource.api_version),
                b',"metadata":',
                orjson.dumps(meta),
                b',"items":[',
                b",".join([stored.raw for stored in page]),
                b"]}",
            )
        )
        return web.Response(body=body, content_type=_JSON)

    # ------------------------------------------------------------------ WATCH
    def _watch_options(self, query: dict[str, str]) -> tuple[str | None, web.Response | None]:
        """Validate the streaming-list options; return (sendInitialEvents, error response)."""
        send_initial = query.get("sendInitialEvents")
        match = query.get("resourceVersionMatch", "")
        if self.streaming_list == "ignore":  # a server from before streaming lists existed
            return None, None
        causes: list[tuple[str, str, str]] = []
        if send_initial is not None:
            if match != "NotOlderThan":
                causes.append(
                    (
                        "resourceVersionMatch",
                        "Forbidden",
                        "sendInitialEvents requires setting resourceVersionMatch to NotOlderThan",
                    )
                )
            if not self.streaming_list:
                causes.append(
                    (
                        "sendInitialEvents",
                        "Forbidden",
                        _WATCHLIST_OFF,
                    )
                )
        if match:
            if send_initial is None:
                causes.append(
                    (
                        "resourceVersionMatch",
                        "Forbidden",
                        _MATCH_WITHOUT_INITIAL,
                    )
                )
            if match != "NotOlderThan":
                causes.append(
                    (
                        "resourceVersionMatch",
                        "Unsupported value",
                        f'"{match}": supported values: "NotOlderThan"',
                    )
                )
        if causes:
            return None, _invalid(causes)
        if send_initial is not None and send_initial.lower() not in ("true", "false"):
            raise BadRequest(f"invalid sendInitialEvents: {send_initial!r}")
        return (send_initial.lower() if send_initial is not None else None), None

    async def _watch(
        self,
        request: web.BaseRequest,
        state: ResourceState,
        selector: Selector,
        query: dict[str, str],
        token: str | None,
        table: tuple[Printer, str] | None = None,
    ) -> web.StreamResponse:
        store = self.store
        send_initial, error = self._watch_options(query)
        if error is not None:
            return error
        bookmarks = query.get("allowWatchBookmarks", "").lower() in ("true", "1")
        try:
            timeout = float(query.get("timeoutSeconds") or 0)
        except ValueError:
            raise BadRequest(f"invalid timeoutSeconds: {query['timeoutSeconds']!r}") from None
        rv_text = query.get("resourceVersion", "")
        watch = Watch(state, selector, token)
        if table is not None:
            watch.table = [table[0], table[1], True]  # printer, includeObject, columns due
        if send_initial == "true" or (send_initial is None and rv_text in ("", "0")):
            watch.queue.extend(store.initial_events(state, selector))
            if send_initial == "true" and bookmarks:
                watch.queue.append(Event(INITIAL_END, store.rv, ("", ""), Stored(b"{}", {}), None))
        elif rv_text not in ("", "0"):
            rv = _int_param(query, "resourceVersion")
            oldest = store.oldest_rv(state)
            if rv < oldest:
                message = f"too old resource version: {rv} ({oldest})"
                if self.expired_as_http:
                    return _status(410, "Expired", message)
                watch.expired = message
            elif rv < store.rv:
                watch.queue.extend(state.events_after(rv))
        # from here on, every change reaches this watch's queue: nothing is missed
        if watch.expired is None:
            state.watchers.add(watch)
        self.watches.add(watch)
        self.notify()
        response = web.StreamResponse(
            status=200,
            headers={
                hdrs.CONTENT_TYPE: _TABLE_TYPE if table is not None else _JSON,
                hdrs.CACHE_CONTROL: "no-cache, private",
            },
        )
        response.enable_chunked_encoding()
        try:
            await response.prepare(request)
            body = _GoChunkedBody(request, response, self.chunk_buffer)
            await self._pump(request, body, watch, bookmarks, timeout)
        except ConnectionError:
            pass  # the client went away; aiohttp closes the connection
        finally:
            state.watchers.discard(watch)
            self.watches.discard(watch)
            self.notify()
        return response

    async def _pump(
        self,
        request: web.BaseRequest,
        body: _GoChunkedBody,
        watch: Watch,
        bookmarks: bool,
        lifetime: float,
    ) -> None:
        """Send queued events, bookmarks and the end of the stream."""
        loop = asyncio.get_running_loop()
        now = loop.time()
        deadline = now + lifetime if lifetime > 0 else math.inf
        period = self.bookmark_period
        next_bookmark = now + period if bookmarks else math.inf
        while True:
            watch.wake.clear()
            if watch.dropped or self.stopping:
                _abort(request)
                return
            if self.stalled:
                await watch.wake.wait()
                continue
            if watch.queue:
                self._drain(watch, body)
                if not watch.queue:
                    body.flush()  # as the API server does when no event is left queued
                await body.send()
                if watch.queue:
                    await asyncio.sleep(0)  # let object operations and other streams run
                continue
            if watch.finished:  # the resource went away (its CRD was deleted)
                await body.end()
                return
            if watch.expired is not None:
                error = {"type": "ERROR", "object": status_body(410, "Expired", watch.expired)}
                body.write(orjson.dumps(error) + b"\n")
                await body.end()
                return
            now = loop.time()
            if now >= deadline:
                await body.end()
                return
            if now >= next_bookmark:
                body.write(self._bookmark(watch.state, self.store.rv, end=False, table=watch.table))
                body.flush()
                await body.send()
                next_bookmark = now + period
                continue
            delay = min(deadline, next_bookmark) - now
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(None if math.isinf(delay) else delay):
                    await watch.wake.wait()

    def _drain(self, watch: Watch, body: _GoChunkedBody) -> None:
        """Write queued events into the body, one write per event (bounded in size)."""
        size = 0
        queue = watch.queue
        selector = watch.selector
        check = not selector.is_everything
        write = body.write
        while queue and size < _BATCH_BYTES:
            event = queue.popleft()
            kind = event.type
            if kind == INITIAL_END:
                write(self._bookmark(watch.state, event.rv, end=True, table=watch.table))
                continue
            if kind == RAW_LINE:
                write(event.cur.raw + b"\n")
                size += len(event.cur.raw)
                continue
            if check:
                seen = _transition(selector, event)
                if seen is None:
                    continue
                kind = seen
            raw = event.cur.raw
            if watch.table is not None:
                raw = _table_event(watch.table, event.cur.obj)
            write(b"".join((_PREFIX[kind], raw, b"}\n")))
            size += len(raw)

    @staticmethod
    def _bookmark(state: ResourceState, rv: int, *, end: bool, table: Any = None) -> bytes:
        meta: dict[str, Any] = {"resourceVersion": str(rv)}
        if end:
            meta["annotations"] = {"k8s.io/initial-events-end": "true"}
        obj: dict[str, Any] = {
            "kind": state.kind,
            "apiVersion": state.resource.api_version,
            "metadata": meta,
        }
        if table is not None:  # a row-less Table that carries the resourceVersion
            obj = {
                "kind": "Table",
                "apiVersion": "meta.k8s.io/v1",
                "metadata": {"resourceVersion": str(rv)},
                "columnDefinitions": None,
                "rows": [
                    {
                        "cells": [],
                        "object": {
                            **obj,
                            "kind": "PartialObjectMetadata",
                            "apiVersion": "meta.k8s.io/v1",
                        },
                    }
                ],
            }
        return orjson.dumps({"type": "BOOKMARK", "object": obj}) + b"\n"


def _table_doc(
    printer: Printer,
    include: str,
    objs: list[dict[str, Any]],
    meta: Mapping[str, Any],
    *,
    columns: bool,
) -> dict[str, Any]:
    """A ``meta.k8s.io/v1`` Table of ``objs``."""
    return {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": dict(meta),
        "columnDefinitions": printer.columns if columns else None,
        "rows": [{"cells": printer.cells(obj), "object": row_object(obj, include)} for obj in objs],
    }


def _table_event(table: list[Any], obj: dict[str, Any]) -> bytes:
    """One watch event's object as a one-row Table; only the first carries the columns."""
    printer, include, columns = table
    table[2] = False
    meta = obj.get("metadata") or {}
    doc = _table_doc(
        printer,
        include,
        [obj],
        {"resourceVersion": meta.get("resourceVersion", "")},
        columns=columns,
    )
    return orjson.dumps(doc)


def _forbidden(
    user: str, verb: str, resource: Resource, namespace: str | None, name: str | None
) -> web.Response:
    """The 403 kube-apiserver's RBAC authorizer writes."""
    subject = f'{resource.name} "{name}"' if name else resource.name
    where = (
        f'in the namespace "{namespace}"'
        if namespace is not None and resource.namespaced
        else "at the cluster scope"
    )
    details: dict[str, Any] = {}
    if name:
        details["name"] = name
    if resource.group:
        details["group"] = resource.group
    details["kind"] = resource.plural
    return _status(
        403,
        "Forbidden",
        f'{subject} is forbidden: User "{user}" cannot {verb} resource "{resource.plural}" '
        f'in API group "{resource.group}" {where}',
        details=details,
    )
