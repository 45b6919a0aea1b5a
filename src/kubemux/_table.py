"""Server-side columns: a live cache of a resource as the API server prints it (kubectl's view).

A :class:`TableInformer` runs the :class:`~kubemux._informer.Informer` loop (LIST, WATCH from
the list's resourceVersion, RELIST on 410, backoff) with
``Accept: application/json;as=Table;v=v1;g=meta.k8s.io`` and ``includeObject=Metadata``, as
``kubectl get`` and ``kubectl get -w`` do. Its :class:`TableStore` keeps the column
definitions (:attr:`TableStore.columns`) and one row per object: the cells the server
printed and the object's metadata (``managedFields`` dropped), never the object itself, so a
table view costs a fraction of a full-object cache.

A server (or aggregated API) without Table support answers with plain objects: the view then
falls back to kubectl's client-side default, ``Name`` and ``Age`` from the metadata (the Age
cell holds the RFC 3339 ``creationTimestamp``; the column's type is ``date``), and
:attr:`TableStore.is_fallback` is true.

Consistency is the informer's: eventually consistent, ordered per object. Cells are what the
server computed when it sent the row: an ``Age`` cell is not re-aged locally.
"""

from __future__ import annotations

import builtins
import dataclasses
from collections.abc import Callable
from typing import Any

import anyio
import msgspec
import orjson

from ._client import ContextClient
from ._codec import DecodeError, Entry, decode_entry, foreign_entry, split_block, split_event
from ._errors import ProtocolError, ResourceExpired
from ._informer import Informer, InformerKey, OnChange
from ._resources import Resource
from ._settings import WatchSettings
from ._store import Replacement, Store

__all__ = [
    "FALLBACK_COLUMNS",
    "TABLE_ACCEPT",
    "TableColumn",
    "TableInformer",
    "TableRow",
    "TableStore",
]

TABLE_ACCEPT = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"
"""The Accept header of a Table LIST or WATCH (plain JSON accepted: the fallback)."""


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class TableColumn:
    """One column as the server defines it (``meta.k8s.io/v1`` TableColumnDefinition).

    Attributes:
        name: The header (``"Name"``, ``"Restarts"``); kubectl prints it upper-cased.
        type: ``string``, ``integer``, ``number``, ``boolean`` or ``date``.
        format: A hint such as ``name`` (the object's name column); often empty.
        description: What the column means.
        priority: 0 for the default columns, higher for ``-o wide`` ones.
    """

    name: str
    type: str = "string"
    format: str = ""
    description: str = ""
    priority: int = 0


FALLBACK_COLUMNS = (
    TableColumn(name="Name", format="name", description="The object's name."),
    TableColumn(name="Age", type="date", description="The object's creationTimestamp."),
)
"""kubectl's columns for a server without Table support."""


@dataclasses.dataclass(frozen=True, slots=True)
class TableRow:
    """One object's row: its cells (one per column) and its metadata."""

    namespace: str
    name: str
    cells: tuple[Any, ...]
    metadata: dict[str, Any]


# ------------------------------------------------------------------------------ decoding
class _ColumnDef(msgspec.Struct, gc=False):
    name: str = ""
    type: str = "string"
    format: str = ""
    description: str = ""
    priority: int = 0


class _Meta(msgspec.Struct, gc=False):
    resourceVersion: str = ""
    continue_: str = msgspec.field(default="", name="continue")


class _Object(msgspec.Struct, gc=False):
    metadata: msgspec.Raw = msgspec.field(default_factory=msgspec.Raw)


class _Row(msgspec.Struct, gc=False):
    cells: msgspec.Raw = msgspec.field(default_factory=msgspec.Raw)
    object: _Object | None = None


class _TablePage(msgspec.Struct, gc=False):
    """A Table (LIST page or watch event object), or a plain list/object (the fallback)."""

    kind: str = ""
    metadata: _Meta = msgspec.field(default_factory=_Meta)
    columnDefinitions: list[_ColumnDef] | None = None
    rows: list[_Row] | None = None
    items: list[msgspec.Raw] | None = None


class _FallbackMeta(msgspec.Struct, gc=False):
    name: str = ""
    creationTimestamp: str | None = None
    resourceVersion: str = ""


