"""Starting things on generations for callers: every start/retry loop of the registry.

The path behind ``watch()`` and ``table()``: a kubectl-style name is resolved through the
context's connection (built-ins without a request, everything else through discovery), the
slot is created on the live generation under the key's lock (``Generations``), and the
caller waits until the slot's first sync finished. A namespaced resource whose cluster-wide
LIST is forbidden falls back to the namespaces the user may read. ``resources()`` and
``event_index()`` go round the same loop: a generation reloaded meanwhile is followed to its
successor, a stopped one raises :class:`ContextRemoved`.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Container, Mapping, Sequence
from typing import TypeVar

import anyio

from .._cache.event_index import EventIndex
from .._cache.multistore import MultiStore, MultiTableStore
from .._cache.store import Store, Transform
from .._cache.table import TableStore
from .._errors import ContextRemoved, Forbidden, ResourceNotFound, unwrap
from .._http.upstream import Upstream
from .._informer.informer import InformerKey
from .._resources import Resource, known_resource, parse_resource, path_segment
from .._wire.types import View
from .changes import ResourceNames
from .connector import Connection
from .context import ContextGeneration, Narrowed, Slot
from .generations import Generations
from .status import ContextState

__all__ = ["EVENT_KEYS", "ResourceSpec", "Starter", "StoreFactory", "informer_key"]

log = logging.getLogger(__name__)

ResourceSpec = str | Resource
T = TypeVar("T")

EVENTS_V1 = parse_resource("events.events.k8s.io")
EVENTS_CORE = parse_resource("events")
EVENT_KEYS = frozenset({InformerKey(EVENTS_V1.name), InformerKey(EVENTS_CORE.name)})
"""The informers that feed a generation's event index."""


