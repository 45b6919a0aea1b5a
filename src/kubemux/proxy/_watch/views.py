"""The parts of a downstream watch (:mod:`.watch`): its settings and end reasons, a
watcher (its bounded buffer, its :class:`~.flow.Flow`, its wake-up), and a view (the
watchers sharing one format and filter, and the history listener that turns each event
into one shared :class:`ViewItem`, hands it to each of them, cuts off the ones over their
budget and wakes the rest at most every :attr:`WatchLimits.write_interval`).

An item holds the event's raw bytes (the store's and the history's own, not a copy) and is
rendered into a watch line only when a watcher writes it, once per view (the line is kept
on the item for the view's other watchers). So a watcher that never reads costs
references, never a rendered copy of each event per view: 40 stalled watchers with 40
selectors of their own used to hold 40 rendered copies of every event.
"""

from __future__ import annotations

import asyncio
import dataclasses
import enum
import logging
import math
from collections.abc import Callable
from typing import Protocol

from ..._wire.codec import decode_raw, raw_resource_version
from .._api.statuses import encode_json
from .._query.selectors import ObjectFilter
from .flow import Flow
from .formats import EventHistoryLike, HistoryEventLike, WatchFormat


class Pumped(Protocol):
    """What writes a detached watcher (:class:`~.pump.Pump`)."""

    def step(self) -> None: ...


__all__ = [
    "Item",
    "ViewItem",
    "WatchEnd",
    "WatchLimits",
    "WatchView",
    "Watcher",
    "at_resource_version",
    "line_for",
    "transition",
]

logger = logging.getLogger(__name__)


# ---------------------------------------------------------------------------- the settings
@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class WatchLimits:
    """How downstream watches behave.

    Attributes:
        max_buffered_events: Events a watcher may fall behind before it is cut off.
        max_buffered_bytes: Bytes of events (their objects' size) a watcher may have
            waiting to be written before it is cut off (its stream ends after what it
            had: the client watches again from the last version it saw). Bytes, not
            events: a client must not hold a thousand 1 MiB objects.
        idle_timeout: Seconds a write may wait for the client to read: past that, the
            watcher is cut and its connection closed (a client that stopped reading).
            Quiet watches (nothing to write) are not idle.
        bookmark_period: Seconds between BOOKMARKs (when the client allows them).
        chunk_bytes: A write gathers buffered lines up to about this many bytes.
        write_interval: A view wakes its watchers at most this often (seconds): events
            closer together than this go to each watcher in one write. 0: at every event.
        wait_timeout: How long ``sendInitialEvents`` from a version ahead of the cache
            waits for it (then a 504 ERROR event).
        scan_slice: Seconds the initial events of a selective watch (every object of the
            snapshot looked at) are scanned before the event loop is yielded to others.
    """

    max_buffered_events: int = 1000
    max_buffered_bytes: int = 16 * 1024 * 1024
    idle_timeout: float = 10.0
    bookmark_period: float = 60.0
    chunk_bytes: int = 128 * 1024  # as a LIST's chunks (proxy._lists.CHUNK_BYTES)
    write_interval: float = 0.05
    wait_timeout: float = 3.0
    scan_slice: float = 0.001


class WatchEnd(enum.Enum):
    """Why a watch ended."""

    TIMEOUT = "timeout"
    """Its ``timeoutSeconds`` (or the default lifetime) passed."""
    EXPIRED = "expired"
    """It started from a version the history no longer holds (a 410 ERROR event was sent)."""
    ERROR = "error"
    """It could not start (an ERROR event was sent), e.g. a version the cache did not reach."""
    CUT_OFF = "cut off"
    """It fell :attr:`WatchLimits.max_buffered_events` or
    :attr:`WatchLimits.max_buffered_bytes` behind."""
    RESET = "reset"
    """The store was cleared (its context stopped or reloaded)."""
    CLOSED = "closed"
    """The broadcaster was closed."""
    DETACHED = "detached"
    """Its starting point was written and the rest is written without its task (a
    :class:`~.pump.Pump`): its end is the pump's."""


# ------------------------------------------------------------------------------ the watcher
class ViewItem:
    """One event as a view's watchers see it: its type and the object's bytes (shared with
    the store and the history), rendered into a watch line when first written and kept for
    the view's other watchers. ``size`` is what it is charged to a watcher's flow."""

    __slots__ = ("_headed", "_plain", "kind", "raw", "rv", "size", "view")

    def __init__(self, view: WatchView, kind: str, raw: bytes, rv: int) -> None:
        self.view = view
        self.kind = kind
        self.raw = raw  # for DELETED after leaving the selector: the object before
        self.rv = rv
        self.size = len(raw)
        self._plain: bytes | None = None
        self._headed: bytes | None = None

    def _render(self, headers: bool) -> bytes:
        raw = self.raw
        try:
            if self.kind == "DELETED":
                raw = at_resource_version(raw, self.rv)
            return self.view.fmt.event(self.kind, raw, headers=headers)
        except Exception:  # an object no reader decodes: skipped, never raised into a watch
            logger.exception("watch view %r: cannot render a %s event", self.view.key[0], self.kind)
            return b""

    def plain(self) -> bytes:
        if self._plain is None:
            self._plain = self._render(False)
        return self._plain

    def headed(self) -> bytes:
        """The line with a Table's columns (a watcher's first); the plain one otherwise."""
        if not self.view.fmt.has_headers:
            return self.plain()
        if self._headed is None:
            self._headed = self._render(True)
        return self._headed


