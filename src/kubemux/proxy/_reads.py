"""LIST, GET and WATCH answered from kubemux's informers.

:func:`plan_read` decides, without I/O, whether a GET is a read the cache can answer with
the API server's semantics, and how (:class:`ReadPlan`); anything it cannot answer exactly
goes upstream instead (:mod:`._passthrough`), so a client always gets the API's answer. One
function per verb (:func:`serve_list`, :func:`serve_get`, :func:`serve_watch`) answers a
plan from a store. What is answered from the cache today:

- LIST and GET with ``resourceVersion`` unset, ``""`` or ``"0"`` (served as fresh as the
  watch), no selector, no ``continue``, a ``limit`` the whole answer fits in; objects as
  JSON, or the Table format (``meta.k8s.io`` v1 or v1beta1, ``includeObject`` ``Metadata``
  or ``None``) from a table-view informer (the server's own columns and cells);
- WATCH of objects from ``resourceVersion`` unset or ``"0"``: the current objects as
  ADDED, then the changes, until ``timeoutSeconds`` (or kube-apiserver's 30-60 minutes).

Selectors, pagination, exact and ``NotOlderThan`` resourceVersions, watches resumed from a
resourceVersion and Table watches go upstream for now; they plug in here verb by verb.
"""

from __future__ import annotations

import dataclasses
import random
import urllib.parse
from collections.abc import Mapping, Sequence

import anyio
import msgspec
import orjson
from starlette.types import Receive, Send

from .._errors import SubscriberOverflow
from .._multistore import MultiStore
from .._resources import Resource
from .._store import Store
from .._table import TableColumn, TableStore
from ._paths import ApiPath
from ._responses import JSON

__all__ = [
    "ReadPlan",
    "parse_accept",
    "plan_read",
    "serve_get",
    "serve_list",
    "serve_watch",
    "store_covers",
]

TABLE_TYPE = "application/json;as=Table;v={v};g=meta.k8s.io"
_LIST_PARAMS = frozenset({"limit", "resourceVersion", "resourceVersionMatch", "timeout"})
_TABLE_PARAMS = frozenset({"includeObject"})
_WATCH_PARAMS = frozenset(
    {"watch", "resourceVersion", "allowWatchBookmarks", "timeoutSeconds", "timeout"}
)


@dataclasses.dataclass(frozen=True, slots=True)
class ReadPlan:
    """A read the cache can answer: what to read and how to write it."""

    verb: str  # "list", "get" or "watch"
    view: str  # "objects" or "table"
    namespace: str | None
    name: str | None
    limit: int = 0
    table_version: str = "v1"
    include_object: str = "Metadata"
    timeout_seconds: float | None = None


def parse_accept(accept: str) -> tuple[str, str] | None:
    """The first media type of ``Accept`` the cache can write: ("objects", "") for JSON,
    ("table", version) for a Table; None if it names none of them (protobuf, YAML,
    PartialObjectMetadata)."""
    if not accept.strip():
        return ("objects", "")
    for item in accept.split(","):
        media, *raw_params = (p.strip() for p in item.split(";"))
        params = {}
        for p in raw_params:
            key, _, value = p.partition("=")
            params[key.strip().lower()] = value.strip()
        media = media.lower()
        if media in ("*/*", "application/*") or (media == "application/json" and not params):
            return ("objects", "")
        if media != "application/json":
            continue
        kind = params.get("as")
        if kind is None:  # application/json;q=0.9 and the like
            if set(params) <= {"q"}:
                return ("objects", "")
            continue
        if (
            kind == "Table"
            and params.get("g") == "meta.k8s.io"
            and params.get("v")
            in (
                "v1",
                "v1beta1",
            )
        ):
            return ("table", params["v"])
    return None


