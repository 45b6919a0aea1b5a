"""How events reach the browsers: one live table per view, however many streams show it.

Every ``/api/stream`` is a :class:`Connection` (its HTTP response). The streams showing the
same table (resource and namespace) are the members of one view (:class:`_View`): one
:class:`~.streams.Stream` with one registry subscription, one contexts panel loop and one
``_keep_watching``, whose every event is *queued* on each member (an append, no task
switch, the bytes shared). Each member's own task writes what it has queued, all of it at
once; the view wakes the waiting writers ``WAKE_SLICE`` at a time, one slice per turn of
the event loop, so a change seen by a thousand streams is a thousand small writes spread
over a few turns, never one long turn.

A connection that joins a running view catches up on its own (``reset``, the stores'
rows from the shared :class:`~._snapshots.SnapshotCache`, ``synced``, the last contexts
panel) while the view's live events queue up for it since it joined: no gap, and a change
that is in both is applied twice, harmlessly. A connection whose client does not keep up
never holds anybody back: its queue grows to ``PENDING_BYTES`` at most, is then dropped,
and the connection starts again from a snapshot once its client reads again. A client that
took nothing for ``stream_send_timeout`` is disconnected by the hub's one periodic sweep
(no timer per stream), and the client leaving is noticed by one ``receive()`` per stream,
waiting without a timer.

The :class:`Hub` runs in the app's lifespan. A mounted app has none: each of its streams
then runs a hub of its own (a view per stream, as many subscriptions as streams).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Any

import anyio
import anyio.abc
import anyio.lowlevel
from starlette.types import Send

from kubemux import Resource

from ._context import StreamContext
from ._encoding import RETRY_MS, encode_event
from .streams import Stream

__all__ = ["Connection", "Hub"]

log = logging.getLogger(__name__)

PENDING_BYTES = 1 << 20  # bytes queued on a connection before it starts again from a snapshot
WAKE_SLICE = 64  # writers woken per turn of the event loop
LARGE_WRITE = 64 * 1024  # a write at least this large is paced (see _Pacer)
TURN_BYTES = 1 << 20  # bytes of large writes per turn of the event loop, at most
RETRY = b"retry: %d\r\n\r\n" % RETRY_MS  # EventSource reconnection delay, first on every stream


class Connection:
    """One event stream's HTTP response: its writes, its queue of shared events, its state.

    :meth:`write` sends at once (bounded by the hub's sweep); :meth:`push` only queues, for
    the connection's own task to write (see :meth:`_View.follow`).
    """

    __slots__ = (
        "_lock",
        "_pacer",
        "_send",
        "_waiter",
        "behind",
        "gone",
        "live",
        "pending",
        "queued",
        "scope",
        "since",
        "stalled",
    )

    def __init__(self, send: Send, pacer: _Pacer) -> None:
        self._send = send
        self._pacer = pacer
        # An asyncio lock: uncontended (nearly always) it takes no turn of the event loop.
        self._lock = asyncio.Lock()
        self._waiter: asyncio.Future[None] | None = None
        self.pending: list[bytes] = [RETRY]  # queued events, shared bytes
        self.queued = len(RETRY)  # their size
        self.live = True  # False while catching up: what is queued waits
        self.behind = False  # the queue overflowed: start again from a snapshot
        self.since: float | None = None  # when the write under way began
        self.scope = anyio.CancelScope()  # cancelled to end the stream
        self.stalled = False  # ended by the sweep
        self.gone = False  # the client went away

    async def write(self, data: bytes) -> None:
        """Send ``data`` now, after anything queued (it blocks while the client does not read)."""
        async with self._lock:
            size = len(data) + (self.queued if self.live else 0)
            if size >= LARGE_WRITE:  # paced before it is copied: waiting holds no copy
                await self._pacer.pace(size)
            if self.pending and self.live:
                data = b"".join((*self.pending, data))  # what was queued meanwhile too
                self.pending.clear()
                self.queued = 0
            self.since = time.monotonic()
            await self._send({"type": "http.response.body", "body": data, "more_body": True})
            self.since = None

    def push(self, data: bytes) -> bool:
        """Queue ``data``; True if the connection's task waits and should be woken."""
        if self.behind:
            return False  # dropped: a snapshot follows
        self.pending.append(data)
        self.queued += len(data)
        if self.queued > PENDING_BYTES:
            self.pending.clear()
            self.queued = 0
            self.behind = True
        return self._waiter is not None and (self.live or self.behind)

    def wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def wait(self) -> None:
        """Wait for :meth:`wake` (a bare future: no timer, no task)."""
        self._waiter = asyncio.get_running_loop().create_future()
        try:
            await self._waiter
        finally:
            self._waiter = None

    async def flush(self) -> None:
        """Write what is queued, all at once."""
        if self.pending:
            await self.write(b"")


class _Pacer:
    """At most ``TURN_BYTES`` of large writes per turn of the event loop, first come first
    served: a few hundred streams catching up at once (each a snapshot of megabytes, each
    write copied into the kernel) are spread over turns of a few milliseconds each."""

    def __init__(self) -> None:
        self._used = 0  # bytes written this turn
        self._waiting: deque[tuple[asyncio.Future[None], int]] = deque()
        self._reset_soon = False

    async def pace(self, size: int) -> None:
        """Return when ``size`` bytes may be written in this turn."""
        if not self._waiting and (self._used == 0 or self._used + size <= TURN_BYTES):
            self._used += size
            self._next_turn()
            return
        waiter = asyncio.get_running_loop().create_future()
        self._waiting.append((waiter, size))
        self._next_turn()
        await waiter  # cancelled: _reset skips it

    def _next_turn(self) -> None:
        if not self._reset_soon:
            self._reset_soon = True
            asyncio.get_running_loop().call_soon(self._reset)

    def _reset(self) -> None:
        """A new turn: let the next writers go (they write in the turn after this one)."""
        self._reset_soon = False
        self._used = 0
        while self._waiting and (self._used == 0 or self._used + self._waiting[0][1] <= TURN_BYTES):
            waiter, size = self._waiting.popleft()
            if not waiter.done():
                waiter.set_result(None)
                self._used += size
        if self._used:
            self._next_turn()


class _ViewStream(Stream):
    """A view's stream: it tells the view when it subscribed and what the panel says."""

    def __init__(self, context: StreamContext, view: _View) -> None:
        super().__init__(context, view.broadcast)
        self._view = view

    async def emit(self, event: str, data: object) -> None:
        if event == "reset":  # every (re)subscription starts with it
            self._view.subscribed = True
        await super().emit(event, data)

    def panel_event(self) -> bytes | None:
        """The whole contexts panel as this view has sent it, for a stream catching up."""
        full = self.panel.full()
        return None if full is None else encode_event("contexts", full)


class _View:
    """One live table (resource, namespace) and the connections showing it."""

    def __init__(self, hub: Hub, resource: Resource, namespace: str | None) -> None:
        self.hub = hub
        self.key = (resource, namespace)
        self.resource = resource
        self.namespace = namespace
        self.members: dict[Connection, None] = {}  # in joining order
        self.subscribed = False  # later members catch up on their own
        self.ended = False
        self.scope = anyio.CancelScope()
        self.stream = _ViewStream(hub.context, self)

    async def run(self) -> None:
        try:
            with self.scope:
                await self.stream.table(self.resource, self.namespace)
        except Exception:  # a bug: the view's streams end, the others go on
            log.exception("the live table of %s ended", self.resource.name)
        finally:
            self.ended = True
            self.hub.forget(self)
            for conn in self.members:
                conn.wake()

    async def broadcast(self, data: bytes) -> None:
        """Queue ``data`` on every member; wake the waiting ones a slice per turn."""
        woken = [conn for conn in self.members if conn.push(data)]
        for start in range(0, len(woken), WAKE_SLICE):
            if start:
                await anyio.lowlevel.checkpoint()
            for conn in woken[start : start + WAKE_SLICE]:
                conn.wake()

    async def follow(self, conn: Connection) -> None:
        """Write this view's events to ``conn`` until the view ends (cancel to stop)."""
        self.members[conn] = None
        conn.live = not self.subscribed  # before the view's first reset: all of it follows
        try:
            while not self.ended:
                if not conn.live:
                    # the whole panel first: the changes queued meanwhile apply on top of it
                    # (each carries whole items, in order), whatever the queue lost
                    panel = self.stream.panel_event()
                    if panel is not None:
                        await conn.write(panel)
                    replay = Stream(self.hub.context, conn.write)
                    # the view's column sets first: its live events may name them by id
                    defined = dict(self.stream.defined)
                    await replay.replay_table(self.resource, self.namespace, defined)
                    conn.live = True
                if conn.pending:
                    await conn.flush()
                elif conn.behind:
                    log.info("a dashboard stream fell behind, resynchronising")
                    conn.behind = False
                    conn.live = False
                else:
                    await conn.wait()
            await conn.flush()
        finally:
            del self.members[conn]
            if not self.members:
                self.hub.forget(self)
                self.scope.cancel("its last stream ended")


class Hub:
    """The views of every event stream, and the sweep closing stalled streams.

    Runs while :meth:`running` is entered (the app's lifespan).
    """

    def __init__(self, context: StreamContext) -> None:
        self.context = context
        self.views: dict[tuple[Resource, str | None], _View] = {}
        self.connections: set[Connection] = set()
        self.pacer = _Pacer()
        self._tg: anyio.abc.TaskGroup | None = None

    def __repr__(self) -> str:
        running = "running" if self._tg is not None else "stopped"
        return f"<Hub {running} views={len(self.views)} connections={len(self.connections)}>"

    @property
    def is_running(self) -> bool:
        return self._tg is not None

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[Hub]:
        """Run the views and the sweep; on exit every view ends (its streams with it)."""
        async with anyio.create_task_group() as tg:
            self._tg = tg
            tg.start_soon(self._sweep)
            try:
                yield self
            finally:
                self._tg = None
                tg.cancel_scope.cancel("the dashboard stopped")

    async def follow_table(
        self, conn: Connection, resource: Resource, namespace: str | None
    ) -> None:
        """Stream the live table to ``conn``, joining (or starting) its view."""
        if self._tg is None:
            raise RuntimeError("the hub is not running")
        view = self.views.get((resource, namespace))
        if view is None:
            view = self.views[resource, namespace] = _View(self, resource, namespace)
            self._tg.start_soon(view.run)
        await view.follow(conn)

    def start_soon(self, func: Callable[..., Coroutine[Any, Any, object]], *args: object) -> None:
        """Run ``func(*args)`` in the hub's task group (it ends with the app)."""
        if self._tg is None:
            raise RuntimeError("the hub is not running")
        self._tg.start_soon(func, *args)

    def forget(self, view: _View) -> None:
        if self.views.get(view.key) is view:
            del self.views[view.key]

    async def _sweep(self) -> None:
        """Every ``stream_send_timeout / 4``: end the streams whose write has waited longer."""
        timeout = self.context.stream_send_timeout
        while True:
            await anyio.sleep(timeout / 4)
            now = time.monotonic()
            for conn in list(self.connections):
                since = conn.since
                if since is not None and now - since > timeout:
                    conn.stalled = True
                    conn.scope.cancel("the client stopped reading")
