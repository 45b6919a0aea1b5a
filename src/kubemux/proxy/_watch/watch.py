"""Downstream watches: one view per (source, format, selector), each event encoded once and
the same bytes written to every watcher of the view, as kube-apiserver's cacher does with
its ``cachingObject``.

A :class:`WatchBroadcaster` sits on one resource's event history (the store's
``EventHistory``: ``since(rv)`` and synchronous listeners called in apply order). A watch
joins a *view* (its format and its filter); the view is one history listener that turns each
change into what its watchers see (an object that enters the selector arrives as ADDED, one
that leaves it as DELETED with its last state at the event's resourceVersion, as the cacher's
``convertToWatchEvent`` does), encodes it once, and appends the same ``bytes`` to each
watcher's buffer. Appending never blocks and never waits: the informer applying the change
is not slowed down by any client.

A view wakes its watchers at most once per :attr:`WatchLimits.write_interval` (50 ms): an
event after a quiet spell goes out at once, events closer together than that go out in one
write. At 100 events/s to 1,000 watchers a write per event is 100,000 TLS records and
syscalls a second, which is most of what a watch costs; batching them is what lets one
process serve that many.

Each watcher has a bounded buffer (:attr:`WatchLimits.max_buffered_events`). A watcher
that falls that far behind is cut off, as the cacher cuts a watcher it cannot hand an event
to: it gets no further events, what it has buffered is still written (a consistent prefix),
and its stream ends; the client re-watches from the last resourceVersion it saw (client-go
does). Memory per watcher is its buffer of references to shared bytes.

Where a watch starts (:class:`~._rv.WatchPlan`): the current objects as ADDED (from a store
snapshot taken in the same synchronous step as joining the view, so nothing is missed or
sent twice), optionally followed by the BOOKMARK annotated ``k8s.io/initial-events-end:
"true"``; or the history's events after a resourceVersion (410 Expired as an ERROR event when
the history no longer holds it: ``too old resource version: N (M)``); or just what comes
next. BOOKMARKs go out every :attr:`WatchLimits.bookmark_period` (60 s, the cacher's) and
2 s before the watch's deadline when the client allows them. A ``RESET`` from the history
(the store was cleared: its context stopped or reloaded) ends every watch after its buffer.

What a view reads and how it writes events (objects or Table rows): :mod:`.formats`;
the watcher, the view and the settings: :mod:`.views`.
This module knows nothing of HTTP: :meth:`WatchBroadcaster.serve` hands byte chunks to an
async ``send`` callable.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable, Hashable, Sequence

import anyio

from ..._wire.versions import rv_int
from .._api.pace import Pacer
from .._api.statuses import ProxyStatusError, expired
from .._query.options import WatchPlan, WatchStart, wait_for_resource_version
from .._query.selectors import ObjectFilter
from .flow import Flow, Sink
from .formats import (
    INITIAL_EVENTS_END,
    EventHistoryLike,
    HasOldest,
    HistoryEventLike,
    ObjectWatchFormat,
    SnapshotLike,
    TableWatchFormat,
    WatchFormat,
)
from .pump import Pump
from .views import WatchEnd, Watcher, WatchLimits, WatchView, line_for

__all__ = [
    "INITIAL_EVENTS_END",
    "EventHistoryLike",
    "HistoryEventLike",
    "ObjectWatchFormat",
    "SnapshotLike",
    "TableWatchFormat",
    "WatchBroadcaster",
    "WatchEnd",
    "WatchFormat",
    "WatchLimits",
]

Detach = Callable[[], tuple[Sink, Callable[[], None], Callable[[], None]]]
"""What gives a watch its :class:`~.flow.Sink`, its ``touch`` and its ``release``."""


# ---------------------------------------------------------------------------- broadcaster
class WatchBroadcaster:
    """Serves every downstream watch of one resource's cache.

    Args:
        history: The store's event history.
        snapshot: Takes an immutable snapshot of the store (for initial events).
        current_rv: The store's resourceVersion now, as an int.
        settings: Buffers and periods.
    """

    def __init__(
        self,
        history: EventHistoryLike,
        snapshot: Callable[[], SnapshotLike],
        current_rv: Callable[[], int],
        settings: WatchLimits | None = None,
    ):
        self.history = history
        self.snapshot = snapshot
        self.current_rv = current_rv
        self.settings = settings or WatchLimits()
        self._views: dict[tuple[Hashable, Hashable], WatchView] = {}
        self._watchers = 0
        self._closed = False

    def __repr__(self) -> str:
        return f"<WatchBroadcaster views={len(self._views)} watchers={self._watchers}>"

    @property
    def views(self) -> int:
        """Views with at least one watcher (each is one history listener)."""
        return len(self._views)

    @property
    def watchers(self) -> int:
        """Watches being served."""
        return self._watchers

    def drop_view(self, view: WatchView) -> None:
        if self._views.get(view.key) is view:
            del self._views[view.key]

    def close(self) -> None:
        """End every watch (each writes what it has buffered, then ends :attr:`CLOSED`);
        new watches end at once."""
        self._closed = True
        for view in list(self._views.values()):
            for watcher in list(view.watchers):
                watcher.end(WatchEnd.CLOSED)
            view.watchers.clear()
            view.close()

    def _view(self, fmt: WatchFormat, filt: ObjectFilter) -> WatchView:
        key = (fmt.key, filt.key)
        view = self._views.get(key)
        if view is None:
            view = self._views[key] = WatchView(
                self.history, self.current_rv, self.settings, fmt, filt, self.drop_view
            )
        return view

    async def serve(
        self,
        plan: WatchPlan,
        fmt: WatchFormat,
        filt: ObjectFilter,
        send: Callable[[bytes], Awaitable[None]],
        *,
        watch_timeout: float,
        flow: Flow | None = None,
        detach: Detach | None = None,
    ) -> WatchEnd:
        """Serve one watch until it ends; every line goes through ``send``.

        Args:
            plan: Where it starts (:func:`~._rv.plan_watch`).
            fmt: How events are written (views are shared by format and filter).
            filt: What it selects.
            send: Writes one chunk of lines to the client (it may block: only this watch
                waits, others and the store go on).
            watch_timeout: Its lifetime in seconds (:func:`~._rv.watch_timeout`).
            flow: Its budget and pulse, which the write side keeps (``send`` reports its
                writes there; a new one from the settings by default).
            detach: Once the starting point is written, gives the :class:`~.flow.Sink`
                the rest goes to without this task (a :class:`~.pump.Pump`; then
                :attr:`WatchEnd.DETACHED` is returned), what counts a write as a use, and
                what to call when the watch ends.

        Returns:
            Why it ended. A client that goes away shows as ``send`` raising, which
            propagates.

        Cancellation: the watch leaves its view and the cancellation propagates.
        """
        deadline = asyncio.get_running_loop().time() + watch_timeout
        if self._closed:
            return WatchEnd.CLOSED
        if plan.start is WatchStart.INITIAL and plan.resource_version > self.current_rv():
            try:
                with anyio.fail_after(max(0.0, deadline - anyio.current_time())):
                    await wait_for_resource_version(
                        self.history,
                        self.current_rv,
                        plan.resource_version,
                        self.settings.wait_timeout,
                    )
            except ProxyStatusError as exc:
                await send(exc.watch_event())
                return WatchEnd.ERROR
            except TimeoutError:
                return WatchEnd.TIMEOUT
        if flow is None:
            flow = Flow(self.settings.max_buffered_bytes, self.settings.idle_timeout)
        # one synchronous step: take the starting point and join the view
        view = self._view(fmt, filt)
        snapshot: SnapshotLike | None = None
        backlog: Sequence[HistoryEventLike] = ()
        if plan.start is WatchStart.INITIAL:
            snapshot = self.snapshot()
            watcher = Watcher(rv_int(snapshot.resource_version) or 0, flow)
        elif plan.start is WatchStart.SINCE:
            events = self.history.since(plan.resource_version)
            if events is None:
                if not view.watchers:
                    view.close()
                await send(self._too_old(plan.resource_version))
                return WatchEnd.EXPIRED
            backlog = events
            watcher = Watcher(max(plan.resource_version, events[-1].rv if events else 0), flow)
        else:
            watcher = Watcher(self.current_rv(), flow)
        view.add(watcher)
        self._watchers += 1
        end = None
        try:
            end = await self._write(watcher, view, plan, snapshot, backlog, send, deadline, detach)
            return end
        finally:
            if end is not WatchEnd.DETACHED:
                self._leave(watcher, view)

    def _ended(
        self, watcher: Watcher, view: WatchView, release: Callable[[], None], why: object
    ) -> None:
        """A detached watch ended (its pump's ``on_end``)."""
        self._leave(watcher, view)
        release()

    def _leave(self, watcher: Watcher, view: WatchView) -> None:
        self._watchers -= 1
        if watcher in view.watchers:
            view.discard(watcher)

    def _too_old(self, rv: int) -> bytes:
        history = self.history
        if isinstance(history, HasOldest):
            oldest = history.oldest_resource_version
        else:  # the history does not say: the version the cache is at
            oldest = self.current_rv()
        return expired(f"too old resource version: {rv} ({oldest})").watch_event()

    async def _write(
        self,
        watcher: Watcher,
        view: WatchView,
        plan: WatchPlan,
        snapshot: SnapshotLike | None,
        backlog: Sequence[HistoryEventLike],
        send: Callable[[bytes], Awaitable[None]],
        deadline: float,
        detach: Detach | None,
    ) -> WatchEnd:
        fmt = view.fmt
        settings = self.settings
        chunk: list[bytes] = []
        size = 0

        async def flush() -> None:
            nonlocal size
            if chunk:
                data = b"".join(chunk)
                chunk.clear()
                size = 0
                await send(data)

        async def put(line: bytes) -> None:
            nonlocal size
            chunk.append(line)
            size += len(line)
            watcher.started = True
            if size >= settings.chunk_bytes:
                await flush()

        # the starting point: the snapshot's objects, or the history's events after N
        if snapshot is not None:
            match = None if view.filter.is_everything else view.filter.matches_raw
            namespace = view.filter.namespace
            pacer = Pacer(settings.scan_slice)  # a selector looks at every object: in slices
            async for _key, raw in pacer.paced(snapshot.items(namespace)):
                if match is not None and not match(raw):
                    continue
                await put(fmt.event("ADDED", raw, headers=not watcher.started))
                if anyio.current_time() >= deadline:
                    await flush()
                    return WatchEnd.TIMEOUT
            if plan.initial_events_end:
                await put(fmt.bookmark(snapshot.resource_version, initial_events_end=True))
        for event in backlog:
            item = view.render(event)
            if item is not None:
                await put(line_for(item, watcher))
        await flush()
        if detach is not None:  # the rest without this task
            sink, touch, release = detach()
            ended = functools.partial(self._ended, watcher, view, release)  # no closure
            Pump(
                watcher,
                view,
                sink,
                deadline=deadline,
                bookmarks=plan.bookmarks,
                touch=touch,
                on_end=ended,
            )
            return WatchEnd.DETACHED
        # then what the view hands over, with bookmarks in between
        period = settings.bookmark_period
        now = anyio.current_time()
        next_bookmark = now + period if plan.bookmarks else float("inf")
        # and one 2 s before the deadline, unless that is already past (the cacher's rule)
        last_bookmark = deadline - 2.0 if plan.bookmarks else float("inf")
        if last_bookmark <= now:
            last_bookmark = float("inf")
        buffer = watcher.buffer
        loop = asyncio.get_running_loop()
        # one timer for the next bookmark or the deadline, moved only when that changes
        # (a cancel scope per wait would arm and disarm one per event)
        alarm: asyncio.TimerHandle | None = None

        def ring() -> None:
            nonlocal alarm
            alarm = None
            watcher.wake()

        try:
            while True:
                if buffer:
                    while buffer and size < settings.chunk_bytes:
                        line = line_for(watcher.take(), watcher)
                        chunk.append(line)
                        size += len(line)
                    await flush()
                    continue
                if watcher.ended is not None:
                    return watcher.ended
                now = loop.time()
                if now >= deadline:
                    return WatchEnd.TIMEOUT
                if now >= next_bookmark or now >= last_bookmark:
                    rv = max(view.rv, watcher.min_rv)
                    await send(fmt.bookmark(str(rv), initial_events_end=False))
                    watcher.started = True
                    next_bookmark = now + period
                    if now >= last_bookmark:
                        last_bookmark = float("inf")
                    continue
                when = min(deadline, next_bookmark, last_bookmark)
                if alarm is None or alarm.when() != when:
                    if alarm is not None:
                        alarm.cancel()
                    alarm = loop.call_at(when, ring)
                await watcher.wait()
        finally:
            if alarm is not None:
                alarm.cancel()
