"""Kubernetes Events grouped by the object they are about.

An :class:`EventIndex` keeps one *bucket* per object (``(kind, namespace, name)``) that currently
has at least one Event, and **a bucket exists only while it holds an event**: deleting, evicting
or relisting away an object's last event drops its bucket, and no other per-object or per-event
structure outlives the events it was for. This is the fix for the leak in Flyte's executor
(flyteorg/flyte#7992), which kept one bucket per object forever: 200,000 churned objects left
200,000 empty buckets behind.

The index is plain synchronous code with no I/O and no locks. It is meant to be mutated from one
thread (the informer's event loop); reads return new lists, never internal containers, so a
caller may hold and iterate a result while the index keeps changing. Like the informer feeding
it, it is eventually consistent and ordered per event.

Both Event shapes are accepted, and may be mixed:

* ``events.k8s.io/v1``: the object is ``regarding``; timestamps are ``series.lastObservedTime``,
  ``eventTime``, ``deprecatedLastTimestamp``, ``deprecatedFirstTimestamp``.
* core ``v1``: the object is ``involvedObject``; timestamps are ``series.lastObservedTime``,
  ``eventTime``, ``lastTimestamp``, ``firstTimestamp``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from itertools import count
from typing import Any, Final

from .._wire.codec import Entry

__all__ = ["EventIndex", "EventIndexStatistics", "ObjectRef", "event_time", "event_timestamp"]

ObjectRef = tuple[str, str, str]
"""``(kind, namespace, name)`` of the object an Event is about; namespace ``""`` when cluster-scoped."""

Event = Mapping[str, Any] | Entry
"""An event as a mapping, or as the informer's cached entry (decoded when needed)."""

_EventKey = tuple[str, str]
"""An Event's own identity: ``(metadata.namespace, metadata.name)``, else ``(namespace, "uid:<uid>")``."""

_ADDED: Final = "ADDED"
_MODIFIED: Final = "MODIFIED"
_DELETED: Final = "DELETED"

# The timestamps that say when an Event last happened, best first. The first one present and
# parseable wins; ``metadata.creationTimestamp`` is the last resort.
_TIME_FIELDS: Final = (
    "eventTime",
    "lastTimestamp",
    "deprecatedLastTimestamp",
    "firstTimestamp",
    "deprecatedFirstTimestamp",
)

# Internal dicts never shrink when keys are deleted (a CPython dict keeps its table), so after a
# big churn an empty-looking dict could still hold megabytes. An emptied dict is replaced by a
# fresh one, and a big one rebuilt once it has fallen to a quarter of its high-water mark; the
# copy costs O(live) and is paid for by the deletions.
_COMPACT_MIN: Final = 1024


@dataclass(frozen=True, slots=True, kw_only=True)
class EventIndexStatistics:
    """A snapshot of an :class:`EventIndex`.

    Attributes:
        buckets: Objects that currently have at least one event (``len(index)``).
        events: Events currently held.
        evicted_by_cap: Events dropped, since the index was created, to keep
            ``max_events_per_object``. Counts evictions, not distinct events: an event evicted,
            updated by the server and evicted again counts twice.
        evicted_by_age: Events dropped, since the index was created, for being older than
            ``max_age`` (on arrival, on a later arrival for the same object, or by ``prune()``).
    """

    buckets: int
    events: int
    evicted_by_cap: int
    evicted_by_age: int


class _Held:
    """One held event. ``(time, seq)`` orders them; higher is newer.

    ``event`` is the mapping given, or the informer's cached :class:`~kubemux._wire.codec.Entry`
    itself (the bytes its store holds: an event is cached once, decoded when read).
    """

    __slots__ = ("event", "ref", "seq", "time")

    def __init__(self, event: Event, ref: ObjectRef, stamp: float, seq: int) -> None:
        self.event = event
        self.ref = ref
        self.time = stamp
        self.seq = seq


def _order(entry: _Held) -> tuple[float, int]:
    return (entry.time, entry.seq)


def _item_order(item: tuple[_EventKey, _Held]) -> tuple[float, int]:
    return (item[1].time, item[1].seq)


def _mapping(value: object) -> Mapping[str, Any] | None:
    if type(value) is dict:  # decoded JSON: skip the slower ABC check
        return value
    return value if isinstance(value, Mapping) else None


def _parse_time(value: object) -> float | None:
    """RFC 3339 (``Z`` or offset, optional fraction) to POSIX seconds; naive means UTC."""
    if not isinstance(value, str) or not value:
        return None
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        return None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return parsed.timestamp()


