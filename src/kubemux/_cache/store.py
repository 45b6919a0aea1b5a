"""The informer's cache: a read-only view keyed by (namespace, name).

Consistency model: a :class:`Store` is eventually consistent with the API server and ordered
per object: every change to one object is applied in the order the server sent it. Reads are
synchronous and never block; they see the state after the last applied event. After a RELIST
the contents are swapped in one step, so a reader never sees half an old list and half a new
one.

Representation: each object is kept as its JSON bytes alone, in a dict per namespace keyed
by name (namespace, name and resourceVersion are all known from there and from the bytes:
see :mod:`kubemux._wire.codec`); an entry is built around the bytes when one is asked for. An
object whose resourceVersion is not in its bytes (a user transform changed it) is kept as
its :class:`~kubemux._wire.codec.PinnedEntry`. Nothing per object is visible to the cyclic
garbage collector (no per-object tuples or dicts), so a large cache costs the collector
nothing and about the size of the JSON in memory (1.07x for 50k 1.8 KB pods: bytes header,
name key and dict slot). :meth:`Store.get` and :meth:`Store.list`
decode on read and return fresh dicts that the caller owns; :meth:`Store.get_raw` and
:meth:`Store.list_raw` return the bytes for callers that pass JSON straight on.
"""

from __future__ import annotations

import builtins
import logging
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, ClassVar, NamedTuple

import anyio
import orjson

from .._resources import Resource
from .._wire import codec as _codec
from .._wire.codec import Entry, StoreChange, decode_entry, decode_raw
from .._wire.types import View
from .._wire.versions import rv_int
from .history import EventHistory, HistoryEvent
from .snapshot import Key, SortedNames, StoreSnapshot
from .stream import ChangeStream, StoreListener, release_sliced

__all__ = [
    "EventHistory",
    "HistoryEvent",
    "Indexer",
    "Key",
    "Replacement",
    "Store",
    "StoreListener",
    "StoreSizes",
    "StoreSnapshot",
    "StoreWriter",
    "Transform",
    "by_label",
    "by_owner",
    "drop_managed_fields",
    "object_key",
]

log = logging.getLogger(__name__)

Transform = _codec.Transform  # one definition: a function from an object to an object
Indexer = Callable[[Mapping[str, Any]], Iterable[str]]
_Items = dict[str, dict[str, "bytes | Entry"]]
"""namespace -> name -> the object's bytes (or its entry, if pinned); no empty inner dicts"""


def _kept(entry: Entry) -> bytes | Entry:
    """What a store keeps of an entry: the bytes alone when they hold its resourceVersion."""
    return entry.raw if type(entry) is Entry else entry


def _size(kept: bytes | Entry) -> int:
    """The object's size in bytes, of what a store keeps."""
    return len(kept) if isinstance(kept, bytes) else len(kept.raw)


def _entry(namespace: str, name: str, kept: bytes | Entry) -> Entry:
    """The entry of what a store keeps."""
    return Entry(namespace, name, None, kept) if isinstance(kept, bytes) else kept


_COMPACT_MIN = 64  # below this many objects, tables are small enough to keep
RELIST_SLICE = 500
"""Changes of a list announced between two yields to the event loop, by default."""


def drop_managed_fields(obj: dict[str, Any]) -> dict[str, Any]:
    """The default transform: drop ``metadata.managedFields`` (often half an object's size).

    The store recognises this function and does the same on the raw bytes, without decoding.
    """
    meta = obj.get("metadata")
    if isinstance(meta, dict):
        meta.pop("managedFields", None)
    return obj


def object_key(obj: Mapping[str, Any]) -> Key:
    """The (namespace, name) key of an object."""
    meta = obj.get("metadata") or {}
    return (meta.get("namespace") or "", meta.get("name") or "")


def by_label(label: str) -> Indexer:
    """An indexer by the value of one label: ``Store(..., indexers={"app": by_label("app")})``."""

    def index(obj: Mapping[str, Any]) -> Iterable[str]:
        value = ((obj.get("metadata") or {}).get("labels") or {}).get(label)
        return (value,) if isinstance(value, str) else ()

    return index


def by_owner(obj: Mapping[str, Any]) -> Iterable[str]:
    """An indexer by owner: ``"Kind/name"`` of every ownerReference (e.g. ``ReplicaSet/web-7d4``)."""
    refs = (obj.get("metadata") or {}).get("ownerReferences") or ()
    return tuple(f"{r.get('kind')}/{r.get('name')}" for r in refs if isinstance(r, dict))


