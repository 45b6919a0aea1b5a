"""The informer's cache: a read-only view keyed by (namespace, name).

Consistency model: a :class:`Store` is eventually consistent with the API server and ordered
per object: every change to one object is applied in the order the server sent it. Reads are
synchronous and never block; they see the state after the last applied event. After a RELIST
the contents are swapped in one step, so a reader never sees half an old list and half a new
one.

Objects returned by reads are the cached values themselves: treat them as read-only (copy
before changing). Mutation is private to the informer.
"""

from __future__ import annotations

import builtins
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from ._resources import Resource

__all__ = ["Indexer", "Key", "Store", "Transform", "drop_managed_fields", "object_key"]

Key = tuple[str, str]
"""(namespace, name); namespace is ``""`` for cluster-scoped objects."""

Transform = Callable[[dict[str, Any]], dict[str, Any]]
Indexer = Callable[[Mapping[str, Any]], Iterable[str]]


def drop_managed_fields(obj: dict[str, Any]) -> dict[str, Any]:
    """The default transform: drop ``metadata.managedFields`` (often half an object's size)."""
    meta = obj.get("metadata")
    if isinstance(meta, dict):
        meta.pop("managedFields", None)
    return obj


def object_key(obj: Mapping[str, Any]) -> Key:
    """The (namespace, name) key of an object."""
    meta = obj.get("metadata") or {}
    return (meta.get("namespace") or "", meta.get("name") or "")


def _rv(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    rv = meta.get("resourceVersion")
    return rv if isinstance(rv, str) else ""


class Store:
    """A read-only cache of one resource in one context.

    Args:
        resource: What is cached.
        transform: Applied to every object before it is stored (default: drop managedFields).
        indexers: Named functions returning index values for an object; query with
            :meth:`by_index`. A namespace index is always present.
    """

    __slots__ = (
        "_by_index",
        "_indexers",
        "_items",
        "_namespaces",
        "_synced",
        "_transform",
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
        self._transform = transform
        self._items: dict[Key, dict[str, Any]] = {}
        self._namespaces: dict[str, set[Key]] = {}
        self._indexers: dict[str, Indexer] = dict(indexers or {})
        self._by_index: dict[str, dict[str, set[Key]]] = {n: {} for n in self._indexers}
        self._synced = False

    # ---------------------------------------------------------------- reads
    @property
    def has_synced(self) -> bool:
        """True once the first LIST has been applied."""
        return self._synced

    def get(self, namespace: str | None, name: str) -> dict[str, Any] | None:
        """The object, or ``None``. Use ``None`` or ``""`` as namespace for cluster-scoped ones."""
        return self._items.get((namespace or "", name))

    def list(self, namespace: str | None = None) -> builtins.list[dict[str, Any]]:
        """All objects, or those of one namespace, sorted by (namespace, name)."""
        if namespace is None:
            keys: Iterable[Key] = self._items.keys()
        else:
            keys = self._namespaces.get(namespace, ())
        return [self._items[k] for k in sorted(keys)]

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
        return [self._items[k] for k in sorted(keys)]

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
    # Private to the informer. Each returns what changed, as (type, object, old) triples.

    def _prepare(self, obj: dict[str, Any]) -> dict[str, Any]:
        return self._transform(obj) if self._transform is not None else obj

    def _index_add(self, key: Key, obj: Mapping[str, Any]) -> None:
        self._namespaces.setdefault(key[0], set()).add(key)
        for name, fn in self._indexers.items():
            table = self._by_index[name]
            for value in fn(obj):
                table.setdefault(value, set()).add(key)

    def _index_remove(self, key: Key, obj: Mapping[str, Any]) -> None:
        _discard(self._namespaces, key[0], key)
        for name, fn in self._indexers.items():
            table = self._by_index[name]
            for value in fn(obj):
                _discard(table, value, key)

    def _upsert(self, obj: dict[str, Any]) -> tuple[str, dict[str, Any], dict[str, Any] | None]:
        obj = self._prepare(obj)
        key = object_key(obj)
        old = self._items.get(key)
        if old is not None:
            self._index_remove(key, old)
        self._items[key] = obj
        self._index_add(key, obj)
        return ("ADDED" if old is None else "MODIFIED", obj, old)

    def _delete(self, obj: Mapping[str, Any]) -> tuple[str, dict[str, Any], dict[str, Any]] | None:
        key = object_key(obj)
        old = self._items.pop(key, None)
        if old is None:
            return None
        self._index_remove(key, old)
        return ("DELETED", old, old)

    def _apply(
        self, event_type: str, obj: dict[str, Any]
    ) -> tuple[str, dict[str, Any], dict[str, Any] | None] | None:
        """Apply one watch event; returns (type, object, old object) or None if nothing changed."""
        rv = _rv(obj)
        if rv:
            self.resource_version = rv
        if event_type == "DELETED":
            deleted = self._delete(obj)
            if deleted is None:
                return None
            # report the server's final state of the object, with the old one beside it
            return ("DELETED", self._prepare(obj), deleted[2])
        return self._upsert(obj)

    def _replace(
        self, objects: Iterable[dict[str, Any]], resource_version: str
    ) -> builtins.list[tuple[str, dict[str, Any], dict[str, Any] | None]]:
        """Swap in a full list; returns the changes a watcher would have seen.

        Objects missing from the list come back as DELETED (deletes missed while away),
        changed ones (different resourceVersion) as MODIFIED, new ones as ADDED, unchanged
        ones not at all. Objects must already be transformed (see :meth:`_prepare`).
        """
        old_items = self._items
        new_items: dict[Key, dict[str, Any]] = {object_key(o): o for o in objects}
        changes: builtins.list[tuple[str, dict[str, Any], dict[str, Any] | None]] = []
        for key, obj in new_items.items():
            old = old_items.get(key)
            if old is None:
                changes.append(("ADDED", obj, None))
            elif _rv(old) != _rv(obj) or not _rv(obj):
                changes.append(("MODIFIED", obj, old))
            else:
                new_items[key] = old  # keep the identical cached object
        for key, old in old_items.items():
            if key not in new_items:
                changes.append(("DELETED", old, old))
        self._items = new_items
        self._namespaces = {}
        self._by_index = {n: {} for n in self._indexers}
        for key, obj in new_items.items():
            self._index_add(key, obj)
        self.resource_version = resource_version
        self._synced = True
        return changes

    def _clear(self) -> None:
        self._items = {}
        self._namespaces = {}
        self._by_index = {n: {} for n in self._indexers}
        self._synced = False


def _discard(table: dict[str, set[Key]], value: str, key: Key) -> None:
    bucket = table.get(value)
    if bucket is not None:
        bucket.discard(key)
        if not bucket:
            del table[value]  # no empty buckets: memory is bounded by live objects
