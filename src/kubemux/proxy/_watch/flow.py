"""What one downstream watcher may hold, and whether its client reads: :class:`Flow`.

kube-apiserver's cacher gives each watcher a small queue of shared events and cuts a
watcher whose queue stays full past a short budget; a watcher's cost is its queue, never a
copy of each event. Here the same, in bytes: a watcher's buffer holds references to the
view's shared events (rendered when written, not when queued), and what they add up to is
charged to its flow. The view asks :meth:`Flow.may_take` before it queues an event (no:
the watcher is cut off); the write side says :meth:`Flow.writing` and :meth:`Flow.wrote`
around each write, and a watchdog asks :meth:`Flow.is_stalled`: a client that has not
taken a write for ``idle_timeout`` seconds is cut and its connection closed.

Nothing here knows the protocol: an HTTP/1.1 response (``_reads.reads.stream_watch``) and
an HTTP/2 stream report their writes the same way.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Protocol

__all__ = ["DETACH", "ON_DISCONNECT", "Flow", "Sink"]

DETACH = "kubemux.detach"
"""A scope key a server may offer (the proxy's HTTP/2 side does): a callable returning a
:class:`Sink`, after which the app's task may return
while its response goes on (a watch written from its view's rounds, no task per watch)."""

ON_DISCONNECT = "kubemux.on_disconnect"
"""A scope key a server may offer (the proxy's HTTP/2 side does): a callable taking a
callback (or None to forget it) to call once when the client goes away, so a watch learns
it without a task blocked on ``receive()`` for its whole life."""


class Flow:
    """The budget and the pulse of one watcher.

    Args:
        max_bytes: Bytes of events the watcher may have waiting to be written.
        idle_timeout: Seconds a write may wait for the client before it counts as gone.
    """

    __slots__ = ("held", "idle_timeout", "max_bytes", "writing_since")

    def __init__(self, max_bytes: int, idle_timeout: float) -> None:
        self.max_bytes = max_bytes
        self.idle_timeout = idle_timeout
        self.held = 0  # bytes of events waiting in the watcher's buffer
        self.writing_since = math.inf  # when the write in progress began (inf: none)

    def __repr__(self) -> str:
        return f"<Flow held={self.held}/{self.max_bytes}>"

    def may_take(self, size: int) -> bool:
        """Whether ``size`` more bytes fit the budget (the view's question)."""
        return self.held + size <= self.max_bytes

    def took(self, size: int) -> None:
        self.held += size

    def gave(self, size: int) -> None:
        self.held -= size

    def writing(self, now: float) -> None:
        """A write to the client begins."""
        self.writing_since = now

    def wrote(self) -> None:
        """The client took the write."""
        self.writing_since = math.inf

    def is_stalled(self, now: float) -> bool:
        """Whether a write has waited ``idle_timeout`` for the client (a watcher with
        nothing to write is quiet, not stalled)."""
        return now - self.writing_since >= self.idle_timeout


class Sink(Protocol):
    """A response written without a task (:data:`DETACH`): synchronous."""

    on_drain: Callable[[], object] | None
    """Called when what a :meth:`push` left waiting has gone."""

    def push(self, data: bytes) -> bool:
        """Write ``data``; False: some of it waits for the client (``on_drain`` then)."""
        ...

    def finish(self) -> None:
        """End the response after what waits."""
        ...

    def abort(self) -> None:
        """End it at once, unfinished (a client that stopped reading)."""
        ...

    def when_gone(self, callback: Callable[[], object] | None) -> None:
        """Call ``callback`` once when the client goes away."""
        ...
