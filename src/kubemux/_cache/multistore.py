"""One read-only store over several namespaces' stores (users who may see only some)."""

from __future__ import annotations

import builtins
from collections.abc import Iterator, Mapping
from typing import Any, NoReturn

from .._wire.codec import Entry
from .._wire.types import View
from .snapshot import Key
from .store import Indexer, Store
from .table import TableColumn, TableRow, TableStore

__all__ = ["MultiStore", "MultiTableStore"]


class MultiStore(Store):
    """A :class:`Store` view over one store per namespace, each kept by its own informer.

    Reads behave as on a store of the whole resource restricted to :attr:`scope`; an object
    of a namespace outside it reads as absent. Returned by ``registry.watch(...,
    namespaces=[...])``, and when a cluster-wide LIST is forbidden and kubemux falls back to
    the namespaces the user may read (:attr:`reason` says why). Reads count as reads of the
    stores underneath (idle reaping sees them).

    Attributes:
        scope: The namespaces watched, sorted.
        reason: Why this scope was chosen (``""`` when the caller asked for it).
    """

    __slots__ = ("_parts", "reason", "scope")

    def __init__(self, stores: Mapping[str, Store], *, reason: str = "") -> None:
        if not stores:
            raise ValueError("a MultiStore needs at least one namespace")
        first = next(iter(stores.values()))
        super().__init__(first.resource, transform=None)
        self._parts = dict(stores)
        self.scope = tuple(sorted(self._parts))
        self.reason = reason

    def __repr__(self) -> str:
        return f"<MultiStore {self.resource.name} scope={list(self.scope)} objects={len(self)}>"

    @property
    def has_synced(self) -> bool:
        return all(s.has_synced for s in self._parts.values())

    @property
    def writer(self) -> NoReturn:
        """A multi-namespace view has no writer of its own: each store has (:attr:`stores`)."""
        raise TypeError("a MultiStore is written through its stores: store.stores[ns].writer")

    @property
    def history(self) -> NoReturn:
        """A multi-namespace view has no history of its own: each store has (:attr:`stores`)."""
        raise TypeError("a MultiStore has one history per store: store.stores[ns].history")

    def snapshot(self) -> NoReturn:
        """A multi-namespace view has no single resourceVersion: snapshot each store."""
        raise TypeError("a MultiStore has no single resourceVersion: snapshot store.stores[ns]")

    @property
    def stores(self) -> dict[str, Store]:
        """namespace -> its store."""
        return dict(self._parts)

    def _get(self, namespace: str | None, name: str) -> Entry | None:
        part = self._parts.get(namespace or "")
        return None if part is None else part.writer.entry(namespace, name)

    def _entries(self, namespace: str | None) -> builtins.list[Entry]:
        if namespace is not None:
            part = self._parts.get(namespace)
            return [] if part is None else part.writer.entries(namespace)
        out: builtins.list[Entry] = []
        for ns in self.scope:
            out.extend(self._parts[ns].writer.entries(ns))
        return out

    def get(self, namespace: str | None, name: str) -> dict[str, Any] | None:
        part = self._parts.get(namespace or "")
        return None if part is None else part.get(namespace, name)

    def get_raw(self, namespace: str | None, name: str) -> bytes | None:
        part = self._parts.get(namespace or "")
        return None if part is None else part.get_raw(namespace, name)

    def list(self, namespace: str | None = None) -> builtins.list[dict[str, Any]]:
        if namespace is not None:
            part = self._parts.get(namespace)
            return [] if part is None else part.list(namespace)
        return [obj for ns in self.scope for obj in self._parts[ns].list(ns)]

    def list_raw(self, namespace: str | None = None) -> builtins.list[bytes]:
        if namespace is not None:
            part = self._parts.get(namespace)
            return [] if part is None else part.list_raw(namespace)
        return [raw for ns in self.scope for raw in self._parts[ns].list_raw(ns)]

    def keys(self) -> builtins.list[Key]:
        return [key for ns in self.scope for key in self._parts[ns]]

    def namespaces(self) -> builtins.list[str]:
        return [ns for ns in self.scope if self._parts[ns].namespaces()]

    def by_index(self, index: str, value: str) -> builtins.list[dict[str, Any]]:
        return [obj for ns in self.scope for obj in self._parts[ns].by_index(index, value)]

    def add_indexer(self, name: str, indexer: Indexer) -> None:
        for part in self._parts.values():
            part.add_indexer(name, indexer)

    def index_values(self, index: str) -> builtins.list[str]:
        values: set[str] = set()
        for part in self._parts.values():
            values.update(part.index_values(index))
        return sorted(values)

    def __len__(self) -> int:
        return sum(len(part) for part in self._parts.values())

    def __contains__(self, key: object) -> bool:
        if not isinstance(key, tuple) or len(key) != 2:
            return False
        part = self._parts.get(key[0] or "")
        return part is not None and key in part

    def __iter__(self) -> Iterator[Key]:
        return iter(self.keys())


class MultiTableStore(MultiStore):
    """A table view (see :class:`TableStore`) over several namespaces."""

    __slots__ = ()

    view = View.TABLE

    def _tables(self) -> builtins.list[TableStore]:
        return [p for p in self._parts.values() if isinstance(p, TableStore)]

    @property
    def columns(self) -> tuple[TableColumn, ...]:
        """The server's columns (the same for every namespace)."""
        for table in self._tables():
            if table.columns:
                return table.columns
        return ()

    @property
    def is_fallback(self) -> bool:
        return any(t.is_fallback for t in self._tables())

    def rows(self, namespace: str | None = None) -> builtins.list[TableRow]:
        tables = self._parts
        if namespace is not None:
            part = tables.get(namespace)
            return part.rows(namespace) if isinstance(part, TableStore) else []
        return [
            row
            for ns in self.scope
            if isinstance(t := tables[ns], TableStore)
            for row in t.rows(ns)
        ]

    def row(self, namespace: str | None, name: str) -> TableRow | None:
        part = self._parts.get(namespace or "")
        return part.row(namespace, name) if isinstance(part, TableStore) else None
