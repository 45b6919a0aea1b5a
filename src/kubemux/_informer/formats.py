"""What differs between views: a :class:`Format` per view, one informer for all.

An :class:`~kubemux._informer.informer.Informer` runs one loop (LIST, WATCH from the list's
resourceVersion, RELIST on 410, backoff) whatever it caches. Its format owns what differs:

- the Accept header and the parameters LISTs and WATCHes add (a Table view asks for
  ``as=Table`` with ``includeObject=Metadata``, as ``kubectl get`` does), and whether a
  streaming list may be used;
- where a LIST page keeps its items (:class:`~kubemux._wire.pages.PageLayout`) and how each item
  becomes a cache entry (a :class:`ListReader` per LIST: an object as is, a Table row as its
  cells and metadata);
- the block decoder of the watch hot path and the line parser of its general path.

:data:`OBJECTS` caches full objects (``registry.watch()``); :data:`TABLE` caches the
server's rows (``registry.table()``: a :class:`~kubemux._cache.table.TableStore`). Formats hold no
state: what a table learns (its columns) lives in its store.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar, Protocol

import msgspec
import orjson

from .._cache.store import Store
from .._cache.table import (
    FALLBACK_COLUMNS,
    TABLE_ACCEPT,
    TABLE_PAGES,
    TableStore,
    decode_table_page,
    fallback_row,
    parse_columns,
    row_bytes,
    row_name,
    table_fast_path,
)
from .._errors import ResourceExpired
from .._wire.codec import (
    Block,
    DecodeError,
    Entry,
    bad_utf8,
    decode_block,
    deeper_recursion,
    object_name,
    split_block,
    split_event,
)
from .._wire.pages import OBJECT_PAGES, PageLayout
from .._wire.types import View

__all__ = ["OBJECTS", "TABLE", "Format", "ListReader", "Skip", "format_for"]

Skip = Callable[[str], None]
"""How a format reports one skipped item (the informer counts and names it)."""

Decoded = list[tuple[str, Entry | bytes]]
"""A block's lines: ``(type, entry)`` decoded on the hot path, ``("", line)`` for the rest."""

_OBJECT_EVENTS = frozenset({"ADDED", "MODIFIED", "DELETED"})


class ListReader(Protocol):
    """How the items of one LIST (all its pages) become cache entries."""

    def page(self, page: Any) -> str:
        """Look at a page's envelope (as its layout decoded it); returns what its items are
        called in a skip's message (``LIST item``, ``Table row``)."""
        ...

    def entry(self, raw: bytes) -> Entry:
        """One item's cache entry. Raises one of ``DecodeError`` (the item is skipped)."""
        ...

    def name(self, raw: bytes) -> str:
        """The item's quoted name as far as it can be read (``""`` if not), for a skip."""
        ...

    def commit(self) -> None:
        """The LIST is complete: give the store what it learnt, before it is swapped in."""
        ...


class Format:
    """What one view asks the server for and how it decodes the answers.

    Attributes:
        view: The view this format caches.
        accept: The Accept header of its LISTs and WATCHes.
        streaming_list: Whether a streaming list (``sendInitialEvents``) may fill it.
        pages: Where its LIST pages keep their items.
        label: What an informer of this format calls itself (in its repr and in logs).
    """

    view: ClassVar[View]
    accept: ClassVar[str]
    streaming_list: ClassVar[bool]
    pages: ClassVar[PageLayout]
    label: ClassVar[str]

    def __repr__(self) -> str:
        return f"<Format {self.view}>"

    def params(self) -> dict[str, str]:
        """Parameters every LIST and WATCH of this view adds."""
        return {}

    def reader(self, store: Store, skip: Skip) -> ListReader:
        """A reader for the items of one LIST into ``store``."""
        raise NotImplementedError

    def decode_block(self, block: Block, store: Store) -> Decoded:
        """The hot path: a block of watch lines, decoded in one call where it can be."""
        raise NotImplementedError

    def block_decoder(self, store: Store) -> Callable[[Block], Decoded]:
        """:meth:`decode_block` for ``store``, with what it needs looked up once (a watch
        takes one per stream: it is called for every block)."""
        return lambda block: self.decode_block(block, store)

    def parse_line(self, line: bytes, store: Store, skip: Skip) -> tuple[str, bytes, Entry | None]:
        """The general path: (event type, object bytes, cache entry for object events) of
        one watch line.

        Raises:
            DecodeError: the line is not a watch event a reader could decode.
            ResourceExpired: the store must be listed again (a table's columns changed).
        """
        raise NotImplementedError

    def line_name(self, line: bytes) -> str:
        """The quoted name of the object of a watch line (``""`` if it cannot be read)."""
        raise NotImplementedError


