"""Which GETs the cache answers, and how their answers are written.

:func:`classify` decides, without I/O, whether a GET is a read the cache may answer
(:class:`ReadRequest`: LIST, GET or WATCH of a resource, as objects or as a Table) or one
that goes upstream as it is (None): subresources, impersonation, media types the cache does
not write (protobuf, YAML, ``PartialObjectMetadata``), repeated or unknown query
parameters (``pretty``, ...). What the parameters mean (selectors, resourceVersions,
pages) is decided later, per resource, by :mod:`.._query.options` and :mod:`.cached`.

The writers send an answer as the API server writes it: a whole body with its length for a
small one, else chunks (``iter_list``/``iter_table``) so no body-sized buffer is built; a
watch as ``application/json`` lines (a Table watch too: kube-apiserver's watch media type
is the serializer's, ``application/json``).
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping

import anyio
from starlette.types import Receive, Send

from ..._wire.types import View
from .._api.lists import INCLUDE_OBJECT_VALUES
from .._api.paths import ApiPath
from .._api.responses import JSON
from .._query.params import Query
from .._watch.flow import Flow, Sink
from .._watch.watch import Detach

__all__ = [
    "CACHE_HEADER",
    "LAG_HEADER",
    "TABLE_TYPE",
    "ReadRequest",
    "classify",
    "parse_accept",
    "send_chunks",
]

TABLE_TYPE = "application/json;as=Table;v={v};g=meta.k8s.io"
CACHE_HEADER = b"x-kubemux-cache"
"""``hit`` on every answer the cache gave."""
LAG_HEADER = b"x-kubemux-cache-lag"
"""Seconds (three decimals) since the cache last heard from the API server."""

_LIST_PARAMS = frozenset(
    {
        "allowWatchBookmarks",
        "continue",
        "fieldSelector",
        "labelSelector",
        "limit",
        "resourceVersion",
        "resourceVersionMatch",
        "sendInitialEvents",
        "timeout",
        "timeoutSeconds",
        "watch",
    }
)
_GET_PARAMS = frozenset({"resourceVersion", "timeout"})
_TABLE_PARAMS = frozenset({"includeObject"})


@dataclasses.dataclass(frozen=True, slots=True)
class ReadRequest:
    """A read the cache may answer.

    Attributes:
        verb: ``"list"``, ``"get"`` or ``"watch"``.
        view: ``"objects"`` or ``"table"``.
        namespace: The path's namespace (None: all, or a cluster-scoped resource).
        name: The object's name (GET, or a watch of one object).
        params: The query parameters (each given once).
        table_version: ``"v1"`` or ``"v1beta1"`` (Table reads).
        include_object: ``includeObject`` of a Table read: ``Metadata``, ``None`` or
            ``Object``.
    """

    verb: str
    view: View
    namespace: str | None
    name: str | None
    params: Mapping[str, str]
    table_version: str = "v1"
    include_object: str = "Metadata"

    @property
    def content_type(self) -> str:
        """The media type of a LIST or GET answer."""
        if self.view == "table":
            return TABLE_TYPE.format(v=self.table_version)
        return JSON


def parse_accept(accept: str) -> tuple[View, str] | None:
    """The first media type of ``Accept`` the cache can write: ("objects", "") for JSON,
    ("table", version) for a Table; None if it names none of them (protobuf, YAML,
    PartialObjectMetadata)."""
    if not accept.strip():
        return (View.OBJECTS, "")
    for item in accept.split(","):
        media, *raw_params = (p.strip() for p in item.split(";"))
        params = {}
        for p in raw_params:
            key, _, value = p.partition("=")
            params[key.strip().lower()] = value.strip()
        media = media.lower()
        if media in ("*/*", "application/*") or (media == "application/json" and not params):
            return (View.OBJECTS, "")
        if media != "application/json":
            continue
        kind = params.get("as")
        if kind is None:  # application/json;q=0.9 and the like
            if set(params) <= {"q"}:
                return (View.OBJECTS, "")
            continue
        if kind == "Table" and params.get("g") == "meta.k8s.io":
            version = params.get("v")
            if version in ("v1", "v1beta1"):
                return (View.TABLE, version)
    return None


def classify(path: ApiPath, query: Query, headers: Mapping[str, str]) -> ReadRequest | None:
    """The read the cache may answer, or None when the GET goes upstream as it is."""
    if path.kind != "resource" or path.subresource is not None:
        return None
    if any(name.startswith("impersonate-") for name in headers):
        return None  # the cache holds what the proxy's credential sees, not another user's
    if query.is_repeated:
        return None  # repeated parameters: let the API server decide what they mean
    params = dict(query.pairs)
    accepted = parse_accept(headers.get("accept", ""))
    if accepted is None:
        return None
    view, table_version = accepted
    watch = query.is_watch
    if watch:
        verb = "watch"
    elif path.name is not None:
        verb = "get"
    else:
        verb = "list"
    allowed = _GET_PARAMS if verb == "get" else _LIST_PARAMS
    if view == "table":
        allowed = allowed | _TABLE_PARAMS
    if not set(params) <= allowed:
        return None  # pretty, export, ...: what the cache does not do
    include = "Metadata"
    if view == "table":
        include = params.get("includeObject", "") or "Metadata"
        if include not in INCLUDE_OBJECT_VALUES:
            return None  # the API server's own 400 (it is worded per request)
    return ReadRequest(
        verb=verb,
        view=view,
        namespace=path.namespace,
        name=path.name,
        params=params,
        table_version=table_version or "v1",
        include_object=include,
    )


def _cache_headers(lag: float) -> list[tuple[bytes, bytes]]:
    return [(CACHE_HEADER, b"hit"), (LAG_HEADER, f"{lag:.3f}".encode())]


async def send_chunks(
    send: Send,
    chunks: Iterable[bytes],
    content_type: str,
    *,
    lag: float,
    status: int = 200,
) -> None:
    """One answer from ``chunks``: with its length when it is one chunk, else streamed."""
    iterator: Iterator[bytes] = iter(chunks)
    first = next(iterator, b"")
    second = next(iterator, None)
    headers = [(b"content-type", content_type.encode("latin-1")), *_cache_headers(lag)]
    if second is None:
        headers.append((b"content-length", str(len(first)).encode()))
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": first})
        return
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": first, "more_body": True})
    await send({"type": "http.response.body", "body": second, "more_body": True})
    for chunk in iterator:
        await send({"type": "http.response.body", "body": chunk, "more_body": True})
    await send({"type": "http.response.body", "body": b"", "more_body": False})


def watch_headers(lag: float) -> list[tuple[bytes, bytes]]:
    """The headers of a watch answered from the cache."""
    return [
        (b"content-type", JSON.encode()),
        (b"cache-control", b"no-cache, private"),
        *_cache_headers(lag),
    ]


async def stream_watch(
    serve: Callable[[Callable[[bytes], Awaitable[None]], Detach | None], Awaitable[object]],
    receive: Receive,
    send: Send,
    *,
    lag: float,
    flow: Flow,
    touch: Callable[[], None],
    disconnect_hook: Callable[[Callable[[], object] | None], None] | None = None,
    detach: Callable[[], Sink] | None = None,
    keep: Callable[[], Callable[[], None]] | None = None,
) -> None:
    """One watch answered from the cache: the headers, then what ``serve`` writes through
    the ``write`` it is given, then the last chunk.

    A client that goes away ends it (its disconnect cancels ``serve``). Each write is
    reported to the watcher's ``flow``; a client that has not taken a write for the flow's
    ``idle_timeout`` is cut and its connection closed (a client that stopped reading): a
    watchdog asks the flow every quarter of that, since arming a timeout per write (a
    ``fail_after`` or a moved deadline) was a tenth of what a write cost. ``touch`` counts
    each write as a use of the store. ``disconnect_hook`` (a server's
    :data:`~.._watch.flow.ON_DISCONNECT`) tells of the client's going instead of a task
    blocked on ``receive()``; with ``detach`` (its :data:`~.._watch.flow.DETACH`) too, the
    watch goes on without this task once its starting point is written, holding what
    ``keep`` gives (its watch slot) until it ends.
    """
    await send({"type": "http.response.start", "status": 200, "headers": watch_headers(lag)})
    stuck = anyio.CancelScope()
    loop = asyncio.get_running_loop()
    period = flow.idle_timeout / 4
    watchdog: asyncio.TimerHandle | None = None

    async def write(data: bytes) -> None:
        touch()
        flow.writing(loop.time())
        await send({"type": "http.response.body", "body": data, "more_body": True})
        flow.wrote()

    def look() -> None:
        nonlocal watchdog
        if flow.is_stalled(loop.time()):
            stuck.cancel("the client has not read for the idle timeout")
        else:
            watchdog = loop.call_later(period, look)

    completed: bool | None = False
    if disconnect_hook is not None:  # the server says when the client goes: no task for it
        gone = anyio.CancelScope()
        disconnect_hook(gone.cancel)
        watchdog = loop.call_later(period, look)
        handoff = None
        if detach is not None and keep is not None:
            taken = detach, keep

            def handoff() -> tuple[Sink, Callable[[], None], Callable[[], None]]:
                nonlocal completed
                completed = None  # the pump ends it
                return taken[0](), touch, taken[1]()

        try:
            with gone, stuck:
                await serve(write, handoff)
                if completed is not None:
                    completed = True
        finally:
            if completed is not None:
                disconnect_hook(None)
            watchdog.cancel()
        if completed:
            with anyio.move_on_after(flow.idle_timeout):
                await send({"type": "http.response.body", "body": b"", "more_body": False})
        return
    async with anyio.create_task_group() as tg:

        async def wait_disconnect() -> None:
            while (await receive())["type"] != "http.disconnect":
                pass
            tg.cancel_scope.cancel("the client went away")

        tg.start_soon(wait_disconnect)
        watchdog = loop.call_later(period, look)
        try:
            with stuck:  # cancelled: a client that does not read, the connection closes
                await serve(write, None)
                completed = True
        finally:
            watchdog.cancel()
        tg.cancel_scope.cancel("watch ended")
    if completed:
        with anyio.move_on_after(flow.idle_timeout):  # a client that stopped reading
            await send({"type": "http.response.body", "body": b"", "more_body": False})