def event_time(event: Mapping[str, Any]) -> float | None:
    """An Event's best timestamp in POSIX seconds, or ``None`` if it has none.

    The first present and parseable of ``series.lastObservedTime``, ``eventTime``,
    ``lastTimestamp``, ``deprecatedLastTimestamp``, ``firstTimestamp``,
    ``deprecatedFirstTimestamp``, ``metadata.creationTimestamp`` (both Event shapes). The
    one place kubemux dates an Event: the index orders by it and the dashboard shows it
    (:func:`event_timestamp` gives the text it came from).
    """
    found = _event_stamp(event)
    return None if found is None else found[1]


def event_timestamp(event: Mapping[str, Any]) -> str | None:
    """The RFC 3339 text :func:`event_time` read, or ``None``."""
    found = _event_stamp(event)
    return None if found is None else found[0]


def _event_stamp(event: Mapping[str, Any]) -> tuple[str, float] | None:
    series = _mapping(event.get("series"))
    candidates: list[object] = [series.get("lastObservedTime") if series is not None else None]
    candidates += [event.get(field) for field in _TIME_FIELDS]
    metadata = _mapping(event.get("metadata"))
    candidates.append(metadata.get("creationTimestamp") if metadata is not None else None)
    for value in candidates:
        parsed = _parse_time(value)
        if parsed is not None:
            assert isinstance(value, str)
            return value, parsed
    return None


def _event_key(event: Mapping[str, Any]) -> _EventKey | None:
    metadata = _mapping(event.get("metadata"))
    if metadata is None:
        return None
    namespace = metadata.get("namespace") or ""
    name = metadata.get("name")
    if name and isinstance(name, str):
        return (namespace, name)
    uid = metadata.get("uid")
    if uid and isinstance(uid, str):
        # Object names are DNS subdomains and cannot contain ":", so this never collides.
        return (namespace, "uid:" + uid)
    return None


def _object_ref(event: Mapping[str, Any]) -> ObjectRef | None:
    regarding = _mapping(event.get("regarding"))
    if regarding is None:
        regarding = _mapping(event.get("involvedObject"))
    if regarding is None:
        return None
    kind = regarding.get("kind")
    name = regarding.get("name")
    if not kind or not name:
        return None
    return (kind, regarding.get("namespace") or "", name)