# ------------------------------------------------------------------------------ objects
class _ObjectReader:
    __slots__ = ("_prepare",)

    def __init__(self, store: Store) -> None:
        self._prepare = store.writer.prepare

    def page(self, page: Any) -> str:
        return "undecodable LIST item"

    def entry(self, raw: bytes) -> Entry:
        return self._prepare(raw, from_list=True)

    def name(self, raw: bytes) -> str:
        return object_name(raw)

    def commit(self) -> None:
        pass


class ObjectFormat(Format):
    """Full objects, as the server sends them (the store's transform applied)."""

    view = View.OBJECTS
    accept = "application/json"
    streaming_list = True
    pages = OBJECT_PAGES
    label = "Informer"

    def reader(self, store: Store, skip: Skip) -> ListReader:
        return _ObjectReader(store)

    def decode_block(self, block: Block, store: Store) -> Decoded:
        return self.block_decoder(store)(block)

    def block_decoder(self, store: Store) -> Callable[[Block], Decoded]:
        writer = store.writer
        if writer.transform is not None:  # a user transform decodes every line
            return lambda block: [("", line) for line in split_block(block)]
        drop = writer.drops_managed_fields
        return lambda block: decode_block(block[0], block[1], block[2], drop)

    def parse_line(self, line: bytes, store: Store, skip: Skip) -> tuple[str, bytes, Entry | None]:
        prepare = store.writer.prepare
        try:
            etype, raw = split_event(line)
            return etype, raw, prepare(raw) if etype in _OBJECT_EVENTS else None
        except DecodeError:
            # the prefix split can be fooled by an unusual envelope: decode it properly
            etype, raw = split_event(line, fast=False)
            return etype, raw, prepare(raw) if etype in _OBJECT_EVENTS else None

    def line_name(self, line: bytes) -> str:
        try:
            with deeper_recursion():
                return object_name(split_event(line, fast=False)[1])
        except DecodeError:
            return ""


# ------------------------------------------------------------------------------ table
class _TableReader:
    """A Table LIST: the first page's columns, each row alone; a plain list (a server
    without Table support) makes the view the NAME/AGE fallback."""

    __slots__ = ("_columns", "_dropped", "_fallback", "_is_table", "_skip", "_store")

    def __init__(self, store: TableStore, skip: Skip) -> None:
        self._store = store
        self._skip = skip
        self._columns: tuple[Any, ...] | None = None
        self._dropped: tuple[int, ...] = ()
        self._fallback = False
        self._is_table = True

    def page(self, page: Any) -> str:
        self._is_table = page.kind == "Table"
        if self._is_table and page.columnDefinitions and self._columns is None:
            self._columns, self._dropped, refused = parse_columns(page.columnDefinitions)
            for why in refused:
                self._skip(why)
        self._fallback = self._fallback or not self._is_table
        return "Table row" if self._is_table else "LIST item"

    def entry(self, raw: bytes) -> Entry:
        row = row_bytes(raw, self._dropped) if self._is_table else fallback_row(raw)
        return self._store.writer.prepare(row, from_list=True)

    def name(self, raw: bytes) -> str:
        return row_name(raw) if self._is_table else object_name(raw)

    def commit(self) -> None:
        writer = self._store.writer
        if self._fallback:
            writer.set_columns(FALLBACK_COLUMNS, fallback=True)
        elif self._columns is not None:
            writer.set_columns(self._columns, dropped=self._dropped)
        else:  # no columns came: keep the table's
            writer.set_columns(self._store.columns, dropped=writer.dropped)


