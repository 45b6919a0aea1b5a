"""Immutable views of a store at one resourceVersion (:class:`StoreSnapshot`).

A store keeps one dict of objects per namespace (a *bucket*). A snapshot copies the outer
dict only (O(namespaces)) and shares the buckets; the store's writer copies a bucket the
first time it changes it after a snapshot was taken (copy-on-write, O(that bucket) once per
snapshot), so a snapshot never sees a later change and taking one never copies the objects.
Taking a snapshot of a store that has not changed since the last one returns that one.

Reading in order: a bucket's names are sorted when a snapshot is first read in order, and
the sorted list is kept beside the store for as long as the bucket is the store's (a bucket
shared with a snapshot is never changed again: the writer copies it), so paging through a
large namespace sorts it once, not per page.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator

from .._wire.codec import Entry

__all__ = ["Key", "SortedNames", "StoreSnapshot"]

Key = tuple[str, str]
"""(namespace, name); namespace is ``""`` for cluster-scoped objects."""

Bucket = dict[str, "bytes | Entry"]
SortedNames = dict[str, tuple[Bucket, list[str]]]
"""namespace -> (the bucket sorted, its names in order): kept by the store, shared by its
snapshots (an entry holds only while the bucket is the one a snapshot has)."""


class StoreSnapshot:
    """The objects of a store at one instant, as bytes; immutable, cheap to take.

    Taken with :meth:`kubemux.Store.snapshot`. It keeps the objects of that instant alive
    while it is referenced (the bytes are shared with the store, not copied; a bucket
    changed since is the store's copy).

    Attributes:
        resource_version: The store's resourceVersion at that instant, as the server sent it.
    """

    __slots__ = ("_count", "_items", "_namespaces", "_sorted", "resource_version")

    def __init__(
        self,
        items: dict[str, Bucket],
        count: int,
        resource_version: str,
        sorted_names: SortedNames,
    ) -> None:
        self._items = items
        self._count = count
        self.resource_version = resource_version
        self._sorted = sorted_names
        self._namespaces: list[str] | None = None

    def __len__(self) -> int:
        return self._count

    def __repr__(self) -> str:
        return f"<StoreSnapshot objects={self._count} rv={self.resource_version!r}>"

    def get_raw(self, namespace: str | None, name: str) -> bytes | None:
        """An object's bytes, or None. ``None`` or ``""`` for a cluster-scoped object."""
        bucket = self._items.get(namespace or "")
        kept = None if bucket is None else bucket.get(name)
        return kept if kept is None or isinstance(kept, bytes) else kept.raw

    def namespaces(self) -> list[str]:
        """The namespaces holding objects, sorted."""
        if self._namespaces is None:
            self._namespaces = sorted(self._items)
        return self._namespaces

    def items(
        self, namespace: str | None = None, after: Key | None = None
    ) -> Iterator[tuple[Key, bytes]]:
        """``((namespace, name), bytes)`` sorted by namespace then name (in one namespace,
        if given), starting strictly after ``after`` (for pagination)."""
        if namespace is not None:
            spaces = [namespace] if namespace in self._items else []
        else:
            spaces = self.namespaces()
        start = 0
        if after is not None:
            start = bisect.bisect_left(spaces, after[0])
        for i in range(start, len(spaces)):
            ns = spaces[i]
            if after is not None and ns < after[0]:
                continue
            bucket = self._items[ns]
            names = self._names(ns, bucket)
            first = (
                bisect.bisect_right(names, after[1]) if after is not None and ns == after[0] else 0
            )
            for j in range(first, len(names)):
                name = names[j]
                kept = bucket[name]
                yield (ns, name), kept if isinstance(kept, bytes) else kept.raw

    def _names(self, ns: str, bucket: Bucket) -> list[str]:
        cached = self._sorted.get(ns)
        if cached is not None and cached[0] is bucket:
            return cached[1]
        names = sorted(bucket)
        self._sorted[ns] = (bucket, names)
        return names