Item = ViewItem


class Watcher:
    __slots__ = ("buffer", "ended", "flow", "min_rv", "pump", "started", "waiter")

    def __init__(self, min_rv: int, flow: Flow):
        # a list, not a deque: 56 bytes empty against 600 (a watcher rarely holds more
        # than a round's few events; the pop from the front moves a few pointers)
        self.buffer: list[Item] = []
        self.ended: WatchEnd | None = None
        self.min_rv = min_rv
        self.flow = flow
        self.started = False  # a first line was written (the Table header is spent)
        # a future made only while the watch loop waits, resolved from the view's
        # synchronous listener: an asyncio.Event per watcher (its deque of waiters) was a
        # tenth of an h2 watch's memory; an anyio Event plus a cancel scope per wait was a
        # sixth of what delivering an event cost
        self.waiter: asyncio.Future[None] | None = None
        self.pump: Pumped | None = None  # a detached watch's writer (.pump)

    def wake(self) -> None:
        """Wake the watch loop if it waits (if not, it looks at the buffer and its end
        before it waits again); a detached watch's pump writes now."""
        if self.pump is not None:
            self.pump.step()
            return
        waiter = self.waiter
        if waiter is not None:
            self.waiter = None
            if not waiter.done():
                waiter.set_result(None)

    async def wait(self) -> None:
        """Until :meth:`wake`."""
        waiter = self.waiter = asyncio.get_running_loop().create_future()
        try:
            await waiter
        finally:
            if self.waiter is waiter:
                self.waiter = None

    def take(self) -> Item:
        """The next buffered item (its bytes leave the flow's budget)."""
        item = self.buffer.pop(0)
        self.flow.gave(item.size)
        return item

    def end(self, why: WatchEnd) -> None:
        if self.ended is None:
            self.ended = why
        self.wake()


class WatchView:
    """The watchers sharing one format and filter, and the history listener feeding them."""

    __slots__ = (
        "filter",
        "fmt",
        "key",
        "last_round",
        "loop",
        "on_close",
        "remove",
        "round",
        "rv",
        "settings",
        "watchers",
    )

    def __init__(
        self,
        history: EventHistoryLike,
        current_rv: Callable[[], int],
        settings: WatchLimits,
        fmt: WatchFormat,
        filt: ObjectFilter,
        on_close: Callable[[WatchView], None],
    ):
        self.settings = settings
        self.on_close = on_close
        self.fmt = fmt
        self.filter = filt
        self.key = (fmt.key, filt.key)
        self.watchers: set[Watcher] = set()
        self.rv = current_rv()
        self.loop = asyncio.get_running_loop()
        self.last_round = -math.inf  # when the watchers were last woken
        self.round: asyncio.TimerHandle | None = None  # a wake-up to come
        self.remove = history.add_listener(self.on_event)

    def add(self, watcher: Watcher) -> None:
        self.watchers.add(watcher)

    def discard(self, watcher: Watcher) -> None:
        self.watchers.discard(watcher)
        if not self.watchers:
            self.close()

    def close(self) -> None:
        self.remove()
        if self.round is not None:
            self.round.cancel()
            self.round = None
        self.on_close(self)

    def wake_soon(self) -> None:
        """Wake the watchers with something buffered now, or at the next round when the
        last one was under :attr:`WatchLimits.write_interval` ago."""
        if self.round is not None:
            return  # the round to come wakes them
        due = self.last_round + self.settings.write_interval
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
                watcher.wake()

    def render(self, event: HistoryEventLike) -> Item | None:
        """What this view's watchers see of ``event`` (None: nothing): one item, shared,
        rendered when written."""
        kind = transition(self.filter, event)
        if kind is None:
            return None
        raw = event.raw
        if kind == "DELETED" and event.type != "DELETED" and event.old is not None:
            raw = event.old  # it left the selector: its last state, at the event's version
        return ViewItem(self, kind, raw, event.rv)

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
        except Exception:  # a selector that cannot read it: skipped, never raised into the store
            logger.exception("watch view %r: cannot filter a %s event", self.key[0], etype)
            item = None
        if item is None:
            return
        limit = self.settings.max_buffered_events
        rv = event.rv
        half = limit // 2
        size = item.size
        cut: list[Watcher] = []
        burst = False
        for watcher in self.watchers:
            if rv <= watcher.min_rv:
                continue
            buffer = watcher.buffer
            held = len(buffer)
            flow = watcher.flow
            if held >= limit or not flow.may_take(size):
                cut.append(watcher)  # over its budget: as the cacher cuts a full watcher
                continue
            buffer.append(item)
            flow.took(size)
            if held >= half or flow.held * 2 >= flow.max_bytes:
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


def transition(filt: ObjectFilter, event: HistoryEventLike) -> str | None:
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


def at_resource_version(raw: bytes, rv: int) -> bytes:
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


def line_for(item: Item, watcher: Watcher) -> bytes:
    """The watch line of ``item`` for ``watcher`` (its first carries a Table's columns)."""
    if watcher.started:
        return item.plain()
    watcher.started = True
    return item.headed()