class _FallbackObject(msgspec.Struct, gc=False):
    metadata: msgspec.Raw = msgspec.field(default_factory=msgspec.Raw)


class _FastMeta(msgspec.Struct, gc=False):
    name: str = ""
    namespace: str = ""
    resourceVersion: str = ""
    managedFields: msgspec.Raw = msgspec.field(default_factory=msgspec.Raw)


class _FastObject(msgspec.Struct, gc=False):
    metadata: _FastMeta = msgspec.field(default_factory=_FastMeta)


class _FastRow(msgspec.Struct, gc=False):
    cells: msgspec.Raw = msgspec.field(default_factory=msgspec.Raw)
    object: _FastObject | None = None


class _FastTable(msgspec.Struct, gc=False):
    kind: str = ""
    columnDefinitions: list[_ColumnDef] | None = None
    rows: list[_FastRow] | None = None


class _FastEvent(msgspec.Struct, gc=False):
    type: str
    object: _FastTable


_fast_decoder = msgspec.json.Decoder(_FastEvent)
_META_KEY = b'"metadata":'
_MF_KEY = b'"managedFields":'
_ROW_HEAD = b'{"cells":'
_ROW_META = b',"metadata":'
_LINE_END = b"}}}]}}"  # metadata, row object, row, rows, Table, event (the server's order)


def _fast_entry(buf: bytes, view: memoryview, pos: int, end: int, row: _FastRow) -> Entry | None:
    """The entry of the one-row Table event ``buf[pos:end]``, its metadata cut out of the
    line with one copy (managedFields dropped); None when the line is not laid out as the
    API server writes it (the caller then takes the general path)."""
    obj = row.object
    if obj is None or not buf.endswith(_LINE_END, pos, end):
        return None
    first = buf.rfind(_META_KEY, pos, end) + len(_META_KEY)
    last = end - len(_LINE_END) + 1
    if first < pos + len(_META_KEY) or buf[first] != 123:  # 123: b"{"
        return None
    meta = obj.metadata
    cells = bytes(row.cells) or b"[]"
    mf = meta.managedFields
    if not len(mf):
        parts: tuple[Any, ...] = (_ROW_HEAD, cells, _ROW_META, view[first:last], b"}")
    else:
        value = bytes(mf)
        key = buf.find(_MF_KEY, first, last)
        while key >= 0 and not buf.startswith(value, key + len(_MF_KEY)):
            key = buf.find(_MF_KEY, key + 1, last)
        if key < 0:
            return None
        cut = key + len(_MF_KEY) + len(value)
        if buf[key - 1] == 44:  # b","
            key -= 1
        elif buf[cut] == 44:
            cut += 1
        parts = (_ROW_HEAD, cells, _ROW_META, view[first:key], view[cut:last], b"}")
    # checked: the row's bytes are put together here, not cut from one object
    return foreign_entry(meta.namespace, meta.name, meta.resourceVersion, b"".join(parts))


_page_decoder = msgspec.json.Decoder(_TablePage)
_OBJECT_EVENTS = frozenset({"ADDED", "MODIFIED", "DELETED"})
_fallback_decoder = msgspec.json.Decoder(_FallbackObject)
_fallback_meta_decoder = msgspec.json.Decoder(_FallbackMeta)
_EMPTY_META = b"{}"


def _row_bytes(row: _Row) -> bytes:
    """A row as the cache keeps it: ``{"cells":[...],"metadata":{...}}``."""
    cells = bytes(row.cells) or b"[]"
    meta = bytes(row.object.metadata) if row.object is not None else b""
    return b'{"cells":' + cells + b',"metadata":' + (meta or _EMPTY_META) + b"}"


def _fallback_row(raw: bytes) -> bytes:
    """The NAME/AGE row of a plain object (a server without Table support)."""
    meta = bytes(_fallback_decoder.decode(raw).metadata) or _EMPTY_META
    head = _fallback_meta_decoder.decode(meta)
    cells = orjson.dumps([head.name, head.creationTimestamp])
    return b'{"cells":' + cells + b',"metadata":' + meta + b"}"