class Store:
    """A read-only cache of one resource in one context.

    Args:
        resource: What is cached.
        transform: Applied to every object before it is stored. The default,
            :func:`drop_managed_fields`, runs on the raw bytes; ``None`` stores objects as
            sent; any other function costs a full decode and re-encode per object.
        indexers: Named functions returning index values for an object (see :func:`by_label`
            and :func:`by_owner`); query with :meth:`by_index`. Namespaces are always indexed.
    """

    __slots__ = (
        "_by_index",
        "_bytes",
        "_count",
        "_cow",
        "_drop_mf",
        "_floor",
        "_history",
        "_indexers",
        "_items",
        "_keyvals",
        "_owned",
        "_peak",
        "_reads",
        "_rv",
        "_snap",
        "_sorted",
        "_stream",
        "_synced",
        "_transform",
        "_type_prefix",
        "_writer",
        "resource",
    )

    view: ClassVar[View] = View.OBJECTS
    """What this store holds of each object (a :class:`~kubemux.TableStore`: its row)."""

    def __init__(
        self,
        resource: Resource,
        *,
        transform: Transform | None = drop_managed_fields,
        indexers: Mapping[str, Indexer] | None = None,
    ) -> None:
        self.resource = resource
        self._rv: int | str = ""  # the last entry's rv (a pinned one's may be an int)
        self._drop_mf = transform is drop_managed_fields
        self._transform = None if transform is drop_managed_fields else transform
        self._items: _Items = {}
        self._count = 0
        self._bytes = 0  # the sum of len(entry.raw): kept by _apply and commit, never scanned
        self._peak = _COMPACT_MIN  # what the hash tables were grown for (see _compact)
        self._indexers: dict[str, Indexer] = dict(indexers or {})
        self._by_index: dict[str, dict[str, set[Key]]] = {n: {} for n in self._indexers}
        self._keyvals: dict[Key, tuple[tuple[str, ...], ...]] = {}
        self._synced = False
        self._floor: int | None = None  # the next full list must not be older (a handover)
        self._reads = 0  # bumped by reads: how the registry tells a store in use (idle reaping)
        # copy-on-write for snapshots: once one is taken (_cow), a bucket is copied the first
        # time it changes (then it is in _owned) until every bucket is new again (a commit)
        self._cow = False
        self._owned: set[str] = set()
        self._snap: StoreSnapshot | None = None  # the last one taken
        self._sorted: SortedNames = {}
        self._history: EventHistory | None = None  # made when first asked for (see history)
        self._stream = ChangeStream(self)  # the listeners: the writer announces through it
        self._writer = self._make_writer()
        self._type_prefix = (
            b'"kind":'
            + orjson.dumps(resource.kind)
            + b',"apiVersion":'
            + orjson.dumps(resource.api_version)
            + b","
            if resource.kind
            else b""
        )

    # ---------------------------------------------------------------- reads
    @property
    def resource_version(self) -> str:
        """The resourceVersion of the last applied change (or list), as the server sent it."""
        rv = self._rv
        return rv if isinstance(rv, str) else str(rv)

    @resource_version.setter
    def resource_version(self, value: str) -> None:
        self._rv = value

    @property
    def has_synced(self) -> bool:
        """True once the first LIST has been applied."""
        return self._synced

    @property
    def writer(self) -> StoreWriter:
        """The one way to change this store (an informer's, a share follower's, an engine's);
        readers never need it."""
        return self._writer

    @property
    def history(self) -> EventHistory:
        """The changes applied to this store, bounded by count and by age (see
        :class:`~kubemux.EventHistory`); fed by :attr:`writer`, whoever writes.

        It records from the first time it is asked for (until then a store pays nothing
        for it): ``since()`` answers from the store's resourceVersion of that moment on.
        """
        history = self._history
        if history is None:
            history = self._history = EventHistory()
            if self._synced:
                history.listed(self.resource_version, (), relist=False)
            self._stream.add(history)
        return history

    def snapshot(self) -> StoreSnapshot:
        """The store's objects at this instant (at :attr:`resource_version`), immutable.

        Costs O(namespaces) at most (the per-namespace dicts are shared, copied by the
        writer when it next changes them); a store unchanged since the last snapshot
        returns that one. Not counted as a read (idle reaping): its reader's requests are.
        """
        snap = self._snap
        if (
            snap is not None
            and self._cow
            and not self._owned
            and snap.resource_version == (self.resource_version)
        ):
            return snap
        items = self._items
        cache = self._sorted
        for ns in [ns for ns, (bucket, _) in cache.items() if items.get(ns) is not bucket]:
            del cache[ns]  # no longer the store's bucket: its snapshots sort it again
        snap = self._snap = StoreSnapshot(dict(items), self._count, self.resource_version, cache)
        self._cow = True
        self._owned = set()
        return snap

    def _get(self, namespace: str | None, name: str) -> Entry | None:
        ns = namespace or ""
        bucket = self._items.get(ns)
        kept = None if bucket is None else bucket.get(name)
        return None if kept is None else _entry(ns, name, kept)

    def _get_kept(self, namespace: str | None, name: str) -> bytes | Entry | None:
        bucket = self._items.get(namespace or "")
        return None if bucket is None else bucket.get(name)

    def get(self, namespace: str | None, name: str) -> dict[str, Any] | None:
        """The object as a fresh dict, or ``None``.

        Use ``None`` or ``""`` as namespace for cluster-scoped objects. Costs one JSON decode.
        """
        self._reads += 1
        kept = self._get_kept(namespace, name)
        if kept is None:
            return None
        return decode_raw(kept) if isinstance(kept, bytes) else kept.decode()

    def get_raw(self, namespace: str | None, name: str) -> bytes | None:
        """The object's JSON bytes, or ``None``. Costs nothing."""
        self._reads += 1
        kept = self._get_kept(namespace, name)
        return kept if kept is None or isinstance(kept, bytes) else kept.raw

    def list(self, namespace: str | None = None) -> builtins.list[dict[str, Any]]:
        """All objects, or those of one namespace, sorted by (namespace, name)."""
        self._reads += 1
        return [e.decode() for e in self._entries(namespace)]

    def list_raw(self, namespace: str | None = None) -> builtins.list[bytes]:
        """Like :meth:`list`, as JSON bytes."""
        self._reads += 1
        items = self._items
        out: builtins.list[bytes] = []
        for ns in sorted(items) if namespace is None else (namespace,):
            bucket = items.get(ns)
            if bucket is not None:
                out.extend(
                    v if isinstance(v, bytes) else v.raw
                    for v in map(bucket.__getitem__, sorted(bucket))
                )
        return out

    def _entries(self, namespace: str | None) -> builtins.list[Entry]:
        items = self._items
        if namespace is not None:
            bucket = items.get(namespace)
            return (
                [] if bucket is None else [_entry(namespace, n, bucket[n]) for n in sorted(bucket)]
            )
        out: builtins.list[Entry] = []
        for ns in sorted(items):
            bucket = items[ns]
            out.extend(_entry(ns, n, bucket[n]) for n in sorted(bucket))
        return out

    def keys(self) -> builtins.list[Key]:
        """Every (namespace, name) key, sorted."""
        self._reads += 1
        return [(ns, name) for ns in sorted(self._items) for name in sorted(self._items[ns])]

    def namespaces(self) -> builtins.list[str]:
        """Namespaces that currently hold at least one object."""
        self._reads += 1
        return sorted(self._items)

    def by_index(self, index: str, value: str) -> builtins.list[dict[str, Any]]:
        """Objects whose indexer ``index`` returned ``value``.

        Raises:
            KeyError: no indexer of that name.
        """
        self._reads += 1
        keys = self._by_index[index].get(value, ())
        return [e.decode() for k in sorted(keys) if (e := self._get(*k)) is not None]

    def add_indexer(self, name: str, indexer: Indexer) -> None:
        """Add an index over the current contents and every later change.

        Costs one decode per cached object now. Adding a name that exists is a no-op.
        """
        if name in self._indexers:
            return
        old_names = builtins.list(self._indexers)
        self._indexers[name] = indexer
        table: dict[str, set[Key]] = {}
        self._by_index[name] = table
        for entry in self._entries(None):
            key = (entry.namespace, entry.name)
            values = tuple(indexer(entry.decode()))
            prev = self._keyvals.get(key, tuple(() for _ in old_names))
            self._keyvals[key] = (*prev, values)
            for value in values:
                table.setdefault(value, set()).add(key)

    def index_values(self, index: str) -> builtins.list[str]:
        """The values an indexer currently holds."""
        self._reads += 1
        return sorted(self._by_index[index])

    def __len__(self) -> int:
        return self._count

    def __contains__(self, key: object) -> bool:
        if not isinstance(key, tuple) or len(key) != 2:
            return False
        self._reads += 1
        bucket = self._items.get(key[0])
        return bucket is not None and key[1] in bucket

    def __iter__(self) -> Iterator[Key]:
        return iter(self.keys())

    def __repr__(self) -> str:
        return (
            f"<Store {self.resource.name} objects={self._count} "
            f"synced={self._synced} rv={self.resource_version!r}>"
        )

    # ------------------------------------------------------------- mutation
    # Through the writer (:attr:`writer`): these are its implementation.

    def _make_writer(self) -> StoreWriter:
        return StoreWriter(self)

    def _prepare(self, raw: bytes, *, from_list: bool = False) -> Entry:
        """Turn one object's bytes into an entry (raises msgspec errors on bad input)."""
        return decode_entry(
            raw,
            drop_managed_fields=self._drop_mf,
            transform=self._transform,
            type_prefix=self._type_prefix if from_list else b"",
        )

    def _prepare_object(self, obj: Mapping[str, Any]) -> Entry:
        return self._prepare(orjson.dumps(obj))

    def _index_values(self, entry: Entry) -> tuple[tuple[str, ...], ...]:
        obj = entry.decode()
        return tuple(tuple(fn(obj)) for fn in self._indexers.values())

    def _index_add(self, key: Key, vals: tuple[tuple[str, ...], ...]) -> None:
        self._keyvals[key] = vals
        for table, values in zip(self._by_index.values(), vals, strict=True):
            for value in values:
                table.setdefault(value, set()).add(key)

    def _index_remove(self, key: Key) -> None:
        vals = self._keyvals.pop(key, ())
        for table, values in zip(self._by_index.values(), vals, strict=False):
            for value in values:
                _discard(table, value, key)

    def _own(self, ns: str) -> dict[str, bytes | Entry]:
        """The bucket of ``ns``, copied first if a snapshot may share it."""
        bucket = self._items[ns] = dict(self._items[ns])
        self._owned.add(ns)
        return bucket

    def _apply(self, event_type: str, entry: Entry) -> StoreChange | None:
        """Apply one watch event; returns what changed, or None if nothing did."""
        if entry.rv:  # as the entry has it: made a string when read
            self._rv = entry.rv
        items = self._items
        ns, name = entry.namespace, entry.name
        bucket = items.get(ns)
        if event_type == "DELETED":
            if bucket is None or name not in bucket:
                return None
            if self._cow and ns not in self._owned:
                bucket = self._own(ns)
            gone = bucket.pop(name)
            old: Entry | None = _entry(ns, name, gone)
            if not bucket:
                del items[ns]  # no empty buckets: memory is bounded by live objects
            self._count -= 1
            self._bytes -= _size(gone)
            if self._indexers:
                self._index_remove((ns, name))
            if self._count * 4 < self._peak:
                self._compact()
            change = StoreChange("DELETED", entry, old)
            for changed in self._stream.on_changed:
                try:  # free in CPython 3.11+ until something raises
                    changed(change)
                except Exception as exc:  # noqa: BLE001 - a listener's bug: logged, removed
                    self._stream.failed(changed, exc)
            return change
        if bucket is None:
            bucket = items[ns] = {}
            if self._cow:
                self._owned.add(ns)
        elif self._cow and ns not in self._owned:
            bucket = self._own(ns)
        kept = bucket.get(name)
        bucket[name] = entry.raw if type(entry) is Entry else entry  # _kept(), inlined
        old = kept if kept is None or not isinstance(kept, bytes) else Entry(ns, name, None, kept)
        if old is None:
            self._count += 1
            self._bytes += len(entry.raw)
            if self._count > self._peak:  # noqa: PLR1730 - cheaper than max() on the hot path
                self._peak = self._count
        else:
            self._bytes += len(entry.raw) - len(old.raw)
        if self._indexers:
            self._index_remove((ns, name))
            self._index_add((ns, name), self._index_values(entry))
        change = StoreChange("ADDED" if old is None else "MODIFIED", entry, old)
        for changed in self._stream.on_changed:
            try:
                changed(change)
            except Exception as exc:  # noqa: BLE001 - a listener's bug: logged, removed
                self._stream.failed(changed, exc)
        return change

    def _bookmark(self, resource_version: str) -> None:
        """The server's resourceVersion moved with no object change."""
        self._rv = resource_version
        self._stream.tell("bookmarked", resource_version)

    def _compact(self) -> None:
        """Give hash tables back after mass deletes (dicts and sets never shrink by themselves).

        Runs when the store has shrunk to a quarter of its peak, so its cost is amortised
        over the deletes that led to it.
        """
        self._peak = max(self._count, _COMPACT_MIN)
        self._items = {ns: dict(bucket) for ns, bucket in self._items.items()}
        self._cow, self._owned = False, set()  # every bucket is new: shared with no snapshot
        if self._indexers:
            self._keyvals = dict(self._keyvals)
            self._by_index = {
                name: {value: set(keys) for value, keys in table.items()}
                for name, table in self._by_index.items()
            }

    def _apply_object(self, event_type: str, obj: Mapping[str, Any]) -> StoreChange | None:
        """:meth:`_apply` for a decoded object (tests and static data)."""
        return self._apply(event_type, self._prepare_object(obj))

    def _replace(
        self, entries: Iterable[Entry], resource_version: str
    ) -> builtins.list[StoreChange]:
        """Swap in a full list in one step and announce it at once; returns the changes a
        watcher would have seen. See :class:`Replacement` for the sliced form an informer
        uses."""
        replacement = Replacement(self)
        for entry in entries:
            replacement.add(entry)
        replacement._start_over_if_older(resource_version)
        for _ in replacement._find_deleted(slice_size=self._count + 1):
            pass
        changes, relist = replacement._swap(resource_version)
        self._stream.tell("listed", resource_version, changes, relist=relist)
        self._stream.tell("announced", changes, resource_version)
        return changes

    def _clear(self) -> None:
        self._items = {}
        self._count = 0
        self._bytes = 0
        self._peak = _COMPACT_MIN
        self._by_index = {n: {} for n in self._indexers}
        self._keyvals = {}
        self._synced = False
        self._cow, self._owned, self._snap = False, set(), None
        self._sorted = {}
        self._stream.unannounced = {}
        self._stream.tell("cleared")


