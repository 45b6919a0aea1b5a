"""Server-side columns: a live cache of a resource as the API server prints it (kubectl's view).

A table view is an :class:`~kubemux._informer.informer.Informer` with the table format
(:data:`kubemux._informer.formats.TABLE`): its LISTs and WATCHes ask for
``Accept: application/json;as=Table;v=v1;g=meta.k8s.io`` with ``includeObject=Metadata``,
as ``kubectl get`` and ``kubectl get -w`` do. Its :class:`TableStore` keeps the column
definitions (:attr:`TableStore.columns`) and one row per object: the cells the server
printed and the object's metadata (``managedFields`` dropped), never the object itself, so a
table view costs a fraction of a full-object cache. This module holds the table's values
and store and the decoding of Table documents; the format puts them to work.

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
from typing import Any

import msgspec
import orjson

from .._resources import Resource
from .._wire.codec import (
    DecodeError,
    Entry,
    UndecodableObject,
    decode_entry,
    decode_raw,
    deeper_recursion,
    foreign_entry,
    object_name,
    quoted_name,
    split_block,
    why_undecodable,
)
from .._wire.pages import PageLayout
from .._wire.types import View
from .store import Store, StoreWriter

__all__ = [
    "FALLBACK_COLUMNS",
    "TABLE_ACCEPT",
    "TABLE_PAGES",
    "ColumnDef",
    "TableColumn",
    "TableRow",
    "TableStore",
    "TableWriter",
    "decode_table_page",
    "fallback_row",
    "parse_columns",
    "row_bytes",
    "row_name",
    "table_columns",
    "table_fast_path",
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
class ColumnDef(msgspec.Struct, gc=False):  # a TableColumnDefinition, decoded
    name: str = ""
    type: str = "string"
    format: str = ""
    description: str = ""
    priority: int = 0


class _ColumnName(msgspec.Struct, gc=False):
    name: str = ""


class _Meta(msgspec.Struct, gc=False):
    resourceVersion: str = ""
    continue_: str = msgspec.field(default="", name="continue")


class _Object(msgspec.Struct, gc=False):
    metadata: msgspec.Raw = msgspec.field(default_factory=msgspec.Raw)


class _Row(msgspec.Struct, gc=False):
    cells: msgspec.Raw = msgspec.field(default_factory=msgspec.Raw)
    object: _Object | None = None


class _NameMeta(msgspec.Struct, gc=False):
    name: str = ""
    namespace: str = ""


class _NameObject(msgspec.Struct, gc=False):
    metadata: _NameMeta = msgspec.field(default_factory=_NameMeta)


class _RowName(msgspec.Struct, gc=False):
    object: _NameObject | None = None


class _TablePage(msgspec.Struct, gc=False):
    """A Table (LIST page or watch event object), or a plain list/object (the fallback).

    Column definitions and rows stay encoded: each is decoded (and refused) on its own."""

    kind: str = ""
    metadata: _Meta = msgspec.field(default_factory=_Meta)
    columnDefinitions: list[msgspec.Raw] | None = None
    rows: list[msgspec.Raw] | None = None
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
    columnDefinitions: list[ColumnDef] | None = None
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
    if cells[:1] != b"[":
        return None  # not a list: the general path refuses the row
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
_row_decoder = msgspec.json.Decoder(_Row)
_row_name_decoder = msgspec.json.Decoder(_RowName)
_column_decoder = msgspec.json.Decoder(ColumnDef)
_column_name_decoder = msgspec.json.Decoder(_ColumnName)
_cells_decoder = msgspec.json.Decoder(list[msgspec.Raw])
_OBJECT_EVENTS = frozenset({"ADDED", "MODIFIED", "DELETED"})
_fallback_decoder = msgspec.json.Decoder(_FallbackObject)
_fallback_meta_decoder = msgspec.json.Decoder(_FallbackMeta)
_EMPTY_META = b"{}"

TABLE_PAGES = PageLayout(
    keys=(b'"rows":[', b'"items":['),
    decode=_page_decoder.decode,
    items=lambda page: page.rows if page.kind == "Table" else page.items,
)
"""A Table LIST page (``rows``), or a plain list (``items``) from a server without Tables."""


def row_bytes(raw: bytes, dropped: tuple[int, ...] = ()) -> bytes:
    """One Table row (``{"cells": [...], "object": {"metadata": {...}}}``) as the cache
    keeps it: ``{"cells":[...],"metadata":{...}}``, the cells of the ``dropped`` columns
    left out. The parts are joined, not decoded and encoded again.

    Raises:
        msgspec.DecodeError, msgspec.ValidationError, RecursionError, UndecodableObject: not
            a row a reader could decode (the caller skips it alone).
    """
    row = _row_decoder.decode(raw)
    cells = bytes(row.cells) or b"[]"
    if cells[:1] != b"[":
        raise UndecodableObject("the row's cells are not a list")
    if dropped:
        cells = (
            b"["
            + b",".join(
                bytes(c) for i, c in enumerate(_cells_decoder.decode(cells)) if i not in dropped
            )
            + b"]"
        )
    meta = (bytes(row.object.metadata) if row.object is not None else b"") or _EMPTY_META
    if meta[:1] != b"{":
        raise UndecodableObject("the row's metadata is not an object")
    return b'{"cells":' + cells + b',"metadata":' + meta + b"}"


def row_name(raw: bytes) -> str:
    """``namespace/name`` of a Table row as far as it can be read (for a skip's message;
    ``""`` if not even that), quoted so that nothing in it reaches a terminal raw."""
    try:
        with deeper_recursion():
            row = _row_name_decoder.decode(raw)
    except DecodeError:
        return object_name(raw, metadata_last=True)
    meta = row.object.metadata if row.object is not None else _NameMeta()
    return quoted_name(meta.namespace, meta.name)


def parse_columns(
    defs: list[msgspec.Raw] | None,
) -> tuple[tuple[TableColumn, ...], tuple[int, ...], list[str]]:
    """A Table's column definitions, each decoded alone: (columns, the indices of the
    definitions refused, why each was refused). A refused column is dropped with its cell
    in every row (:func:`row_bytes`), so the other columns keep their cells."""
    columns: list[TableColumn] = []
    dropped: list[int] = []
    why: list[str] = []
    for i, raw in enumerate(defs or ()):
        try:
            d = _column_decoder.decode(raw)
        except DecodeError as exc:
            dropped.append(i)
            why.append(f"Table column {_column_label(raw, i)} ({why_undecodable(exc)})")
            continue
        columns.append(
            TableColumn(
                name=d.name,
                type=d.type,
                format=d.format,
                description=d.description,
                priority=d.priority,
            )
        )
    return tuple(columns), tuple(dropped), why


def _column_label(raw: msgspec.Raw, index: int) -> str:
    try:
        name = _column_name_decoder.decode(raw).name
    except DecodeError:
        name = ""
    return orjson.dumps(name).decode() if name else f"#{index + 1}"


def fallback_row(raw: bytes) -> bytes:
    """The NAME/AGE row of a plain object (a server without Table support)."""
    meta = bytes(_fallback_decoder.decode(raw).metadata) or _EMPTY_META
    head = _fallback_meta_decoder.decode(meta)
    cells = orjson.dumps([head.name, head.creationTimestamp])
    return b'{"cells":' + cells + b',"metadata":' + meta + b"}"


def table_columns(defs: list[ColumnDef]) -> tuple[TableColumn, ...]:
    """The decoded column definitions as :class:`TableColumn` values."""
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
    dicts, :meth:`rows` and :meth:`row` return :class:`TableRow` values. A column
    definition no reader could decode is left out, with its cell in every row.
    """

    __slots__ = ("_dropped", "columns", "is_fallback")

    view = View.TABLE

    def __init__(self, resource: Resource) -> None:
        super().__init__(resource)
        self.columns: tuple[TableColumn, ...] = ()
        self.is_fallback = False
        self._dropped: tuple[int, ...] = ()  # the server's columns left out (undecodable)

    def __repr__(self) -> str:
        mode = " fallback" if self.is_fallback else ""
        return (
            f"<TableStore {self.resource.name}{mode} columns={len(self.columns)} "
            f"rows={len(self)} synced={self.has_synced} rv={self.resource_version!r}>"
        )

    def row(self, namespace: str | None, name: str) -> TableRow | None:
        """One object's row, or None."""
        entry = self.writer.entry(namespace, name)
        return None if entry is None else _to_row(entry)

    def rows(self, namespace: str | None = None) -> builtins.list[TableRow]:
        """Every row (in one namespace, if given), sorted by namespace and name."""
        return [_to_row(e) for e in sorted(self.writer.entries(namespace), key=_entry_key)]

    @property
    def writer(self) -> TableWriter:
        """The one way to change this table (see :class:`~kubemux.StoreWriter`), columns
        included."""
        writer = super().writer
        assert isinstance(writer, TableWriter)
        return writer

    def _make_writer(self) -> StoreWriter:
        return TableWriter(self)

    def _prepare(self, raw: bytes, *, from_list: bool = False) -> Entry:
        # raw is a row as row_bytes writes it: metadata at the top, managedFields dropped
        return decode_entry(raw, drop_managed_fields=True, transform=None, type_prefix=b"")


