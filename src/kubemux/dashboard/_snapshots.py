"""Encoded table snapshots, shared by every stream (:class:`SnapshotCache`)."""

from __future__ import annotations

from collections import OrderedDict

import anyio
import anyio.lowlevel

from kubemux import MultiTableStore, Resource, Store, TableColumn, TableStore

from ._encoding import BATCH, encode_event
from ._rows import row_change

__all__ = ["SLICE", "SnapshotCache"]

SLICE = 100  # objects summarised between two checkpoints

Version = tuple[str, int, tuple[TableColumn, ...]]


class _Snapshot:
    __slots__ = ("events", "rows", "store", "version")

    def __init__(
        self, store: Store, version: Version, events: list[bytes], rows: dict[bytes, bytes]
    ) -> None:
        self.store = store
        self.version = version
        self.events = events
        self.rows = rows


class SnapshotCache:
    """Encoded table snapshots, shared by every stream.

    One entry per (context, resource, namespace): the ``changes`` events (``BATCH`` rows
    each) that replay a table view's store (its ``columns`` event is the stream's to send,
    :meth:`~._encoding.Encodings.columns_event`), valid while the store is
    the same object at the same resourceVersion, size and columns. Concurrent streams wanting the same snapshot wait for one
    encoding. An entry also keeps each object's encoded row (by the object's bytes), so the
    next encoding, after a few changes, summarises only the objects that changed. At most
    ``max_entries`` entries (least recently used go first). :attr:`scoped` keeps the table
    views over a user's readable namespaces (a forbidden cluster-wide LIST), which
    ``registry.store()`` does not name, for every stream's snapshot.
    """

    def __init__(self, max_entries: int = 256) -> None:
        self.max_entries = max_entries
        self.encodings = 0  # snapshots encoded (for tests and benches)
        self.summarized = 0  # objects summarised for snapshots (for tests and benches)
        self._entries: OrderedDict[tuple[str, str, str | None], _Snapshot] = OrderedDict()
        self._busy: dict[tuple[str, str, str | None], anyio.Event] = {}
        # (context, resource) -> a table view over the namespaces the context's user may
        # read (its cluster-wide LIST was forbidden): registry.store() does not name it
        self.scoped: dict[tuple[str, str], TableStore | MultiTableStore] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def clear(self) -> None:
        self._entries.clear()
        self.scoped.clear()

    async def events(
        self,
        context: str,
        resource: Resource,
        namespace: str | None,
        store: TableStore | MultiTableStore,
    ) -> list[bytes]:
        """The ``changes`` events that replay ``store`` (filtered by ``namespace``)."""
        key = (context, resource.name, namespace)
        while True:
            version = (_resource_version(store), len(store), store.columns)
            entry = self._entries.get(key)
            if entry is not None and entry.store is store and entry.version == version:
                self._entries.move_to_end(key)
                return entry.events
            busy = self._busy.get(key)
            if busy is None:
                break
            await busy.wait()  # somebody encodes it: theirs is likely what we need
        done = self._busy[key] = anyio.Event()
        try:
            known = entry.rows if entry is not None else {}
            raws = store.list_raw(namespace)  # the store at one instant; slices follow it
            rows: dict[bytes, bytes] = {}
            events: list[bytes] = []
            fresh = 0
            for start in range(0, len(raws), BATCH):
                batch = []
                for raw in raws[start : start + BATCH]:
                    row = known.get(raw)
                    if row is None:
                        row = row_change("ADDED", context, raw)
                        fresh += 1
                        if row is None:
                            continue  # skipped alone (logged): the others go on
                        if fresh % SLICE == 0:
                            await anyio.lowlevel.checkpoint()  # the event loop stays responsive
                    rows[raw] = row
                    batch.append(row)
                events.append(encode_event("changes", b"[" + b",".join(batch) + b"]"))
            self.encodings += 1
            self.summarized += fresh
            self._entries[key] = _Snapshot(store, version, events, rows)
            self._entries.move_to_end(key)
            while len(self._entries) > self.max_entries:
                self._entries.popitem(last=False)
            return events
        finally:
            del self._busy[key]
            done.set()


def _resource_version(store: Store) -> str:
    """A store's resourceVersion; a multi-namespace view's, that of each namespace."""
    if isinstance(store, MultiTableStore):
        return ",".join(part.resource_version for part in store.stores.values())
    return store.resource_version