def _columns(defs: list[_ColumnDef]) -> tuple[TableColumn, ...]:
    return tuple(
        TableColumn(
            name=d.name,
            type=d.type,
            format=d.format,
            description=d.description,
            priority=d.priority,
        )
        for d in defs
    )


# ------------------------------------------------------------------------------ store
class TableStore(Store):
    """A read-only, live table of one resource in one context: columns and rows.

    Rows are keyed like a :class:`~kubemux.Store`'s objects, by (namespace, name); the
    mapping reads (:meth:`get`, :meth:`list`) return ``{"cells": [...], "metadata": {...}}``
    dicts, :meth:`rows` and :meth:`row` return :class:`TableRow` values.
    """

    __slots__ = ("columns", "is_fallback")

    def __init__(self, resource: Resource) -> None:
        super().__init__(resource)
        self.columns: tuple[TableColumn, ...] = ()
        self.is_fallback = False

    def __repr__(self) -> str:
        mode = " fallback" if self.is_fallback else ""
        return (
            f"<TableStore {self.resource.name}{mode} columns={len(self.columns)} "
            f"rows={len(self)} synced={self.has_synced} rv={self.resource_version!r}>"
        )

    def row(self, namespace: str | None, name: str) -> TableRow | None:
        """One object's row, or None."""
        entry = self._get(namespace, name)
        return None if entry is None else _to_row(entry)

    def rows(self, namespace: str | None = None) -> builtins.list[TableRow]:
        """Every row (in one namespace, if given), sorted by namespace and name."""
        return [_to_row(e) for e in sorted(self._entries(namespace), key=_entry_key)]

    def _prepare(self, raw: bytes, *, from_list: bool = False) -> Entry:
        # raw is a row as _row_bytes writes it: metadata at the top, managedFields dropped
        return decode_entry(raw, drop_managed_fields=True, transform=None, type_prefix=b"")


def _entry_key(entry: Entry) -> tuple[str, str]:
    return entry.namespace, entry.name


def _to_row(entry: Entry) -> TableRow:
    data = orjson.loads(entry.raw)
    return TableRow(entry.namespace, entry.name, tuple(data.get("cells") or ()), data["metadata"])


