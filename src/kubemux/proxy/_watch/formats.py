"""What a downstream watch reads (the store's event history and snapshots, as protocols) and
how it writes events: :class:`ObjectWatchFormat` (watch lines of objects) and
:class:`TableWatchFormat` (``meta.k8s.io/v1`` Table rows, the columns in the first event).
:class:`~._watch.WatchBroadcaster` encodes each event once with a view's format.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Hashable, Iterator, Mapping, Sequence
from typing import Any, Final, Protocol, runtime_checkable

import orjson

from ..._cache.snapshot import Key
from ..._wire.ages import AgeCells
from ..._wire.codec import raw_resource_version
from .._api.lists import TABLE_V1, ColumnLike, column_definitions, split_table_row, table_row
from .._api.statuses import encode_json

__all__ = [
    "INITIAL_EVENTS_END",
    "EventHistoryLike",
    "HasOldest",
    "HistoryEventLike",
    "Key",
    "ObjectWatchFormat",
    "SnapshotLike",
    "TableWatchFormat",
    "WatchFormat",
]


INITIAL_EVENTS_END: Final = "k8s.io/initial-events-end"
"""The annotation of the BOOKMARK that ends a watch's initial events."""


class HistoryEventLike(Protocol):
    """One change of the store (``kubemux.HistoryEvent``)."""

    @property
    def type(self) -> str: ...
    @property
    def rv(self) -> int: ...
    @property
    def namespace(self) -> str: ...
    @property
    def name(self) -> str: ...
    @property
    def raw(self) -> bytes: ...
    @property
    def old(self) -> bytes | None: ...


class EventHistoryLike(Protocol):
    """The store's bounded event history (``kubemux.EventHistory``)."""

    def since(self, rv: int) -> Sequence[HistoryEventLike] | None: ...
    def add_listener(self, fn: Callable[[HistoryEventLike], None]) -> Callable[[], None]: ...


@runtime_checkable
class HasOldest(Protocol):
    """A history that says the oldest resourceVersion it can resume from."""

    @property
    def oldest_resource_version(self) -> int: ...


class SnapshotLike(Protocol):
    """An immutable view of the store (``kubemux.StoreSnapshot``)."""

    @property
    def resource_version(self) -> str: ...
    def items(
        self, namespace: str | None = None, after: Key | None = None
    ) -> Iterator[tuple[Key, bytes]]: ...


class WatchFormat(Protocol):
    """How a view writes events. Views are shared between watches of equal :attr:`key`."""

    @property
    def key(self) -> Hashable: ...

    @property
    def has_headers(self) -> bool:
        """True when a watcher's first event differs from the others (a Table's columns)."""
        ...

    def event(self, type: str, raw: bytes, *, headers: bool) -> bytes:
        """One watch line (with its newline) for an object event."""
        ...

    def bookmark(self, resource_version: str, *, initial_events_end: bool) -> bytes:
        """One BOOKMARK line (with its newline)."""
        ...


_PREFIX = {t: b'{"type":"' + t.encode() + b'","object":' for t in ("ADDED", "MODIFIED", "DELETED")}


@dataclasses.dataclass(frozen=True, slots=True)
class ObjectWatchFormat:
    """Watch events carrying the objects' JSON bytes as cached (``application/json``)."""

    kind: str
    api_version: str

    @property
    def key(self) -> Hashable:
        return ("objects", self.kind, self.api_version)

    @property
    def has_headers(self) -> bool:
        return False

    def event(self, type: str, raw: bytes, *, headers: bool) -> bytes:
        return _PREFIX[type] + raw + b"}\n"

    def bookmark(self, resource_version: str, *, initial_events_end: bool) -> bytes:
        meta: dict[str, Any] = {"resourceVersion": resource_version}
        if initial_events_end:
            meta["annotations"] = {INITIAL_EVENTS_END: "true"}
        obj = {"kind": self.kind, "apiVersion": self.api_version, "metadata": meta}
        return b'{"type":"BOOKMARK","object":' + encode_json(obj) + b"}\n"


class TableWatchFormat:
    """Watch events as one-row Tables (``as=Table``), from rows cached as
    ``{"cells":[...],"metadata":{...}}`` (kubemux's table view). The first event of each
    watcher carries the column definitions, later ones ``null``, as the API server's watch
    encoder does (``NoHeaders`` after the first)."""

    __slots__ = ("_ages", "_defs", "api_version", "include")

    def __init__(
        self,
        columns: Sequence[ColumnLike | Mapping[str, Any]] | bytes,
        include: str = "Metadata",
        api_version: str = TABLE_V1,
    ):
        if include == "Object":
            raise ValueError("rows hold metadata, not objects: includeObject=Object needs objects")
        if isinstance(columns, bytes):
            self._defs = columns
            decoded = orjson.loads(columns) if columns else []
            self._ages = AgeCells.of(decoded if isinstance(decoded, list) else [])
        else:
            self._defs = column_definitions(columns)
            self._ages = AgeCells.of(columns)
        self.include = include
        self.api_version = api_version

    @property
    def key(self) -> Hashable:
        return ("table", self.api_version, self.include, self._defs)

    @property
    def has_headers(self) -> bool:
        return True

    def _table(self, rv: str, rows: bytes, headers: bool) -> bytes:
        return b"".join(
            (
                b'{"kind":"Table","apiVersion":',
                encode_json(self.api_version),
                b',"metadata":{"resourceVersion":',
                encode_json(rv),
                b'},"columnDefinitions":',
                self._defs if headers else b"null",
                b',"rows":[',
                rows,
                b"]}",
            )
        )

    def event(self, type: str, raw: bytes, *, headers: bool) -> bytes:
        cells, meta = split_table_row(raw)
        if self._ages is not None:  # a snapshot's rows were rendered when last sent
            cells = self._ages.refresh(cells, meta)
        row = table_row(cells, meta, self.include, self.api_version)
        return _PREFIX[type] + self._table(raw_resource_version(raw), row, headers) + b"}\n"

    def bookmark(self, resource_version: str, *, initial_events_end: bool) -> bytes:
        meta: dict[str, Any] = {"resourceVersion": resource_version}
        if initial_events_end:
            meta["annotations"] = {INITIAL_EVENTS_END: "true"}
        row = table_row(b"[]", encode_json(meta), "Metadata", self.api_version)
        return b'{"type":"BOOKMARK","object":' + self._table(resource_version, row, False) + b"}\n"
