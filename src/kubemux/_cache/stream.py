"""A store's change stream: what its listeners hear (:class:`StoreListener`).

One thing announces a store's changes: its writer (:class:`~kubemux.StoreWriter`), whoever
writes through it (an informer, a share follower, a fake). Every listener hears every
change in apply order:

- :meth:`~StoreListener.changed` for each watch event applied (the hot path);
- :meth:`~StoreListener.listed` when a full list is swapped in (one step), then its changes
  through :meth:`~StoreListener.announced`, a slice at a time, the event loop running in
  between (a 50k-object relist never stalls it); until a change is announced,
  ``StoreWriter.announced_entries`` reports the object as it was, so a listener that joins
  part-way sees neither a gap nor a duplicate;
- :meth:`~StoreListener.bookmarked` when the resourceVersion moves with no object change;
- :meth:`~StoreListener.cleared` when the store is emptied (its context stopped or reloaded).

The store's event history is one listener (it serves the proxy's watches and resumes); the
registry's publisher is another (subscriptions, the event index, the dashboard).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

import anyio

from .._wire.codec import Entry, StoreChange

__all__ = ["ChangeStream", "StoreListener", "release_sliced"]

log = logging.getLogger(__name__)


class StoreListener:
    """What hears a store's changes: subclass it and override what you need (every method
    does nothing here, but :meth:`announced`, which hands each change to :meth:`changed`).

    Register with ``store.writer.add_listener(listener)``. Each method runs inside the
    writer's call, on the store's event loop: it must be quick and must not raise (one
    that raises is logged and removed).
    """

    __slots__ = ()

    def changed(self, change: StoreChange) -> None:
        """One watch event applied (``ADDED``, ``MODIFIED``, ``DELETED``); by default also
        each change of a list, as it is announced."""

    def listed(
        self, resource_version: str, changes: Sequence[StoreChange], *, relist: bool
    ) -> None:
        """A full list was swapped in at ``resource_version`` (``relist``: over a synced
        store; else the store was empty and not synced). ``changes`` are what a watcher
        would have seen; they follow through :meth:`announced`."""

    def announced(self, changes: Sequence[StoreChange], resource_version: str) -> None:
        """A slice of the last list's changes, in order (``resource_version``: the list's)."""
        for change in changes:
            self.changed(change)

    def bookmarked(self, resource_version: str) -> None:
        """The resourceVersion moved with no object change (a watch bookmark)."""

    def cleared(self) -> None:
        """The store was emptied and is no longer synced."""


class ChangeStream:
    """One store's listeners, and the changes of a list not announced to them yet: the
    store's writer announces through it (the store holds one; nothing else does).

    Every listener hears every change in apply order. One that raises is logged and removed
    (``owner``: the store, named in the log); the others still hear the change.
    """

    __slots__ = ("_owner", "listeners", "on_changed", "unannounced")

    def __init__(self, owner: object) -> None:
        self._owner = owner
        self.listeners: list[StoreListener] = []
        self.on_changed: tuple[Callable[[StoreChange], None], ...] = ()
        """The listeners' bound ``changed``: the hot path loops over it (empty: no cost)."""
        self.unannounced: dict[str, dict[str, StoreChange]] = {}
        """namespace -> name -> a list's change not announced yet (see :meth:`announce`)."""

    def add(self, listener: StoreListener) -> Callable[[], None]:
        """Add ``listener``; the function that removes it (idempotent)."""
        self.listeners.append(listener)
        self.on_changed = (*self.on_changed, listener.changed)

        def remove() -> None:
            self.remove(listener)

        return remove

    def remove(self, listener: StoreListener) -> None:
        if listener in self.listeners:
            i = self.listeners.index(listener)
            del self.listeners[i]
            self.on_changed = (*self.on_changed[:i], *self.on_changed[i + 1 :])

    def tell(self, method: str, *args: Any, **kwargs: Any) -> None:
        """Call ``method`` of every listener (the slow path: lists, bookmarks, clears)."""
        for listener in tuple(self.listeners):
            try:
                getattr(listener, method)(*args, **kwargs)
            except Exception as exc:  # noqa: BLE001 - a listener's bug: logged, removed
                self.failed(listener.changed, exc)

    def failed(self, changed: Callable[[StoreChange], None], exc: Exception) -> None:
        """A listener raised (a bug): it is logged and removed."""
        for listener in self.listeners:
            if listener.changed == changed:
                log.error(
                    "%r: the listener %r raised; it is removed", self._owner, listener, exc_info=exc
                )
                self.remove(listener)
                return

    async def announce(
        self, changes: list[StoreChange], resource_version: str, *, relist: bool, step: int
    ) -> None:
        """A list swapped in: ``listed``, then its changes ``step`` at a time, the event loop
        running between slices; meanwhile :attr:`unannounced` holds the rest. Cancelled
        part-way, the rest is announced at once (listeners are never left behind the store)."""
        self.tell("listed", resource_version, changes, relist=relist)
        if len(changes) <= step:
            self.tell("announced", changes, resource_version)
            return
        pending: dict[str, dict[str, StoreChange]] = {}
        for c in changes:
            bucket = pending.get(c.entry.namespace)
            if bucket is None:
                bucket = pending[c.entry.namespace] = {}
            bucket[c.entry.name] = c
        self.unannounced = pending
        start = 0
        try:
            while start < len(changes):
                part = changes[start : start + step]
                start += step
                for c in part:
                    bucket = pending[c.entry.namespace]
                    del bucket[c.entry.name]
                    if not bucket:
                        del pending[c.entry.namespace]
                self.tell("announced", part, resource_version)
                await anyio.lowlevel.checkpoint()
        finally:
            if self.unannounced is pending:  # (a clear meanwhile: nothing to announce)
                if start < len(changes):  # cancelled part-way: the rest at once
                    self.tell("announced", changes[start:], resource_version)
                self.unannounced = {}

    def announced(self, entries: list[Entry], namespace: str | None) -> list[Entry]:
        """``entries`` (the store's, of ``namespace`` or all) as the listeners have been told
        them: less the changes not announced yet (their old entries instead), sorted."""
        pending = self.unannounced
        if not pending:
            return entries
        out: list[Entry] = []
        for e in entries:
            change = pending.get(e.namespace, {}).get(e.name)
            if change is None:
                out.append(e)
            elif change.type == "MODIFIED" and change.old is not None:
                out.append(change.old)
        for ns, bucket in pending.items():
            if namespace is None or ns == namespace:
                out.extend(c.old for c in bucket.values() if c.type == "DELETED" and c.old)
        out.sort(key=lambda e: (e.namespace, e.name))
        return out


async def release_sliced(changes: list[StoreChange], step: int) -> None:
    """Drop a list's changes a slice at a time. Their entries are theirs alone (the store
    keeps the bytes), so freeing 50k at once would stall the loop ~10 ms."""
    while len(changes) > step:
        del changes[-step:]
        await anyio.lowlevel.checkpoint()
    changes.clear()