class StoreSizes(NamedTuple):
    """What a store holds: objects, and the bytes of their JSON as kept."""

    objects: int
    bytes: int


class StoreWriter:
    """The one public way to change a :class:`Store`: for an informer, a shared-watch
    follower, or any engine that fills a store (``store.writer``). Readers keep the
    read-only :class:`Store`.

    Every byte string that enters the store passes :meth:`prepare` (or a decoder that
    applies the same check, :func:`kubemux._wire.codec.check_readable`): what no reader could
    decode is refused, never cached. The writer is the one thing that announces the store's
    changes: every change goes to its listeners (:meth:`add_listener`; the store's
    :attr:`~Store.history` is one), in apply order, whoever writes; nobody passes a change
    on by hand. Changes to one object must be applied in the server's order; one writer at
    a time, on the store's event loop (it is not thread-safe).

    Attributes:
        apply: ``apply(type, entry) -> StoreChange | None``: one watch event (``ADDED``,
            ``MODIFIED``, ``DELETED``); None if nothing changed (a delete of an object
            not held). The store's resourceVersion becomes the entry's.
        prepare: ``prepare(raw, *, from_list=False) -> Entry``: one object's bytes as an
            entry, the store's transform applied (``from_list``: the item of a LIST, which
            carries no kind). Raises one of ``kubemux._wire.codec.DecodeError``.
    """

    __slots__ = ("_store", "apply", "prepare")

    def __init__(self, store: Store) -> None:
        self._store = store
        # the store's own methods: the hot path pays no extra call
        self.apply: Callable[[str, Entry], StoreChange | None] = store._apply
        self.prepare: Callable[..., Entry] = store._prepare

    def __repr__(self) -> str:
        return f"<StoreWriter of {self._store!r}>"

    @property
    def transform(self) -> Transform | None:
        """The store's transform, if not the default (None: objects are kept as sent,
        ``managedFields`` dropped or not as :attr:`drops_managed_fields` says)."""
        return self._store._transform

    @property
    def drops_managed_fields(self) -> bool:
        """Whether ``metadata.managedFields`` is cut out of the bytes (the default)."""
        return self._store._drop_mf

    def set_resource_version(self, resource_version: str) -> None:
        """The server's resourceVersion moved with no object change (a bookmark): the
        store's moves, the history's listeners get a ``BOOKMARK``."""
        self._store._bookmark(resource_version)

    def add_listener(self, listener: StoreListener) -> Callable[[], None]:
        """Have ``listener`` hear every change from now on (see :class:`StoreListener`);
        returns the function that removes it (idempotent). To start from what the store
        holds, read :meth:`announced_entries` in the same synchronous step."""
        return self._store._stream.add(listener)

    def announced_entries(self, namespace: str | None = None) -> builtins.list[Entry]:
        """The objects as the store's listeners have been told so far (of one namespace, if
        given), sorted: the store, less the changes of a list still being announced (their
        old entries instead). Not a read (idle reaping does not count it)."""
        store = self._store
        return store._stream.announced(store._entries(namespace), namespace)

    def replacement(self) -> Replacement:
        """A full list to build beside the store (in slices) and swap in at once with
        :meth:`Replacement.commit`; objects missing from it come back as DELETED."""
        return Replacement(self._store)

    def replace(
        self, entries: Iterable[Entry], resource_version: str
    ) -> builtins.list[StoreChange]:
        """Swap a full list in, in one step, and announce its changes at once (small lists:
        tests, static data); returns the changes a watcher would have seen."""
        return self._store._replace(entries, resource_version)

    def set_floor(self, resource_version: str) -> None:
        """The next full list must not be older than ``resource_version`` (a decimal one;
        else nothing is checked): one that is starts the store over (cleared, so its
        watches end, then listed as new) rather than showing a past after a newer present.
        Set when a same-cluster reload hands a synced store to a new informer."""
        rv = rv_int(resource_version)
        self._store._floor = rv

    def clear(self) -> None:
        """Empty the store (its context stopped or reloaded): not synced any more; its
        listeners hear :meth:`~StoreListener.cleared` (the history's a ``RESET``)."""
        self._store._clear()

    def entries(self, namespace: str | None = None) -> builtins.list[Entry]:
        """Every object held (of one namespace, if given), sorted, as entries. Not a read."""
        return self._store._entries(namespace)

    def entry(self, namespace: str | None, name: str) -> Entry | None:
        """The entry of one object held, or None. Not a read (idle reaping does not count it)."""
        return self._store._get(namespace, name)

    def reads(self) -> int:
        """Reads of the store so far (``get``, ``list``...): how its owner tells a store in
        use from one nobody reads (idle reaping)."""
        return self._store._reads

    def sizes(self) -> StoreSizes:
        """Objects held and their bytes (kept up to date by the writer: nothing scanned)."""
        store = self._store
        return StoreSizes(store._count, store._bytes)