class Starter:
    """Starts (or reuses) slots on the registry's generations and waits for them."""

    def __init__(
        self,
        generations: Generations,
        *,
        stop_timeout: float,
        names: ResourceNames,
        status_changed: Callable[[], None],
    ) -> None:
        self._gens = generations
        self._stop_timeout = stop_timeout
        self._names = names
        self._status_changed = status_changed

    async def scoped_store(
        self,
        context: str,
        resource: ResourceSpec,
        namespace: str | None,
        namespaces: Sequence[str] | None,
        labels: str | None,
        fields: str | None,
        view: View,
    ) -> Store:
        """The synced store of ``watch()``/``table()``: one informer, one per namespace of
        ``namespaces``, or, where the cluster-wide LIST is forbidden, one per namespace the
        user may read."""
        if namespaces is not None:
            if namespace is not None:
                raise ValueError("give namespace or namespaces, not both")
            if isinstance(namespaces, str) or not namespaces:
                raise ValueError("namespaces must be a non-empty list of names")
            return await self._union(context, resource, namespaces, labels, fields, view, "")
        if namespace is None and (found := self._narrowed(context, resource, labels, fields, view)):
            return await self._narrowed_store(context, resource, labels, fields, view, found)
        try:
            return await self.synced_store(context, resource, namespace, labels, fields, view)
        except Forbidden:
            # a cluster-wide LIST refused: the generation narrowed it to the namespaces the
            # user may read (see ContextGeneration._narrow); anything else is the caller's
            found = (
                None
                if namespace is not None
                else self._narrowed(context, resource, labels, fields, view)
            )
            if found is None:
                raise
            return await self._narrowed_store(context, resource, labels, fields, view, found)

    def _narrowed(
        self,
        context: str,
        resource: ResourceSpec,
        labels: str | None,
        fields: str | None,
        view: View,
    ) -> Narrowed | None:
        """The live generation's narrowing of this cluster-wide informer, if it made one."""
        gen = self._gens.gens.get(context)
        if gen is None or not gen.narrowed or gen.is_stopping:
            return None
        res = resource if isinstance(resource, Resource) else known_resource(resource)
        if res is None and (connection := gen.cached_connection()) is not None:
            res = connection.resolve_cached(str(resource))
        if res is None:
            return None
        return gen.narrowed.get(informer_key(res, None, labels, fields, view))

    async def _narrowed_store(
        self,
        context: str,
        resource: ResourceSpec,
        labels: str | None,
        fields: str | None,
        view: View,
        narrowed: Narrowed,
    ) -> Store:
        store = await self._union(
            context, resource, narrowed.scope, labels, fields, view, narrowed.reason
        )
        narrowed.store = store  # what store() returns for the cluster-wide informer
        return store

    async def _union(
        self,
        context: str,
        resource: ResourceSpec,
        scope: Sequence[str],
        label_selector: str | None,
        field_selector: str | None,
        view: View,
        reason: str,
    ) -> MultiStore:
        parts: dict[str, Store] = {}

        async def one(ns: str) -> None:
            parts[ns] = await self.synced_store(
                context, resource, ns, label_selector, field_selector, view
            )

        try:
            async with anyio.create_task_group() as tg:
                for ns in dict.fromkeys(scope):
                    tg.start_soon(one, ns)
        except BaseExceptionGroup as group:  # the first failure, as watch() raises it
            raise unwrap(group) from None
        kind = MultiTableStore if view == "table" else MultiStore
        return kind(parts, reason=reason)

    async def synced_store(
        self,
        context: str,
        resource: ResourceSpec,
        namespace: str | None,
        label_selector: str | None,
        field_selector: str | None,
        view: View,
    ) -> Store:
        stops_seen = self._gens.stops.get(context)
        fixed = resource if isinstance(resource, Resource) else known_resource(resource)

        def key_of(res: Resource) -> InformerKey:
            key = informer_key(res, namespace, label_selector, field_selector, view)
            self._names.learn(res)
            self._raise_pending_failure(context, key)  # inside its backoff: no request
            return key

        async def resolve_and_add(gen: ContextGeneration, connection: Connection) -> Slot:
            res = await connection.resolve(str(resource))
            return gen.ensure_slot(key_of(res), res, persistent=False)

        while True:
            if fixed is not None:  # nothing to resolve: check, create and use in one step
                key = key_of(fixed)
                async with self._gens.lock(context):
                    gen = await self._gens.current(context, stops_seen)
                    slot = gen.ensure_slot(key, fixed, persistent=False)
            else:
                gen, slot = await self._on_connection(context, stops_seen, resolve_and_add)
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
                    self._gens.stops.get(context) != stops_seen
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

    async def _on_connection(
        self,
        context: str,
        stops_seen: int | None,
        use: Callable[[ContextGeneration, Connection], Awaitable[T]],
    ) -> tuple[ContextGeneration, T]:
        """``use`` the live generation's connection, started if needed; a generation
        reloaded meanwhile is followed to its successor. While ``use`` runs the generation
        counts it as pending (it does not stop itself as idle); if it is left with nothing
        to run afterwards it stops, and this returns only once it has (no idle session)."""
        while True:
            async with self._gens.lock(context):
                gen = await self._gens.current(context, stops_seen)
                gen.pending += 1
            try:
                return gen, await use(gen, await gen.connection())
            except ContextRemoved:
                if self._gens.stops.get(context) != stops_seen or not gen.is_stopping:
                    raise
            finally:
                gen.pending -= 1
                if gen.stop_if_unused():
                    with anyio.move_on_after(self._stop_timeout, shield=True):
                        await gen.wait_done()

    async def resources(self, context: str) -> tuple[Resource, ...]:
        """See :meth:`WatcherRegistry.resources`."""

        async def discover(gen: ContextGeneration, connection: Connection) -> tuple[Resource, ...]:
            return await connection.resources()

        return (await self._on_connection(context, self._gens.stops.get(context), discover))[1]

    @contextlib.asynccontextmanager
    async def upstream(self, context: str) -> AsyncIterator[Upstream]:
        """See :meth:`WatcherRegistry.upstream`: the live generation's client, held (as
        pending) for the block; the generation stays running afterwards."""
        stops_seen = self._gens.stops.get(context)
        while True:
            async with self._gens.lock(context):
                gen = await self._gens.current(context, stops_seen)
                gen.pending += 1
            try:
                try:
                    connection = await gen.connection()
                except ContextRemoved:
                    if self._gens.stops.get(context) != stops_seen or not gen.is_stopping:
                        raise
                    continue  # reloaded meanwhile: the new generation
                client = getattr(connection, "client", None)
                if client is None:
                    raise RuntimeError(f"context {context!r}: its connector has no HTTP client")
                gen.last_used = time.monotonic()
                yield Upstream(client, gen.number, gen.wait_done)
                return
            finally:
                gen.pending -= 1
                gen.last_used = time.monotonic()

    async def event_index(self, context: str) -> EventIndex:
        """See :meth:`WatcherRegistry.event_index`."""
        while True:
            try:
                store = await self.scoped_store(
                    context, EVENTS_V1, None, None, None, None, View.OBJECTS
                )
            except ResourceNotFound:
                store = await self.scoped_store(
                    context, EVENTS_CORE, None, None, None, None, View.OBJECTS
                )
            gen = self._gens.gens.get(context)
            if gen is None or not gen.is_running:
                continue  # stopped or reloaded in between: the next call decides what to raise
            try:
                return gen.open_event_index(store)
            except ContextRemoved:
                continue

    def running_store(
        self,
        context: str,
        resource: ResourceSpec,
        namespace: str | None,
        label_selector: str | None,
        field_selector: str | None,
        view: View,
    ) -> Store | None:
        """See :meth:`WatcherRegistry.store` (never starts anything)."""
        gen = self._gens.gens.get(context)
        if gen is None or not gen.is_running:
            return None
        if isinstance(resource, Resource):
            res: Resource | None = resource
        else:
            connection = gen.cached_connection()
            res = connection.resolve_cached(resource) if connection is not None else None
        if res is None:
            return None
        key = informer_key(res, namespace, label_selector, field_selector, view)
        slot = gen.slots.get(key)
        if slot is None and (narrowed := gen.narrowed.get(key)) is not None:
            union = narrowed.store  # a forbidden cluster-wide informer: its namespaces
            if union is None or not union.has_synced:
                return None
            gen.last_used = time.monotonic()
            return union
        if slot is None or not slot.store.has_synced:
            return None
        gen.last_used = time.monotonic()
        return slot.store

    def subscription_names(self, resource: ResourceSpec) -> Container[str]:
        """The full resource names ``resource`` means (see :class:`ResourceNames`)."""
        if isinstance(resource, Resource):
            return frozenset((resource.name,))
        resolved = set()
        for gen in self._gens.gens.values():
            connection = gen.cached_connection()
            if connection is not None and (res := connection.resolve_cached(resource)):
                resolved.add(res.name)
        with contextlib.suppress(ValueError):
            resolved.add(parse_resource(resource).name)
        return self._names.matcher(resource, resolved)

    def _raise_pending_failure(self, context: str, key: InformerKey) -> None:
        """Inside the backoff window of this informer's failed start: its error, no request."""
        failure = self._gens.slot_failures.get(context, {}).get(key)
        gen = self._gens.gens.get(context)
        if failure is not None and failure.pending and (gen is None or key not in gen.slots):
            failure.reraise()


