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

from collections.abc import Sequence

from .._wire.codec import StoreChange

__all__ = ["StoreListener"]


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