class EventIndex:
    """Kubernetes Events grouped by the object they are about; a bucket goes with its last event.

    Feed it watch events with :meth:`apply` and relists with :meth:`replace` (the informer does;
    it also works standalone on event dicts), read it with :meth:`events_for`.

    Grouping: an event belongs to ``(kind, namespace, name)`` of its ``regarding`` object
    (``events.k8s.io/v1``) or ``involvedObject`` (core ``v1``); the namespace is the reference's,
    or ``""``. An event whose reference changes on ``MODIFIED`` moves buckets. Events with no
    identity (``metadata.name``, else ``metadata.uid``) or no object kind and name are ignored.

    Ordering ("newest first"): by the event's best timestamp, the first present of
    ``series.lastObservedTime``, ``eventTime``, ``lastTimestamp``, ``deprecatedLastTimestamp``,
    ``firstTimestamp``, ``metadata.creationTimestamp`` (RFC 3339, compared as instants). Events
    with equal timestamps are ordered by arrival, the last applied first: a watch delivers in
    resourceVersion order, so this is resourceVersion order. A relist keeps the arrival order of
    events whose ``resourceVersion`` did not change. An event with no usable timestamp is dated
    by when it first arrived (``clock()``).

    Limits (both optional):
        * ``max_events_per_object`` keeps the newest N events of each object; an older one is
          evicted when a newer one arrives (and an arriving event older than all N is dropped).
        * ``max_age`` (seconds) drops an arriving event already older than that, and the
          object's other too-old events with it. Objects that receive nothing are only aged by
          :meth:`prune`, which the owner should call periodically (it scans every event).

    Mappings given are stored as they are (no copy): treat what :meth:`events_for` returns
    as read-only. Cached entries given by an informer are stored as the same entry its store
    holds (an event is cached once) and decoded into a fresh dict when read. Not thread-safe:
    mutate from one thread.
    """

    __slots__ = (
        "_buckets",
        "_buckets_peak",
        "_clock",
        "_entries",
        "_entries_peak",
        "_evicted_by_age",
        "_evicted_by_cap",
        "_max_age",
        "_max_events",
        "_seq",
    )

    def __init__(
        self,
        *,
        max_events_per_object: int | None = None,
        max_age: float | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """Create an empty index.

        Args:
            max_events_per_object: Keep at most this many (the newest) events per object.
            max_age: Drop events whose timestamp is older than this many seconds.
            clock: Wall-clock time in POSIX seconds (event timestamps are wall-clock).
        """
        if max_events_per_object is not None and max_events_per_object < 1:
            raise ValueError(f"max_events_per_object must be >= 1, got {max_events_per_object}")
        if max_age is not None and not max_age > 0:
            raise ValueError(f"max_age must be > 0, got {max_age}")
        self._max_events = max_events_per_object
        self._max_age = max_age
        self._clock = clock
        # The only two containers; every entry of each is there because an event is held.
        self._buckets: dict[ObjectRef, dict[_EventKey, _Held]] = {}
        self._entries: dict[_EventKey, _Held] = {}
        self._buckets_peak = 0
        self._entries_peak = 0
        self._seq = count()
        self._evicted_by_cap = 0
        self._evicted_by_age = 0

    # --- mutation -----------------------------------------------------------------------------

    def apply(self, event_type: str, event: Event) -> None:
        """Apply one watch event: ``"ADDED"``, ``"MODIFIED"`` or ``"DELETED"``.

        Other types (``BOOKMARK``, ``ERROR``) are ignored, as is ``DELETED`` for an event the
        index does not hold. ``DELETED`` is matched by the event's identity alone.
        """
        if event_type in (_ADDED, _MODIFIED):
            self._upsert(event, None)
        elif event_type == _DELETED:
            key = _event_key(event.decode() if isinstance(event, Entry) else event)
            if key is not None:
                entry = self._entries.pop(key, None)
                if entry is not None:
                    self._unlink(key, entry)
                    self._compact()

    def replace(self, events: Iterable[Event]) -> None:
        """Make the index hold exactly ``events`` (after a relist).

        Events no longer listed are dropped with their buckets, as if deleted. Limits apply as
        on :meth:`apply`. If iterating ``events`` raises, the index is left as it was.
        """
        previous = self._entries
        previous_buckets = self._buckets
        self._entries = {}
        self._buckets = {}
        self._entries_peak = self._buckets_peak = 0
        try:
            for event in events:
                self._upsert(event, previous)
        except BaseException:
            self._entries = previous
            self._buckets = previous_buckets
            self._entries_peak = len(previous)
            self._buckets_peak = len(previous_buckets)
            raise

    def clear(self) -> None:
        """Drop every event and bucket (the eviction counters are kept)."""
        self._entries = {}
        self._buckets = {}
        self._entries_peak = self._buckets_peak = 0

    def prune(self, now: float | None = None) -> int:
        """Drop events older than ``max_age`` seconds before ``now`` (default ``clock()``).

        Scans every event. Returns how many were dropped; 0 when there is no ``max_age``.
        """
        if self._max_age is None:
            return 0
        cutoff = (self._clock() if now is None else now) - self._max_age
        stale = [(key, entry) for key, entry in self._entries.items() if entry.time < cutoff]
        for key, entry in stale:
            del self._entries[key]
            self._unlink(key, entry)
        self._evicted_by_age += len(stale)
        self._compact()
        return len(stale)

    # --- reads --------------------------------------------------------------------------------

    def events_for(self, kind: str, namespace: str | None, name: str) -> list[Mapping[str, Any]]:
        """The events about one object, newest first; ``[]`` if it has none.

        ``namespace`` ``None`` and ``""`` both mean cluster-scoped. The list is new; the
        mappings in it are the stored events themselves (read-only).
        """
        bucket = self._buckets.get((kind, namespace or "", name))
        if bucket is None:
            return []
        return [
            _mapping_of(held.event) for held in sorted(bucket.values(), key=_order, reverse=True)
        ]

    def objects(self) -> list[ObjectRef]:
        """The objects that currently have events, as ``(kind, namespace, name)``."""
        return list(self._buckets)

    def statistics(self) -> EventIndexStatistics:
        """Live counts and cumulative eviction counters."""
        return EventIndexStatistics(
            buckets=len(self._buckets),
            events=len(self._entries),
            evicted_by_cap=self._evicted_by_cap,
            evicted_by_age=self._evicted_by_age,
        )

    def __len__(self) -> int:
        """The number of buckets: objects that currently have at least one event."""
        return len(self._buckets)

    def __contains__(self, ref: object) -> bool:
        """Whether ``(kind, namespace, name)`` currently has events."""
        try:
            return ref in self._buckets
        except TypeError:  # unhashable
            return False

    def __repr__(self) -> str:
        return f"<EventIndex buckets={len(self._buckets)} events={len(self._entries)}>"

    # --- internals ----------------------------------------------------------------------------

    def _upsert(self, given: Event, previous: Mapping[_EventKey, _Held] | None) -> None:
        """Add or update ``given``. ``previous``: the pre-relist entries, during :meth:`replace`."""
        event = given.decode() if isinstance(given, Entry) else given
        key = _event_key(event)
        if key is None:
            return
        old = self._entries.get(key)
        prior = old if previous is None or old is not None else previous.get(key)
        ref = _object_ref(event)
        if ref is None:  # not (or no longer) about an object we can name
            if old is not None:
                del self._entries[key]
                self._unlink(key, old)
                self._compact()
            return

        stamp = event_time(event)
        now = 0.0
        if stamp is None or self._max_age is not None:
            now = self._clock()
        if stamp is None:
            stamp = prior.time if prior is not None else now
        if self._max_age is not None and stamp < now - self._max_age:
            if old is not None:
                del self._entries[key]
                self._unlink(key, old)
                self._compact()
            self._evicted_by_age += 1
            return

        if (
            previous is not None
            and prior is not None
            and (rv := _resource_version(event))
            and rv == _rv_of(prior.event)
        ):
            seq = prior.seq  # unchanged across the relist: keep its place among ties
        else:
            seq = next(self._seq)

        if old is not None and old.ref != ref:  # the event now regards another object
            self._unlink(key, old)
        entry = _Held(given, ref, stamp, seq)
        self._entries[key] = entry
        bucket = self._buckets.get(ref)
        if bucket is None:
            bucket = self._buckets[ref] = {}
        bucket[key] = entry
        self._entries_peak = max(self._entries_peak, len(self._entries))
        self._buckets_peak = max(self._buckets_peak, len(self._buckets))

        if len(bucket) > 1:
            self._limit(ref, bucket, now)

    def _limit(self, ref: ObjectRef, bucket: dict[_EventKey, _Held], now: float) -> None:
        """Enforce ``max_age`` and ``max_events_per_object`` on one (non-empty) bucket."""
        if self._max_age is not None:
            cutoff = now - self._max_age
            for key in [k for k, e in bucket.items() if e.time < cutoff]:
                del bucket[key]
                del self._entries[key]
                self._evicted_by_age += 1
        if self._max_events is not None:
            excess = len(bucket) - self._max_events
            if excess == 1:  # the usual case: one arrived, one goes
                oldest = [min(bucket.items(), key=_item_order)[0]]
            elif excess > 1:
                oldest = [key for key, _ in sorted(bucket.items(), key=_item_order)[:excess]]
            else:
                oldest = []
            for key in oldest:
                del bucket[key]
                del self._entries[key]
            self._evicted_by_cap += len(oldest)
        if not bucket:  # unreachable while the arriving event is the newest, kept for safety
            del self._buckets[ref]

    def _unlink(self, key: _EventKey, entry: _Held) -> None:
        """Remove ``entry`` from its bucket, dropping the bucket if that emptied it."""
        bucket = self._buckets.get(entry.ref)
        if bucket is None:
            return
        if bucket.get(key) is entry:
            del bucket[key]
        if not bucket:
            del self._buckets[entry.ref]

    def _compact(self) -> None:
        """Give back the tables of dicts that shrank a lot (CPython dicts never shrink)."""
        entries, buckets = len(self._entries), len(self._buckets)
        if entries == 0 and self._entries_peak:
            self._entries = {}
            self._entries_peak = 0
        elif self._entries_peak >= _COMPACT_MIN and entries * 4 < self._entries_peak:
            self._entries = dict(self._entries)
            self._entries_peak = entries
        if buckets == 0 and self._buckets_peak:
            self._buckets = {}
            self._buckets_peak = 0
        elif self._buckets_peak >= _COMPACT_MIN and buckets * 4 < self._buckets_peak:
            self._buckets = dict(self._buckets)
            self._buckets_peak = buckets


def _mapping_of(event: Event) -> Mapping[str, Any]:
    return event.decode() if isinstance(event, Entry) else event


def _rv_of(event: Event) -> str | None:
    return event.resource_version if isinstance(event, Entry) else _resource_version(event)


def _resource_version(event: Mapping[str, Any]) -> str | None:
    metadata = _mapping(event.get("metadata"))
    if metadata is None:
        return None
    rv = metadata.get("resourceVersion")
    return rv if isinstance(rv, str) else None