class StoreFactory:
    """Builds each slot's store: a :class:`TableStore` for table views, else a
    :class:`Store` with the resource's transform (``transforms`` by kubectl name, else
    ``default``)."""

    __slots__ = ("_default", "_transforms")

    def __init__(self, default: Transform | None, transforms: Mapping[str, Transform | None]):
        self._default = default
        self._transforms = {_full_name(k): v for k, v in transforms.items()}

    def __call__(self, resource: Resource, view: View) -> Store:
        if view == "table":
            return TableStore(resource)
        return Store(resource, transform=self._transforms.get(resource.name, self._default))


def _full_name(name: str) -> str:
    """A built-in's full name (``po`` -> ``pods``), else the name as given (a CRD's
    ``plural.group``)."""
    try:
        return parse_resource(name).name
    except ValueError:
        return name


def informer_key(
    res: Resource,
    namespace: str | None,
    label_selector: str | None,
    field_selector: str | None,
    view: View = View.OBJECTS,
) -> InformerKey:
    """What names one informer of a context: a namespace only for namespaced resources.

    Raises:
        ValueError: the namespace is ``.`` or ``..`` (no URL can hold it; client-go
            refuses it too).
    """
    if namespace and res.namespaced:
        path_segment(namespace, "namespace")
    return InformerKey(
        res.name,
        namespace if res.namespaced else None,
        label_selector or None,
        field_selector or None,
        view,
    )
