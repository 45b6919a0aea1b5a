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
import logging
import time
from collections.abc import (
    AsyncGenerator,
    Container,
    Iterable,
    Iterator,
    Mapping,
    Sequence,
)
from typing import TYPE_CHECKING, Any

import anyio
import anyio.abc

from ._changes import Publisher
from ._connector import Connector, HttpConnector
from ._context import ContextGeneration, GenerationSettings
from ._errors import ContextRemoved, ResourceNotFound
from ._event_index import EventIndex
from ._fanout import Change, Fanout, Subscription
from ._generations import Generations
from ._informer import InformerKey
from ._kubeconfig import ContextConfig
from ._kubeconfig_watch import ContextDiff, KubeconfigSource
from ._resources import Resource, known_resource, parse_resource
from ._runtime import require_asyncio
from ._settings import Backoff, WatchSettings
from ._status import ContextState, ContextStatus, RegistryStatus
from ._store import Indexer, Store, Transform, drop_managed_fields
from ._table import TableStore

if TYPE_CHECKING:
    from .share import ShareEngine
    from .share._connector import ShareConnector

__all__ = ["WatcherRegistry"]

log = logging.getLogger(__name__)

ResourceSpec = str | Resource
Specs = list[tuple[InformerKey, Resource]]


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
        share: Share watches between replicas (``kubemux.share.Redis(url)``): per (cluster,
            identity, resource, scope) one replica runs the watch and the others follow it;
            ``status()`` shows each informer's role. None (the default) shares nothing and
            imports no engine. See ``docs/sharing.md``.
        share_lead: False: this replica only follows (a dashboard), never runs a shared
            watch itself; its data goes stale while no replica leads.
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
        share: ShareEngine | None = None,
        share_lead: bool = True,
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
        self._transforms = {_full_name(k): v for k, v in (transforms or {}).items()}
        self._idle_timeout = idle_timeout
        self._share = share
        connector = connector or HttpConnector(self.settings)
        self._share_connector: ShareConnector | None = None
        if share is not None:
            if not isinstance(connector, HttpConnector):
                raise ValueError("share= works with the built-in HTTP connector only")
            from .share._connector import ShareConnector

            connector = self._share_connector = ShareConnector(
                connector, share, can_lead=share_lead
            )
        settings_ = GenerationSettings(
            connector=connector,
            start_backoff=start_backoff or Backoff(initial_delay=1.0, max_delay=60.0),
            start_timeout=start_timeout,
            make_store=self._make_store,
            event_keys=_EVENT_KEYS,
            event_cap=event_cap,
            event_max_age=event_max_age,
        )
        self._fanout = Fanout()
        self._aliases: dict[str, frozenset[str]] = {}  # resource -> every name it goes by
        publisher = Publisher(self._fanout, _EVENT_KEYS)
        self._table = Generations(
            source,
            settings=settings_,
            publisher=publisher.for_slot,
            final=publisher.final,
            status_changed=self._status_changed,
            autowatch=self._autowatch,
            stop_timeout=stop_timeout,
        )
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
        require_asyncio("WatcherRegistry")
        self._state = "opening"
        try:
            async with (
                self._source as source,
                self._share_session(),
                anyio.create_task_group() as tg,
            ):
                self._tg = self._table.tg = tg
                self._state = self._table.state = "open"
                tg.start_soon(self._follow, source, name="kubemux kubeconfig follower")
                if self._idle_timeout is not None:
                    tg.start_soon(
                        self._table.reap_forever,
                        self._idle_timeout,
                        self._fanout.named_contexts,
                        self._autowatch_keys,
                        name="kubemux reaper",
                    )
                for name in self.contexts:
                    self._table.autostart(name, [])
                try:
                    yield self
                finally:
                    self._state = self._table.state = "closing"
                    with anyio.CancelScope(shield=True):
                        await self._table.close()
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
            self._state = self._table.state = "closed"
            self._tg = self._table.tg = None

    @contextlib.asynccontextmanager
    async def _share_session(self) -> AsyncGenerator[None]:
        """The share engine's session for the registry's lifetime (nothing without one)."""
        if self._share is None or self._share_connector is None:
            yield
            return
        async with self._share.open() as session:
            self._share_connector.session = session
            try:
                yield
            finally:
                self._share_connector.session = None

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
            table = self._table
            await table.for_each(diff.removed, table.remove)
            await table.for_each([c.name for c in diff.changed], table.reload)
            await table.for_each([c.name for c in diff.added], table.add)
            self._syncs += 1
            event, self._sync_event = self._sync_event, anyio.Event()
            event.set()
            self._status_changed()

    # ------------------------------------------------------------------ generations
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
        return await self._table.stop_watcher(context)

    def _make_store(self, resource: Resource, view: str) -> Store:
        if view == "table":
            return TableStore(resource)
        return Store(resource, transform=self._transforms.get(resource.name, self._transform))

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
        store = await self._synced_store(
            context, resource, namespace, label_selector, field_selector, "objects"
        )
        for name, fn in (indexers or {}).items():
            store.add_indexer(name, fn)
        return store

    async def table(
        self,
        context: str,
        resource: ResourceSpec,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> TableStore:
        """Start (or reuse) a table view and return it once synced: the server's columns
        (``.columns``, kubectl's, a CRD's printer columns) and one row of cells per object
        (``.rows()``), kept live by LIST and WATCH in the Table format with object
        metadata, as ``kubectl get`` does. Servers without Table support give NAME and AGE.

        Subscribe with ``view="table"`` for row changes. It raises what :meth:`watch`
        raises; cancelling the caller does not cancel the shared start.
        """
        store = await self._synced_store(
            context, resource, namespace, label_selector, field_selector, "table"
        )
        assert isinstance(store, TableStore)
        return store

    async def resources(self, context: str) -> tuple[Resource, ...]:
        """What the context's cluster serves (discovery: aggregated, else legacy), in
        kubectl's priority order, preferred versions only; for resource pickers.

        Starts the context if needed (without starting any informer). Raises what
        :meth:`watch` raises when the context cannot be started or discovery fails.
        """
        stops_seen = self._table.stops.get(context)
        while True:
            async with self._table.lock(context):
                gen = await self._table.current(context, stops_seen)
                gen.pending += 1
            try:
                connection = await gen.connection()
                return await connection.resources()
            except ContextRemoved:
                if self._table.stops.get(context) != stops_seen or not gen.is_stopping:
                    raise
            finally:
                gen.pending -= 1
                if gen.stop_if_unused():
                    with anyio.move_on_after(self._stop_timeout, shield=True):
                        await gen.wait_done()

    async def _synced_store(
        self,
        context: str,
        resource: ResourceSpec,
        namespace: str | None,
        label_selector: str | None,
        field_selector: str | None,
        view: str,
    ) -> Store:
        stops_seen = self._table.stops.get(context)
        fixed = resource if isinstance(resource, Resource) else known_resource(resource)
        while True:
            if fixed is not None:  # nothing to resolve: check, create and use in one step
                key = _informer_key(fixed, namespace, label_selector, field_selector, view)
                self._learn_names(fixed)
                self._raise_pending_failure(context, key)
            async with self._table.lock(context):
                gen = await self._table.current(context, stops_seen)
                if fixed is not None:
                    slot = gen.ensure_slot(key, fixed, persistent=False)
                else:
                    gen.pending += 1
            if fixed is None:
                try:
                    connection = await gen.connection()
                    res = await connection.resolve(str(resource))
                    key = _informer_key(res, namespace, label_selector, field_selector, view)
                    self._learn_names(res)
                    self._raise_pending_failure(context, key)
                    slot = gen.ensure_slot(key, res, persistent=False)
                except ContextRemoved:
                    if self._table.stops.get(context) != stops_seen or not gen.is_stopping:
                        raise
                    continue  # reloaded meanwhile: the new generation
                finally:
                    gen.pending -= 1
                    if gen.stop_if_unused():  # nothing to run: no idle session outlives us
                        with anyio.move_on_after(self._stop_timeout, shield=True):
                            await gen.wait_done()
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
                    self._table.stops.get(context) != stops_seen
                ):
                    raise ContextRemoved(context, gen.stop_reason or "stopped")
                # reloaded (a new generation takes over) or closing as idle after a failed
                # start: let this generation finish (no session outlives the call), then go
                # round again: the new generation, or the failure inside its backoff window
                with anyio.move_on_after(self._stop_timeout, shield=True):
                    await gen.wait_done()
                continue
            gen.last_used = time.monotonic()
            return slot.store

    def _raise_pending_failure(self, context: str, key: InformerKey) -> None:
        """Inside the backoff window of this informer's failed start: its error, no request."""
        failure = self._table.slot_failures.get(context, {}).get(key)
        gen = self._table.gens.get(context)
        if failure is not None and failure.pending and (gen is None or key not in gen.slots):
            failure.reraise()

    async def event_index(self, context: str) -> EventIndex:
        """The live :class:`EventIndex` of ``context``, starting its event informer if needed.

        Events come from ``events.k8s.io/v1``, or from core ``v1`` where that group is
        absent. The index lives as long as the context's generation: ``stop_watcher`` (or a
        reload) drops it, and a reload builds a new one.

        It raises the same errors as :meth:`watch`. Cancelling the caller does not cancel
        the shared start.
        """
        while True:
            try:
                store = await self.watch(context, _EVENTS_V1)
            except ResourceNotFound:
                store = await self.watch(context, _EVENTS_CORE)
            gen = self._table.gens.get(context)
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
        gen = self._table.gens.get(context)
        if gen is None or not gen.is_running:
            return None
        if isinstance(resource, Resource):
            res: Resource | None = resource
        else:
            connection = gen.cached_connection()
            res = connection.resolve_cached(resource) if connection is not None else None
        if res is None:
            return None
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
        view: str = "objects",
    ) -> Subscription:
        """Subscribe to changes; use as ``async with registry.subscribe(...) as changes``.

        Subscribing does not start informers: it receives the changes of informers that run
        now or later (see ``watch()``, ``table()`` and ``autowatch``). With
        ``snapshot=True`` the current store contents come first as ADDED
        (``change.snapshot`` is True), then live changes, with no gap and no duplicate.
        ``view="table"`` delivers the row changes of ``table()`` views instead of objects.

        A kubectl-style ``resource`` name is resolved with each running context's
        discovery (and the built-in table), so ``"po"``, ``"Deployment"`` or a CRD's short
        name work once a context serving them runs.

        A subscriber more than ``buffer_size`` changes behind is closed: iteration raises
        :class:`SubscriberOverflow`. The informers never wait for a subscriber.
        """
        if view not in ("objects", "table"):
            raise ValueError(f"view must be 'objects' or 'table', not {view!r}")
        names = self._subscription_names(resource) if resource is not None else None
        wanted = frozenset(contexts) if contexts is not None else None

        def take_snapshot() -> list[Change]:
            gens = [g for g in self._table.gens.values() if wanted is None or g.key in wanted]
            return Publisher.snapshot(gens, names, namespace, view)

        return self._fanout.subscribe(
            resource=names,
            contexts=wanted,
            namespace=namespace,
            buffer_size=buffer_size or self._subscriber_buffer,
            snapshot=take_snapshot if snapshot else None,
            view=view,
        )

    def _subscription_names(self, resource: ResourceSpec) -> Container[str]:
        """The full resource names ``resource`` means: resolved now where a running
        context or the built-in table knows it, else matched against the names of every
        resource an informer runs for (so a subscription made before its context runs
        still gets its changes)."""
        if isinstance(resource, Resource):
            return frozenset((resource.name,))
        names = set()
        for gen in self._table.gens.values():
            connection = gen.cached_connection()
            if connection is not None and (res := connection.resolve_cached(resource)):
                names.add(res.name)
        try:
            names.add(parse_resource(resource).name)
        except ValueError:
            pass
        return _Names(frozenset(names), resource.strip().lower(), self._aliases)

    def _learn_names(self, res: Resource) -> None:
        if res.name not in self._aliases:
            self._aliases[res.name] = _alias_names(res)

    def status(self) -> RegistryStatus:
        """A frozen snapshot of every context's state for a UI. Never holds a secret."""
        now = time.monotonic()
        out: dict[str, ContextStatus] = {}
        for name, cfg in self.contexts.items():
            out[name] = self._table.context_status(cfg, now)
        snap = self._source.snapshot
        return RegistryStatus(
            contexts=out,
            current_context=self.current_context,
            kubeconfig_errors=dict(snap.errors),
            invalid_contexts=dict(snap.invalid),
            kubeconfig_syncs=self._syncs,
            subscribers=len(self._fanout),
            subscriber_overflows=self._fanout.overflows,
        )

    def __repr__(self) -> str:
        states: collections.Counter[str] = collections.Counter()
        informers = synced = 0
        for gen in self._table.gens.values():
            states[str(gen.state)] += 1
            for slot in gen.slots.values():
                informers += 1
                synced += slot.store.has_synced
        running = ", ".join(f"{n} {s}" for s, n in sorted(states.items())) or "0 running"
        return (
            f"<WatcherRegistry {self._state} contexts={len(self.contexts)} ({running}); "
            f"informers={informers}, synced={synced}; subscribers={len(self._fanout)}>"
        )

    # ------------------------------------------------------------------ introspection
    @property
    def live_contexts(self) -> list[str]:
        """Contexts that currently have a generation (starting, running or stopping)."""
        return sorted(self._table.gens)

    def _structure_sizes(self) -> dict[str, int]:
        return {**self._table.sizes(), "subscribers": len(self._fanout)}

    def _idle_generations(self, now: float) -> list[ContextGeneration]:  # for tests
        assert self._idle_timeout is not None
        return self._table.idle(
            now, self._idle_timeout, self._fanout.named_contexts(), self._autowatch_keys
        )

    @property
    def _gens(self) -> Mapping[str, ContextGeneration]:  # for tests
        return self._table.gens


