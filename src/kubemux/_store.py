"""The informer's cache: a read-only view keyed by (namespace, name).

Consistency model: a :class:`Store` is eventually consistent with the API server and ordered
per object: every change to one object is applied in the order the server sent it. Reads are
synchronous and never block; they see the state after the last applied event. After a RELIST
the contents are swapped in one step, so a reader never sees half an old list and half a new
one.

Representation: each object is kept as its JSON bytes plus its identity (see
:mod:`kubemux._codec`), so a large cache costs the collector nothing and about the size of the
JSON in memory. :meth:`Store.get` and :meth:`Store.list` decode on read and return fresh dicts
that the caller owns; :meth:`Store.get_raw` and :meth:`Store.list_raw` return the bytes for
callers that pass JSON straight on (a dashboard's HTTP response).
"""

from __future__ import annotations

import builtins
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

import orjson

from ._codec import Entry, decode_entry
from ._resources import Resource

__all__ = ["Indexer", "Key", "Store", "Transform", "drop_managed_fields", "object_key"]

Key = tuple[str, str]
"""(namespace, name); namespace is ``""`` for cluster-scoped objects."""

Transform = Callable[[dict[str, Any]], dict[str, Any]]
Indexer = Callable[[Mapping[str, Any]], Iterable[str]]


def drop_managed_fields(obj: dict[str, Any]) -> dict[str, Any]:
    """The default transform: drop ``metadata.managedFields`` (often half an object's size).

    The store recognises this function and does the same on the raw bytes, without decoding.
    """
    meta = obj.get("metadata")
    if isinstance(meta, dict):
        meta.pop("managedFields", None)
    return obj


def object_key(obj: Mapping[str, Any]) -> Key:
    """The (namespace, name) key of an object."""
    meta = obj.get("metadata") or {}
    return (meta.get("namespace") or "", meta.get("name") or "")


Change3 = tuple[str, Entry, Entry | None]
"""(type, entry, old entry): what one applied event changed."""


