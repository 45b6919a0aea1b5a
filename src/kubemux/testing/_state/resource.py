"""One resource type of the fake cluster: its objects, event history and open watches.

Objects are stored as JSON bytes (``Stored``), never mutated; every change is an ``Event``
that goes into the history (for watch resumes and paginated lists) and onto the queue of every
open ``Watch``, which the HTTP layer drains.
"""

from __future__ import annotations

import asyncio
import bisect
from collections import deque
from collections.abc import Iterable
from typing import Any

import orjson

from ..._cache.snapshot import Key
from ..._resources import Resource
from .._wire.protocol import Selector

__all__ = [
    "ADDED",
    "DELETED",
    "INITIAL_END",
    "MODIFIED",
    "NO_OBJECT",
    "RAW_LINE",
    "Event",
    "ResourceState",
    "Stored",
    "Watch",
]

ADDED = "ADDED"
MODIFIED = "MODIFIED"
DELETED = "DELETED"
INITIAL_END = "INITIAL_END"
RAW_LINE = "RAW_LINE"  # a test-injected line, sent verbatim
"""Queue marker: the initial events of a streaming list end here (becomes a BOOKMARK)."""


class Stored:
    """One version of an object: its JSON bytes (serialised once), decoded only on demand.

    Most paths (unfiltered watches and lists) only ever need the bytes; keeping 100k objects
    as bytes rather than dicts also keeps the garbage collector out of the way.
    """

    __slots__ = ("_obj", "raw")

    def __init__(self, raw: bytes, obj: dict[str, Any] | None = None) -> None:
        self.raw = raw
        self._obj = obj

    @property
    def obj(self) -> dict[str, Any]:
        """The object as a dict: shared and cached, so never mutate it."""
        if self._obj is None:
            self._obj = orjson.loads(self.raw)
        return self._obj


class Event:
    """One change: ``cur`` is the new version (the final one for DELETED), ``prev`` the old."""

    __slots__ = ("cur", "key", "prev", "rv", "type")

    def __init__(self, type_: str, rv: int, key: Key, cur: Stored, prev: Stored | None) -> None:
        self.type = type_
        self.rv = rv
        self.key = key
        self.cur = cur
        self.prev = prev


NO_OBJECT = Stored(b"{}", {})


class Watch:
    """One open watch stream: the events it still has to send, and why it should end."""

    __slots__ = (
        "dropped",
        "expired",
        "finished",
        "queue",
        "selector",
        "state",
        "table",
        "token",
        "wake",
    )

    def __init__(self, state: ResourceState, selector: Selector, token: str | None) -> None:
        self.state = state
        self.selector = selector
        self.token = token
        self.queue: deque[Event] = deque()
        self.wake = asyncio.Event()
        self.dropped = False
        self.finished = False  # end cleanly once the queue is sent (CRD deleted, end_watches)
        self.expired: str | None = None  # message of the in-stream 410 still to send
        self.table: Any = None  # (printer, includeObject) when the client asked for Tables

    def push(self, events: Iterable[Event]) -> None:
        """Queue events for this stream and wake its writer."""
        self.queue.extend(events)
        self.wake.set()


class ResourceState:
    """Objects, history and open watches of one resource type."""

    def __init__(self, resource: Resource) -> None:
        self.resource = resource
        self.kind = resource.kind or _guess_kind(resource.plural)
        self.list_kind = f"{self.kind}List"
        self.objects: dict[Key, Stored] = {}
        self.history: list[Event] = []
        self.first = 0  # index of the oldest event still in history
        self.trimmed_rv = 0  # resume points older than this have lost events
        self.watchers: set[Watch] = set()
        self._sorted: list[Key] | None = None

    def sorted_keys(self) -> list[Key]:
        """Keys in (namespace, name) order, cached until the key set changes."""
        if self._sorted is None:
            self._sorted = sorted(self.objects)
        return self._sorted

    def invalidate_keys(self) -> None:
        """Forget the sorted key cache (the key set changed)."""
        self._sorted = None

    def record(self, events: list[Event], limit: int) -> None:
        """Append events to the history (trimmed to ``limit``) and to every watch queue."""
        self.history.extend(events)
        excess = len(self.history) - self.first - limit
        if excess > 0:
            self.first += excess
            self.trimmed_rv = self.history[self.first - 1].rv
            if self.first > 1024 and self.first * 2 > len(self.history):
                del self.history[: self.first]
                self.first = 0
        for watch in self.watchers:
            watch.push(events)

    def events_after(self, rv: int) -> list[Event]:
        """History events newer than ``rv`` (the caller checked that ``rv`` is not expired)."""
        start = bisect.bisect_right(self.history, rv, lo=self.first, key=_event_rv)
        return self.history[start:]

    def state_at(self, rv: int) -> dict[Key, Stored | None]:
        """What differs between now and ``rv``: key -> its version at ``rv`` (None: absent)."""
        overlay: dict[Key, Stored | None] = {}
        for index in range(len(self.history) - 1, self.first - 1, -1):
            event = self.history[index]
            if event.rv <= rv:
                break
            overlay[event.key] = event.prev  # the earliest change after rv wins (written last)
        return overlay


def _event_rv(event: Event) -> int:
    return event.rv


def _guess_kind(plural: str) -> str:
    singular = plural[:-3] + "y" if plural.endswith("ies") else plural.removesuffix("s")
    return singular[:1].upper() + singular[1:]
