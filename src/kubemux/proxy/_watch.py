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

A view wakes its watchers at most once per :attr:`WatchSettings.write_interval` (50 ms): an
event after a quiet spell goes out at once, events closer together than that go out in one
write. At 100 events/s to 1,000 watchers a write per event is 100,000 TLS records and
syscalls a second, which is most of what a watch costs; batching them is what lets one
process serve that many.

Each watcher has a bounded buffer (:attr:`WatchSettings.max_buffered_events`). A watcher
that falls that far behind is cut off, as the cacher cuts a watcher it cannot hand an event
to: it gets no further events, what it has buffered is still written (a consistent prefix),
and its stream ends; the client re-watches from the last resourceVersion it saw (client-go
does). Memory per watcher is its buffer of references to shared bytes.

Where a watch starts (:class:`~._rv.WatchPlan`): the current objects as ADDED (from a store
snapshot taken in the same synchronous step as joining the view, so nothing is missed or
sent twice), optionally followed by the BOOKMARK annotated ``k8s.io/initial-events-end:
"true"``; or the history's events after a resourceVersion (410 Expired as an ERROR event when
the history no longer holds it: ``too old resource version: N (M)``); or just what comes
next. BOOKMARKs go out every :attr:`WatchSettings.bookmark_period` (60 s, the cacher's) and
2 s before the watch's deadline when the client allows them. A ``RESET`` from the history
(the store was cleared: its context stopped or reloaded) ends every watch after its buffer.

What a view reads and how it writes events (objects or Table rows): :mod:`._watch_formats`.
This module knows nothing of HTTP: :meth:`WatchBroadcaster.serve` hands byte chunks to an
async ``send`` callable.
"""

from __future__ import annotations

import asyncio
import dataclasses
import enum
import logging
import math
from collections import deque
from collections.abc import Awaitable, Callable, Hashable, Sequence

import anyio

from .._codec import decode_raw, raw_resource_version
from ._rv import WatchPlan, WatchStart, wait_for_resource_version
from ._selectors import ObjectFilter
from ._statuses import ProxyStatusError, encode_json, expired
from ._watch_formats import (
    INITIAL_EVENTS_END,
    EventHistoryLike,
    HasOldest,
    HistoryEventLike,
    ObjectWatchFormat,
    SnapshotLike,
    TableWatchFormat,
    WatchFormat,
)

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
    "WatchSettings",
]

logger = logging.getLogger(__name__)


# ---------------------------------------------------------------------------- the settings
@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class WatchSettings:
    """How downstream watches behave.

    Attributes:
        max_buffered_events: Events a watcher may fall behind before it is cut off.
        bookmark_period: Seconds between BOOKMARKs (when the client allows them).
        chunk_bytes: A write gathers buffered lines up to about this many bytes.
        write_interval: A view wakes its watchers at most this often (seconds): events
            closer together than this go to each watcher in one write. 0: at every event.
        wait_timeout: How long ``sendInitialEvents`` from a version ahead of the cache
            waits for it (then a 504 ERROR event).
    """

    max_buffered_events: int = 1000
    bookmark_period: float = 60.0
    chunk_bytes: int = 128 * 1024  # as a LIST's chunks (proxy._lists.CHUNK_BYTES)
    write_interval: float = 0.05
    wait_timeout: float = 3.0


class WatchEnd(enum.Enum):
    """Why a watch ended."""

    TIMEOUT = "timeout"
    """Its ``timeoutSeconds`` (or the default lifetime) passed."""
    EXPIRED = "expired"
    """It started from a version the history no longer holds (a 410 ERROR event was sent)."""
    ERROR = "error"
    """It could not start (an ERROR event was sent), e.g. a version the cache did not reach."""
    CUT_OFF = "cut off"
    """It fell :attr:`WatchSettings.max_buffered_events` behind."""
    RESET = "reset"
    """The store was cleared (its context stopped or reloaded)."""
    CLOSED = "closed"
    """The broadcaster was closed."""


# ------------------------------------------------------------------------------ the watcher
class _Headed:
    """A line whose first-event variant (with a Table's columns) is built on demand, once."""

    __slots__ = ("_headed", "plain", "raw", "type", "view")

    def __init__(self, view: _View, type: str, raw: bytes, plain: bytes):
        self.view = view
        self.type = type
        self.raw = raw
        self.plain = plain
        self._headed: bytes | None = None

    def headed(self) -> bytes:
        if self._headed is None:
            self._headed = self.view.fmt.event(self.type, self.raw, headers=True)
        return self._headed


Item = bytes | _Headed


class _Watcher:
    __slots__ = ("buffer", "ended", "min_rv", "started", "wake")

    def __init__(self, min_rv: int):
        self.buffer: deque[Item] = deque()
        self.ended: WatchEnd | None = None
        self.min_rv = min_rv
        self.started = False  # a first line was written (the Table header is spent)
        # asyncio's own Event, set() from the view's synchronous listener: the watch loop
        # runs on asyncio (uvicorn, kubernetes-asyncio), and an anyio Event plus a cancel
        # scope per wait was a sixth of what delivering an event cost
        self.wake = asyncio.Event()

    def end(self, why: WatchEnd) -> None:
        if self.ended is None:
            self.ended = why
        self.wake.set()


class _View:
    """The watchers sharing one format and filter, and the history listener feeding them."""

    __slots__ = (
        "broadcaster",
        "filter",
        "fmt",
        "key",
        "last_round",
        "loop",
        "remove",
        "round",
        "rv",
        "watchers",
    )

    def __init__(self, broadcaster: WatchBroadcaster, fmt: WatchFormat, filt: ObjectFilter):
        self.broadcaster = broadcaster
        self.fmt = fmt
        self.filter = filt
        self.key = (fmt.key, filt.key)
        self.watchers: set[_Watcher] = set()
        self.rv = broadcaster.current_rv()
        self.loop = asyncio.get_running_loop()
        self.last_round = -math.inf  # when the watchers were last woken
        self.round: asyncio.TimerHandle | None = None  # a wake-up to come
        self.remove = broadcaster.history.add_listener(self.on_event)

    def add(self, watcher: _Watcher) -> None:
        self.watchers.add(watcher)

    def discard(self, watcher: _Watcher) -> None:
        self.watchers.discard(watcher)
        if not self.watchers:
            self.close()

    def close(self) -> None:
        self.remove()
        if self.round is not None:
            self.round.cancel()
            self.round = None
        self.broadcaster.drop_view(self)

    def wake_soon(self) -> None:
        """Wake the watchers with something buffered now, or at the next round when the
        last one was under :attr:`WatchSettings.write_interval` ago."""
        if self.round is not None:
            return  # the round to come wakes them
        due = self.last_round + self.broadcaster.settings.write_interval
        if self.loop.time() >= due:
            self.wake()
        else:
            self.round = self.loop.call_at(due, self.wake)

    def wake(self) -> None:
        if self.round is not None:
            self.round.cancel()
            self.round = None
        self.last_round = self.loop.time()
        for watcher in self.watchers:
            if watcher.buffer:
                watcher.wake.set()

    def render(self, event: HistoryEventLike) -> Item | None:
        """What this view's watchers see of ``event`` (None: nothing), encoded."""
        kind = _transition(self.filter, event)
        if kind is None:
            return None
        raw = event.raw
        if kind == "DELETED":
            source = event.old if event.type != "DELETED" and event.old is not None else raw
            raw = _at_resource_version(source, event.rv)
        plain = self.fmt.event(kind, raw, headers=False)
        if self.fmt.has_headers:
            return _Headed(self, kind, raw, plain)
        return plain

    def on_event(self, event: HistoryEventLike) -> None:
        """The history listener: synchronous, never blocks, never raises into the store."""
        etype = event.type
        self.rv = max(self.rv, event.rv)
        if etype == "BOOKMARK" or not self.watchers:
            return
        if etype == "RESET":
            for watcher in list(self.watchers):
                watcher.end(WatchEnd.RESET)
            self.watchers.clear()
            self.close()
            return
        try:
            item = self.render(event)
        except Exception:  # an object no reader decodes: skipped, never raised into the store
            logger.exception("watch view %r: cannot render a %s event", self.key[0], etype)
            item = None
        if item is None:
            return
        limit = self.broadcaster.settings.max_buffered_events
        rv = event.rv
        half = limit // 2
        cut: list[_Watcher] = []
        burst = False
        for watcher in self.watchers:
            if rv <= watcher.min_rv:
                continue
            buffer = watcher.buffer
            held = len(buffer)
            if held >= limit:
                cut.append(watcher)
                continue
            buffer.append(item)
            if held >= half:
                burst = True
        for watcher in cut:
            watcher.end(WatchEnd.CUT_OFF)
            self.watchers.discard(watcher)
        if not self.watchers:
            self.close()
        elif burst:  # half a buffer behind: pacing must not be what cuts a watcher off
            self.wake()
        else:
            self.wake_soon()


def _transition(filt: ObjectFilter, event: HistoryEventLike) -> str | None:
    """The event type a watcher of ``filt`` sees (``convertToWatchEvent``)."""
    etype = event.type
    if etype not in ("ADDED", "MODIFIED", "DELETED"):
        return None
    if filt.is_everything:
        return etype
    if not filt.filters_content:  # a namespace only: no decoding
        return etype if event.namespace == filt.namespace else None
    now = etype != "DELETED" and filt.matches_raw(event.raw)
    old = event.old
    if etype == "DELETED":
        before = filt.matches_raw(event.raw)
    else:
        before = old is not None and filt.matches_raw(old)
    if now:
        return "MODIFIED" if before else "ADDED"
    return "DELETED" if before else None


def _at_resource_version(raw: bytes, rv: int) -> bytes:
    """``raw`` with ``metadata.resourceVersion`` set to ``rv`` (a DELETED event carries the
    version of the deletion; rewritten only when it differs)."""
    text = str(rv)
    if raw_resource_version(raw) == text:
        return raw
    obj = decode_raw(raw)
    meta = obj.get("metadata")
    if isinstance(meta, dict):
        meta["resourceVersion"] = text
    elif isinstance(obj, dict):
        obj["metadata"] = {"resourceVersion": text}
    return encode_json(obj)


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
        settings: WatchSettings | None = None,
    ):
        self.history = history
        self.snapshot = snapshot
        self.current_rv = current_rv
        self.settings = settings or WatchSettings()
        self._views: dict[tuple[Hashable, Hashable], _View] = {}
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

    def drop_view(self, view: _View) -> None:
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

    def _view(self, fmt: WatchFormat, filt: ObjectFilter) -> _View:
        key = (fmt.key, filt.key)
        view = self._views.get(key)
        if view is None:
            view = self._views[key] = _View(self, fmt, filt)
        return view

    async def serve(
        self,
        plan: WatchPlan,
        fmt: WatchFormat,
        filt: ObjectFilter,
        send: Callable[[bytes], Awaitable[None]],
        *,
        watch_timeout: float,
    ) -> WatchEnd:
        """Serve one watch until it ends; every line goes through ``send``.

        Args:
            plan: Where it starts (:func:`~._rv.plan_watch`).
            fmt: How events are written (views are shared by format and filter).
            filt: What it selects.
            send: Writes one chunk of lines to the client (it may block: only this watch
                waits, others and the store go on).
            watch_timeout: Its lifetime in seconds (:func:`~._rv.watch_timeout`).

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
        # one synchronous step: take the starting point and join the view
        view = self._view(fmt, filt)
        snapshot: SnapshotLike | None = None
        backlog: Sequence[HistoryEventLike] = ()
        if plan.start is WatchStart.INITIAL:
            snapshot = self.snapshot()
            watcher = _Watcher(_as_int(snapshot.resource_version))
        elif plan.start is WatchStart.SINCE:
            events = self.history.since(plan.resource_version)
            if events is None:
                if not view.watchers:
                    view.close()
                await send(self._too_old(plan.resource_version))
                return WatchEnd.EXPIRED
            backlog = events
            watcher = _Watcher(max(plan.resource_version, events[-1].rv if events else 0))
        else:
            watcher = _Watcher(self.current_rv())
        view.add(watcher)
        self._watchers += 1
        try:
            return await self._write(watcher, view, plan, snapshot, backlog, send, deadline)
        finally:
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
        watcher: _Watcher,
        view: _View,
        plan: WatchPlan,
        snapshot: SnapshotLike | None,
        backlog: Sequence[HistoryEventLike],
        send: Callable[[bytes], Awaitable[None]],
        deadline: float,
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
            for _key, raw in snapshot.items(namespace):
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
                await put(_line(item, watcher))
        await flush()
        # then what the view hands over, with bookmarks in between
        period = settings.bookmark_period
        now = anyio.current_time()
        next_bookmark = now + period if plan.bookmarks else float("inf")
        # and one 2 s before the deadline, unless that is already past (the cacher's rule)
        last_bookmark = deadline - 2.0 if plan.bookmarks else float("inf")
        if last_bookmark <= now:
            last_bookmark = float("inf")
        buffer = watcher.buffer
        wake = watcher.wake
        loop = asyncio.get_running_loop()
        # one timer for the next bookmark or the deadline, moved only when that changes
        # (a cancel scope per wait would arm and disarm one per event)
        alarm: asyncio.TimerHandle | None = None

        def ring() -> None:
            nonlocal alarm
            alarm = None
            wake.set()

        try:
            while True:
                if buffer:
                    while buffer and size < settings.chunk_bytes:
                        line = _line(buffer.popleft(), watcher)
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
                wake.clear()
                if buffer or watcher.ended is not None:
                    continue
                await wake.wait()
        finally:
            if alarm is not None:
                alarm.cancel()


def _line(item: Item, watcher: _Watcher) -> bytes:
    if isinstance(item, bytes):
        return item
    if watcher.started:
        return item.plain
    watcher.started = True
    return item.headed()


def _as_int(resource_version: str) -> int:
    return int(resource_version) if resource_version.isascii() and resource_version.isdigit() else 0
