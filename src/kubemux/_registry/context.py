"""One context generation as an active object.

A :class:`ContextGeneration` owns everything one generation of one kubeconfig context runs:
its cancel scope, its connection (HTTP session), its task group, its informer slots, its
event index. It hears about the outside only through the :class:`Hooks` it is given and
imports nothing of the registry.

Lifecycle::

    starting ──connected──► running ──request_stop()──► stopping ──► stopped
        │  ▲                                                            ▲
        │  └── backing off (a persistent generation retries) ◄─┐        │
        └── connect failed ──────────────────────────────────────┴──────┘

Every failure is contained here: a start that fails (or takes longer than
``start_timeout``) is recorded and, for a persistent generation (autowatch, reload), retried
with backoff; an informer that fails for any reason records its error in its slot and is
retried while its siblings go on. Only cancellation crosses the generation.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import time
from collections.abc import Callable, Mapping, Sequence

import anyio
import anyio.abc

from .._auth.provider import recording_interruptions
from .._cache.event_index import EventIndex
from .._cache.store import Store
from .._cache.stream import StoreListener
from .._errors import (
    ContextRemoved,
    Forbidden,
    StartTimeout,
    Unauthorized,
    as_kubemux_error,
    unwrap,
)
from .._informer.informer import InformerKey, InformerStatus
from .._informer.repeats import RepeatedWarning
from .._kubeconfig.load import ContextConfig
from .._resources import Resource
from .._settings import Backoff
from .._wire.types import View
from .connector import Connection, Connector, SlotSource
from .failure import Failure
from .narrowing import Narrowed, narrowed_scope
from .status import ContextState

__all__ = ["ContextGeneration", "GenerationSettings", "Hooks", "Narrowed", "Slot"]

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Hooks:
    """How a generation talks to its owner. Every hook is synchronous and must not raise."""

    publisher: Callable[[ContextGeneration, Slot], StoreListener]
    """The listener of one slot's store (subscriptions, the event index): installed when the
    slot is made, removed when it goes."""
    final: Callable[[ContextGeneration, str, str, View], None]
    """(generation, resource, change type, view): a final RESET or REMOVED."""
    state_changed: Callable[[], None]
    start_failed: Callable[[ContextGeneration, Failure | None], None]
    """A start failed (or, with None, succeeded)."""
    slot_failed: Callable[[ContextGeneration, InformerKey, Failure | None], None]
    """A slot's first sync failed (or, with None, succeeded)."""
    done: Callable[[ContextGeneration], None]
    """The generation has exited and cleaned up (called from its ``finally``)."""


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class GenerationSettings:
    connector: Connector
    start_backoff: Backoff
    start_timeout: float
    make_store: Callable[[Resource, View], Store]
    event_keys: frozenset[InformerKey]
    event_cap: int | None
    event_max_age: float | None
    namespaces: Mapping[str, Sequence[str]] = dataclasses.field(default_factory=dict)
    """context -> the namespaces its user may read (where a forbidden cluster-wide LIST
    falls back to; else the context's namespace, else ``default``)."""

    def __post_init__(self) -> None:
        if not self.start_timeout > 0:
            raise ValueError(f"start_timeout must be positive, not {self.start_timeout!r}")


class Slot:
    """One informer of one generation: single-flight first sync, then its running source."""

    __slots__ = (
        "failure",
        "key",
        "persistent",
        "ready",
        "resource",
        "source",
        "store",
        "unlisten",
    )

    def __init__(
        self, key: InformerKey, resource: Resource, store: Store, persistent: bool
    ) -> None:
        self.key = key
        self.resource = resource
        self.store = store
        self.persistent = persistent  # keep retrying the first sync (autowatch, reloads)
        self.source: SlotSource | None = None
        self.ready = anyio.Event()  # the first sync attempt finished (error or not)
        self.failure: Failure | None = None
        self.unlisten: Callable[[], None] = _nothing  # removes the store's publisher

    def status(self) -> InformerStatus | None:
        return self.source.status() if self.source is not None else None