def plan_read(
    path: ApiPath, query: Sequence[tuple[str, str]], headers: Mapping[str, str]
) -> ReadPlan | None:
    """How the cache answers this GET, or None when it goes upstream (see the module)."""
    if path.kind != "resource" or path.subresource is not None:
        return None
    if any(name.startswith("impersonate-") for name in headers):
        return None  # the cache holds what the proxy's credential sees, not another user's
    params: dict[str, str] = {}
    for key, value in query:
        if key in params:
            return None  # repeated parameters: let the API server decide what they mean
        params[key] = value
    accepted = parse_accept(headers.get("accept", ""))
    if accepted is None:
        return None
    view, table_version = accepted
    watch = params.get("watch", "").lower()
    if watch not in ("", "false", "0") and watch not in ("true", "1"):
        return None
    rv = params.get("resourceVersion", "")
    if watch in ("true", "1"):
        return _plan_watch(path, params, view, rv)
    allowed = _LIST_PARAMS | (_TABLE_PARAMS if view == "table" else frozenset())
    if not set(params) <= allowed | {"watch"}:
        return None
    if rv not in ("", "0"):
        return None  # an exact or NotOlderThan version: upstream knows it (for now)
    match = params.get("resourceVersionMatch", "")
    if match and not (match == "NotOlderThan" and rv == "0"):
        return None
    include = params.get("includeObject", "Metadata") if view == "table" else "Metadata"
    if include not in ("Metadata", "None"):
        return None
    limit = 0
    if "limit" in params:
        try:
            limit = int(params["limit"])
        except ValueError:
            return None
        if limit < 0:
            return None
    return ReadPlan(
        verb="get" if path.name is not None else "list",
        view=view,
        namespace=path.namespace,
        name=path.name,
        limit=limit,
        table_version=table_version or "v1",
        include_object=include,
    )


def _plan_watch(path: ApiPath, params: dict[str, str], view: str, rv: str) -> ReadPlan | None:
    if view != "objects" or not set(params) <= _WATCH_PARAMS:
        return None
    if rv not in ("", "0"):
        return None  # resuming from a version needs the event history (for now: upstream)
    timeout: float | None = None
    if "timeoutSeconds" in params:
        try:
            timeout = float(int(params["timeoutSeconds"]))
        except ValueError:
            return None
        if timeout < 0:
            return None
    return ReadPlan(
        verb="watch",
        view="objects",
        namespace=path.namespace,
        name=path.name,
        timeout_seconds=timeout,
    )


def store_covers(store: Store, namespace: str | None) -> bool:
    """Whether ``store`` holds everything a read of ``namespace`` (None: all) would see."""
    if isinstance(store, MultiStore):  # a namespace fallback: only its namespaces
        return namespace is not None and namespace in store.stores
    return True


# ------------------------------------------------------------------------------ LIST
def _list_body(resource: Resource, resource_version: str, items: list[bytes]) -> bytes:
    head = orjson.dumps(
        {
            "kind": f"{resource.kind}List",
            "apiVersion": resource.api_version,
            "metadata": {"resourceVersion": resource_version},
        }
    )
    return head[:-1] + b',"items":[' + b",".join(items) + b"]}"


class _RawRow(msgspec.Struct, gc=False):
    cells: msgspec.Raw = msgspec.Raw(b"[]")
    metadata: msgspec.Raw = msgspec.Raw(b"{}")


_row_decoder = msgspec.json.Decoder(_RawRow)


def _table_row(raw: bytes, plan: ReadPlan) -> bytes:
    row = _row_decoder.decode(raw)
    cells = bytes(row.cells)
    if plan.include_object == "None":
        return b'{"cells":' + cells + b',"object":null}'
    return (
        b'{"cells":'
        + cells
        + b',"object":{"kind":"PartialObjectMetadata","apiVersion":"meta.k8s.io/'
        + plan.table_version.encode()
        + b'","metadata":'
        + bytes(row.metadata)
        + b"}}"
    )


def _columns(columns: Sequence[TableColumn]) -> bytes:
    return orjson.dumps(
        [
            {
                "name": c.name,
                "type": c.type,
                "format": c.format,
                "description": c.description,
                "priority": c.priority,
            }
            for c in columns
        ]
    )


def _table_body(store: TableStore, plan: ReadPlan, rows: list[bytes], rv: str) -> bytes:
    head = orjson.dumps(
        {
            "kind": "Table",
            "apiVersion": f"meta.k8s.io/{plan.table_version}",
            "metadata": {"resourceVersion": rv},
        }
    )
    return (
        head[:-1]
        + b',"columnDefinitions":'
        + _columns(store.columns)
        + b',"rows":['
        + b",".join(_table_row(r, plan) for r in rows)
        + b"]}"
    )


def _headers(content_type: str, length: int) -> list[tuple[bytes, bytes]]:
    return [
        (b"content-type", content_type.encode()),
        (b"content-length", str(length).encode()),
        (b"x-kubemux-cache", b"hit"),
    ]


