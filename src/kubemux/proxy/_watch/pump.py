"""A watch written without a task (:class:`Pump`): once its starting point is written, a
watch on a server that offers :data:`~.flow.DETACH` (the proxy's HTTP/2 side) hands its
watcher to a pump and its task returns. The view's round writes into the pump's
:class:`~.flow.Sink` from the listener's own call (:meth:`Watcher.wake
<.views.Watcher.wake>`), one timer per watch brings its bookmarks and its deadline, and a
watchdog, armed only while a chunk waits for the client, its idle cut. A waiting watch then costs its watcher, its pump and its stream:
no task, no coroutine frames, no cancel scopes (24 KiB per h2 watch before, issue 32).

It behaves as the task's loop (:meth:`~.watch.WatchBroadcaster.serve`) does: what is
buffered goes out in chunks of up to ``chunk_bytes``; a chunk the client's window did not
take holds the next ones back (they stay in the watcher's buffer, where its budget counts
them); an ended watcher's buffer is written before its stream ends; a client that has not
taken a write for the flow's ``idle_timeout`` is cut (its stream reset).
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable

from .flow import Flow, Sink
from .formats import WatchFormat
from .views import WatchEnd, Watcher, WatchView, line_for

__all__ = ["Pump"]


class Pump:
    """Writes one detached watch (see the module)."""

    __slots__ = (
        "alarm",
        "blocked",
        "deadline",
        "done",
        "flow",
        "fmt",
        "last_bookmark",
        "loop",
        "next_bookmark",
        "on_end",
        "period",
        "sink",
        "touch",
        "touched",
        "view",
        "watchdog",
        "watcher",
    )

    def __init__(
        self,
        watcher: Watcher,
        view: WatchView,
        sink: Sink,
        *,
        deadline: float,
        bookmarks: bool,
        touch: Callable[[], None],
        on_end: Callable[[WatchEnd | None], None],
    ) -> None:
        self.watcher = watcher
        self.view = view
        self.fmt: WatchFormat = view.fmt
        self.sink = sink
        self.flow: Flow = watcher.flow
        self.touch = touch
        self.touched = -math.inf
        self.on_end = on_end
        self.loop = loop = asyncio.get_running_loop()
        self.deadline = deadline
        self.period = view.settings.bookmark_period
        now = loop.time()
        self.next_bookmark = now + self.period if bookmarks else math.inf
        # and one 2 s before the deadline, unless that is already past (the cacher's rule)
        self.last_bookmark = deadline - 2.0 if bookmarks else math.inf
        if self.last_bookmark <= now:
            self.last_bookmark = math.inf
        self.alarm: asyncio.TimerHandle | None = None
        self.blocked = False  # a chunk waits for the client's window
        self.done = False
        self.watchdog: asyncio.TimerHandle | None = None  # armed while a chunk waits
        watcher.pump = self
        sink.on_drain = self.drained
        sink.when_gone(self.gone)
        self.step()

    def step(self) -> None:
        """Write what is buffered, then the time's due (a bookmark, the deadline)."""
        if self.done or self.blocked:
            return
        watcher = self.watcher
        buffer = watcher.buffer
        # a round's one event: its line as it is, no list, no join
        if len(buffer) == 1 and not self.write(line_for(watcher.take(), watcher)):
            return
        limit = self.view.settings.chunk_bytes
        while buffer:
            chunk: list[bytes] = []
            size = 0
            while buffer and size < limit:
                line = line_for(watcher.take(), watcher)
                chunk.append(line)
                size += len(line)
            if not self.write(b"".join(chunk)):
                return
        if watcher.ended is not None:
            self.end(watcher.ended)
            return
        now = self.loop.time()
        if now >= self.deadline:
            self.end(WatchEnd.TIMEOUT)
            return
        if now >= self.next_bookmark or now >= self.last_bookmark:
            rv = max(self.view.rv, watcher.min_rv)
            watcher.started = True
            self.next_bookmark = now + self.period
            if now >= self.last_bookmark:
                self.last_bookmark = math.inf
            if not self.write(self.fmt.bookmark(str(rv), initial_events_end=False)):
                return
        when = min(self.deadline, self.next_bookmark, self.last_bookmark)
        alarm = self.alarm
        if alarm is None or alarm.when() != when:
            if alarm is not None:
                alarm.cancel()
            self.alarm = self.loop.call_at(when, self.ring)

    def write(self, data: bytes) -> bool:
        now = self.loop.time()
        if now - self.touched >= 1.0:  # a use of the store, counted once a second at most
            self.touched = now
            self.touch()
        if not data or self.sink.push(data):
            return True
        self.blocked = True
        self.flow.writing(now)
        self.watchdog = self.loop.call_at(now + self.flow.idle_timeout, self.look)
        return False

    def drained(self) -> None:
        """The sink's callback: the chunk that waited has gone."""
        self.blocked = False
        self.flow.wrote()
        if self.watchdog is not None:
            self.watchdog.cancel()
            self.watchdog = None
        self.step()

    def ring(self) -> None:
        self.alarm = None
        self.step()

    def look(self) -> None:
        self.watchdog = None
        if self.done:
            return
        now = self.loop.time()
        if self.flow.is_stalled(now):  # a client that does not read: cut
            self.close(None)
            self.sink.abort()
        elif self.blocked:  # a clock a hair early
            when = self.flow.writing_since + self.flow.idle_timeout
            self.watchdog = self.loop.call_at(max(when, now), self.look)

    def gone(self) -> None:
        """The client went away."""
        if not self.done:
            self.close(None)
            self.sink.abort()

    def end(self, why: WatchEnd) -> None:
        self.close(why)
        self.sink.finish()

    def close(self, why: WatchEnd | None) -> None:
        self.done = True
        self.watcher.pump = None
        self.sink.when_gone(None)
        if self.watchdog is not None:
            self.watchdog.cancel()
            self.watchdog = None
        if self.alarm is not None:
            self.alarm.cancel()
            self.alarm = None
        # the view may be walking its watchers (this is its round): it is left after it
        self.loop.call_soon(self.on_end, why)