class TableWriter(StoreWriter):
    """A :class:`~kubemux.StoreWriter` of a :class:`TableStore`: rows, and the columns."""

    __slots__ = ("_table",)

    def __init__(self, store: TableStore) -> None:
        super().__init__(store)
        self._table = store

    def set_columns(
        self,
        columns: tuple[TableColumn, ...],
        *,
        dropped: tuple[int, ...] = (),
        fallback: bool = False,
    ) -> None:
        """The server's columns (``dropped``: the indices of column definitions left out,
        whose cells rows no longer hold; ``fallback``: kubectl's NAME/AGE for a server
        without Table support)."""
        store = self._table
        store.columns, store._dropped, store.is_fallback = columns, dropped, fallback

    @property
    def dropped(self) -> tuple[int, ...]:
        """The indices of the server's column definitions left out (undecodable)."""
        return self._table._dropped


def _entry_key(entry: Entry) -> tuple[str, str]:
    return entry.namespace, entry.name


def _to_row(entry: Entry) -> TableRow:
    data = decode_raw(entry.raw)  # the lenient read every store's reader uses
    cells = data.get("cells")
    meta = data.get("metadata")
    return TableRow(
        entry.namespace,
        entry.name,
        tuple(cells) if isinstance(cells, list) else (),
        meta if isinstance(meta, dict) else {},
    )


# ------------------------------------------------------------------------------ watch lines
def table_fast_path(
    block: tuple[bytes, int, int], known: tuple[TableColumn, ...]
) -> list[tuple[str, Entry | bytes]]:
    """The hot path of a Table watch: ``(type, entry)`` for each object event of a one-row
    Table whose columns are ``known`` (or not repeated), the whole block decoded in one
    msgspec call; ``("", line)`` for anything else (the general path's). The caller has
    checked the block is UTF-8."""
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
            and (not page.columnDefinitions or table_columns(page.columnDefinitions) == known)
        ):
            entry = _fast_entry(buf, view, pos, end, page.rows[0])
        if entry is None or not entry.name or not entry.rv:
            append(("", buf[pos:end]))
        else:
            append((event.type, entry))
        pos = end + 1
    return out


decode_table_page = _page_decoder.decode
"""A Table (a LIST page or a watch event's object) with its rows and columns still encoded,
or a plain list or object (the fallback)."""
