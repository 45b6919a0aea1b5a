"""A store's event history: the changes applied to it, bounded by count and by age, from
which a watch can resume at a resourceVersion (:class:`EventHistory`).

The history is one listener of the store's change stream (:mod:`kubemux._cache.stream`):
it hears every change the store's writer applies, whoever writes (an informer, a share
follower, any engine), and shares the store's bytes: it keeps the
:class:`~kubemux._wire.codec.StoreChange` the store made anyway (the entry, the old entry), no
copy; a :class:`HistoryEvent` is built only for a reader (:meth:`EventHistory.since`) or a
listener. A relist's changes (found missing: DELETED; changed: MODIFIED; new: ADDED) are
kept as one step at the list's resourceVersion.

resourceVersions are compared as integers (kube-apiserver's are decimal in practice); a
store whose resourceVersions are not decimal has a history that never answers.
"""

from __future__ import annotations

import collections
import logging
import math
import time
from collections.abc import Callable, Sequence

import msgspec

from .._wire.codec import StoreChange
from .._wire.versions import rv_int
from .stream import StoreListener

__all__ = ["EventHistory", "HistoryEvent"]

log = logging.getLogger(__name__)

DEFAULT_MAX_EVENTS = 10_000
DEFAULT_MAX_AGE = 150.0
"""At least 75 s (kube-apiserver's watch cache keeps events that long), twice that here."""
_MARK_PERIOD = 1.0  # seconds between two time marks: what ages are measured to


class HistoryEvent(msgspec.Struct, frozen=True, gc=False):
    """One change of a store, as its history hands it over.

    Attributes:
        type: ``ADDED``, ``MODIFIED``, ``DELETED``; ``BOOKMARK`` (the store's
            resourceVersion moved with no object change: given to listeners, not kept);
            ``RESET`` (the store was cleared, its context stopped or reloaded: listeners end
            their watches).
        rv: The resourceVersion the change brought the store to. A relist's changes all
            carry the list's (``raw`` keeps the object's own).
        namespace: The object's namespace (``""`` if cluster-scoped; for RESET too).
        name: The object's name (``""`` for BOOKMARK and RESET).
        raw: The object's bytes (for DELETED its last state; ``b""`` for BOOKMARK, RESET).
        old: The object as it was before (MODIFIED, DELETED: for a selector's enter and
            leave), or None.
    """

    type: str
    rv: int
    namespace: str
    name: str
    raw: bytes
    old: bytes | None


class _Step(msgspec.Struct, gc=False):
    """A relist's changes, kept as one step at the list's resourceVersion."""

    rv: int
    changes: tuple[StoreChange, ...]


def _change_rv(change: StoreChange) -> int | None:
    entry = change.entry
    rv = entry.rv
    return rv_int(rv if rv is not None else entry.resource_version)


def _event(change: StoreChange, rv: int) -> HistoryEvent:
    entry, old = change.entry, change.old
    return HistoryEvent(
        change.type,
        rv,
        entry.namespace,
        entry.name,
        entry.raw,
        None if old is None or change.type == "ADDED" else old.raw,
    )


Listener = Callable[[HistoryEvent], None]