class Replacement:
    """A full list being built beside a store, then swapped in and announced with
    :meth:`commit`.

    The informer adds a relist's entries in slices, yielding to the event loop in between;
    the store keeps serving the old contents until the swap, which is O(1). So a 50k-object
    relist is atomic for readers and never stalls the loop. Objects missing from the new
    list come back as DELETED (deletes missed while away), changed ones (another
    resourceVersion) as MODIFIED, new ones as ADDED, unchanged ones not at all.
    """

    __slots__ = ("_by_index", "_bytes", "_changes", "_count", "_items", "_keyvals", "_store")

    def __init__(self, store: Store) -> None:
        self._store = store
        self._items: _Items = {}
        self._count = 0
        self._bytes = 0
        self._by_index: dict[str, dict[str, set[Key]]] = {n: {} for n in store._indexers}
        self._keyvals: dict[Key, tuple[tuple[str, ...], ...]] = {}
        self._changes: builtins.list[StoreChange] = []

    def __len__(self) -> int:
        return self._count

    def add(self, entry: Entry) -> None:
        """One object of the new list."""
        ns, name = entry.namespace, entry.name
        bucket = self._items.get(ns)
        if bucket is None:
            bucket = self._items[ns] = {}
        prev = bucket.get(name)
        if prev is None:
            self._count += 1
            self._bytes += len(entry.raw)
        else:  # listed twice (a continue token that overlapped): the last one stays
            self._bytes += len(entry.raw) - _size(prev)
        bucket[name] = _kept(entry)
        store = self._store
        if store._indexers:
            key = (ns, name)
            vals = store._index_values(entry)
            self._keyvals[key] = vals
            for table, values in zip(self._by_index.values(), vals, strict=True):
                for value in values:
                    table.setdefault(value, set()).add(key)
        kept = store._get_kept(ns, name)
        if kept is None:
            self._changes.append(StoreChange("ADDED", entry, None))
        elif not _same_version(kept, entry):
            self._changes.append(StoreChange("MODIFIED", entry, _entry(ns, name, kept)))

    async def commit(self, resource_version: str, *, slice_size: int = RELIST_SLICE) -> int:
        """Swap the new list in at ``resource_version`` and announce what changed; returns
        how many changes there were.

        Runs in slices of ``slice_size`` objects, yielding to the event loop between them:
        the objects missing from the new list are found, the list is swapped in (one step;
        the store's listeners hear :meth:`~StoreListener.listed`), then the changes are
        announced (:meth:`~StoreListener.announced`) and let go. Until a change is
        announced, :meth:`StoreWriter.announced_entries` reports the object as it was.

        Cancellation before the swap leaves the store as it was; after it, the changes not
        announced yet are announced at once (listeners are never left behind the store).
        A list older than the store's floor (:meth:`StoreWriter.set_floor`) starts it over.
        """
        self._start_over_if_older(resource_version)
        for _ in self._find_deleted(slice_size):
            await anyio.lowlevel.checkpoint()
        changes, relist = self._swap(resource_version)
        count = len(changes)
        await self._store._stream.announce(
            changes, resource_version, relist=relist, step=slice_size
        )
        await release_sliced(changes, slice_size)
        return count

    def _start_over_if_older(self, resource_version: str) -> None:
        """The first list after a handover (the store has a floor): if it is older than what
        the store has shown, clear the store (its listeners hear it: the history's watches
        end, subscribers get a RESET) and make this list a first one (every object ADDED).
        Never a past after a newer present: a watcher resuming from what it saw would ask
        the server for a future."""
        store = self._store
        floor, store._floor = store._floor, None
        rv = rv_int(resource_version)
        if floor is None or rv is None or rv >= floor or not store._synced:
            return
        log.warning(
            "%r: a list at resourceVersion %s is older than the %s it had shown; its watches "
            "end and it starts over",
            store,
            rv,
            floor,
        )
        store._clear()
        self._changes = [
            StoreChange("ADDED", _entry(ns, name, kept), None)
            for ns, bucket in self._items.items()
            for name, kept in bucket.items()
        ]

    def _find_deleted(self, slice_size: int) -> Iterator[None]:
        """Record the old objects missing from the new list; yields every ``slice_size``."""
        new = self._items
        i = 0
        for ns, bucket in self._store._items.items():
            new_bucket = new.get(ns, {})
            for name, kept in bucket.items():
                if name not in new_bucket:
                    old = _entry(ns, name, kept)
                    self._changes.append(StoreChange("DELETED", old, old))
                i += 1
                if i % slice_size == 0:
                    yield

    def _swap(self, resource_version: str) -> tuple[builtins.list[StoreChange], bool]:
        """Swap the new list in, in one step; (its changes, whether the store was synced)."""
        store = self._store
        synced = store._synced
        store._items = self._items
        store._cow, store._owned = False, set()  # every bucket is new
        store._count = self._count
        store._bytes = self._bytes
        store._peak = max(self._count, _COMPACT_MIN)
        store._by_index = self._by_index
        store._keyvals = self._keyvals
        store.resource_version = resource_version
        store._synced = True
        changes, self._changes = self._changes, []
        return changes, synced


def _same_version(kept: bytes | Entry, entry: Entry) -> bool:
    """Does a relist's ``entry`` have the resourceVersion of what the store keeps? (None
    known: no.) Equal bytes that both hold their resourceVersion have the same one; else
    the versions are read (from the bytes if need be) and compared in compact form."""
    if type(kept) is bytes and type(entry) is Entry and kept == entry.raw:
        return bool(entry.rv if entry.rv is not None else entry.compact_rv())
    rv = entry.compact_rv()
    old_rv = _entry("", "", kept).compact_rv()
    return bool(rv) and rv == old_rv


def _discard(table: dict[str, set[Key]], value: str, key: Key) -> None:
    bucket = table.get(value)
    if bucket is not None:
        bucket.discard(key)
        if not bucket:
            del table[value]  # no empty buckets: memory is bounded by live objects