class Store:
    """A read-only cache of one resource in one context.

    Args:
        resource: What is cached.
        transform: Applied to every object before it is stored. The default,
            :func:`drop_managed_fields`, runs on the raw bytes; ``None`` stores objects as
            sent; any other function costs a full decode and re-encode per object.
        indexers: Named functions returning index values for an object; query with
            :meth:`by_index`. A namespace index is always present.
    """

    __slots__ = (
        "_by_index",
        "_drop_mf",
        "_indexers",
        "_items",
        "_keyvals",
        "_namespaces",
        "_synced",
        "_transform",
        "_type_prefix",
        "resource",
        "resource_version",
    )

    def __init__(
        self,
        resource: Resource,
        *,
        transform: Transform | None = drop_managed_fields,
        indexers: Mapping[str, Indexer] | None = None,
    ) -> None:
        self.resource = resource
        self.resource_version = ""
        self._drop_mf = transform is drop_managed_fields
        self._transform = None if transform is drop_managed_fields else transform
        self._items: dict[Key, Entry] = {}
        self._namespaces: dict[str, set[Key]] = {}
        self._indexers: dict[str, Indexer] = dict(indexers or {})
        self._by_index: dict[str, dict[str, set[Key]]] = {n: {} for n in self._indexers}
        self._keyvals: dict[Key, tuple[tuple[str, ...], ...]] = {}
        self._synced = False
        self._type_prefix = (
            b'"kind":'
            + orjson.dumps(resource.kind)
            + b',"apiVersion":'
            + orjson.dumps(resource.api_version)
            + b","
            if resource.kind
            else b""
        )

    # ---------------------------------------------------------------- reads
    @property
    def has_synced(self) -> bool:
        """True once the first LIST has been applied."""
        return self._synced

    def get(self, namespace: str | None, name: str) -> dict[str, Any] | None:
        """The object as a fresh dict, or ``None``.

        Use ``None`` or ``""`` as namespace for cluster-scoped objects. Costs one JSON decode.
        """
        entry = self._items.get((namespace or "", name))
        return None if entry is None else entry.decode()

    def get_raw(self, namespace: str | None, name: str) -> bytes | None:
        """The object's JSON bytes, or ``None``. Costs nothing."""
        entry = self._items.get((namespace or "", name))
        return None if entry is None else entry.raw

    def list(self, namespace: str | None = None) -> builtins.list[dict[str, Any]]:
        """All objects, or those of one namespace, sorted by (namespace, name)."""
        return [e.decode() for e in self._entries(namespace)]

    def list_raw(self, namespace: str | None = None) -> builtins.list[bytes]:
        """Like :meth:`list`, as JSON bytes."""
        return [e.raw for e in self._entries(namespace)]

    def _entries(self, namespace: str | None) -> builtins.list[Entry]:
        items = self._items
        keys: Iterable[Key] = items if namespace is None else self._namespaces.get(namespace, ())
        return [items[k] for k in sorted(keys)]

    def keys(self) -> builtins.list[Key]:
        """Every (namespace, name) key, sorted."""
        return sorted(self._items)

    def namespaces(self) -> builtins.list[str]:
        """Namespaces that currently hold at least one object."""
        return sorted(self._namespaces)

    def by_index(self, index: str, value: str) -> builtins.list[dict[str, Any]]:
        """Objects whose indexer ``index`` returned ``value``.

        Raises:
            KeyError: no indexer of that name.
        """
        keys = self._by_index[index].get(value, ())
        return [self._items[k].decode() for k in sorted(keys)]

    def index_values(self, index: str) -> builtins.list[str]:
        """The values an indexer currently holds."""
        return sorted(self._by_index[index])

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, key: object) -> bool:
        return key in self._items

    def __iter__(self) -> Iterator[Key]:
        return iter(self.keys())

    def __repr__(self) -> str:
        return (
            f"<Store {self.resource.name} objects={len(self._items)} "
            f"synced={self._synced} rv={self.resource_version!r}>"
        )

    # ------------------------------------------------------------- mutation
    # Private to the informer.

    def _prepare(self, raw: bytes, *, from_list: bool = False) -> Entry:
        """Turn one object's bytes into an entry (raises msgspec errors on bad input)."""
        return decode_entry(
            raw,
            drop_managed_fields=self._drop_mf,
            transform=self._transform,
            type_prefix=self._type_prefix if from_list else b"",
        )

    def _prepare_object(self, obj: Mapping[str, Any]) -> Entry:
        return self._prepare(orjson.dumps(obj))

    def _index_add(self, key: Key, entry: Entry) -> None:
        self._namespaces.setdefault(key[0], set()).add(key)
        if self._indexers:
            obj = entry.decode()
            vals = tuple(tuple(fn(obj)) for fn in self._indexers.values())
            self._keyvals[key] = vals
            for table, values in zip(self._by_index.values(), vals, strict=True):
                for value in values:
                    table.setdefault(value, set()).add(key)

    def _index_remove(self, key: Key) -> None:
        _discard(self._namespaces, key[0], key)
        if self._indexers:
            vals = self._keyvals.pop(key, ())
            for table, values in zip(self._by_index.values(), vals, strict=False):
                for value in values:
                    _discard(table, value, key)

    def _apply(self, event_type: str, entry: Entry) -> Change3 | None:
        """Apply one watch event; returns what changed, or None if nothing did."""
        if entry.resource_version:
            self.resource_version = entry.resource_version
        key = (entry.namespace, entry.name)
        if event_type == "DELETED":
            old = self._items.pop(key, None)
            if old is None:
                return None
            self._index_remove(key)
            return ("DELETED", entry, old)
        old = self._items.get(key)
        if old is not None:
            self._index_remove(key)
        self._items[key] = entry
        self._index_add(key, entry)
        return ("ADDED" if old is None else "MODIFIED", entry, old)

    def _apply_object(self, event_type: str, obj: Mapping[str, Any]) -> Change3 | None:
        """:meth:`_apply` for a decoded object (tests and static data)."""
        return self._apply(event_type, self._prepare_object(obj))

    def _replace(self, entries: Iterable[Entry], resource_version: str) -> builtins.list[Change3]:
        """Swap in a full list in one step; returns the changes a watcher would have seen.

        Objects missing from the list come back as DELETED (deletes missed while away),
        changed ones (another resourceVersion) as MODIFIED, new ones as ADDED, unchanged ones
        not at all.
        """
        old_items = self._items
        new_items: dict[Key, Entry] = {(e.namespace, e.name): e for e in entries}
        changes: builtins.list[Change3] = []
        # indexes are updated by the difference only: cost grows with what changed
        for key, entry in new_items.items():
            old = old_items.get(key)
            if old is None:
                changes.append(("ADDED", entry, None))
                self._index_add(key, entry)
            elif old.resource_version != entry.resource_version or not entry.resource_version:
                changes.append(("MODIFIED", entry, old))
                if self._indexers:
                    self._index_remove(key)
                    self._index_add(key, entry)
        for key, old in old_items.items():
            if key not in new_items:
                changes.append(("DELETED", old, old))
                self._index_remove(key)
        self._items = new_items
        self.resource_version = resource_version
        self._synced = True
        return changes

    def _clear(self) -> None:
        self._items = {}
        self._namespaces = {}
        self._by_index = {n: {} for n in self._indexers}
        self._keyvals = {}
        self._synced = False


def _discard(table: dict[str, set[Key]], value: str, key: Key) -> None:
    bucket = table.get(value)
    if bucket is not None:
        bucket.discard(key)
        if not bucket:
            del table[value]  # no empty buckets: memory is bounded by live objects
