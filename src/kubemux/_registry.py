"""The WatcherRegistry: context key -> one live generation, every change of a key serialised.

Each kubeconfig context has at most one live :class:`~kubemux._context.ContextGeneration`
(an active object owning its cancel scope, connection, task group and informers; it runs as
one task of the registry's task group). Every start, stop and reload of one key happens
under that key's lock, so an entry cannot be overwritten, a slot cannot be started on a
generation being stopped, and no generation exists that the registry cannot stop. A
generation removes itself from the map when it ends only if it is still the current one for
its key (compare-and-delete).
"""

from __future__ import annotations

import collections
import contextlib
import functools
import itertools
import logging
import time
from collections.abc import (
    AsyncGenerator,
    AsyncIterator,
    Awaitable,
    Callable,
    Iterable,
    Mapping,
    Sequence,
)
from typing import Any

import anyio
import anyio.abc

from ._codec import Entry
from ._connector import Connector, HttpConnector
from ._context import ContextGeneration, GenerationSettings, Hooks, Slot, iter_synced
from ._errors import ContextNotFound, ContextRemoved, RegistryClosed, ResourceNotFound
from ._event_index import EventIndex
from ._failure import Failure
from ._fanout import Change, Fanout, Subscription
from ._informer import InformerKey, InformerStatus
from ._kubeconfig import ContextConfig
from ._kubeconfig_watch import ContextDiff, KubeconfigSource
from ._resources import Resource, parse_resource
from ._settings import Backoff, WatchSettings
from ._status import ContextState, ContextStatus, RegistryStatus, build_context_status
from ._store import Indexer, Store, Transform, drop_managed_fields

__all__ = ["WatcherRegistry"]

log = logging.getLogger(__name__)

ResourceSpec = str | Resource
Specs = list[tuple[InformerKey, Resource]]

_REMEMBER_FOR = 600.0  # a context that comes back within this restores its informers
_REMEMBER_MAX = 1000


