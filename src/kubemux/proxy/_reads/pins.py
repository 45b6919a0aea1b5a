"""What continue tokens pin: a shared base snapshot and a prefix of the changes after it.

A store snapshot shares the store's per-namespace buckets until the store changes one:
then the store copies that bucket (copy-on-write), and a snapshot kept alive keeps the old
copy, and its sorted names. Pinning a snapshot per paginated LIST of a changing namespace
therefore kept one bucket copy per pin (1,024 ``limit=1`` LISTs of a changing 20k-pod
namespace: +407 MB, renewable by the client).

Here pins share structure instead. A :class:`PinSource` (one per served store) keeps one
*base* snapshot and a :class:`ChangeLog`: every change of the store after the base, in
apply order (the history's listener appends them). A pin is the base plus the first *n*
changes (:class:`PinnedView`): O(1) to take, nothing copied, exactly the store as it was
when the pin was taken (the log holds every change between). Pages are read by merging
the base's sorted items with the pinned prefix's latest state of each changed object.

A base lives as long as a pin reads it (the source holds it weakly); once its log holds
more than ``max(1024, objects / 8)`` changes the next pin starts a new base, so reading a
page costs at most that many more steps, and the bases alive are few (one per that many
changes within the pins' five minutes). A RESET (the store cleared) ends the log.
"""

from __future__ import annotations

import bisect
import weakref
from collections.abc import Iterator
from typing import Any, Protocol

__all__ = ["ChangeLog", "PinSource", "PinnedView", "view_at"]

Key = tuple[str, str]
MIN_REBASE = 1024


class SnapshotLike(Protocol):
    resource_version: str

    def __len__(self) -> int: ...
    def get_raw(self, namespace: str | None, name: str) -> bytes | None: ...
    def items(
        self, namespace: str | None = None, after: Key | None = None
    ) -> Iterator[tuple[Key, bytes]]: ...


class ChangeLog:
    """A base snapshot and the changes applied after it, in order (see the module)."""

    __slots__ = ("__weakref__", "base", "changes", "closed", "counts")

    def __init__(self, base: SnapshotLike) -> None:
        self.base = base
        self.changes: list[tuple[Key, bytes | None]] = []  # None: deleted
        self.closed = False
        self.counts: dict[str | None, int] = {}  # the base's objects per namespace

    def base_count(self, namespace: str | None) -> int:
        found = self.counts.get(namespace)
        if found is None:
            if namespace is None:
                found = len(self.base)
            else:
                found = sum(1 for _ in self.base.items(namespace))
            self.counts[namespace] = found
        return found


class PinnedView:
    """The store as it was when pinned: a base and the first ``length`` changes of its log.
    Reads like a store snapshot (``resource_version``, ``items``, ``len``)."""

    __slots__ = ("_length", "_log", "resource_version")

    def __init__(self, log: ChangeLog, length: int, resource_version: str) -> None:
        self._log = log
        self._length = length
        self.resource_version = resource_version

    def __repr__(self) -> str:
        return f"<PinnedView rv={self.resource_version!r} changes={self._length}>"

    def _overlay(self, namespace: str | None) -> dict[Key, bytes | None]:
        changes = self._log.changes
        overlay: dict[Key, bytes | None] = {}
        for i in range(self._length):
            key, raw = changes[i]
            if namespace is None or key[0] == namespace:
                overlay[key] = raw
        return overlay

    def __len__(self) -> int:
        return self.count(None)

    def count(self, namespace: str | None) -> int:
        """Objects in ``namespace`` (None: all) at the pin."""
        base = self._log.base
        total = self._log.base_count(namespace)
        for (ns, name), raw in self._overlay(namespace).items():
            was = base.get_raw(ns or None, name) is not None
            total += (raw is not None) - was
        return total

    def items(
        self, namespace: str | None = None, after: Key | None = None
    ) -> Iterator[tuple[Key, bytes]]:
        """``((namespace, name), bytes)`` in the API's order, strictly after ``after``, as
        a store snapshot's ``items``."""
        base_items = self._log.base.items(namespace, after)
        if not self._length:
            yield from base_items
            return
        overlay = self._overlay(namespace)
        changed = sorted(overlay)
        i = bisect.bisect_right(changed, after) if after is not None else 0
        for key, raw in base_items:
            while i < len(changed) and changed[i] < key:
                added = overlay[changed[i]]
                if added is not None:
                    yield changed[i], added
                i += 1
            if key in overlay:
                continue  # the overlay has its state at the pin (or its absence)
            yield key, raw
        for key in changed[i:]:
            kept = overlay[key]
            if kept is not None:
                yield key, kept


class PinSource:
    """Pins of one store (see the module docstring): feed it the store's history events
    (:meth:`on_event`), and :meth:`pin` a snapshot taken at the same instant."""

    __slots__ = ("_log",)

    def __init__(self) -> None:
        self._log: weakref.ref[ChangeLog] | None = None

    def on_event(self, event: Any) -> None:
        log = self._log() if self._log is not None else None
        if log is None:
            return
        kind = event.type
        if kind == "RESET":
            log.closed = True
            self._log = None
        elif kind in ("ADDED", "MODIFIED"):
            log.changes.append(((event.namespace, event.name), event.raw))
        elif kind == "DELETED":
            log.changes.append(((event.namespace, event.name), None))

    def pin(self, snapshot: SnapshotLike) -> PinnedView:
        """A view equal to ``snapshot`` (the store now) that shares structure with the other
        pins. Call it in the same synchronous step as taking ``snapshot``."""
        log = self._log() if self._log is not None else None
        if log is None or log.closed or len(log.changes) > max(MIN_REBASE, len(snapshot) // 8):
            log = ChangeLog(snapshot)
            self._log = weakref.ref(log)
        return PinnedView(log, len(log.changes), snapshot.resource_version)


def view_at(snapshot: SnapshotLike, history: Any, rv: int) -> PinnedView | None:
    """The store as it was at ``rv`` (an Exact LIST of a version the cache has passed):
    ``snapshot`` (the store now) with the changes after ``rv`` undone, from the store's
    ``history`` (:meth:`~kubemux._cache.history.EventHistory.undo_since`); None when the
    history cannot tell. Call it in the same synchronous step as taking ``snapshot``."""
    undo = history.undo_since(rv)
    if undo is None:
        return None
    log = ChangeLog(snapshot)
    log.changes = [((namespace, name), raw) for namespace, name, raw in undo]
    return PinnedView(log, len(log.changes), str(rv))
