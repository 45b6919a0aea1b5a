"""FakeConnector: contexts whose objects live in memory, for tests without HTTP.

A :class:`FakeConnector` is a :class:`~kubemux._registry.connector.Connector` (the seam through which a
context generation gets its data) that serves objects the test puts into it. It drives the
real lifecycle core (registry, generations, slots, stores, subscriptions) with no server,
socket or client in between, and scripts what a connector can do to it: a connect that
fails or hangs, a first sync that fails or waits, an informer that reports an error.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import hashlib
import itertools
import time
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from typing import Any

import anyio
import anyio.abc
import orjson

from ..._auth.provider import CredentialStatus
from ..._cache.store import Store
from ..._informer.discovery import resolve
from ..._kubeconfig.load import ContextConfig
from ..._resources import BUILTIN_RESOURCES, Resource, known_resource, parse_resource
from ..._wire.types import InformerKey, InformerState
from .source import FakeSource, SourceHooks

__all__ = ["FakeConnector", "Gate"]


class Gate:
    """Where a :class:`FakeConnector` holds calls (connects, first syncs) until :meth:`open`.

    A test waits for a call to arrive with :meth:`wait_reached`, does what it wants to race
    against the held call (stop the context, reload it, close the registry), then opens the
    gate or lets the held call be cancelled.
    """

    def __init__(self) -> None:
        self._opened = False
        self._open_event: anyio.Event | None = None
        self._reached_event: anyio.Event | None = None
        self.reached = 0
        """How many calls have arrived at the gate so far."""
        self.waiting = 0
        """How many calls are held at the gate now."""

    @property
    def is_open(self) -> bool:
        return self._opened

    def open(self) -> None:
        """Let every held call (and every later one) through."""
        self._opened = True
        if self._open_event is not None:
            self._open_event.set()

    async def wait_reached(self, count: int = 1) -> None:
        """Wait until ``count`` calls have arrived at the gate. Cancelling only stops the wait."""
        while self.reached < count:
            if self._reached_event is None:
                self._reached_event = anyio.Event()
            await self._reached_event.wait()

    async def _pass(self) -> None:
        self.reached += 1
        event, self._reached_event = self._reached_event, None
        if event is not None:
            event.set()
        if self._opened:
            return
        self.waiting += 1
        try:
            while not self._opened:
                if self._open_event is None:
                    self._open_event = anyio.Event()
                await self._open_event.wait()
        finally:
            self.waiting -= 1


@dataclasses.dataclass
class _Scripted:
    """Faults and gates for one context (and, by resource name, for its first syncs)."""

    connect_errors: list[BaseException] = dataclasses.field(default_factory=list)
    connect_gate: Gate | None = None
    disconnect_gate: Gate | None = None
    sync_errors: dict[str, list[BaseException]] = dataclasses.field(default_factory=dict)
    sync_gates: dict[str, Gate] = dataclasses.field(default_factory=dict)


class FakeConnector:
    """A connector whose contexts serve objects held in memory (no HTTP).

    Pass it as ``WatcherRegistry(contexts, connector=fake)``; :meth:`contexts` makes the
    :class:`~kubemux.ContextConfig` values. Objects are put in per context and resource with
    :meth:`create`, :meth:`update` and :meth:`delete`; a change reaches every running
    informer of that resource at once (synchronously: when the call returns, the stores
    hold it and subscribers have it queued). Informers filter by namespace and label and
    field selectors as the API server does.

    Example::

        fake = FakeConnector()
        fake.create("prod", "pods", make_pod("web-1"))
        async with WatcherRegistry(fake.contexts("prod"), connector=fake) as registry:
            store = await registry.watch("prod", "pods")
            fake.create("prod", "pods", make_pod("web-2"))
            assert store.get("default", "web-2") is not None

    Faults: :meth:`fail_connect`, :meth:`hold_connect`, :meth:`hold_disconnect`,
    :meth:`fail_sync`, :meth:`hold_sync`, :meth:`set_error` and :meth:`crash`. Observation: :attr:`connects`,
    :meth:`open_connections`, :meth:`running` and :meth:`wait_for`.

    Args:
        resources: Resources served besides the built-ins (custom resources), resolved by
            their kubectl names (plural, singular, kind, short names) like discovery does.
    """

    def __init__(self, resources: Iterable[Resource] = ()) -> None:
        self._served: tuple[Resource, ...] = (*BUILTIN_RESOURCES, *resources)
        self._objects: dict[tuple[str, str], dict[tuple[str, str], dict[str, Any]]] = {}
        self._rv = itertools.count(1)
        self._last_rv = 0
        self._scripts: dict[str, _Scripted] = {}
        self._sources: set[FakeSource] = set()
        self._connections: list[_FakeConnection] = []
        self._changed: anyio.Event | None = None
        self._hooks = SourceHooks(
            before_sync=self._before_sync,
            objects=self._objects_of,
            resource_version=lambda: str(self._last_rv),
            started=self._started,
            stopped=self._stopped,
        )
        self.connects: list[str] = []
        """Every connect attempt (that was not cancelled on entry), by context name, in order."""

    def __repr__(self) -> str:
        return (
            f"<FakeConnector connections={len(self._connections)} "
            f"informers={len(self._sources)} connects={len(self.connects)}>"
        )

    # ------------------------------------------------------------------ contexts
    @staticmethod
    def context(name: str, *, namespace: str | None = None, revision: int = 0) -> ContextConfig:
        """A :class:`ContextConfig` for ``name`` (no file, no credentials).

        A different ``revision`` gives a different fingerprint: put it in a
        :class:`~kubemux.KubeconfigSource` to make the registry reload the context.
        """
        server = f"https://{name}.fake.invalid"
        digest = hashlib.sha256(orjson.dumps([name, namespace, revision])).hexdigest()
        return ContextConfig(
            name=name,
            cluster_name=name,
            server=server,
            user_name=name,
            namespace=namespace,
            source="<fake>",
            fingerprint=digest,
            config={},
            cluster_key=hashlib.sha256(server.encode()).hexdigest(),  # a revision keeps it
        )

    @classmethod
    def contexts(cls, *names: str, namespace: str | None = None) -> dict[str, ContextConfig]:
        """``{name: context(name)}`` for each name, in order."""
        return {name: cls.context(name, namespace=namespace) for name in names}

    # ------------------------------------------------------------------ objects
    def create(
        self, context: str, resource: str | Resource, obj: Mapping[str, Any]
    ) -> dict[str, Any]:
        """Add (or replace) an object; returns it with its new ``resourceVersion``."""
        return self._put(context, resource, obj)

    def update(
        self, context: str, resource: str | Resource, obj: Mapping[str, Any]
    ) -> dict[str, Any]:
        """Replace an existing object (:class:`KeyError` if there is none)."""
        res = self._resource(resource)
        if _key(res, obj) not in self._objects.get((context, res.name), {}):
            raise KeyError(f"{context}/{res.name}: no object {_key(res, obj)}")
        return self._put(context, res, obj)

    def delete(
        self, context: str, resource: str | Resource, namespace: str | None, name: str
    ) -> dict[str, Any] | None:
        """Remove an object; returns it, or None if there was none."""
        res = self._resource(resource)
        objects = self._objects.get((context, res.name), {})
        gone = objects.pop(((namespace or "default") if res.namespaced else "", name), None)
        if gone is None:
            return None
        gone = copy.deepcopy(gone)
        gone["metadata"]["resourceVersion"] = self._next_rv()
        self._publish(context, res, "DELETED", gone)
        return gone

    def objects(self, context: str, resource: str | Resource) -> list[dict[str, Any]]:
        """The objects of one resource in one context (copies), by namespace and name."""
        res = self._resource(resource)
        objects = self._objects.get((context, res.name), {})
        return [copy.deepcopy(objects[k]) for k in sorted(objects)]

    # ------------------------------------------------------------------ faults
    def fail_connect(self, context: str, error: BaseException, times: int = 1) -> None:
        """The next ``times`` connects of ``context`` raise ``error`` (a copy each time)."""
        self._script(context).connect_errors.extend(error for _ in range(times))

    def hold_connect(self, context: str) -> Gate:
        """Hold connects of ``context`` at a :class:`Gate` (until it is opened)."""
        gate = self._script(context).connect_gate = Gate()
        return gate

    def hold_disconnect(self, context: str) -> Gate:
        """Hold the closing of connections of ``context`` at a :class:`Gate`, shielded from
        cancellation (a cleanup that hangs: what ``stop_timeout`` bounds)."""
        gate = self._script(context).disconnect_gate = Gate()
        return gate

    def fail_sync(
        self, context: str, resource: str | Resource, error: BaseException, times: int = 1
    ) -> None:
        """The next ``times`` first syncs of ``resource`` in ``context`` raise ``error``."""
        errors = self._script(context).sync_errors.setdefault(self._resource(resource).name, [])
        errors.extend(error for _ in range(times))

    def hold_sync(self, context: str, resource: str | Resource) -> Gate:
        """Hold first syncs of ``resource`` in ``context`` at a :class:`Gate`."""
        gate = self._script(context).sync_gates[self._resource(resource).name] = Gate()
        return gate

    def set_error(
        self,
        context: str,
        resource: str | Resource,
        error: str | None,
        state: InformerState = InformerState.BACKING_OFF,
    ) -> int:
        """Make the running informers of ``resource`` report ``error`` in their status (as an
        informer whose watch fails does), or, with None, recover (state ``watching``, no
        error). Returns how many informers it reached."""
        name = self._resource(resource).name
        reached = 0
        for source in list(self._sources):
            if source.context == context and source.resource.name == name:
                source.report(state if error is not None else InformerState.WATCHING, error)
                reached += 1
        return reached

    def crash(self, context: str, resource: str | Resource, error: BaseException) -> int:
        """Make the running informers of ``resource`` raise ``error`` (as a bug below the
        registry would); returns how many it reached. The registry contains it and starts
        them again after a backoff."""
        name = self._resource(resource).name
        reached = 0
        for source in list(self._sources):
            if source.context == context and source.resource.name == name:
                source.crash(error)
                reached += 1
        return reached

    # ------------------------------------------------------------------ observation
    def open_connections(self, context: str | None = None) -> int:
        """Connections open now (of ``context``, or of every context)."""
        return sum(1 for c in self._connections if context is None or c.context == context)

    def running(self, context: str | None = None, resource: str | Resource | None = None) -> int:
        """Informers running now (synced and not stopped), optionally of one context and
        resource."""
        name = None if resource is None else self._resource(resource).name
        return sum(
            1
            for s in self._sources
            if (context is None or s.context == context)
            and (name is None or s.resource.name == name)
        )

    async def wait_for(self, predicate: Callable[[], bool]) -> None:
        """Wait until ``predicate()`` holds; it is checked after every connect, disconnect,
        informer start and stop, and object change. Cancelling only stops the wait (guard it
        with ``anyio.fail_after``)."""
        while not predicate():
            if self._changed is None:
                self._changed = anyio.Event()
            await self._changed.wait()

    # ------------------------------------------------------------------ connector
    @contextlib.asynccontextmanager
    async def open(self) -> AsyncIterator[None]:
        """The registry's lifetime (the :class:`Connector` protocol): nothing to open."""
        yield

    @contextlib.asynccontextmanager
    async def connect(self, config: ContextConfig) -> AsyncIterator[_FakeConnection]:
        """Connect one generation of ``config.name`` (the :class:`Connector` protocol)."""
        name = config.name
        await anyio.lowlevel.checkpoint()  # as real I/O would: a cancelled start ends here
        self.connects.append(name)
        self._notify()
        script = self._scripts.get(name)
        if script is not None:
            if script.connect_gate is not None:
                await script.connect_gate._pass()
            if script.connect_errors:
                raise copy.copy(script.connect_errors.pop(0))
        connection = _FakeConnection(self, name)
        self._connections.append(connection)
        self._notify()
        try:
            yield connection
        finally:
            script = self._scripts.get(name)
            gate = script.disconnect_gate if script is not None else None
            if gate is not None:
                with anyio.CancelScope(shield=True):
                    await gate._pass()
            self._connections.remove(connection)
            self._notify()

    # ------------------------------------------------------------------ internals
    def _script(self, context: str) -> _Scripted:
        return self._scripts.setdefault(context, _Scripted())

    def _resource(self, resource: str | Resource) -> Resource:
        if isinstance(resource, Resource):
            return resource
        return known_resource(resource) or resolve(resource, self._served)

    def _next_rv(self) -> str:
        self._last_rv = next(self._rv)
        return str(self._last_rv)

    def _put(
        self, context: str, resource: str | Resource, obj: Mapping[str, Any]
    ) -> dict[str, Any]:
        res = self._resource(resource)
        stored = copy.deepcopy(dict(obj))
        meta = stored.setdefault("metadata", {})
        if not res.namespaced:
            meta.pop("namespace", None)
        elif not meta.get("namespace"):
            meta["namespace"] = "default"
        meta.setdefault(
            "uid",
            hashlib.sha256(orjson.dumps([context, res.name, _key(res, stored)])).hexdigest()[:32],
        )
        meta.setdefault("creationTimestamp", time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
        meta["resourceVersion"] = self._next_rv()
        stored.setdefault("apiVersion", res.api_version)
        if res.kind:
            stored.setdefault("kind", res.kind)
        objects = self._objects.setdefault((context, res.name), {})
        key = _key(res, stored)
        kind = "MODIFIED" if key in objects else "ADDED"
        objects[key] = stored
        self._publish(context, res, kind, stored)
        return copy.deepcopy(stored)

    def _publish(self, context: str, res: Resource, kind: str, obj: dict[str, Any]) -> None:
        for source in list(self._sources):
            if source.context == context and source.resource.name == res.name:
                source.apply(kind, obj)
        self._notify()

    async def _before_sync(self, context: str, resource: str) -> None:
        script = self._scripts.get(context)
        if script is None:
            return
        gate = script.sync_gates.get(resource)
        if gate is not None:
            await gate._pass()
        errors = script.sync_errors.get(resource)
        if errors:
            raise copy.copy(errors.pop(0))

    def _objects_of(self, context: str, resource: str) -> Iterable[Mapping[str, Any]]:
        return self._objects.get((context, resource), {}).values()

    def _started(self, source: FakeSource) -> None:
        self._sources.add(source)
        self._notify()

    def _stopped(self, source: FakeSource) -> None:
        self._sources.discard(source)
        self._notify()

    def _notify(self) -> None:
        event, self._changed = self._changed, None
        if event is not None:
            event.set()


def _key(res: Resource, obj: Mapping[str, Any]) -> tuple[str, str]:
    meta = obj.get("metadata") or {}
    namespace = (meta.get("namespace") or "default") if res.namespaced else ""
    return namespace, str(meta.get("name") or "")


class _FakeConnection:
    """One generation's connection to a :class:`FakeConnector` context."""

    def __init__(self, fake: FakeConnector, context: str) -> None:
        self.fake = fake
        self.context = context

    async def resources(self) -> tuple[Resource, ...]:
        return self.fake._served

    async def resolve(self, name: str) -> Resource:
        return known_resource(name) or resolve(name, self.fake._served, context=self.context)

    def resolve_cached(self, name: str) -> Resource | None:
        try:
            return known_resource(name) or resolve(name, self.fake._served)
        except LookupError:
            try:
                return parse_resource(name)
            except ValueError:
                return None

    def credential_status(self) -> CredentialStatus | None:
        return None

    def source(
        self,
        resource: Resource,
        key: InformerKey,
        *,
        store: Store,
        on_state: Callable[[], None],
    ) -> FakeSource:
        return FakeSource(
            self.context,
            resource,
            key,
            store=store,
            on_state=on_state,
            hooks=self.fake._hooks,
        )