class TableFormat(Format):
    """The server's rows: ``{"cells": [...], "metadata": {...}}`` per object (managedFields
    dropped), the column definitions in the :class:`~kubemux._cache.table.TableStore`.

    A Table watch cannot carry a streaming list. New column definitions in a watch (a CRD's
    printer columns edited) raise ``ResourceExpired``: the informer lists again. A row or a
    column definition no reader could decode is skipped alone.
    """

    view = View.TABLE
    accept = TABLE_ACCEPT
    streaming_list = False
    pages = TABLE_PAGES
    label = "TableInformer"

    def params(self) -> dict[str, str]:
        return {"includeObject": "Metadata"}

    def reader(self, store: Store, skip: Skip) -> ListReader:
        assert isinstance(store, TableStore), "a table view's store is a TableStore"
        return _TableReader(store, skip)

    def decode_block(self, block: Block, store: Store) -> Decoded:
        """Object events of one-row Tables with known columns become entries, the block
        decoded in one msgspec call; anything else (bookmarks, errors, new columns, plain
        objects, lines laid out otherwise, bytes that are not UTF-8, a table with columns
        left out) goes to :meth:`parse_line`."""
        assert isinstance(store, TableStore)
        buf, start, stop = block
        if store.writer.dropped or bad_utf8(buf, start, stop):
            return [("", line) for line in split_block(block)]
        return table_fast_path(block, store.columns)

    def parse_line(self, line: bytes, store: Store, skip: Skip) -> tuple[str, bytes, Entry | None]:
        assert isinstance(store, TableStore)
        writer = store.writer
        try:
            etype, raw = split_event(line)
        except DecodeError:
            etype, raw = split_event(line, fast=False)
        if etype not in ("ADDED", "MODIFIED", "DELETED", "BOOKMARK"):
            return etype, raw, None
        page = decode_table_page(raw)
        if page.kind != "Table":  # plain objects: a server without Table support
            row = fallback_row(raw)
        else:
            if page.columnDefinitions:
                columns, dropped, refused = parse_columns(page.columnDefinitions)
                if store.columns and (columns, dropped) != (store.columns, writer.dropped):
                    raise ResourceExpired(410, "Expired", "the server's table columns changed")
                if not store.columns:
                    for why in refused:
                        skip(why)
                writer.set_columns(columns, dropped=dropped)
            if etype == "BOOKMARK":
                rv = page.metadata.resourceVersion
                if not rv and page.rows:
                    rv = _row_rv(bytes(page.rows[0]))
                return etype, b'{"metadata":{"resourceVersion":' + orjson.dumps(rv) + b"}}", None
            if not page.rows:
                return etype, raw, None  # an object event without a row: skipped
            row = row_bytes(bytes(page.rows[0]), writer.dropped)
        if etype == "BOOKMARK":
            return etype, row, None
        return etype, row, writer.prepare(row)

    def line_name(self, line: bytes) -> str:
        try:
            with deeper_recursion():
                page = decode_table_page(split_event(line, fast=False)[1])
        except DecodeError:
            return ""
        return row_name(bytes(page.rows[0])) if page.rows else ""


class _RvMeta(msgspec.Struct, gc=False):
    resourceVersion: str = ""


class _RvObject(msgspec.Struct, gc=False):
    metadata: _RvMeta = msgspec.field(default_factory=_RvMeta)


class _RvRow(msgspec.Struct, gc=False):
    object: _RvObject | None = None


_row_rv_decoder = msgspec.json.Decoder(_RvRow)


def _row_rv(raw: bytes) -> str:
    row = _row_rv_decoder.decode(raw)
    return row.object.metadata.resourceVersion if row.object is not None else ""


OBJECTS = ObjectFormat()
"""Full objects (:meth:`~kubemux.WatcherRegistry.watch`)."""
TABLE = TableFormat()
"""The server's rows (:meth:`~kubemux.WatcherRegistry.table`)."""
_BY_VIEW: dict[View, Format] = {View.OBJECTS: OBJECTS, View.TABLE: TABLE}


def format_for(view: View | str) -> Format:
    """The format of a view (``"objects"`` and ``"table"`` are accepted as strings).

    Raises:
        ValueError: no such view.
    """
    return _BY_VIEW[View(view)]