async def _send(send: Send, body: bytes, content_type: str) -> None:
    await send(
        {"type": "http.response.start", "status": 200, "headers": _headers(content_type, len(body))}
    )
    await send({"type": "http.response.body", "body": body})


async def serve_list(store: Store, plan: ReadPlan, send: Send) -> bool:
    """Answer a LIST from ``store``; False (nothing sent) if it must go upstream."""
    rv = store.resource_version
    items = store.list_raw(plan.namespace)
    if plan.limit and len(items) > plan.limit:
        return False  # a page of a larger list: upstream pages it (for now)
    if plan.view == "table":
        assert isinstance(store, TableStore)
        content_type = TABLE_TYPE.format(v=plan.table_version)
        await _send(send, _table_body(store, plan, items, rv), content_type)
        return True
    await _send(send, _list_body(store.resource, rv, items), JSON)
    return True


# ------------------------------------------------------------------------------ GET
async def serve_get(store: Store, plan: ReadPlan, send: Send) -> bool:
    """Answer a GET of one object from ``store``; False if it must go upstream (an object
    the cache does not have: the API server's 404 is the one to give)."""
    assert plan.name is not None
    namespace = plan.namespace if store.resource.namespaced else None
    raw = store.get_raw(namespace, plan.name)
    if raw is None:
        return False
    if plan.view == "table":
        assert isinstance(store, TableStore)
        rv = _object_rv(raw)
        content_type = TABLE_TYPE.format(v=plan.table_version)
        await _send(send, _table_body(store, plan, [raw], rv), content_type)
        return True
    await _send(send, raw, JSON)
    return True


class _Meta(msgspec.Struct, gc=False):
    resourceVersion: str = ""


class _WithMeta(msgspec.Struct, gc=False):
    metadata: _Meta = msgspec.field(default_factory=_Meta)


_meta_decoder = msgspec.json.Decoder(_WithMeta)


def _object_rv(raw: bytes) -> str:
    try:
        return _meta_decoder.decode(raw).metadata.resourceVersion
    except msgspec.DecodeError:
        return ""


# ------------------------------------------------------------------------------ WATCH
_DEFAULT_WATCH_TIMEOUT = (1800.0, 3600.0)  # kube-apiserver: minRequestTimeout .. twice it


async def serve_watch(
    subscription: object,
    plan: ReadPlan,
    receive: Receive,
    send: Send,
) -> None:
    """Stream a subscription (entered, with its snapshot) as a watch: one
    ``{"type":...,"object":...}`` line per change, until ``timeoutSeconds``, the client
    leaving, or the informer's generation ending (a reload or a removal: the client lists
    again, as after any watch the server ends)."""
    timeout = plan.timeout_seconds
    if timeout is None:
        timeout = random.uniform(*_DEFAULT_WATCH_TIMEOUT)
    await send(
        {
            "type": "http.response.start",
            "status": 200,
            "headers": [
                (b"content-type", JSON.encode()),
                (b"cache-control", b"no-cache, private"),
                (b"x-kubemux-cache", b"hit"),
            ],
        }
    )
    async with anyio.create_task_group() as tg:

        async def wait_disconnect() -> None:
            while (await receive())["type"] != "http.disconnect":
                pass
            tg.cancel_scope.cancel("the client went away")

        tg.start_soon(wait_disconnect)
        with anyio.move_on_after(timeout):
            try:
                async for change in subscription:  # type: ignore[attr-defined]
                    if change.type not in ("ADDED", "MODIFIED", "DELETED"):
                        break  # RESET or REMOVED: this watch is over
                    if plan.name is not None and change.name != plan.name:
                        continue
                    line = (
                        b'{"type":"' + change.type.encode() + b'","object":' + change.raw + b"}\n"
                    )
                    await send({"type": "http.response.body", "body": line, "more_body": True})
            except SubscriberOverflow:
                pass  # too slow: cut off, as the API server cuts off a slow watcher
        await send({"type": "http.response.body", "body": b"", "more_body": False})
        tg.cancel_scope.cancel("watch ended")


def query_pairs(query_string: bytes) -> list[tuple[str, str]]:
    """The query parameters, in order (repeated ones kept)."""
    return urllib.parse.parse_qsl(query_string.decode("latin-1"), keep_blank_values=True)
