"""The WatcherRegistry: one entry per kubeconfig context, started lazily, stopped cleanly.

Lifecycle of a context entry (one *generation*)::

    watch() ──► starting ──client built──► running ──stop_watcher()/sync──► stopping ──► (gone)
                    └──── client failed ──► (gone; the failure is kept for backoff)

The entry runs as one task in the registry's task group, inside its own cancel scope; its
informers run in the entry's own task group, so cancelling the scope stops everything of
that generation, and the entry's ``finally`` closes its HTTP session, drops its stores and
removes it from the registry only if it is still the current generation for its key
(compare-and-delete).
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import time
from collections.abc import AsyncGenerator, Callable, Iterable, Mapping, Sequence
from typing import Any

import anyio
import anyio.abc

from ._client import open_client
from ._codec import Entry
from ._context import (
    ContextEntry,
    ContextStatus,
    Failure,
    RegistryStatus,
    Slot,
    context_status,
    task_name,
)
from ._errors import ContextNotFound, ContextRemoved, KubemuxError, ResourceNotFound
from ._event_index import EventIndex
from ._fanout import Change, Fanout, Subscription
from ._informer import Informer, InformerKey
from ._kubeconfig import ContextConfig
from ._kubeconfig_watch import ContextDiff, KubeconfigSource
from ._resources import Resource, parse_resource
from ._settings import Backoff, WatchSettings
from ._store import Indexer, Store, Transform, drop_managed_fields

__all__ = ["WatcherRegistry"]

log = logging.getLogger(__name__)

ResourceSpec = str | Resource


class WatcherRegistry(anyio.AsyncContextManagerMixin):
    """Live, cached views of Kubernetes resources across every context of a kubeconfig.

    Build it with :meth:`from_kubeconfig`, or from a :class:`KubeconfigSource` or a mapping
    of :class:`ContextConfig`. Use it as an async context manager: leaving the block stops
    every watcher and closes every HTTP session.

    Args:
        source: Where contexts come from.
        settings: How informers talk to API servers.
        autowatch: Resources every context watches as soon as it is known (and again after
            a reload); failures are retried in the background and shown in :meth:`status`.
            Without it, nothing starts until :meth:`watch` is called.
        start_backoff: Delays before a failed start may be tried again.
        stop_timeout: Upper bound on the shielded cleanup of one context.
        subscriber_buffer: Default buffer size of a subscription.
        transform: Applied to every object before it is cached (default: drop managedFields).
        transforms: Per-resource transforms (``{"pods": fn}``), overriding ``transform``.
        event_cap: Keep at most this many events per object in the event index.
        event_max_age: Drop events older than this many seconds from the event index
            (for clusters whose event expiry lags).
        idle_timeout: Stop a context's watchers (closing its session and dropping its
            caches) once it has gone this many seconds unused; None (the default) never
            does. A context is in use while its stores are read, a registry call names it
            (``watch``, ``store``, ``event_index``, ``events_for``) or an open subscription
            names it in ``contexts``; contexts that ``autowatch`` started are never stopped
            for idleness. Subscribers see a ``REMOVED`` change; the next ``watch()`` starts
            the context again. Hold the registry, not a store: a store of a stopped context
            is empty.
    """

    def __init__(
        self,
        source: KubeconfigSource | Mapping[str, ContextConfig],
        *,
        settings: WatchSettings | None = None,
        autowatch: Sequence[ResourceSpec] = (),
        start_backoff: Backoff | None = None,
        stop_timeout: float = 5.0,
        subscriber_buffer: int = 1000,
        transform: Transform | None = drop_managed_fields,
        event_cap: int | None = None,
        event_max_age: float | None = None,
        transforms: Mapping[str, Transform | None] | None = None,
        idle_timeout: float | None = None,
    ) -> None:
        if idle_timeout is not None and not idle_timeout > 0:
            raise ValueError(f"idle_timeout must be positive or None, not {idle_timeout!r}")
        if not isinstance(source, KubeconfigSource):
            source = KubeconfigSource.static(source)
        self._source = source
        self.settings = settings or WatchSettings()
        self._autowatch = tuple(parse_resource(r) for r in autowatch)
        self._autowatch_keys = frozenset(InformerKey(r.name) for r in self._autowatch)
        self._start_backoff = start_backoff or Backoff(initial_delay=1.0, max_delay=60.0)
        self._stop_timeout = stop_timeout
        self._subscriber_buffer = subscriber_buffer
        self._transform = transform
        self._transforms = {parse_resource(k).name: v for k, v in (transforms or {}).items()}
        self._event_cap = event_cap
        self._event_max_age = event_max_age
        self._idle_timeout = idle_timeout
        self._entries: dict[str, ContextEntry] = {}
        self._failures: dict[str, Failure] = {}  # context -> failed client build
        # context -> informer -> failed first LIST; kept here, not on the entry, so that an
        # entry whose only informer failed can be stopped (no idle session left open)
        self._slot_failures: dict[str, dict[InformerKey, Failure]] = {}
        self._fanout = Fanout()
        self._generations = itertools.count(1)
        self._tg: anyio.abc.TaskGroup | None = None
        self._state = "unopened"
        self._reconcile_lock = anyio.Lock()
        self._syncs = 0
        self._sync_event = anyio.Event()
        self._status_version = 0
        self._status_event = anyio.Event()

    @classmethod
    def from_kubeconfig(
        cls,
        paths: str | Sequence[str] | None = None,
        follow: bool = True,
        *,
        debounce_delay: float = 0.2,
        **kwargs: Any,
    ) -> WatcherRegistry:
        """A registry following kubeconfig files.

        Args:
            paths: A path or paths; ``None`` means ``$KUBECONFIG`` (split on ``os.pathsep``,
                merged with kubectl's rules), else ``~/.kube/config``.
            follow: Watch the files and reconcile on every change.
            debounce_delay: Quiet time after the last file event before a sync.
            **kwargs: Passed to the constructor.
        """
        source = KubeconfigSource(paths, follow=follow, debounce_delay=debounce_delay)
        return cls(source, **kwargs)

    # ------------------------------------------------------------------ lifecycle
    @contextlib.asynccontextmanager
    async def __asynccontextmanager__(self) -> AsyncGenerator[WatcherRegistry]:
        if self._state != "unopened":
            raise RuntimeError(f"a WatcherRegistry can be entered once (it is {self._state})")
        self._state = "opening"
        try:
            async with self._source as source, anyio.create_task_group() as tg:
                self._tg = tg
                self._state = "open"
                tg.start_soon(self._follow, source, name="kubemux kubeconfig follower")
                if self._idle_timeout is not None:
                    tg.start_soon(self._reap_forever, self._idle_timeout, name="kubemux reaper")
                for name in self._source.contexts:
                    self._autostart(name, ())
                try:
                    yield self
                finally:
                    self._state = "closing"
                    with anyio.CancelScope(shield=True):
                        await self._stop_entries(
                            list(self._entries.values()), "registry closed", final_change="REMOVED"
                        )
                    self._fanout.close_all()
                    tg.cancel_scope.cancel("registry closed")
        except BaseExceptionGroup as group:
            # Our tasks contain their own failures, so a group here carries the caller's
            # exception from the body: give it back unwrapped.
            inner = _single(group)
            if inner is None:
                raise
            raise inner from inner.__cause__
        finally:
            self._state = "closed"
            self._tg = None

    # ------------------------------------------------------------------ kubeconfig
    @property
    def contexts(self) -> Mapping[str, ContextConfig]:
        """What the kubeconfig says now: context name -> :class:`ContextConfig`."""
        return self._source.contexts

    @property
    def current_context(self) -> str | None:
        """The kubeconfig's current-context, by kubectl's merge rules."""
        return self._source.current_context

    @property
    def kubeconfig_syncs(self) -> int:
        """How many kubeconfig syncs have been reconciled (including ones that changed nothing)."""
        return self._syncs

    async def wait_kubeconfig_sync(self, after: int) -> int:
        """Wait until more than ``after`` syncs were reconciled; returns the new count.

        Take ``after = registry.kubeconfig_syncs`` *before* editing the file. Cancelling
        only stops the wait.
        """
        while self._syncs <= after:
            await self._sync_event.wait()
        return self._syncs

    async def sync_kubeconfig(self) -> None:
        """Re-read the kubeconfig now and reconcile (also works with ``follow=False``)."""
        before = self._syncs
        await self._source.sync_now()  # its diff reaches _follow like any other
        await self.wait_kubeconfig_sync(before)

    @property
    def status_version(self) -> int:
        """A number that grows whenever what :meth:`status` shows may have changed state.

        It moves on context and informer state changes (starting, running, synced, backing
        off, stopping, stopped), on errors recorded or cleared, and on kubeconfig syncs; not
        on every object (object counts and resourceVersions change all the time).
        """
        return self._status_version

    async def wait_status_change(self, after: int) -> int:
        """Wait until :attr:`status_version` exceeds ``after``; returns the new value.

        Take ``after = registry.status_version`` before reading :meth:`status`, then wait:
        a UI re-reads status exactly when a state changed. Cancelling only stops the wait.
        """
        while self._status_version <= after:
            await self._status_event.wait()
        return self._status_version

    def _status_changed(self) -> None:
        self._status_version += 1
        event, self._status_event = self._status_event, anyio.Event()
        event.set()

    async def _follow(self, source: KubeconfigSource) -> None:
        async for diff in source.diffs:
            try:
                await self._reconcile(diff)
            except Exception:  # never lose the follower to one bad sync
                log.exception("kubeconfig reconcile failed")

    async def _reconcile(self, diff: ContextDiff) -> None:
        async with self._reconcile_lock:
            to_stop = []
            for name in diff.removed:
                self._forget_failures(name)
                entry = self._entries.get(name)
                if entry is not None:
                    to_stop.append(entry)
            reloads: list[tuple[ContextConfig, list[tuple[InformerKey, Resource]]]] = []
            for cfg in diff.changed:
                self._forget_failures(cfg.name)
                entry = self._entries.get(cfg.name)
                if entry is not None:
                    specs = [(s.key, s.resource) for s in entry.slots.values()]
                    reloads.append((cfg, specs))
            if to_stop:
                log.info("kubeconfig: removing %s", ", ".join(e.key for e in to_stop))
                await self._stop_entries(to_stop, "removed from the kubeconfig", "REMOVED")
            reloaded = [self._entries[c.name] for c, _ in reloads if c.name in self._entries]
            if reloaded:
                log.info("kubeconfig: reloading %s", ", ".join(e.key for e in reloaded))
                await self._stop_entries(reloaded, "reloaded (kubeconfig changed)", "RESET")
            for cfg, specs in reloads:
                self._autostart(cfg.name, specs)
            for cfg in diff.added:
                self._autostart(cfg.name, ())
            self._syncs += 1
            event, self._sync_event = self._sync_event, anyio.Event()
            event.set()
            self._status_changed()

    def _autostart(self, name: str, specs: Iterable[tuple[InformerKey, Resource]]) -> None:
        wanted = {InformerKey(r.name): r for r in self._autowatch}
        wanted.update(dict(specs))
        if not wanted or self._state != "open" or name not in self.contexts:
            return
        entry = self._new_entry(name)
        for key, resource in wanted.items():
            self._start_slot(entry, key, resource, persistent=True)

    # ------------------------------------------------------------------ entries
    def _new_entry(self, name: str) -> ContextEntry:
        assert self._tg is not None
        entry = ContextEntry(name, next(self._generations), self.contexts[name])
        self._entries[name] = entry
        self._status_changed()
        self._tg.start_soon(self._run_entry, entry, name=f"kubemux context {name!r}")
        return entry

    async def _run_entry(self, entry: ContextEntry) -> None:
        try:
            with anyio.CancelScope() as scope:
                entry.scope = scope
                if entry.state == "stopping":
                    scope.cancel(entry.stop_reason)
                async with open_client(entry.config) as client, anyio.create_task_group() as tg:
                    entry.client, entry.tg = client, tg
                    entry.state = "running"
                    self._failures.pop(entry.key, None)
                    entry.ready.set()
                    self._status_changed()
                    for slot in entry.slots.values():  # queued before the client existed
                        tg.start_soon(self._run_slot, entry, slot, name=task_name(entry, slot))
                    await anyio.sleep_forever()
        except Exception as exc:  # noqa: BLE001 - contained per context, recorded, backed off
            failure = Failure.record(exc, self._failures.get(entry.key), self._start_backoff)
            entry.failure = self._failures[entry.key] = failure
            log.warning(
                "context %r: %s (retry allowed in %.1fs)",
                entry.key,
                exc,
                failure.retry_at - time.monotonic(),
            )
        finally:
            self._cleanup_entry(entry)

    def _cleanup_entry(self, entry: ContextEntry) -> None:
        # Runs in the entry task's finally: synchronous, so it cannot be interrupted.
        was_running = entry.client is not None
        entry.state = "stopped"
        if entry.event_index is not None:
            entry.event_index.clear()
            entry.event_index = None
        entry.client = None
        entry.tg = None
        for slot in entry.slots.values():
            if not slot.ready.is_set():
                slot.failure = entry.failure or Failure(
                    ContextRemoved(entry.key, entry.stop_reason or "stopped")
                )
                slot.ready.set()
            slot.store._clear()
            slot.informer = None
        if was_running and entry.final_change is not None:
            for resource in sorted({s.key.resource for s in entry.slots.values()}):
                self._fanout.publish(
                    Change(entry.key, resource, entry.final_change, None, entry.generation),
                    None,
                )
        entry.slots.clear()
        entry.ready.set()
        if self._entries.get(entry.key) is entry:  # compare-and-delete, never a newer one
            del self._entries[entry.key]
        entry.done.set()
        self._status_changed()

    def _request_stop(self, entry: ContextEntry, reason: str, final_change: str | None) -> None:
        if entry.state in ("stopping", "stopped"):
            return
        entry.state = "stopping"
        entry.stop_reason = reason
        entry.final_change = final_change
        self._status_changed()
        if entry.scope is not None:
            entry.scope.cancel(f"context {entry.key!r} {reason}")

    async def _stop_entries(
        self, entries: Sequence[ContextEntry], reason: str, final_change: str | None
    ) -> None:
        for entry in entries:
            self._request_stop(entry, reason, final_change)
        with anyio.move_on_after(self._stop_timeout, shield=True) as scope:
            for entry in entries:
                await entry.done.wait()
        if scope.cancelled_caught:
            stuck = [e.key for e in entries if not e.done.is_set()]
            log.error("contexts %s did not stop within %.1fs", stuck, self._stop_timeout)

    async def _reap_forever(self, idle_timeout: float) -> None:
        """Stop contexts unused for ``idle_timeout`` seconds (looks every quarter of it)."""
        while True:
            await anyio.sleep(idle_timeout / 4)
            try:
                idle = self._idle_entries(time.monotonic())
                if idle:
                    for entry in idle:
                        entry.reaped = True
                    keys = [e.key for e in idle]
                    log.info("stopping contexts unused for %gs: %s", idle_timeout, keys)
                    await self._stop_entries(idle, f"unused for {idle_timeout:g}s", "REMOVED")
            except Exception:  # never lose the reaper (nor the registry) to one bad round
                log.exception("idle reaping failed")

    def _idle_entries(self, now: float) -> list[ContextEntry]:
        """Running entries nobody used for ``idle_timeout`` (see the constructor)."""
        assert self._idle_timeout is not None
        named = self._fanout.named_contexts()
        autowatched = self._autowatch_keys
        idle = []
        for entry in self._entries.values():
            slots = entry.slots.values()
            if entry.state != "running" or any(s.key in autowatched for s in slots):
                continue
            reads = sum(s.store._reads for s in slots)
            busy = entry.key in named or not all(s.ready.is_set() for s in slots)
            if busy or reads != entry.reads_seen:
                entry.reads_seen = reads
                entry.last_used = now
            elif now - entry.last_used >= self._idle_timeout:
                idle.append(entry)
        return idle

    async def stop_watcher(self, context: str) -> bool:
        """Stop every watcher of ``context``; idempotent.

        Returns only after the context's tasks have exited, its HTTP session is closed and
        its stores are dropped (bounded by ``stop_timeout``). Subscribers receive a final
        ``REMOVED`` change. Concurrent calls for one context share one stop.

        Returns:
            True if something was running (or starting) and is now stopped; False for an
            unknown or already stopped context.

        Cancellation: the cleanup itself is shielded; cancelling the caller does not leave a
        half-stopped context.
        """
        self._forget_failures(context)
        entry = self._entries.get(context)
        if entry is None:
            return False
        await self._stop_entries([entry], "stopped by stop_watcher()", "REMOVED")
        return True

    async def _ensure_entry(self, context: str) -> ContextEntry:
        if self._state != "open":
            raise RuntimeError("the registry is not open: use `async with registry:`")
        while True:
            entry = self._entries.get(context)
            if entry is None:
                if context not in self.contexts:
                    reason = self._source.snapshot.invalid.get(context)
                    raise ContextNotFound(context, reason)
                failure = self._failures.get(context)
                if failure is not None and failure.pending:
                    failure.reraise()
                entry = self._new_entry(context)
            if entry.state in ("stopping", "stopped"):
                with anyio.move_on_after(self._stop_timeout):
                    await entry.done.wait()
                if entry.final_change not in ("RESET", None) and not entry.reaped:
                    raise ContextRemoved(context, entry.stop_reason or "stopped")
                continue  # reloaded, or stopped for being idle: start it again
            await entry.ready.wait()
            if entry.failure is not None:
                entry.failure.reraise()
            if entry.state != "running":
                continue
            return entry

    def _live_slots(self, context: str) -> Mapping[InformerKey, Slot]:
        entry = self._entries.get(context)
        return entry.slots if entry is not None and entry.state == "running" else {}

    def _forget_failures(self, context: str, key: InformerKey | None = None) -> None:
        """Drop the failure records of a context (or of one of its informers)."""
        if key is None:
            had = self._failures.pop(context, None), self._slot_failures.pop(context, None)
            if had != (None, None):
                self._status_changed()
            return
        failures = self._slot_failures.get(context)
        if failures is not None and failures.pop(key, None) is not None:
            self._status_changed()
            if not failures:
                del self._slot_failures[context]

    def _start_slot(
        self, entry: ContextEntry, key: InformerKey, resource: Resource, *, persistent: bool
    ) -> Slot:
        transform = self._transforms.get(resource.name, self._transform)
        store = Store(resource, transform=transform)
        slot = Slot(key, resource, store, persistent)
        entry.slots[key] = slot
        if entry.tg is not None:
            entry.tg.start_soon(self._run_slot, entry, slot, name=task_name(entry, slot))
        return slot

    async def _run_slot(self, entry: ContextEntry, slot: Slot) -> None:
        assert entry.client is not None
        informer = Informer(
            entry.client,
            slot.resource,
            slot.key,
            settings=self.settings,
            store=slot.store,
            on_change=self._publisher(entry, slot),
            on_state=self._status_changed,
        )
        slot.informer = informer
        while True:
            try:
                await informer.initial_sync()
                break
            except KubemuxError as exc:
                failures = self._slot_failures.setdefault(entry.key, {})
                for key in [k for k, f in failures.items() if not f.pending]:
                    del failures[key]  # expired records go: at most one per live backoff
                failure = Failure.record(exc, failures.get(slot.key), self._start_backoff)
                failures[slot.key] = slot.failure = failure
                slot.ready.set()
                self._status_changed()
                log.warning("context %r: %s failed: %s", entry.key, slot.key, exc)
                if not slot.persistent:
                    if entry.slots.get(slot.key) is slot:
                        del entry.slots[slot.key]
                    if not entry.slots:  # nothing left to run: close the session too
                        self._request_stop(entry, "idle after a failed start", None)
                    return
                await anyio.sleep(max(0.0, failure.retry_at - time.monotonic()))
        self._forget_failures(entry.key, slot.key)
        slot.failure = None
        slot.ready.set()
        await informer.watch_forever()

    def _publisher(
        self, entry: ContextEntry, slot: Slot
    ) -> Callable[[str, Entry, Entry | None], None]:
        fanout = self._fanout
        context, resource, generation = entry.key, slot.key.resource, entry.generation
        feeds_index = slot.key in _EVENT_KEYS

        def publish(kind: str, obj: Entry, old: Entry | None) -> None:
            if len(fanout):
                fanout.publish(
                    Change.from_entry(context, resource, kind, obj, generation), obj.namespace
                )
            if feeds_index:
                index = entry.event_index
                if index is not None:
                    index.apply(kind, obj.decode())

        return publish

    # ------------------------------------------------------------------ public API
    async def watch(
        self,
        context: str,
        resource: ResourceSpec,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        indexers: Mapping[str, Indexer] | None = None,
    ) -> Store:
        """Start (or reuse) an informer and return its store once it has synced.

        Starting is lazy and single-flight: concurrent calls for the same (context,
        resource, scope) share one LIST.

        Raises:
            ContextNotFound: no such (valid) context in the kubeconfig.
            ContextRemoved: the context was stopped or removed while starting.
            Unauthorized, Forbidden, ResourceNotFound, ApiError: the first LIST failed.
            ClusterUnreachable: the server could not be reached.
            KubeconfigError: the context's credentials or TLS files cannot be used.

        After a failure, calls within the backoff delay raise the same error at once
        without a request. Cancelling the caller does not cancel the shared start.

        ``indexers`` (see :func:`kubemux.by_label`, :func:`kubemux.by_owner`) are added to
        the store if it lacks them; query with ``store.by_index(name, value)``.
        """
        res = parse_resource(resource)
        key = _informer_key(res, namespace, label_selector, field_selector)
        while True:
            failure = self._slot_failures.get(context, {}).get(key)
            if failure is not None and failure.pending and key not in self._live_slots(context):
                failure.reraise()  # inside the backoff window: no request
            entry = await self._ensure_entry(context)
            entry.last_used = time.monotonic()
            slot = entry.slots.get(key)
            if slot is None:
                slot = self._start_slot(entry, key, res, persistent=False)
            await slot.ready.wait()
            if entry.state != "running":
                if entry.final_change not in ("RESET", None) and not entry.reaped:
                    raise ContextRemoved(context, entry.stop_reason or "stopped")
                # reloaded (a new generation takes over) or closing as idle after a failed
                # start: let this generation finish (no session outlives the call), then go
                # round again: the new generation, or the failure inside its backoff window
                with anyio.move_on_after(self._stop_timeout, shield=True):
                    await entry.done.wait()
                if slot.failure is not None and not isinstance(slot.failure.error, ContextRemoved):
                    slot.failure.reraise()  # this call's own failure: it gets the error
                continue
            if slot.failure is not None:
                slot.failure.reraise()
            for name, fn in (indexers or {}).items():
                slot.store.add_indexer(name, fn)
            entry.last_used = time.monotonic()
            return slot.store

    async def event_index(self, context: str) -> EventIndex:
        """The live :class:`EventIndex` of ``context``, starting its event informer if needed.

        Events come from ``events.k8s.io/v1``, or from core ``v1`` where that group is
        absent. The index lives as long as the context's generation: ``stop_watcher`` (or a
        reload) drops it, and a reload builds a new one.

        Raises:
            The same errors as :meth:`watch`.

        Cancelling the caller does not cancel the shared start.
        """
        while True:
            try:
                store = await self.watch(context, _EVENTS_V1)
            except ResourceNotFound:
                store = await self.watch(context, _EVENTS_CORE)
            entry = self._entries.get(context)
            if entry is None or entry.state != "running":
                continue  # stopped or reloaded in between: watch() decides what to raise
            if entry.event_index is None:
                index = EventIndex(
                    max_events_per_object=self._event_cap, max_age=self._event_max_age
                )
                index.replace(store.list())
                entry.event_index = index
                if self._event_max_age is not None and entry.tg is not None:
                    entry.tg.start_soon(
                        _prune_forever,
                        index,
                        self._event_max_age / 10,
                        name=f"kubemux event pruning {context!r}",
                    )
            return entry.event_index

    async def events_for(
        self, context: str, kind: str, namespace: str | None, name: str
    ) -> list[Mapping[str, Any]]:
        """The Kubernetes Events about one object, newest first.

        Starts the context's event informer if it is not running (see :meth:`event_index`).
        """
        index = await self.event_index(context)
        return index.events_for(kind, namespace, name)

    def store(
        self,
        context: str,
        resource: ResourceSpec,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> Store | None:
        """The synced store of a running informer, or None (never starts anything).

        The arguments name the informer as :meth:`watch` does.
        """
        entry = self._entries.get(context)
        if entry is None or entry.state != "running":
            return None
        res = parse_resource(resource)
        key = _informer_key(res, namespace, label_selector, field_selector)
        slot = entry.slots.get(key)
        if slot is None or not slot.store.has_synced:
            return None
        entry.last_used = time.monotonic()
        return slot.store

    def subscribe(
        self,
        resource: ResourceSpec | None = None,
        contexts: Iterable[str] | None = None,
        *,
        namespace: str | None = None,
        snapshot: bool = True,
        buffer_size: int | None = None,
    ) -> Subscription:
        """Subscribe to changes; use as ``async with registry.subscribe(...) as changes``.

        Subscribing does not start informers: it receives the changes of informers that run
        now or later (see ``watch()`` and ``autowatch``). With ``snapshot=True`` the current
        store contents come first as ADDED (``change.snapshot`` is True), then live changes,
        with no gap and no duplicate between the two.

        A subscriber more than ``buffer_size`` changes behind is closed: iteration raises
        :class:`SubscriberOverflow`. The informers never wait for a subscriber.
        """
        res_name = parse_resource(resource).name if resource is not None else None
        wanted = frozenset(contexts) if contexts is not None else None

        def take_snapshot() -> list[Change]:
            initial: list[Change] = []
            for entry in self._entries.values():
                if entry.state != "running" or (wanted is not None and entry.key not in wanted):
                    continue
                seen: set[tuple[str, str, str]] = set()
                for slot in entry.slots.values():
                    informer = slot.informer
                    if res_name is not None and slot.key.resource != res_name:
                        continue
                    if informer is None or not slot.store.has_synced:
                        continue
                    for e in informer.snapshot_entries(namespace):
                        ident = (slot.key.resource, e.namespace, e.name)
                        if ident not in seen:
                            seen.add(ident)
                            initial.append(
                                Change.from_entry(
                                    entry.key,
                                    slot.key.resource,
                                    "ADDED",
                                    e,
                                    entry.generation,
                                    snapshot=True,
                                )
                            )
            return initial

        return self._fanout.subscribe(
            resource=res_name,
            contexts=wanted,
            namespace=namespace,
            buffer_size=buffer_size or self._subscriber_buffer,
            snapshot=take_snapshot if snapshot else None,
        )

    def status(self) -> RegistryStatus:
        """A frozen snapshot of every context's state for a UI. Never holds a secret."""
        now = time.monotonic()
        out: dict[str, ContextStatus] = {}
        for name, cfg in self.contexts.items():
            failures = [f for f in (self._failures.get(name),) if f is not None]
            failures += self._slot_failures.get(name, {}).values()
            out[name] = context_status(cfg, self._entries.get(name), failures, now)
        snap = self._source.snapshot
        return RegistryStatus(
            contexts=out,
            current_context=self.current_context,
            kubeconfig_errors=dict(snap.errors),
            invalid_contexts=dict(snap.invalid),
            kubeconfig_syncs=self._syncs,
        )

    def __repr__(self) -> str:
        states: dict[str, int] = {}
        informers = synced = 0
        for entry in self._entries.values():
            states[entry.state] = states.get(entry.state, 0) + 1
            for slot in entry.slots.values():
                informers += 1
                synced += slot.store.has_synced
        running = ", ".join(f"{n} {s}" for s, n in sorted(states.items())) or "0 running"
        return (
            f"<WatcherRegistry {self._state} contexts={len(self.contexts)} ({running}); "
            f"informers={informers}, synced={synced}; subscribers={len(self._fanout)}>"
        )

    # test and leak-probe helpers
    @property
    def live_contexts(self) -> list[str]:
        """Contexts that currently have an entry (starting, running or stopping)."""
        return sorted(self._entries)

    def _structure_sizes(self) -> dict[str, int]:
        return {
            "entries": len(self._entries),
            "failures": len(self._failures) + len(self._slot_failures),
            "subscribers": len(self._fanout),
            "slots": sum(len(e.slots) for e in self._entries.values()),
        }


def _informer_key(
    res: Resource, namespace: str | None, label_selector: str | None, field_selector: str | None
) -> InformerKey:
    """What names one informer of a context: a namespace only for namespaced resources."""
    return InformerKey(
        res.name,
        namespace if res.namespaced else None,
        label_selector or None,
        field_selector or None,
    )


_EVENTS_V1 = parse_resource("events.events.k8s.io")
_EVENTS_CORE = parse_resource("events")
_EVENT_KEYS = frozenset({InformerKey(_EVENTS_V1.name), InformerKey(_EVENTS_CORE.name)})


async def _prune_forever(index: EventIndex, period: float) -> None:
    while True:
        await anyio.sleep(period)
        index.prune()


def _single(group: BaseExceptionGroup[BaseException]) -> BaseException | None:
    exc: BaseException = group
    while isinstance(exc, BaseExceptionGroup):
        if len(exc.exceptions) != 1:
            return None
        exc = exc.exceptions[0]
    return exc