class EventHistory(StoreListener):
    """The changes applied to one store, bounded by count and by age.

    :meth:`since` answers "every change after resourceVersion N, in apply order" while the
    history still holds all of them, and None once it does not (the caller answers 410
    Expired; a client then lists again). Listeners are called synchronously, in apply
    order, as the store announces its changes: :meth:`since` and :meth:`add_listener` in
    one synchronous step miss nothing.

    Consistency: what :meth:`since` returns are the store's own changes; a relist's (the
    changes it found) are kept as one step at the list's resourceVersion when the list is
    swapped in, so a watch resumed from a version inside a relist gets the whole relist
    again (some changes twice, none missed). Listeners get a relist's changes a slice at a
    time after that (the event loop runs between slices), each at the list's version: a
    reader that started from :meth:`since`, or from the store as it is, skips events at or
    below the version it started from (they are in what it read), as every later change
    has a larger one.

    Args:
        max_events: Changes kept at most (older ones go first; a relist of more changes
            than this is not kept).
        max_age: Seconds a change is kept at least (and, while changes keep coming, about
            at most: ages are measured to a second).
        clock: Monotonic seconds (for tests).
    """

    __slots__ = (
        "_clock",
        "_count",
        "_floor",
        "_items",
        "_listeners",
        "_marks",
        "_seq",
        "max_age",
        "max_events",
    )

    def __init__(
        self,
        *,
        max_events: int = DEFAULT_MAX_EVENTS,
        max_age: float = DEFAULT_MAX_AGE,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if max_events < 0 or not max_age >= 0:
            raise ValueError("max_events and max_age must not be negative")
        self.max_events = max_events
        self.max_age = max_age
        self._clock = clock
        self._items: collections.deque[StoreChange | _Step] = collections.deque()
        self._count = 0  # changes held (a step counts its changes)
        self._seq = 0  # items appended, ever
        self._marks: collections.deque[tuple[float, int]] = collections.deque()  # (time, seq)
        # since(rv) is complete for rv >= _floor: the newest resourceVersion dropped, or
        # the first list's; None: nothing known yet (never listed, or cleared)
        self._floor: float | None = None  # an int, or math.inf: never answer
        self._listeners: list[Listener] = []

    def __len__(self) -> int:
        """Changes held."""
        return self._count

    def __repr__(self) -> str:
        return f"<EventHistory events={self._count} oldest={self._floor}>"

    @property
    def oldest_resource_version(self) -> int:
        """The oldest resourceVersion :meth:`since` answers for (``-1``: none yet)."""
        self._expire(self._clock())
        floor = self._floor
        return -1 if floor is None or floor == math.inf else int(floor)

    # ------------------------------------------------------------------ reads
    def since(self, rv: int) -> list[HistoryEvent] | None:
        """Every change after ``rv`` (``event.rv > rv``), in apply order; None when ``rv``
        is older than what is kept (or the store's versions are not decimal)."""
        self._expire(self._clock())
        floor = self._floor
        if floor is None or rv < floor:
            return None
        picked: list[tuple[StoreChange | _Step, int]] = []
        for item in reversed(self._items):
            item_rv = item.rv if isinstance(item, _Step) else _change_rv(item)
            if item_rv is None:
                return None  # not decimal: nothing can be said
            if item_rv <= rv:
                break
            picked.append((item, item_rv))
        out: list[HistoryEvent] = []
        for item, item_rv in reversed(picked):
            if isinstance(item, _Step):
                out.extend(_event(c, item_rv) for c in item.changes)
            else:
                out.append(_event(item, item_rv))
        return out

    def undo_since(self, rv: int) -> list[tuple[str, str, bytes | None]] | None:
        """What takes the store as it is now back to ``rv``: ``(namespace, name, bytes)``
        to apply in order (None: the object was absent at ``rv``); None when that cannot
        be told: ``rv`` older than what is kept, or a relist among the changes after it
        (a relist's changes stand for every change the watch missed: the states between
        are unknown). Call it in the same synchronous step as reading the store."""
        events = self.since(rv)
        if events is None or any(isinstance(item, _Step) and item.rv > rv for item in self._items):
            return None
        undo: list[tuple[str, str, bytes | None]] = []
        for event in reversed(events):
            before = event.raw if event.type == "DELETED" else event.old
            if event.type == "ADDED":
                undo.append((event.namespace, event.name, None))
            elif event.old is None and before is None:
                return None
            else:
                undo.append((event.namespace, event.name, event.old or before))
        return undo

    def add_listener(self, fn: Listener) -> Callable[[], None]:
        """Call ``fn(event)`` for every change from now on (and BOOKMARK, RESET); returns
        the function that removes it (idempotent).

        ``fn`` runs inside the writer's call, on the store's event loop: it must be quick
        and must not raise (one that raises is logged and removed). A relist calls it for
        each of its changes, a slice at a time (see the class).
        """
        self._listeners.append(fn)

        def remove() -> None:
            try:
                self._listeners.remove(fn)
            except ValueError:
                pass

        return remove

    # ------------------------------------------------------------------ the store's stream
    def changed(self, change: StoreChange) -> None:
        """One applied change (the hot path: no event is built unless somebody listens;
        the clock is read once per change, the bounds looked at once per second or once
        per ``max_events // 16`` changes)."""
        self._items.append(change)
        self._seq += 1
        self._count += 1
        now = self._clock()
        marks = self._marks
        if not marks or now - marks[-1][0] >= _MARK_PERIOD:
            marks.append((now, self._seq - 1))
            self._expire(now)
        elif self._count > self.max_events:
            self._expire(now)
        if self._listeners:
            rv = _change_rv(change)
            self._notify(_event(change, -1 if rv is None else rv))

    def listed(
        self, resource_version: str, changes: Sequence[StoreChange], *, relist: bool
    ) -> None:
        """A list was swapped in: a relist's changes are kept as one step at its
        resourceVersion (before they are announced: :meth:`since` answers as the store
        is); a first list's start the history (it answers from its version on)."""
        rv = rv_int(resource_version)
        if not relist:
            self._forget(math.inf if rv is None else rv)
        elif rv is None:
            self._forget(math.inf)  # not decimal: never answer
        elif len(changes) > self.max_events:
            self._forget(rv)  # too many to keep: resumes before the list are Expired
        elif changes:
            self._items.append(_Step(rv, tuple(changes)))
            self._seq += 1
            self._count += len(changes)
            now = self._clock()
            self._marks.append((now, self._seq - 1))
            self._expire(now)

    def announced(self, changes: Sequence[StoreChange], resource_version: str) -> None:
        """A slice of a list's changes, given to the listeners at the list's version (kept
        already by :meth:`listed`)."""
        if self._listeners:
            rv = rv_int(resource_version)
            for change in changes:
                self._notify(_event(change, -1 if rv is None else rv))

    def bookmarked(self, resource_version: str) -> None:
        if self._listeners:
            rv = rv_int(resource_version)
            self._notify(HistoryEvent("BOOKMARK", -1 if rv is None else rv, "", "", b"", None))

    def cleared(self) -> None:
        """The store was cleared: nothing can be answered until it is listed again."""
        self._forget(None)
        if self._listeners:
            self._notify(HistoryEvent("RESET", -1, "", "", b"", None))

    # ------------------------------------------------------------------ bounds
    def _forget(self, floor: float | None) -> None:
        self._items.clear()
        self._marks.clear()
        self._count = 0
        self._floor = floor

    def _expire(self, now: float) -> None:
        """Drop what is past the count, and each group of changes (those between two time
        marks) once the mark after it is older than ``max_age``: every change is kept for
        ``max_age`` at least, and about that long at most while changes keep coming."""
        items, marks = self._items, self._marks
        first = self._seq - len(items)  # the seq of items[0]
        keep_from = first
        while len(marks) >= 2 and now - marks[1][0] > self.max_age:
            marks.popleft()
            keep_from = marks[0][1]
        excess = self._count - self.max_events
        if excess > 0:  # past the count: make room for a while (amortised)
            excess += self.max_events // 16
        dropped: StoreChange | _Step | None = None
        while items and (first < keep_from or excess > 0):
            dropped = items.popleft()
            n = len(dropped.changes) if isinstance(dropped, _Step) else 1
            self._count -= n
            excess -= n
            first += 1
        while len(marks) >= 2 and marks[1][1] <= first:
            marks.popleft()
        if dropped is None:
            return
        if isinstance(dropped, _Step):
            rv: int | None = dropped.rv
        else:
            rv = _change_rv(dropped)
        floor = self._floor
        if rv is None:
            self._floor = math.inf  # not decimal: never answer
        elif floor is None or rv > floor:
            self._floor = rv  # the versions grow in apply order: the newest dropped

    def _notify(self, event: HistoryEvent) -> None:
        for fn in tuple(self._listeners):
            try:
                fn(event)
            except Exception:
                log.exception("an event history listener raised; it is removed")
                try:
                    self._listeners.remove(fn)
                except ValueError:
                    pass
