"""The fake cluster's data: objects, one global resourceVersion counter, per-resource history.

Sync and loop-agnostic: object operations never await and never block on watchers. Each open
watch owns a queue that object operations append to; the HTTP layer drains those queues.

Objects are stored as JSON bytes, never mutated: an update stores a new version. Callers get
fresh copies, free to edit what they receive (or passed in) without corrupting the cluster.
"""

from __future__ import annotations

import bisect
import datetime as dt
import secrets
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import orjson

from ..._cache.snapshot import Key
from ..._resources import BUILTIN_RESOURCES, Resource, parse_resource, register_resource
from .._access.authorizer import RBAC_RESOURCES, settle_aggregation
from .._wire.protocol import BadRequest, Selector
from .crd import CrdInfo
from .resource import (
    ADDED,
    DELETED,
    MODIFIED,
    NO_OBJECT,
    Event,
    ResourceState,
    Stored,
    Watch,
)

__all__ = ["RBAC_RESOURCES", "SERVED_RESOURCES", "ObjectStore"]  # RBAC_RESOURCES: for tests

_TOP_KEYS = ("kind", "apiVersion", "metadata")
_CRD_GROUP = "apiextensions.k8s.io"
_META_ORDER = (
    "name",
    "generateName",
    "namespace",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
)


def _describe(state: ResourceState, key: Key) -> str:
    where = f"{key[0]}/{key[1]}" if key[0] else key[1]
    return f"{state.resource.name} {where!r}"


def _same(new: Mapping[str, Any], old: Mapping[str, Any]) -> bool:
    """Whether two versions differ only in their resourceVersion."""
    if new.keys() != old.keys() or any(new[k] != old[k] for k in new if k != "metadata"):
        return False
    a, b = dict(new["metadata"]), dict(old["metadata"])
    a.pop("resourceVersion", None)
    b.pop("resourceVersion", None)
    return a == b


def _copy(stored: Stored) -> dict[str, Any]:
    copy: dict[str, Any] = orjson.loads(stored.raw)
    return copy


_clock: list[Any] = [0, ""]