# ------------------------------------------------------------------------------ informer
class TableInformer(Informer):
    """The :class:`~kubemux._informer.Informer` loop over Table LISTs and WATCHes.

    Same lifecycle, states, backoff and status as the object informer; streaming lists are
    not used (a Table watch cannot carry them). When the server's column definitions change
    (a CRD's printer columns were edited), the table is listed again.
    """

    store: TableStore
    _accept = TABLE_ACCEPT  # LISTs and WATCHes ask for the Table format

    def __init__(
        self,
        client: ContextClient,
        resource: Resource,
        key: InformerKey,
        *,
        settings: WatchSettings,
        store: TableStore,
        on_change: OnChange | None = None,
        on_state: Callable[[], None] | None = None,
    ) -> None:
        super().__init__(
            client,
            resource,
            key,
            settings=dataclasses.replace(settings, streaming_list=False),
            store=store,
            on_change=on_change,
            on_state=on_state,
        )

    def __repr__(self) -> str:
        return (
            f"<TableInformer {self.client.context}/{self.key} state={self._state} "
            f"rows={len(self.store)}>"
        )

    def _base_params(self) -> dict[str, str]:
        params = super()._base_params()
        params["includeObject"] = "Metadata"
        return params

    async def _list(self) -> str:
        """A full paginated Table LIST, applied to the store; returns its resourceVersion."""
        s = self.settings
        store = self.store
        replacement = Replacement(store)
        params = self._base_params()
        if s.page_size:
            params["limit"] = str(s.page_size)
        list_rv = ""
        columns: tuple[TableColumn, ...] | None = None
        fallback = False
        while True:
            try:
                body = await self.client.list(
                    self.resource,
                    self.key.namespace,
                    params,
                    s,
                    progress=self._progress,
                    accept=self._accept,
                )
            except ResourceExpired:
                if "continue" not in params:
                    raise
                replacement = Replacement(store)
                params = self._base_params()
                continue
            try:
                page = _page_decoder.decode(body)
            except DecodeError as exc:
                raise ProtocolError(
                    self.client.server, f"LIST {self.resource.name} returned invalid JSON: {exc}"
                ) from exc
            del body
            if page.kind == "Table":
                if page.columnDefinitions and columns is None:
                    columns = _columns(page.columnDefinitions)
                raws = [_row_bytes(row) for row in page.rows or ()]
            else:
                fallback = True
                raws = []
                for item in page.items or ():
                    try:
                        raws.append(_fallback_row(bytes(item)))
                    except DecodeError as exc:
                        self._skip(f"malformed LIST item ({exc})")
            for i, raw in enumerate(raws):
                try:
                    replacement.add(store._prepare(raw, from_list=True))
                except DecodeError as exc:
                    self._skip(f"malformed Table row ({exc})")
                if i % s.relist_slice == s.relist_slice - 1:
                    await anyio.lowlevel.checkpoint()
            list_rv = page.metadata.resourceVersion or list_rv
            token = page.metadata.continue_
            if not token:
                break
            params["continue"] = token
            await anyio.lowlevel.checkpoint()
        store.is_fallback = fallback
        store.columns = FALLBACK_COLUMNS if fallback else (columns or store.columns)
        await self._commit(replacement, list_rv)
        return list_rv

    def _decode(self, block: Any) -> list[tuple[str, Entry | bytes]]:
        """The hot path: object events of one-row Tables with known columns become entries,
        the whole block decoded in one msgspec call; anything else (bookmarks, errors, new
        columns, plain objects, lines laid out otherwise) goes to :meth:`_parse` through the
        informer's general path."""
        buf, start, stop = block
        view = memoryview(buf)
        if buf.find(b"\n\n", start, stop) >= 0:
            return [("", line) for line in split_block(block)]
        try:
            events = _fast_decoder.decode_lines(view[start:stop])
        except DecodeError:
            return [("", line) for line in split_block(block)]
        out: list[tuple[str, Entry | bytes]] = []
        append = out.append
        find = buf.find
        known = self.store.columns
        pos = start
        for event in events:
            end = find(b"\n", pos, stop)
            if end < 0:
                end = stop
            if buf[pos] != 123:  # not where the decoder was (a blank-ish line): go slowly
                return [("", line) for line in split_block(block)]
            page = event.object
            entry = None
            if (
                event.type in _OBJECT_EVENTS
                and page.kind == "Table"
                and page.rows
                and len(page.rows) == 1
                and (not page.columnDefinitions or _columns(page.columnDefinitions) == known)
            ):
                entry = _fast_entry(buf, view, pos, end, page.rows[0])
            if entry is None or not entry.name or not entry.rv:
                append(("", buf[pos:end]))
            else:
                append((event.type, entry))
            pos = end + 1
        return out

    def _parse(self, line: bytes) -> tuple[str, bytes, Entry | None]:
        """(event type, row bytes, cache entry for object events) of one Table watch line."""
        try:
            etype, raw = split_event(line)
        except DecodeError:
            etype, raw = split_event(line, fast=False)
        if etype not in ("ADDED", "MODIFIED", "DELETED", "BOOKMARK"):
            return etype, raw, None
        page = _page_decoder.decode(raw)
        if page.kind != "Table":  # plain objects: a server without Table support
            row = _fallback_row(raw)
        else:
            if page.columnDefinitions:
                columns = _columns(page.columnDefinitions)
                if self.store.columns and columns != self.store.columns:
                    raise ResourceExpired(410, "Expired", "the server's table columns changed")
                self.store.columns = columns
            if etype == "BOOKMARK":
                rv = page.metadata.resourceVersion
                if not rv and page.rows and page.rows[0].object is not None:
                    rv = _fallback_meta_decoder.decode(
                        bytes(page.rows[0].object.metadata) or _EMPTY_META
                    ).resourceVersion
                return etype, b'{"metadata":{"resourceVersion":' + orjson.dumps(rv) + b"}}", None
            if not page.rows:
                return etype, raw, None  # an object event without a row: skipped
            row = _row_bytes(page.rows[0])
        if etype == "BOOKMARK":
            return etype, row, None
        return etype, row, self.store._prepare(row)
