"""What fills one slot from a FakeConnector."""

from __future__ import annotations

import copy
import dataclasses
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any

import anyio
import anyio.abc
import orjson

from ..._cache.store import Store
from ..._cache.table import FALLBACK_COLUMNS, TableStore
from ..._resources import Resource
from ..._wire.codec import Entry
from ..._wire.types import InformerKey, InformerState, InformerStatus
from .._wire.protocol import Selector

__all__ = ["FakeSource", "SourceHooks"]


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class SourceHooks:
    """What a :class:`FakeSource` asks of the connector that made it."""

    before_sync: Callable[[str, str], Awaitable[None]]
    """(context, resource): wait at a gate, or raise a scripted failure."""
    objects: Callable[[str, str], Iterable[Mapping[str, Any]]]
    """(context, resource): the objects now."""
    resource_version: Callable[[], str]
    started: Callable[[FakeSource], None]
    """Synced and receiving changes."""
    stopped: Callable[[FakeSource], None]


class FakeSource:
    """What fills one slot from a FakeConnector (the ``SlotSource`` protocol): its first
    sync takes the objects there are, then changes are applied as the connector makes them
    (:meth:`apply`, synchronously), all through the store's writer (which announces them)."""

    def __init__(
        self,
        context: str,
        resource: Resource,
        key: InformerKey,
        *,
        store: Store,
        on_state: Callable[[], None],
        hooks: SourceHooks,
    ) -> None:
        self._hooks = hooks
        self.context = context
        self.resource = resource
        self.key = key
        self.store = store
        self._on_state = on_state
        self._selector = Selector.parse(
            key.namespace if resource.namespaced else None,
            key.label_selector or "",
            key.field_selector or "",
        )
        self._state = InformerState.LISTING
        self._last_error: str | None = None
        self._last_sync: float | None = None
        self._synced = False
        self._events = 0
        self._crashed: BaseException | None = None
        self._wake: anyio.Event | None = None

    def __repr__(self) -> str:
        return f"<FakeSource {self.context}/{self.key} {self._state}>"

    @property
    def has_synced(self) -> bool:
        return self._synced

    async def run(self, *, task_status: anyio.abc.TaskStatus[None]) -> None:
        hooks = self._hooks
        name = self.resource.name
        try:
            await hooks.before_sync(self.context, name)
        except Exception as exc:
            self.report(InformerState.ERROR, str(exc))
            raise
        objects = hooks.objects(self.context, name)
        entries = [self._entry(o) for o in objects if self._selector.matches(o)]
        self.store.writer.replace(entries, hooks.resource_version())
        self._synced = True
        self._last_sync = time.time()
        self.report(InformerState.WATCHING, None)
        hooks.started(self)
        try:
            task_status.started()
            while self._crashed is None:
                self._wake = anyio.Event()
                await self._wake.wait()
            raise self._crashed
        finally:
            self._state = InformerState.STOPPED
            hooks.stopped(self)

    def status(self) -> InformerStatus:
        return InformerStatus(
            resource=self.key.resource,
            namespace=self.key.namespace,
            label_selector=self.key.label_selector,
            field_selector=self.key.field_selector,
            state=self._state,
            has_synced=self._synced,
            objects=len(self.store),
            resource_version=self.store.resource_version,
            relists=0,
            reconnects=0,
            skipped_lines=0,
            last_error=self._last_error,
            last_sync=self._last_sync,
            events_applied=self._events,
            view=self.key.view,
        )

    def crash(self, error: BaseException) -> None:
        """Raise ``error`` from :meth:`run` (a bug below the registry)."""
        self._crashed = copy.copy(error)
        if self._wake is not None:
            self._wake.set()

    def report(self, state: InformerState, error: str | None) -> None:
        """Show ``state`` and ``error`` in :meth:`status` (and tell the generation)."""
        if (state, error) != (self._state, self._last_error):
            self._state, self._last_error = state, error
            self._on_state()

    def _entry(self, obj: Mapping[str, Any]) -> Entry:
        store = self.store
        if isinstance(store, TableStore):  # the rows of a server without Table support
            store.writer.set_columns(FALLBACK_COLUMNS, fallback=True)
            meta = obj.get("metadata") or {}
            row = {"cells": [meta.get("name"), meta.get("creationTimestamp")], "metadata": meta}
            return store.writer.prepare(orjson.dumps(row))
        return store.writer.prepare(orjson.dumps(obj))

    def apply(self, kind: str, obj: Mapping[str, Any]) -> None:
        """One change of an object of this resource (filtered by the informer's scope)."""
        entry = self._entry(obj)
        if kind != "DELETED" and not self._selector.matches(obj):
            kind = "DELETED"  # it no longer matches: gone from this informer's view
        if self.store.writer.apply(kind, entry) is not None:  # the writer announces it
            self._events += 1