class _Names:
    """The resources a subscription's name means (a container of full names)."""

    __slots__ = ("_aliases", "_name", "_resolved")

    def __init__(
        self, resolved: frozenset[str], name: str, aliases: Mapping[str, frozenset[str]]
    ) -> None:
        self._resolved = resolved
        self._name = name
        self._aliases = aliases

    def __contains__(self, resource: object) -> bool:
        if resource in self._resolved:
            return True
        return isinstance(resource, str) and self._name in self._aliases.get(resource, ())

    def __iter__(self) -> Iterator[str]:  # for snapshots: what is known now
        yield from self._resolved
        for resource, names in list(self._aliases.items()):
            if self._name in names and resource not in self._resolved:
                yield resource


def _alias_names(res: Resource) -> frozenset[str]:
    """Every kubectl name of ``res`` (plural, singular, kind, short names, with group)."""
    base = {res.plural, res.singular, res.kind.lower(), *res.short_names}
    names = {n.lower() for n in base if n}
    if res.group:
        names |= {f"{n}.{res.group}" for n in list(names)}
        names.add(f"{res.plural}.{res.version}.{res.group}")
    return frozenset(names)


def _full_name(name: str) -> str:
    """A built-in's full name (``po`` -> ``pods``), else the name as given (a CRD's
    ``plural.group``)."""
    try:
        return parse_resource(name).name
    except ValueError:
        return name


def _informer_key(
    res: Resource,
    namespace: str | None,
    label_selector: str | None,
    field_selector: str | None,
    view: str = "objects",
) -> InformerKey:
    """What names one informer of a context: a namespace only for namespaced resources."""
    return InformerKey(
        res.name,
        namespace if res.namespaced else None,
        label_selector or None,
        field_selector or None,
        view,
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