class ContextGeneration:
    """One generation of one context. Run it with ``task_group.start_soon(gen.run)``."""

    def __init__(
        self,
        key: str,
        number: int,
        config: ContextConfig,
        *,
        settings: GenerationSettings,
        hooks: Hooks,
        persistent: bool,
    ) -> None:
        self.key = key
        self.number = number
        self.config = config
        self.persistent = persistent  # retry failed starts in place (autowatch, reload)
        self._warnings = RepeatedWarning(log)  # a start failing the same way: a line a minute
        self._settings = settings
        self._hooks = hooks
        self.state = ContextState.STARTING
        self.slots: dict[InformerKey, Slot] = {}
        self.failure: Failure | None = None  # the last failed start
        self.event_index: EventIndex | None = None
        self.stop_reason = ""
        self.final_change: str | None = "REMOVED"
        self.reaped = False  # stopped for being idle: a later watch() starts it again
        self.pending = 0  # callers about to add a slot (resolving a name meanwhile)
        self.notes: dict[str, str] = {}  # resource -> why its scope is what it is
        self.narrowed: dict[InformerKey, Narrowed] = {}  # cluster-wide keys it narrowed
        self.last_used = time.monotonic()
        self.reads_seen = 0
        self._scope = anyio.CancelScope()  # may be cancelled before run() enters it
        self._tg: anyio.abc.TaskGroup | None = None
        self._connection: Connection | None = None
        self._started = anyio.Event()  # connected, or the first start attempt failed
        self._done = anyio.Event()
        self._connected_once = False  # subscribers may hold its objects: say goodbye
        self.keep_stores = False  # a same-cluster reload: synced stores go to the successor
        self.kept: dict[InformerKey, Store] = {}  # ... once this generation has ended

    def __repr__(self) -> str:
        return (
            f"<ContextGeneration {self.key!r} #{self.number} {self.state} "
            f"informers={len(self.slots)}>"
        )

    # ------------------------------------------------------------------ queries
    @property
    def is_stopping(self) -> bool:
        return self.state is ContextState.STOPPING or self._done.is_set()

    @property
    def is_running(self) -> bool:
        return self.state is ContextState.RUNNING and not self._done.is_set()

    @property
    def is_done(self) -> bool:
        return self._done.is_set()

    async def wait_done(self) -> None:
        await self._done.wait()

    async def connection(self) -> Connection:
        """The live connection, once connected.

        Raises:
            The start's failure (while backing off, or for a start that failed), or
            ContextRemoved if the generation stopped.
        """
        await self._started.wait()
        if self._connection is not None and self.is_running:
            return self._connection
        if self.failure is not None and not self.is_stopping:
            self.failure.reraise()
        if self.failure is not None and self.final_change is None:
            self.failure.reraise()
        raise ContextRemoved(self.key, self.stop_reason or "stopped")

    def cached_connection(self) -> Connection | None:
        return self._connection if self.is_running else None

    def specs(self) -> list[tuple[InformerKey, Resource]]:
        """What this generation watches, to start the same informers on its successor."""
        return [(s.key, s.resource) for s in self.slots.values()]

    def informer_statuses(self) -> tuple[InformerStatus, ...]:
        return tuple(st for s in self.slots.values() if (st := s.status()) is not None)

    # ------------------------------------------------------------------ control
    def ensure_slot(
        self, key: InformerKey, resource: Resource, *, persistent: bool, store: Store | None = None
    ) -> Slot:
        """The slot for ``key``, created (and started once connected) if missing; ``store``:
        a synced one handed over by the generation before (its slot is ready at once).

        Raises:
            ContextRemoved: the generation is stopping; nothing is started on it.
        """
        slot = self.slots.get(key)
        if slot is not None:
            return slot
        if self.is_stopping:
            raise ContextRemoved(self.key, self.stop_reason or "stopped")
        store = store if store is not None else self._settings.make_store(resource, key.view)
        slot = Slot(key, resource, store, persistent)
        if store.has_synced:  # handed over: served while the new informer relists into it
            slot.ready.set()
            self._connected_once = True  # subscribers hold its objects: a stop says goodbye
        slot.unlisten = slot.store.writer.add_listener(self._hooks.publisher(self, slot))
        self.slots[key] = slot
        if self._tg is not None and self._connection is not None:
            self._start_slot(self._tg, self._connection, slot)
        return slot

    def request_stop(self, reason: str, final_change: str | None) -> None:
        """Cancel everything of this generation (idempotent); :meth:`wait_done` to wait."""
        if self.is_stopping:
            return
        self.state = ContextState.STOPPING
        self.stop_reason = reason
        self.final_change = final_change
        self._hooks.state_changed()
        self._scope.cancel(f"context {self.key!r} {reason}")

    def stop_if_unused(self) -> bool:
        """Stop a lazily started generation that has nothing to run and nobody about to
        give it something (a name that did not resolve): no idle session stays open.
        Returns whether it is stopping now."""
        if not self.slots and not self.pending and not self.persistent and not self.is_stopping:
            self.request_stop("idle: nothing to watch", None)
        return self.is_stopping and not self.slots

    def open_event_index(self, store: Store) -> EventIndex:
        """The generation's event index, built from ``store`` on first use."""
        if self.event_index is None:
            if not self.is_running or self._tg is None:
                raise ContextRemoved(self.key, self.stop_reason or "stopped")
            s = self._settings
            index = EventIndex(max_events_per_object=s.event_cap, max_age=s.event_max_age)
            index.replace(store.writer.announced_entries())
            self.event_index = index
            if s.event_max_age is not None:
                self._tg.start_soon(
                    _prune_forever,
                    index,
                    s.event_max_age / 10,
                    name=f"kubemux event pruning {self.key!r}",
                )
        return self.event_index

    # ------------------------------------------------------------------ running
    async def run(self) -> None:
        """Connect, run the slots, until cancelled; clean up in any case. Never raises
        except cancellation."""
        try:
            with self._scope:
                await self._run()
        finally:
            self._cleanup()

    async def _run(self) -> None:
        s = self._settings
        while True:
            try:
                async with contextlib.AsyncExitStack() as stack:
                    with (
                        anyio.move_on_after(s.start_timeout) as limit,
                        recording_interruptions() as interrupted,
                    ):
                        connection = await stack.enter_async_context(
                            s.connector.connect(self.config)
                        )
                    if limit.cancelled_caught:
                        # what the start was waiting for (an exec plugin, a lock), if known
                        detail = "; ".join(interrupted) or None
                        raise StartTimeout(self.key, s.start_timeout, detail)
                    tg = await stack.enter_async_context(anyio.create_task_group())
                    self._connection, self._tg = connection, tg
                    self._connected_once = True
                    self.failure = None
                    self._warnings.reset()
                    self.state = ContextState.RUNNING
                    self._hooks.start_failed(self, None)
                    self._started.set()
                    self._hooks.state_changed()
                    for slot in list(self.slots.values()):  # queued before we connected
                        slot.failure = None  # the failed start it may carry is over
                        self._start_slot(tg, connection, slot)
                    await anyio.sleep_forever()
            except Exception as exc:
                error = as_kubemux_error(exc, f"context {self.key!r}")
                if error is not exc:
                    log.error("context %r: unexpected error", self.key, exc_info=exc)
                failure = Failure.record(error, self.failure, s.start_backoff)
                self.failure = failure
                self._connection, self._tg = None, None
                self._hooks.start_failed(self, failure)
                self._fail_waiting_slots(failure)
                retry_in = max(0.0, failure.retry_at - time.monotonic())
                self._warnings.warning(
                    f"context {self.key!r}: {failure.error}", f" (retry in {retry_in:.1f}s)"
                )
                if not self.persistent:
                    return
                self.state = ContextState.BACKING_OFF
                self._started.set()
                self._hooks.state_changed()
                await anyio.sleep(max(0.0, failure.retry_at - time.monotonic()))
                self.state = ContextState.STARTING
                self._hooks.state_changed()

    def _fail_waiting_slots(self, failure: Failure) -> None:
        for slot in self.slots.values():
            if not slot.ready.is_set():
                slot.failure = failure
                slot.ready.set()

    def _start_slot(self, tg: anyio.abc.TaskGroup, connection: Connection, slot: Slot) -> None:
        tg.start_soon(
            self._run_slot, connection, slot, name=f"kubemux informer {self.key!r} {slot.key}"
        )

    async def _run_slot(self, connection: Connection, slot: Slot) -> None:
        backoff = self._settings.start_backoff
        failure: Failure | None = None
        while True:
            source = connection.source(
                slot.resource,
                slot.key,
                store=slot.store,
                on_state=self._hooks.state_changed,
            )
            slot.source = source
            synced = False
            try:
                async with anyio.create_task_group() as tg:
                    await tg.start(source.run)
                    synced = True
                    failure = slot.failure = None
                    self._hooks.slot_failed(self, slot.key, None)
                    slot.ready.set()
                    self._hooks.state_changed()
            except Exception as exc:
                inner = unwrap(exc)  # the source's error, out of its task group
                exc = inner if isinstance(inner, Exception) else exc
                if not synced and self._narrow(slot, exc):
                    return  # forbidden cluster-wide: its namespaces run instead (a note)
                if not synced:  # the first sync failed
                    failure = self._slot_failure(slot, exc, failure, backoff)
                    if not slot.persistent:
                        self._drop_slot(slot)
                        return
                else:  # a bug below us after the first sync: contained, retried
                    log.error("context %r: %s failed", self.key, slot.key, exc_info=exc)
                    failure = Failure.record(
                        as_kubemux_error(exc, f"{self.key}/{slot.key}"), failure, backoff
                    )
                    slot.failure = failure
                    self._hooks.state_changed()
                await anyio.sleep(max(0.0, failure.retry_at - time.monotonic()))

    def _slot_failure(
        self, slot: Slot, exc: Exception, previous: Failure | None, backoff: Backoff
    ) -> Failure:
        error = as_kubemux_error(exc, f"context {self.key!r}: {slot.key}")
        if error is not exc:
            log.error("context %r: %s: unexpected error", self.key, slot.key, exc_info=exc)
        failure = Failure.record(error, previous, backoff)
        slot.failure = failure
        if slot.store.has_synced and isinstance(error, Unauthorized | Forbidden):
            slot.store.writer.clear()  # handed over, then refused: what it holds is not ours
        self._hooks.slot_failed(self, slot.key, failure)
        slot.ready.set()
        self._hooks.state_changed()
        log.warning("context %r: %s failed: %s", self.key, slot.key, error)
        return failure

    def _narrow(self, slot: Slot, exc: Exception) -> bool:
        """A cluster-wide LIST of a namespaced resource answered 403: run one informer per
        namespace the user may read instead, and say so in a note; not a failure (nothing
        backs off, status shows no error) and nothing tries the cluster-wide LIST again in
        this generation. Callers waiting for the slot get the 403 and read :attr:`narrowed`.
        """
        key = slot.key
        if not isinstance(exc, Forbidden) or key.namespace is not None:
            return False
        if not slot.resource.namespaced or self.is_stopping:
            return False
        configured = self._settings.namespaces.get(self.key)
        narrowed = self.narrowed[key] = narrowed_scope(self.config, configured, exc)
        self.notes[slot.resource.name] = narrowed.reason
        log.info("context %r: %s: %s", self.key, key, narrowed.reason)
        for namespace in narrowed.scope:
            self.ensure_slot(
                dataclasses.replace(key, namespace=namespace),
                slot.resource,
                persistent=slot.persistent,
            )
        # for callers waiting on it (they take the union); not kept as a failure record
        slot.failure = Failure.record(exc, None, self._settings.start_backoff)
        slot.ready.set()
        self._hooks.slot_failed(self, key, None)  # no failure record: no backoff, no error
        self._drop_slot(slot)
        self._hooks.state_changed()
        return True

    def _drop_slot(self, slot: Slot) -> None:
        if self.slots.get(slot.key) is slot:
            del self.slots[slot.key]
        _drop_store(slot)
        if not self.slots and not self.pending:  # nothing left to run: close the session too
            self.request_stop("idle after a failed start", None)

    def _cleanup(self) -> None:
        # Runs in run()'s finally: synchronous, so it cannot be interrupted.
        self.state = ContextState.STOPPING
        self._connection, self._tg = None, None
        if self.event_index is not None:
            self.event_index.clear()
            self.event_index = None
        removed = ContextRemoved(self.key, self.stop_reason or "stopped")
        for slot in self.slots.values():
            if not slot.ready.is_set():
                slot.failure = self.failure or Failure(removed)
                slot.ready.set()
            if self.keep_stores and slot.store.has_synced:  # not cleared: handed over
                slot.unlisten()
                slot.source, self.kept[slot.key] = None, slot.store
            else:
                _drop_store(slot)
        if self._connected_once and self.final_change is not None:
            for resource, view in sorted(
                {(s.key.resource, s.key.view) for s in self.slots.values()}
            ):
                self._hooks.final(self, resource, self.final_change, view)
        self.slots.clear()
        self._started.set()
        self._done.set()
        self._hooks.done(self)
        self._hooks.state_changed()


def _drop_store(slot: Slot) -> None:
    """Empty a slot's store (its listeners hear it cleared), then stop listening to it."""
    slot.store.writer.clear()
    slot.unlisten()
    slot.source = None


def _nothing() -> None:
    pass


async def _prune_forever(index: EventIndex, period: float) -> None:
    while True:
        await anyio.sleep(period)
        index.prune()