def _now() -> str:
    """The current time as RFC 3339 seconds (formatted once per second)."""
    second = int(time.time())
    if second != _clock[0]:
        stamp = dt.datetime.fromtimestamp(second, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        _clock[:] = [second, stamp]
    return str(_clock[1])


SERVED_RESOURCES: tuple[Resource, ...] = (
    *BUILTIN_RESOURCES,
    Resource(
        group="autoscaling",
        version="v2",
        plural="horizontalpodautoscalers",
        kind="HorizontalPodAutoscaler",
    ),
    *RBAC_RESOURCES.values(),
)
"""What every fake serves: the built-in table, the rest of ``kubectl get all``, RBAC."""


class ObjectStore:
    """All objects of a fake cluster, with etcd-like resourceVersions and a watch history."""

    def __init__(self, *, history_limit: int, on_change: Callable[[], None]) -> None:
        self.rv = 0
        self.compacted_rv = 0
        self.history_limit = history_limit
        self._on_change = on_change
        self._states: dict[tuple[str, str], ResourceState] = {}
        self._extra: dict[tuple[str, str], Resource] = {}
        self._builtin = {(r.group, r.plural): r for r in SERVED_RESOURCES}
        self.crds: dict[tuple[str, str], CrdInfo] = {}  # (group, plural) -> what a CRD serves
        self._aggregating = False

    # ------------------------------------------------------------------ resource types
    def register(self, resource: Resource) -> ResourceState:
        """Serve ``resource`` (and list it in discovery); idempotent."""
        ident = (resource.group, resource.plural)
        state = self._states.get(ident)
        if state is None:
            if ident not in self._builtin:
                self._extra[ident] = resource
                register_resource(resource)
            state = self._states[ident] = ResourceState(self._builtin.get(ident, resource))
        return state

    def state(self, resource: str | Resource) -> ResourceState:
        """The state of a resource type, registering it on first use."""
        res = parse_resource(resource)
        state = self._states.get((res.group, res.plural))
        return state if state is not None else self.register(res)

    def lookup(self, group: str, version: str, plural: str) -> ResourceState | None:
        """The resource served at ``/apis/{group}/{version}/{plural}``, if any."""
        ident = (group, plural)
        res = self._extra.get(ident) or self._builtin.get(ident)
        if res is None:
            return None
        crd = self.crds.get(ident)
        if version not in (crd.versions if crd is not None else (res.version,)):
            return None
        return self.state(res)

    def served_versions(self, res: Resource) -> tuple[str, ...]:
        """The versions ``res`` is served at, preferred first."""
        crd = self.crds.get((res.group, res.plural))
        return crd.versions if crd is not None else (res.version,)

    # ------------------------------------------------------------------ CRDs
    def _crd_event(self, state: ResourceState, events: Iterable[Event]) -> None:
        """Serve, change or withdraw custom resources as their CRDs come and go; aggregate."""
        if state.resource == RBAC_RESOURCES["clusterroles"]:
            if not self._aggregating:  # the aggregation controller: writes watches see
                self._aggregating = True
                try:
                    settle_aggregation(
                        lambda: [_copy(state.objects[key]) for key in state.sorted_keys()],
                        lambda role: self.replace(state, ("", role["metadata"]["name"]), role),
                    )
                finally:
                    self._aggregating = False
            return
        if (
            state.resource.group != _CRD_GROUP
            or state.resource.plural != "customresourcedefinitions"
        ):
            return
        for event in events:
            if event.type == DELETED:
                self._withdraw(event.cur.obj)
            else:
                self._serve(event.cur.obj)

    def _serve(self, crd: Mapping[str, Any]) -> None:
        info = CrdInfo.parse(crd)
        if info is None:
            return
        ident = (info.resource.group, info.resource.plural)
        self.crds[ident] = info
        self._extra[ident] = info.resource
        register_resource(info.resource)
        state = self._states.get(ident)
        if state is not None:
            state.resource = info.resource
        else:
            self._states[ident] = ResourceState(info.resource)

    def _withdraw(self, crd: Mapping[str, Any]) -> None:
        info = CrdInfo.parse(crd)
        if info is None:
            return
        ident = (info.resource.group, info.resource.plural)
        if self.crds.pop(ident, None) is None:
            return
        self._extra.pop(ident, None)
        state = self._states.pop(ident, None)
        if state is not None:  # the custom objects go with it; their watches end
            for watch in state.watchers:
                watch.finished = True
                watch.wake.set()
            state.watchers.clear()

    def resources(self) -> list[Resource]:
        """Every served resource type: the built-in table, then registered ones (and CRDs)."""
        return [*SERVED_RESOURCES, *self._extra.values()]

    def oldest_rv(self, state: ResourceState) -> int:
        """Resume points (watch RVs, continue tokens) older than this are Expired."""
        return max(self.compacted_rv, state.trimmed_rv)

    # ------------------------------------------------------------------ object operations
    def _key(self, state: ResourceState, namespace: str | None, name: str) -> Key:
        if state.resource.namespaced:
            return (namespace or "default", name)
        return ("", name)

    def _build(
        self, state: ResourceState, obj: Mapping[str, Any], old: Stored | None, rv: int
    ) -> tuple[Key, Stored]:
        source = dict(obj.get("metadata") or {})
        name = source.get("name")
        if not name:
            prefix = source.get("generateName")
            if not prefix:
                raise ValueError("metadata.name (or metadata.generateName) is required")
            name = f"{prefix}{secrets.token_hex(3)[:5]}"
        key = self._key(state, source.get("namespace"), str(name))
        meta: dict[str, Any] = {"name": key[1]}
        if source.get("generateName"):
            meta["generateName"] = source["generateName"]
        if state.resource.namespaced:
            meta["namespace"] = key[0]
        if old is not None:
            old_meta = old.obj["metadata"]
            meta["uid"] = old_meta["uid"]
            generation = int(old_meta.get("generation", 1))
            if obj.get("spec") != old.obj.get("spec"):
                generation += 1
            created = old_meta["creationTimestamp"]
        else:
            meta["uid"] = source.get("uid") or str(uuid.uuid4())
            generation = int(source.get("generation") or 1)
            created = source.get("creationTimestamp") or _now()
        meta["resourceVersion"] = str(rv)
        meta["generation"] = generation
        meta["creationTimestamp"] = created
        for k, v in source.items():
            if k not in _META_ORDER:
                meta[k] = v
        out: dict[str, Any] = {
            "kind": state.kind,
            "apiVersion": state.resource.api_version,
            "metadata": meta,
        }
        for k, v in obj.items():
            if k not in _TOP_KEYS:
                out[k] = v
        try:
            raw = orjson.dumps(out)  # bytes: nothing the caller can still touch
        except orjson.JSONEncodeError as exc:  # nested deeper than orjson writes (254)
            raise BadRequest(f"the object cannot be stored: {exc}") from None
        return key, Stored(raw)

    def _insert(self, state: ResourceState, objs: Iterable[Mapping[str, Any]]) -> list[Event]:
        events: list[Event] = []
        try:
            for obj in objs:
                rv = self.rv + 1
                key, stored = self._build(state, obj, None, rv)
                if key in state.objects:
                    raise ValueError(f"{_describe(state, key)} already exists")
                self.rv = rv
                state.objects[key] = stored
                events.append(Event(ADDED, rv, key, stored, None))
        finally:
            if events:
                state.invalidate_keys()
                state.record(events, self.history_limit)
                self._crd_event(state, events)
                self._on_change()
        return events

    def create_many(self, resource: str | Resource, objs: Iterable[Mapping[str, Any]]) -> int:
        """Create objects in one go: one history append and one wake-up per watch.

        Returns:
            The resourceVersion after the last creation.

        Raises:
            ValueError: an object exists already (objects before it were created).
        """
        self._insert(self.state(resource), objs)
        return self.rv

    def create(self, resource: str | Resource, obj: Mapping[str, Any]) -> dict[str, Any]:
        """Create one object; see :meth:`FakeCluster.create`."""
        (event,) = self._insert(self.state(resource), (obj,))
        return _copy(event.cur)

    def insert(self, state: ResourceState, obj: Mapping[str, Any]) -> Stored:
        """Create one object and return its stored version (no copy).

        Raises:
            ValueError: it exists already, or it has no name.
        """
        (event,) = self._insert(state, (obj,))
        return event.cur

    def update(self, resource: str | Resource, obj: Mapping[str, Any]) -> dict[str, Any]:
        """Replace an existing object; see :meth:`FakeCluster.update`."""
        state = self.state(resource)
        meta = obj.get("metadata") or {}
        key = self._key(state, meta.get("namespace"), str(meta.get("name") or ""))
        old = state.objects.get(key)
        if old is None:
            raise KeyError(f"{_describe(state, key)} not found")
        rv = self.rv + 1
        key, stored = self._build(state, obj, old, rv)
        self.rv = rv
        state.objects[key] = stored
        events = [Event(MODIFIED, rv, key, stored, old)]
        state.record(events, self.history_limit)
        self._crd_event(state, events)
        self._on_change()
        return _copy(stored)

    def apply(self, resource: str | Resource, obj: Mapping[str, Any]) -> dict[str, Any]:
        """Create or update; see :meth:`FakeCluster.apply`."""
        state = self.state(resource)
        meta = obj.get("metadata") or {}
        if meta.get("name"):
            key = self._key(state, meta.get("namespace"), str(meta["name"]))
            if key in state.objects:
                return self.update(state.resource, obj)
        return self.create(state.resource, obj)

    def delete(
        self, resource: str | Resource, namespace: str | None, name: str
    ) -> dict[str, Any] | None:
        """Delete one object; see :meth:`FakeCluster.delete`."""
        state = self.state(resource)
        key = self._key(state, namespace, name)
        old = state.objects.pop(key, None)
        if old is None:
            return None
        state.invalidate_keys()
        self.rv += 1
        final = {**old.obj, "metadata": {**old.obj["metadata"], "resourceVersion": str(self.rv)}}
        stored = Stored(orjson.dumps(final), final)
        events = [Event(DELETED, self.rv, key, stored, old)]
        state.record(events, self.history_limit)
        self._crd_event(state, events)
        self._on_change()
        return _copy(stored)

    # ------------------------------------------------------------------ writes over HTTP
    def key_of(self, state: ResourceState, namespace: str | None, name: str) -> Key:
        """The key of ``name`` in ``namespace`` (ignored for cluster-scoped resources)."""
        return self._key(state, namespace, name)

    def prepare(self, state: ResourceState, obj: Mapping[str, Any]) -> tuple[Key, Stored]:
        """What creating ``obj`` would store (a dry run); nothing changes.

        Raises:
            ValueError: it has no name, or it exists already.
        """
        key, stored = self._build(state, obj, None, self.rv + 1)
        if key in state.objects:
            raise ValueError(f"{_describe(state, key)} already exists")
        return key, stored

    def replace(
        self, state: ResourceState, key: Key, obj: Mapping[str, Any], *, dry_run: bool = False
    ) -> tuple[Stored, bool]:
        """Write ``obj`` as the new version of the object at ``key`` (which must exist).

        As in kube-apiserver, a write that changes nothing keeps the object, its
        resourceVersion and sends no event. Returns the version now stored (or that would
        be, with ``dry_run``) and whether it changed.
        """
        old = state.objects[key]
        rv = self.rv + 1
        _, stored = self._build(
            state,
            {
                **obj,
                "metadata": {**(obj.get("metadata") or {}), "name": key[1], "namespace": key[0]},
            },
            old,
            rv,
        )
        if _same(stored.obj, old.obj):
            return old, False
        if dry_run:
            return stored, True
        self.rv = rv
        state.objects[key] = stored
        events = [Event(MODIFIED, rv, key, stored, old)]
        state.record(events, self.history_limit)
        self._crd_event(state, events)
        self._on_change()
        return stored, True

    def remove(self, state: ResourceState, keys: Iterable[Key]) -> list[Stored]:
        """Delete the objects at ``keys`` (missing ones are skipped): one history append.

        Returns the final versions, as their DELETED events carry them.
        """
        events: list[Event] = []
        for key in keys:
            old = state.objects.pop(key, None)
            if old is None:
                continue
            self.rv += 1
            meta = {**old.obj["metadata"], "resourceVersion": str(self.rv)}
            final = {**old.obj, "metadata": meta}
            events.append(Event(DELETED, self.rv, key, Stored(orjson.dumps(final), final), old))
        if events:
            state.invalidate_keys()
            state.record(events, self.history_limit)
            self._crd_event(state, events)
            self._on_change()
        return [event.cur for event in events]

    def get(
        self, resource: str | Resource, namespace: str | None, name: str
    ) -> dict[str, Any] | None:
        """A copy of one object, or None."""
        state = self.state(resource)
        stored = state.objects.get(self._key(state, namespace, name))
        return None if stored is None else _copy(stored)

    def objects(
        self, resource: str | Resource, namespace: str | None = None
    ) -> list[dict[str, Any]]:
        """Copies of the current objects, sorted by (namespace, name)."""
        state = self.state(resource)
        return [
            _copy(state.objects[key])
            for key in state.sorted_keys()
            if namespace is None or key[0] == namespace
        ]

    def compact(self) -> list[Watch]:
        """Forget all history; return the open watches, which must now end with a 410."""
        self.compacted_rv = self.rv
        watches: list[Watch] = []
        for state in self._states.values():
            state.history.clear()
            state.first = 0
            watches.extend(state.watchers)
        return watches

    # ------------------------------------------------------------------ reads for the server
    def list_at(
        self,
        state: ResourceState,
        rv: int,
        selector: Selector,
        after: Key | None,
        limit: int,
    ) -> tuple[list[Stored], Key | None, int]:
        """One page of a LIST at snapshot ``rv`` (checked not to be expired).

        Returns:
            The page, the last key when more items follow (else None), and how many keys
            follow the page (an upper bound when the selector filters content).
        """
        overlay = state.state_at(rv) if rv < self.rv else {}
        keys = state.sorted_keys()
        gone = [key for key, was in overlay.items() if was is not None and key not in state.objects]
        if gone:  # deleted since the snapshot: merge them back in (timsort: nearly linear)
            keys = sorted(keys + gone)
        lo, hi = 0, len(keys)
        if selector.namespace is not None:
            lo = bisect.bisect_left(keys, (selector.namespace, ""))
            hi = bisect.bisect_left(keys, (selector.namespace + "\x00", ""))
        if after is not None:
            lo = max(lo, bisect.bisect_right(keys, after))
        page: list[Stored] = []
        objects = state.objects
        check = selector.filters_content
        index = lo
        while index < hi:
            key = keys[index]
            index += 1
            stored = overlay.get(key, NO_OBJECT) if overlay else NO_OBJECT
            if stored is NO_OBJECT:
                stored = objects.get(key)
            if stored is None or (check and not selector.matches(stored.obj)):
                continue
            page.append(stored)
            if limit and len(page) >= limit:
                break
        if limit and len(page) >= limit and index < hi:
            return page, keys[index - 1], hi - index
        return page, None, 0

    def initial_events(self, state: ResourceState, selector: Selector) -> list[Event]:
        """Synthetic ADDED events for every current object the selector matches."""
        page, _, _ = self.list_at(state, self.rv, selector, None, 0)
        rv = self.rv
        return [Event(ADDED, rv, ("", ""), stored, None) for stored in page]