class WatcherRegistry(anyio.AsyncContextManagerMixin):
    """Live, cached views of Kubernetes resources across every context of a kubeconfig.

    Build it with :meth:`from_kubeconfig`, or from a :class:`KubeconfigSource` or a mapping
    of :class:`ContextConfig`. Use it as an async context manager: leaving the block stops
    every watcher and closes every HTTP session. kubemux runs on asyncio (its HTTP client
    is aiohttp).

    Args:
        source: Where contexts come from.
        settings: How informers talk to API servers.
        autowatch: Resources every context watches as soon as it is known (and again after
            a reload); failed starts are retried in the background with ``start_backoff``
            and shown in :meth:`status`. Without it, nothing starts until :meth:`watch`.
        start_backoff: Delays before a failed start may be tried again.
        start_timeout: Upper bound on starting a context (building its client, running its
            exec plugin); past it the start fails with :class:`StartTimeout` and backs off.
        stop_timeout: Upper bound on the shielded cleanup of one context.
        subscriber_buffer: Default buffer size of a subscription.
        transform: Applied to every object before it is cached (default: drop managedFields).
        transforms: Per-resource transforms (``{"pods": fn}``), overriding ``transform``.
        event_cap: Keep at most this many events per object in the event index.
        event_max_age: Drop events older than this many seconds from the event index.
        idle_timeout: Stop a context's watchers once it has gone this many seconds unused
            (store reads, registry calls naming it, subscriptions naming it); None (the
            default) never does. Autowatched contexts are never stopped for idleness.
            Subscribers see ``REMOVED``; the next ``watch()`` starts the context again.
        connector: Where contexts get their data (advanced; default: HTTP to the API server).
    """

    def __init__(
        self,
        source: KubeconfigSource | Mapping[str, ContextConfig],
        *,
        settings: WatchSettings | None = None,
        autowatch: Sequence[ResourceSpec] = (),
        start_backoff: Backoff | None = None,
        start_timeout: float = 30.0,
        stop_timeout: float = 5.0,
        subscriber_buffer: int = 1000,
        transform: Transform | None = drop_managed_fields,
        event_cap: int | None = None,
        event_max_age: float | None = None,
        transforms: Mapping[str, Transform | None] | None = None,
        idle_timeout: float | None = None,
        connector: Connector | None = None,
    ) -> None:
        if idle_timeout is not None and not idle_timeout > 0:
            raise ValueError(f"idle_timeout must be positive or None, not {idle_timeout!r}")
        if not start_timeout > 0:
            raise ValueError(f"start_timeout must be positive, not {start_timeout!r}")
        if not isinstance(source, KubeconfigSource):
            source = KubeconfigSource.static(source)
        self._source = source
        self.settings = settings or WatchSettings()
        self._autowatch = tuple(parse_resource(r) for r in autowatch)
        self._autowatch_keys = frozenset(InformerKey(r.name) for r in self._autowatch)
        self._stop_timeout = stop_timeout
        self._subscriber_buffer = subscriber_buffer
        self._transform = transform
        self._transforms = {parse_resource(k).name: v for k, v in (transforms or {}).items()}
        self._idle_timeout = idle_timeout
        self._gen_settings = GenerationSettings(
            connector=connector or HttpConnector(self.settings),
            start_backoff=start_backoff or Backoff(initial_delay=1.0, max_delay=60.0),
            start_timeout=start_timeout,
            make_store=self._make_store,
            event_keys=_EVENT_KEYS,
            event_cap=event_cap,
            event_max_age=event_max_age,
        )
        self._hooks = Hooks(
            publisher=self._publisher,
            final=self._publish_final,
            state_changed=self._status_changed,
            start_failed=self._record_start_failure,
            slot_failed=self._record_slot_failure,
            done=self._generation_done,
        )
        self._gens: dict[str, ContextGeneration] = {}
        self._locks: dict[str, tuple[anyio.Lock, list[int]]] = {}
        self._stop_calls: dict[str, _SharedStop] = {}  # stop_watcher() calls under way
        self._stragglers: set[ContextGeneration] = set()  # stops that overran stop_timeout
        self._failures: dict[str, Failure] = {}  # context -> failed start
        self._slot_failures: dict[str, dict[InformerKey, Failure]] = {}  # failed first LISTs
        self._stops: dict[str, int] = {}  # context -> serial of its last explicit stop
        self._stop_serial = itertools.count(1)
        self._remembered: collections.OrderedDict[str, tuple[float, Specs]] = (
            collections.OrderedDict()
        )
        self._fanout = Fanout()
        self._numbers = itertools.count(1)
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
        _require_asyncio()
        self._state = "opening"
        try:
            async with self._source as source, anyio.create_task_group() as tg:
                self._tg = tg
                self._state = "open"
                tg.start_soon(self._follow, source, name="kubemux kubeconfig follower")
                if self._idle_timeout is not None:
                    tg.start_soon(self._reap_forever, self._idle_timeout, name="kubemux reaper")
                for name in self.contexts:
                    self._autostart(name, [])
                try:
                    yield self
                finally:
                    self._state = "closing"
                    with anyio.CancelScope(shield=True):
                        await self._for_each(list(self._gens), self._close_one)
                        with anyio.move_on_after(self._stop_timeout):
                            for gen in list(self._stragglers):
                                await gen.wait_done()
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

    async def _close_one(self, name: str) -> None:
        self._stops[name] = next(self._stop_serial)
        await self._stop(name, "stopped: the registry closed", "REMOVED")

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
        """A number that grows whenever what :meth:`status` shows may have changed state
        (context and informer states, errors recorded or cleared, kubeconfig syncs), not
        on every object."""
        return self._status_version

    async def wait_status_change(self, after: int) -> int:
        """Wait until :attr:`status_version` exceeds ``after``; returns the new value.
        Cancelling only stops the wait."""
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
            if diff.removed:
                log.info("kubeconfig: removing %s", ", ".join(diff.removed))
            await self._for_each(diff.removed, self._remove_one)
            await self._for_each([c.name for c in diff.changed], self._reload_one)
            await self._for_each([c.name for c in diff.added], self._add_one)
            self._syncs += 1
            event, self._sync_event = self._sync_event, anyio.Event()
            event.set()
            self._status_changed()

    async def _for_each(self, keys: Iterable[str], op: Callable[[str], Awaitable[Any]]) -> None:
        """Run ``op`` for each key concurrently (each takes its own key's lock)."""

        async def guarded(key: str) -> None:
            try:
                await op(key)
            except Exception:  # one key's trouble must not stop the others
                log.exception("context %r: %s failed", key, getattr(op, "__name__", op))

        async with anyio.create_task_group() as tg:
            for key in keys:
                tg.start_soon(guarded, key)

    async def _remove_one(self, name: str) -> None:
        self._forget_failures(name)
        self._stops.pop(name, None)
        async with self._lock(name):
            gen = self._gens.get(name)
            if gen is not None:
                self._remember(name, gen.specs())
                await self._stop_generation(gen, "removed from the kubeconfig", "REMOVED")

    async def _reload_one(self, name: str) -> None:
        self._forget_failures(name)
        async with self._lock(name):
            gen = self._gens.get(name)
            if gen is None:
                return
            log.info("kubeconfig: reloading %s", name)
            specs = gen.specs()
            await self._stop_generation(gen, "reloaded (kubeconfig changed)", "RESET")
            self._autostart(name, specs)

    async def _add_one(self, name: str) -> None:
        async with self._lock(name):
            remembered = self._remembered.pop(name, None)
            fresh = remembered and time.monotonic() - remembered[0] < _REMEMBER_FOR
            specs = remembered[1] if remembered and fresh else []
            self._autostart(name, specs)

    def _remember(self, name: str, specs: Specs) -> None:
        """Keep what a removed context watched, for a while, in case it comes back (a
        kubeconfig rewritten in a way that hid it for one sync)."""
        if specs:
            self._remembered[name] = (time.monotonic(), specs)
            self._remembered.move_to_end(name)
            while len(self._remembered) > _REMEMBER_MAX:
                self._remembered.popitem(last=False)

    def _autostart(self, name: str, specs: Specs) -> None:
        """Start the autowatched and ``specs`` informers of ``name`` (caller holds its lock
        or runs before any other task could)."""
        wanted = {InformerKey(r.name): r for r in self._autowatch}
        wanted.update(dict(specs))
        if not wanted or self._state != "open" or name not in self.contexts:
            return
        gen = self._gens.get(name)
        if gen is None or gen.is_stopping:
            gen = self._spawn(name, persistent=True)
        for key, resource in wanted.items():
            gen.ensure_slot(key, resource, persistent=True)

    # ------------------------------------------------------------------ generations
    @contextlib.asynccontextmanager
    async def _lock(self, key: str) -> AsyncIterator[None]:
        """The lock serialising every start, stop and reload of one key (dropped when free)."""
        lock, users = self._locks.get(key) or self._locks.setdefault(key, (anyio.Lock(), [0]))
        users[0] += 1
        try:
            async with lock:
                yield
        finally:
            users[0] -= 1
            if not users[0]:
                del self._locks[key]

    def _spawn(self, name: str, *, persistent: bool) -> ContextGeneration:
        assert self._tg is not None and self._state == "open"
        gen = ContextGeneration(
            name,
            next(self._numbers),
            self.contexts[name],
            settings=self._gen_settings,
            hooks=self._hooks,
            persistent=persistent,
        )
        old = self._gens.get(name)
        if old is not None:  # a generation that is stopping on its own: no longer current
            self._stragglers.add(old)
        self._gens[name] = gen
        self._status_changed()
        self._tg.start_soon(gen.run, name=f"kubemux context {name!r}")
        return gen

    def _generation_done(self, gen: ContextGeneration) -> None:
        if self._gens.get(gen.key) is gen:  # compare-and-delete, never a newer one
            del self._gens[gen.key]
        self._stragglers.discard(gen)

    async def _stop_generation(
        self, gen: ContextGeneration, reason: str, final_change: str | None
    ) -> None:
        """Stop ``gen`` and wait (shielded, bounded) until it has cleaned up."""
        gen.request_stop(reason, final_change)
        with anyio.move_on_after(self._stop_timeout, shield=True):
            await gen.wait_done()
        if not gen.is_done:
            log.error("context %r did not stop within %.1fs", gen.key, self._stop_timeout)
            self._stragglers.add(gen)
            self._generation_done(gen)

    async def _stop(
        self,
        name: str,
        reason: str,
        final_change: str | None,
        only: ContextGeneration | None = None,
    ) -> bool:
        with anyio.CancelScope(shield=True):  # every holder of the lock is bounded in time
            async with self._lock(name):
                gen = self._gens.get(name)
                if gen is None or (only is not None and gen is not only):
                    return False
                await self._stop_generation(gen, reason, final_change)
        return True

    async def stop_watcher(self, context: str) -> bool:
        """Stop every watcher of ``context``; idempotent.

        Returns only after the context's tasks have exited, its HTTP session is closed and
        its stores are dropped (bounded by ``stop_timeout``); a start in progress (an exec
        plugin running) is cancelled. Subscribers receive a final ``REMOVED`` change.
        ``watch()`` calls in flight for the context raise :class:`ContextRemoved`.
        Concurrent calls for one context share one stop and all return True.

        Returns:
            True if something was running (or starting) and is now stopped; False for an
            unknown or already stopped context.

        Cancellation: the stop itself is shielded; cancelling the caller does not leave a
        half-stopped context.
        """
        self._forget_failures(context)
        if context in self._gens or context in self.contexts:
            self._stops[context] = next(self._stop_serial)
        shared = self._stop_calls.get(context)
        if shared is not None:  # a stop of this context is under way: share its outcome
            with anyio.CancelScope(shield=True):
                await shared.done.wait()
            return shared.result
        shared = self._stop_calls[context] = _SharedStop()
        try:
            shared.result = await self._stop(context, "stopped by stop_watcher()", "REMOVED")
        finally:
            del self._stop_calls[context]
            shared.done.set()
        return shared.result

    async def _current(self, context: str, stops_seen: int | None) -> ContextGeneration:
        """The live generation of ``context``, started if needed (caller holds the lock)."""
        if self._state != "open":
            if self._state == "closing":
                raise ContextRemoved(context, "stopped: the registry closed")
            raise RegistryClosed(f"the registry is {self._state}: use `async with registry:`")
        if self._stops.get(context) != stops_seen:
            raise ContextRemoved(context, "stopped by stop_watcher()")
        gen = self._gens.get(context)
        if gen is not None and not gen.is_stopping:
            return gen
        if gen is not None:  # stopping on its own (idle after a failed start)
            with anyio.move_on_after(self._stop_timeout, shield=True):
                await gen.wait_done()
            self._generation_done(gen)
        if context not in self.contexts:
            raise ContextNotFound(context, self._source.snapshot.invalid.get(context))
        failure = self._failures.get(context)
        if failure is not None and failure.pending:
            failure.reraise()
        return self._spawn(context, persistent=False)

    def _record_start_failure(self, gen: ContextGeneration, failure: Failure | None) -> None:
        if self._gens.get(gen.key) is not gen:
            return
        if failure is None:
            self._failures.pop(gen.key, None)
        else:
            self._failures[gen.key] = failure

    def _record_slot_failure(
        self, gen: ContextGeneration, key: InformerKey, failure: Failure | None
    ) -> None:
        if self._gens.get(gen.key) is not gen:
            return
        if failure is None:
            self._forget_failures(gen.key, key)
            return
        failures = self._slot_failures.setdefault(gen.key, {})
        for k in [k for k, f in failures.items() if not f.pending]:
            del failures[k]  # expired records go: at most one per live backoff
        failures[key] = failure

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

    def _make_store(self, resource: Resource) -> Store:
        return Store(resource, transform=self._transforms.get(resource.name, self._transform))

    def _publisher(
        self, gen: ContextGeneration, slot: Slot
    ) -> Callable[[str, Entry, Entry | None], None]:
        fanout = self._fanout
        context, resource, number = gen.key, slot.key.resource, gen.number
        feeds_index = slot.key in _EVENT_KEYS

        def publish(kind: str, obj: Entry, old: Entry | None) -> None:
            if len(fanout):
                fanout.publish(
                    Change.from_entry(context, resource, kind, obj, number), obj.namespace
                )
            if feeds_index:
                index = gen.event_index
                if index is not None:
                    index.apply(kind, obj.decode())

        return publish

    def _publish_final(self, gen: ContextGeneration, resource: str, kind: str) -> None:
        self._fanout.publish(Change(gen.key, resource, kind, None, gen.number), None)

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
        resource, scope) share one LIST. The store returned belongs to a live generation:
        if the context is reloaded meanwhile, the new generation's store is returned; if
        it is stopped or removed, :class:`ContextRemoved` is raised.

        Raises:
            ContextNotFound: no such (valid) context in the kubeconfig.
            ContextRemoved: the context was stopped or removed while starting.
            Unauthorized, Forbidden, ResourceNotFound, ApiError: the first LIST failed.
            ClusterUnreachable: the server could not be reached.
            StartTimeout: the context did not start within ``start_timeout``.
            KubeconfigError: the context's credentials or TLS files cannot be used.
            RegistryClosed: the registry is not open.

        After a failure, calls within the backoff delay raise the same error at once
        without a request. Cancelling the caller does not cancel the shared start.

        ``indexers`` (see :func:`kubemux.by_label`, :func:`kubemux.by_owner`) are added to
        the store if it lacks them; query with ``store.by_index(name, value)``.
        """
        res = parse_resource(resource)
        key = _informer_key(res, namespace, label_selector, field_selector)
        stops_seen = self._stops.get(context)
        while True:
            failure = self._slot_failures.get(context, {}).get(key)
            gen = self._gens.get(context)
            if failure is not None and failure.pending and (gen is None or key not in gen.slots):
                failure.reraise()  # inside the backoff window: no request
            async with self._lock(context):
                gen = await self._current(context, stops_seen)
                slot = gen.ensure_slot(key, res, persistent=False)
            gen.last_used = time.monotonic()
            if gen.state is ContextState.BACKING_OFF and gen.failure is not None:
                gen.failure.reraise()
            await slot.ready.wait()
            own = slot.failure
            if own is not None and not isinstance(own.error, ContextRemoved):
                if gen.is_stopping:  # let it finish first: no session outlives the call
                    with anyio.move_on_after(self._stop_timeout, shield=True):
                        await gen.wait_done()
                own.reraise()  # this call's own failure: it gets the error
            if gen.is_stopping:
                if (gen.final_change not in ("RESET", None) and not gen.reaped) or (
                    self._stops.get(context) != stops_seen
                ):
                    raise ContextRemoved(context, gen.stop_reason or "stopped")
                # reloaded (a new generation takes over) or closing as idle after a failed
                # start: let this generation finish (no session outlives the call), then go
                # round again: the new generation, or the failure inside its backoff window
                with anyio.move_on_after(self._stop_timeout, shield=True):
                    await gen.wait_done()
                continue
            for name, fn in (indexers or {}).items():
                slot.store.add_indexer(name, fn)
            gen.last_used = time.monotonic()
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
            gen = self._gens.get(context)
            if gen is None or not gen.is_running:
                continue  # stopped or reloaded in between: watch() decides what to raise
            try:
                return gen.open_event_index(store)
            except ContextRemoved:
                continue

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
        gen = self._gens.get(context)
        if gen is None or not gen.is_running:
            return None
        res = parse_resource(resource)
        slot = gen.slots.get(_informer_key(res, namespace, label_selector, field_selector))
        if slot is None or not slot.store.has_synced:
            return None
        gen.last_used = time.monotonic()
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
            gens = [g for g in self._gens.values() if wanted is None or g.key in wanted]
            seen: set[tuple[str, str, str, str]] = set()
            for gen, slot, source in iter_synced(gens, res_name):
                for e in source.snapshot_entries(namespace):
                    ident = (gen.key, slot.key.resource, e.namespace, e.name)
                    if ident not in seen:
                        seen.add(ident)
                        initial.append(
                            Change.from_entry(
                                gen.key, slot.key.resource, "ADDED", e, gen.number, snapshot=True
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
            out[name] = self._context_status(name, cfg, now)
        snap = self._source.snapshot
        return RegistryStatus(
            contexts=out,
            current_context=self.current_context,
            kubeconfig_errors=dict(snap.errors),
            invalid_contexts=dict(snap.invalid),
            kubeconfig_syncs=self._syncs,
        )

    def _context_status(self, name: str, cfg: ContextConfig, now: float) -> ContextStatus:
        gen = self._gens.get(name)
        failures = [f for f in (self._failures.get(name),) if f is not None]
        failures += self._slot_failures.get(name, {}).values()
        state, number = ContextState.IDLE, None
        informers: tuple[InformerStatus, ...] = ()
        errors: list[str] = []
        if gen is not None:
            state, number, informers = gen.state, gen.number, gen.informer_statuses()
            errors = [i.last_error for i in informers if i.last_error]
            errors += [str(s.failure.error) for s in gen.slots.values() if s.failure]
        if failures and state in (ContextState.IDLE, ContextState.RUNNING, ContextState.STOPPING):
            pending = any(f.pending for f in failures)
            state = ContextState.BACKING_OFF if pending else ContextState.ERROR
        errors += [str(f.error) for f in failures if str(f.error) not in errors]
        retry_in = max(0.0, min(f.retry_at for f in failures) - now) if failures else None
        return build_context_status(
            name=cfg.name,
            server=cfg.server,
            cluster_name=cfg.cluster_name,
            user_name=cfg.user_name,
            namespace=cfg.namespace,
            source=cfg.source,
            state=state,
            generation=number,
            informers=informers,
            errors=errors,
            retry_in=retry_in,
        )

    def __repr__(self) -> str:
        states: collections.Counter[str] = collections.Counter()
        informers = synced = 0
        for gen in self._gens.values():
            states[str(gen.state)] += 1
            for slot in gen.slots.values():
                informers += 1
                synced += slot.store.has_synced
        running = ", ".join(f"{n} {s}" for s, n in sorted(states.items())) or "0 running"
        return (
            f"<WatcherRegistry {self._state} contexts={len(self.contexts)} ({running}); "
            f"informers={informers}, synced={synced}; subscribers={len(self._fanout)}>"
        )

    # ------------------------------------------------------------------ idle reaping
    async def _reap_forever(self, idle_timeout: float) -> None:
        """Stop contexts unused for ``idle_timeout`` seconds (looks every quarter of it)."""
        while True:
            await anyio.sleep(idle_timeout / 4)
            idle = self._idle_generations(time.monotonic())
            if idle:
                log.info(
                    "stopping contexts unused for %gs: %s", idle_timeout, [g.key for g in idle]
                )
            for gen in idle:
                gen.reaped = True
            await self._for_each(
                [g.key for g in idle],
                functools.partial(self._reap, {g.key: g for g in idle}, idle_timeout),
            )

    async def _reap(
        self, idle: Mapping[str, ContextGeneration], idle_timeout: float, key: str
    ) -> None:
        await self._stop(key, f"unused for {idle_timeout:g}s", "REMOVED", only=idle[key])

    def _idle_generations(self, now: float) -> list[ContextGeneration]:
        """Running generations nobody used for ``idle_timeout`` (see the constructor)."""
        assert self._idle_timeout is not None
        named = self._fanout.named_contexts()
        idle = []
        for gen in self._gens.values():
            slots = gen.slots.values()
            if not gen.is_running or any(s.key in self._autowatch_keys for s in slots):
                continue
            reads = sum(s.store._reads for s in slots)
            busy = gen.key in named or not all(s.ready.is_set() for s in slots)
            if busy or reads != gen.reads_seen:
                gen.reads_seen = reads
                gen.last_used = now
            elif now - gen.last_used >= self._idle_timeout:
                idle.append(gen)
        return idle

    # ------------------------------------------------------------------ introspection
    @property
    def live_contexts(self) -> list[str]:
        """Contexts that currently have a generation (starting, running or stopping)."""
        return sorted(self._gens)

    def _structure_sizes(self) -> dict[str, int]:
        return {
            "entries": len(self._gens) + len(self._stragglers),
            "failures": len(self._failures) + len(self._slot_failures),
            "subscribers": len(self._fanout),
            "slots": sum(len(g.slots) for g in self._gens.values()),
            "locks": len(self._locks),
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


class _SharedStop:
    __slots__ = ("done", "result")

    def __init__(self) -> None:
        self.done = anyio.Event()
        self.result = False


def _require_asyncio() -> None:
    import sniffio

    library = sniffio.current_async_library()
    if library != "asyncio":
        raise RuntimeError(
            f"kubemux runs on asyncio (its HTTP client is aiohttp); "
            f"WatcherRegistry was entered under {library}"
        )


_EVENTS_V1 = parse_resource("events.events.k8s.io")
_EVENTS_CORE = parse_resource("events")
_EVENT_KEYS = frozenset({InformerKey(_EVENTS_V1.name), InformerKey(_EVENTS_CORE.name)})


def _single(group: BaseExceptionGroup[BaseException]) -> BaseException | None:
    exc: BaseException = group
    while isinstance(exc, BaseExceptionGroup):
        if len(exc.exceptions) != 1:
            return None
        exc = exc.exceptions[0]
    return exc
