"""The WatcherRegistry, the face of the registry layer: one live generation per context key
(:mod:`.generations`, one serialised path per key), the starts callers wait for
(:class:`~.slots.Starter`), subscriptions (:mod:`.changes`, :mod:`.fanout`), the kubeconfig
half of the API (:mod:`.following`).
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import AsyncGenerator, Iterable, Mapping, Sequence
from typing import Any

import anyio

from .._auth.pool import IN_CLUSTER_ROOT, CredentialPool
from .._authz.authorizer import Authorizer, AuthorizerSettings
from .._authz.authorizers import Authorizers
from .._cache.event_index import EventIndex
from .._cache.multistore import MultiTableStore
from .._cache.store import Indexer, Store, Transform, drop_managed_fields
from .._cache.table import TableStore
from .._errors import unwrapped
from .._http.upstream import Upstream
from .._informer.informer import InformerKey
from .._kubeconfig.load import ContextConfig
from .._kubeconfig.source import KubeconfigSource
from .._resources import Resource, parse_resource
from .._runtime import require_asyncio
from .._settings import Backoff, WatchSettings
from .._wire.types import View
from .changes import Publisher, ResourceNames, scope, subscription
from .connector import Connector, HttpConnector, Sharing
from .context import GenerationSettings
from .fanout import Fanout, Subscription
from .following import KubeconfigAPI, KubeconfigFollower, default_source
from .generations import Generations
from .slots import EVENT_KEYS, ResourceSpec, Starter, StoreFactory
from .status import RegistryStatus, StatusSignal

__all__ = ["WatcherRegistry"]

log = logging.getLogger(__name__)


class WatcherRegistry(KubeconfigAPI, anyio.AsyncContextManagerMixin):
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
        autowatch_view: ``"objects"`` (full objects, as :meth:`watch`) or ``"table"`` (the
            server's columns and rows, as :meth:`table`; what a UI that lists objects needs,
            without a second watch of the same resource).
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
        namespaces: The namespaces a context's user may read (context -> names), for users
            who may not list across all namespaces (Lens's "accessible namespaces"): a
            forbidden cluster-wide LIST falls back to them (else to the context's namespace).
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
        autowatch_view: View | str = View.OBJECTS,
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
        namespaces: Mapping[str, Sequence[str]] | None = None,
        share: Sharing | None = None,
        share_lead: bool = True,
    ) -> None:
        if not isinstance(source, KubeconfigSource):
            source = KubeconfigSource.static(source)
        signal = StatusSignal()
        self.settings = settings or WatchSettings()
        autowatch_view = View.of(autowatch_view, "autowatch_view")
        autowatched = [parse_resource(r) for r in autowatch]
        self._subscriber_buffer = subscriber_buffer
        connector = connector or HttpConnector(self.settings, CredentialPool())
        # a share engine wraps the connector (it opens its own session)
        self._shared = share.connector(connector, can_lead=share_lead) if share else None
        self._connector = connector = self._shared or connector
        settings_ = GenerationSettings(
            connector=connector,
            start_backoff=start_backoff or Backoff(initial_delay=1.0, max_delay=60.0),
            start_timeout=start_timeout,
            make_store=StoreFactory(transform, transforms or {}),
            event_keys=EVENT_KEYS,
            event_cap=event_cap,
            event_max_age=event_max_age,
            namespaces={k: tuple(v) for k, v in (namespaces or {}).items()},
        )
        self._fanout = Fanout()
        publisher = Publisher(self._fanout, EVENT_KEYS)
        self._generations = Generations(
            source,
            settings=settings_,
            publisher=publisher.for_slot,
            final=publisher.final,
            status_changed=signal.changed,
            autowatch=[(InformerKey(r.name, view=autowatch_view), r) for r in autowatched],
            stop_timeout=stop_timeout,
            idle_timeout=idle_timeout,
            named=self._fanout.named_contexts,
        )
        self._starter = Starter(
            self._generations,
            stop_timeout=stop_timeout,
            names=ResourceNames(),
            status_changed=signal.changed,
        )
        self._authorizers = Authorizers(self)
        self._follower = KubeconfigFollower(source, self._generations, signal)
        KubeconfigAPI.__init__(self, self._follower)  # the kubeconfig half of the API
        self._entered = False

    @classmethod
    def from_kubeconfig(
        cls,
        paths: str | Sequence[str] | None = None,
        follow: bool = True,
        *,
        debounce_delay: float = 0.2,
        in_cluster_root: str = IN_CLUSTER_ROOT,
        **kwargs: Any,
    ) -> WatcherRegistry:
        """A registry following kubeconfig files.

        Args:
            paths: A path or paths; ``None`` means ``$KUBECONFIG`` (split on ``os.pathsep``,
                merged with kubectl's rules), else ``~/.kube/config``; with neither, inside
                a pod (``KUBERNETES_SERVICE_HOST`` and a service-account token in
                ``in_cluster_root``), one context named ``in-cluster`` that uses the
                service account's token file (re-read as it rotates) and CA.
            in_cluster_root: The service-account folder (tests point it elsewhere).
            follow: Watch the files and reconcile on every change.
            debounce_delay: Quiet time after the last file event before a sync.
            **kwargs: Passed to the constructor.
        """
        return cls(default_source(paths, follow, debounce_delay, in_cluster_root), **kwargs)

    # ------------------------------------------------------------------ lifecycle
    @contextlib.asynccontextmanager
    async def __asynccontextmanager__(self) -> AsyncGenerator[WatcherRegistry]:
        if self._entered:
            raise RuntimeError(f"a WatcherRegistry can be entered once (it is {self._state})")
        require_asyncio("WatcherRegistry")
        self._entered = True
        # our tasks contain their own failures, so a group carries the caller's exception
        # from the body: it is given back unwrapped
        with unwrapped():
            async with (  # left in reverse: the follower ends, then every generation,
                self._follower.source as source,  # then subscriptions (each after its last change)
                self._connector.open(),  # a share engine's session, for every generation
                self._fanout.open(),  # every subscription ends with it
                self._generations.open() as generations,
                self._authorizers.open(),  # they use the generations: they stop first
                anyio.create_task_group() as tg,
            ):
                tg.start_soon(self._follower.follow, source, name="kubemux kubeconfig follower")
                for name in self.contexts:
                    generations.autostart(name, [])
                try:
                    yield self
                finally:
                    tg.cancel_scope.cancel("registry closed")

    @property
    def _state(self) -> str:
        state = self._generations.state
        return "opening" if state == "unopened" and self._entered else state

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
        return await self._generations.stop_watcher(context)

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
        namespaces: Sequence[str] | None = None,
    ) -> Store:
        """Start (or reuse) an informer and return its store once it has synced.

        Starting is lazy and single-flight: concurrent calls for the same (context,
        resource, scope) share one LIST. The store returned belongs to a live generation:
        if the context is reloaded meanwhile, the new generation's store is returned; if
        it is stopped or removed, :class:`ContextRemoved` is raised.

        Raises:
            ContextNotFound: no such context in the kubeconfig.
            InvalidContext: the kubeconfig defines the context but it cannot be used (a
                missing cluster or user entry, a removed auth provider, ...): names the
                file, the entry and why; also listed in ``status().invalid_contexts``.
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

        ``namespaces=[...]`` watches those namespaces (one informer each) behind one
        :class:`MultiStore`. With neither ``namespace`` nor ``namespaces``, a namespaced
        resource whose cluster-wide LIST is forbidden (403) falls back to the context's
        accessible namespaces (the registry's ``namespaces`` option), else its default
        namespace; the store's ``scope`` and ``reason`` and :meth:`status` say so.
        """
        store = await self._starter.scoped_store(
            context, resource, namespace, namespaces, label_selector, field_selector, View.OBJECTS
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
        namespaces: Sequence[str] | None = None,
    ) -> TableStore | MultiTableStore:
        """Start (or reuse) a table view and return it once synced: the server's columns
        (``.columns``, kubectl's, a CRD's printer columns) and one row of cells per object
        (``.rows()``), kept live by LIST and WATCH in the Table format with object
        metadata, as ``kubectl get`` does. Servers without Table support give NAME and AGE.

        Subscribe with ``view="table"`` for row changes. It raises what :meth:`watch`
        raises; cancelling the caller does not cancel the shared start.
        """
        store = await self._starter.scoped_store(
            context, resource, namespace, namespaces, label_selector, field_selector, View.TABLE
        )
        assert isinstance(store, TableStore | MultiTableStore)
        return store

    async def resources(self, context: str) -> tuple[Resource, ...]:
        """What the context's cluster serves (discovery: aggregated, else legacy), in
        kubectl's priority order, preferred versions only; for resource pickers.

        Starts the context if needed (without starting any informer). Raises what
        :meth:`watch` raises when the context cannot be started or discovery fails.
        """
        return await self._starter.resources(context)

    @contextlib.asynccontextmanager
    async def upstream(self, context: str) -> AsyncGenerator[Upstream]:
        """The context's API server for requests of any kind (what ``kubemux.proxy``
        forwards): ``async with registry.upstream("prod") as up: async with
        up.request("PATCH", path, ...) as resp``.

        Requests go through the running generation's client, with its credential
        (refreshed as the informers' is). Starts the context if needed, without starting
        any informer. The generation stays running afterwards, as one with informers does
        (``idle_timeout`` reaps it once unused), so a stream of requests reuses one
        session. A reload or removal stops it: requests in flight then fail.

        Raises:
            What :meth:`watch` raises when the context cannot be started.

        Cancellation: leaving the block (by cancellation too) releases the generation.
        """
        async with self._starter.upstream(context) as upstream:
            yield upstream

    async def authorizer(
        self, context: str, *, settings: AuthorizerSettings | None = None
    ) -> Authorizer:
        """The context's :class:`Authorizer` once its RBAC informers synced (first ``settings``
        stay). Raises ContextNotFound, NotSynced, or :meth:`watch`'s; cancelling stops the wait."""
        return await self._authorizers.get(context, settings)

    async def event_index(self, context: str) -> EventIndex:
        """The live :class:`EventIndex` of ``context``, starting its event informer if needed.

        Events come from ``events.k8s.io/v1``, or from core ``v1`` where that group is
        absent. The index lives as long as the context's generation: ``stop_watcher`` (or a
        reload) drops it, and a reload builds a new one.

        It raises the same errors as :meth:`watch`. Cancelling the caller does not cancel
        the shared start.
        """
        return await self._starter.event_index(context)

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
        view: View | str = View.OBJECTS,
    ) -> Store | None:
        """The synced store of a running informer, or None (never starts anything).

        The arguments name the informer as :meth:`watch` does; ``view="table"`` names the
        :meth:`table` view (a :class:`TableStore`).
        """
        return self._starter.running_store(
            context, resource, namespace, label_selector, field_selector, View.of(view)
        )

    def subscribe(
        self,
        resource: ResourceSpec | None = None,
        contexts: Iterable[str] | None = None,
        *,
        namespace: str | None = None,
        snapshot: bool = True,
        buffer_size: int | None = None,
        view: View | str = View.OBJECTS,
        namespaces: Iterable[str] | None = None,
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
        view = View.of(view)
        names = self._starter.subscription_names(resource) if resource is not None else None
        return subscription(
            self._fanout,
            self._generations.gens,
            names,
            contexts,
            scope(namespace, namespaces),
            snapshot=snapshot,
            buffer_size=buffer_size or self._subscriber_buffer,
            view=view,
        )

    def status(self) -> RegistryStatus:
        """A frozen snapshot of every context's state for a UI. Never holds a secret."""
        now, gens, snap = time.monotonic(), self._generations, self.kubeconfig_snapshot
        return RegistryStatus(
            contexts={name: gens.context_status(cfg, now) for name, cfg in self.contexts.items()},
            current_context=self.current_context,
            kubeconfig_errors=dict(snap.errors),
            invalid_contexts=dict(snap.invalid),
            kubeconfig_syncs=self.kubeconfig_syncs,
            subscribers=len(self._fanout),
            subscriber_overflows=self._fanout.overflows,
            share=self._shared.placement_status() if self._shared is not None else None,
        )

    def __repr__(self) -> str:
        return (
            f"<WatcherRegistry {self._state} contexts={len(self.contexts)} "
            f"{self._generations.summary()}; subscribers={len(self._fanout)}>"
        )

    # ------------------------------------------------------------------ introspection
    @property
    def live_contexts(self) -> list[str]:
        """Contexts that currently have a generation (starting, running or stopping)."""
        return sorted(self._generations.gens)

    def _structure_sizes(self) -> dict[str, int]:
        return {**self._generations.sizes(), "subscribers": len(self._fanout)}
