"""The stores the proxy serves reads from, each with its watch broadcaster and freshness.

A :class:`ServedStore` wraps one informer's store (cluster-wide, or one namespace of a
limited user's fallback): its :class:`~._watch.WatchBroadcaster` on the store's event
history (one history listener per watch view, however many downstream watches), the
bounded waits for a resourceVersion, and what the cache knows of its own freshness: when it
last heard from the API server (an event, a bookmark, or its LIST). :class:`ServedStores`
keeps one per store; a store that is cleared (its context stopped or reloaded: the
history's ``RESET``) is dropped with its broadcaster, whose watches end.

Freshness is "as fresh as the watch": the cache has applied everything the API server sent
up to :attr:`ServedStore.resource_version`; how long ago it last heard from it
(:attr:`ServedStore.lag`) is an upper bound of how stale it may be, not a measure of it (a
quiet resource hears only bookmarks, about once a minute from kube-apiserver).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterator
from typing import Any

import anyio

from ..._cache.store import Store
from ..._resources import Resource
from ..._wire.types import View
from ..._wire.versions import rv_int
from .._query.options import wait_for_resource_version
from .._watch.watch import WatchBroadcaster, WatchLimits
from .pins import PinSource

__all__ = ["ServedStatus", "ServedStore", "ServedStores"]


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class ServedStatus:
    """One store the proxy serves from, for a UI (``Proxy.status()``).

    Attributes:
        context: The kubeconfig context.
        resource: The resource's full name (``pods``, ``deployments.apps``).
        view: ``"objects"`` or ``"table"``.
        namespace: The namespace of a limited user's per-namespace store; None for the
            cluster-wide one.
        resource_version: The version the cache is at (the API server's).
        lag: Seconds since the cache last heard from the API server (an event, a bookmark
            or its LIST): how stale it may be at most, as far as the proxy can tell.
        watches: Downstream watches served from it now.
        views: Of which distinct (format, selector) views (one history listener each).
    """

    context: str
    resource: str
    view: View
    namespace: str | None
    resource_version: str
    lag: float
    watches: int
    views: int


class ServedStore:
    """One store served by the proxy (see the module docstring).

    Args:
        context: The context the store belongs to.
        store: The informer's store (a plain :class:`~kubemux.Store` or
            :class:`~kubemux.TableStore`, never a MultiStore: use its per-namespace stores).
        view: ``"objects"`` or ``"table"``.
        namespace: The namespace the store holds alone (a fallback's part), or None.
        settings: The watch broadcaster's settings.
        heard: Wall-clock time the informer last heard from its API server, if known.
        on_reset: Called once when the store is cleared.
    """

    __slots__ = (
        "_on_reset",
        "_remove",
        "broadcaster",
        "cleared",
        "closed",
        "context",
        "history",
        "last_heard",
        "namespace",
        "pins",
        "shown",
        "store",
        "view",
    )

    def __init__(
        self,
        context: str,
        store: Store,
        view: View,
        *,
        namespace: str | None = None,
        settings: WatchLimits | None = None,
        heard: float | None = None,
        on_reset: Callable[[ServedStore], None] | None = None,
    ) -> None:
        self.context = context
        self.store = store
        self.view = view
        self.namespace = namespace
        self.history: Any = store.history  # records from now on (see Store.history)
        self.broadcaster = WatchBroadcaster(self.history, store.snapshot, self.current_rv, settings)
        self.last_heard = heard if heard is not None else time.time()
        self.closed = False
        self.cleared = False  # closed by a RESET: the store was cleared (stopped, reloaded)
        self.pins = PinSource()  # what continue tokens pin, sharing structure
        self.shown = 0  # the highest version answered from it: it must never go back
        self._on_reset = on_reset
        self._remove = self.history.add_listener(self._on_event)

    def __repr__(self) -> str:
        return (
            f"<ServedStore {self.context!r} {self.resource.name} {self.view} "
            f"rv={self.store.resource_version!r} {self.broadcaster!r}>"
        )

    @property
    def resource(self) -> Resource:
        return self.store.resource

    @property
    def resource_version(self) -> str:
        """The version the store is at, as the API server wrote it."""
        return self.store.resource_version

    def current_rv(self) -> int:
        """:attr:`resource_version` as an integer."""
        return rv_int(self.store.resource_version) or 0  # 0: not a decimal one

    @property
    def lag(self) -> float:
        """Seconds since the store last heard from the API server (see the module)."""
        return max(0.0, time.time() - self.last_heard)

    def snapshot(self) -> Any:
        """The store's immutable snapshot now (``store.snapshot()``)."""
        return self.store.snapshot()

    def touch(self) -> None:
        """Count a use of the store (the registry reaps stores nobody reads)."""
        self.store.get_raw("", "")

    def _on_event(self, event: Any) -> None:
        self.last_heard = time.time()
        self.pins.on_event(event)
        if event.type == "RESET":
            self.cleared = True
            self.close()

    def close(self) -> None:
        """End every watch and stop listening (idempotent)."""
        if self.closed:
            return
        self.closed = True
        self._remove()
        self.broadcaster.close()
        if self._on_reset is not None:
            self._on_reset(self)

    async def wait_for(self, target: int, wait_timeout: float) -> int:
        """Wait until the store has reached ``target``; the version it is at.

        Raises:
            ProxyStatusError: 504 "Too large resource version" after ``wait_timeout``.

        Cancellation: the wait's listener is removed and the cancellation propagates.
        """
        return await wait_for_resource_version(self.history, self.current_rv, target, wait_timeout)

    async def wait_until(self, done: Callable[[], bool], wait_timeout: float) -> bool:
        """Wait, at most ``wait_timeout`` seconds, until ``done()`` holds (checked after each
        change of the store); whether it does.

        Cancellation: the wait's listener is removed and the cancellation propagates.
        """
        if done():
            return True
        changed = anyio.Event()
        remove = self.history.add_listener(lambda _event: changed.set())
        try:
            with anyio.move_on_after(wait_timeout):
                while not done():
                    await changed.wait()
                    changed = anyio.Event()
        finally:
            remove()
        return done()

    def status(self) -> ServedStatus:
        return ServedStatus(
            context=self.context,
            resource=self.resource.name,
            view=self.view,
            namespace=self.namespace,
            resource_version=self.store.resource_version,
            lag=round(self.lag, 3),
            watches=self.broadcaster.watchers,
            views=self.broadcaster.views,
        )


class ServedStores:
    """One :class:`ServedStore` per store the proxy serves from; a cleared store's is
    dropped (its watches end).

    Args:
        settings: The watch broadcasters' settings.
        max_stores: Most stores kept; past it, those without watches are dropped (the
            registry has let them go, or will build them again).
    """

    def __init__(self, settings: WatchLimits | None = None, *, max_stores: int = 4096) -> None:
        self.settings = settings or WatchLimits()
        self.max_stores = max_stores
        self._served: dict[int, ServedStore] = {}  # id(store) -> ServedStore
        self.on_cleared: Callable[[ServedStore], None] | None = None  # a store's RESET

    def __len__(self) -> int:
        return len(self._served)

    def __iter__(self) -> Iterator[ServedStore]:
        return iter(list(self._served.values()))

    def get(
        self,
        context: str,
        store: Store,
        view: View,
        *,
        namespace: str | None = None,
        heard: Callable[[], float | None] | None = None,
    ) -> ServedStore:
        """The store's :class:`ServedStore`, made on first use (``heard`` then says when
        its informer last heard from the API server)."""
        served = self._served.get(id(store))
        if served is not None and served.store is store and not served.closed:
            return served
        if len(self._served) >= self.max_stores:
            self._prune()
        served = ServedStore(
            context,
            store,
            view,
            namespace=namespace,
            settings=self.settings,
            heard=heard() if heard is not None else None,
            on_reset=self._drop,
        )
        self._served[id(store)] = served
        return served

    def _drop(self, served: ServedStore) -> None:
        if self._served.get(id(served.store)) is served:
            del self._served[id(served.store)]
        if served.cleared and self.on_cleared is not None:
            self.on_cleared(served)

    def _prune(self) -> None:
        for served in list(self._served.values()):
            if not served.broadcaster.watchers:
                served.close()

    def close(self) -> None:
        """End every watch and forget every store."""
        for served in list(self._served.values()):
            served.close()

    def status(self) -> tuple[ServedStatus, ...]:
        return tuple(s.status() for s in self._served.values())
