"""LIST, GET and WATCH answered from kubemux's informers, with kube-apiserver's semantics.

:class:`CachedReads` takes a :class:`~._reads.ReadRequest` for a resource and answers it
from the store of the context's informer for that resource (cluster-wide; a namespaced
request reads its namespace from it; a limited user's fallback store serves the namespaces
it holds), or says it cannot (False, nothing sent) and the request goes upstream as it is.

- **Options** are parsed as the API server parses them (:func:`~._rv.parse_list_options`):
  its 400 and 422 answers, word for word, for bad selectors, integers and combinations.
  A custom resource's field selector the proxy does not know goes upstream (its CRD may
  declare ``selectableFields``).
- **resourceVersion** (:func:`~._rv.plan_list`, :func:`~._rv.plan_get`): unset, ``""``
  and ``"0"`` read the cache (as fresh as the watch, past the floors below); a newer
  version waits for the cache, bounded, then 504 ``Too large resource version`` with
  ``Retry-After``; an exact older one comes from the store's event history taken back
  to it (:func:`~.pins.view_at`), else upstream. Every LIST answers the snapshot's
  resourceVersion, the API server's own.
- **Pages** (``limit``/``continue``) read one pinned snapshot (:class:`~._continue.
  SnapshotPins`), so every page together is exactly the set at the first page's version.
  Tokens are bound to the context, the resource, the view and the namespace.
- **Watches** go through the store's :class:`~._watch.WatchBroadcaster`; Table watches
  too (from the table view's rows). A Table read that needs the objects
  (``includeObject=Object``, a field selector on fields other than the name and
  namespace) joins each row with the objects view's object of the same version, and goes
  upstream when the two views disagree (and always for a watch).
- **Monotonic and consistent reads** (:mod:`.freshness`): a read waits, bounded, until
  the store has reached what the proxy has shown (a write's version included), and with
  ``consistent_reads`` the server's version for resourceVersion unset; else upstream.

Every answer carries ``X-Kubemux-Cache: hit`` and ``X-Kubemux-Cache-Lag`` (see
:mod:`.served`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import sys
from collections.abc import Callable, Iterator
from operator import itemgetter
from typing import Any

import anyio
from starlette.types import Receive, Scope, Send

from ..._cache.multistore import MultiStore
from ..._cache.snapshot import Key
from ..._errors import ApiError, KubemuxError
from ..._registry.registry import WatcherRegistry
from ..._resources import Resource
from ..._wire.codec import raw_resource_version
from ..._wire.types import View
from .._api.lists import iter_list, iter_table, join_table, split_table_row
from .._api.responses import status_for_error
from .._api.statuses import ProxyStatusError, too_many_requests
from .._api.tokens import (
    LATEST,
    ContinueTokens,
    PinnedSnapshot,
    SnapshotPins,
    remaining_item_count,
    take_page,
)
from .._query.fields import BUILTIN_GROUPS
from .._query.options import (
    ListOptions,
    Source,
    parse_list_options,
    plan_get,
    plan_list,
)
from .._query.selectors import ObjectFilter
from .._watch.flow import Flow
from .._watch.watch import WatchLimits
from .callers import as_status_error, credential_key
from .freshness import Freshness, GoUpstream, shows_state
from .marks import WriteMarks, bound_context
from .pins import view_at
from .reads import ReadRequest, send_chunks
from .scans import Scans
from .served import ServedStatus, ServedStore, ServedStores
from .table_join import Inconsistent, joined_rows, row_matcher, served_ages, served_columns
from .watches import serve_watch

__all__ = ["CachedReads", "CachedSettings", "as_status_error", "credential_key"]

TOO_MANY = "Too many requests, please try again later."


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class CachedSettings:
    """How reads are answered from the cache (see :class:`~kubemux.proxy.ProxySettings`)."""

    store_timeout: float = 95.0
    wait_timeout: float = 3.0
    read_your_writes_timeout: float = 3.0
    consistent_reads: bool = False
    consistent_wait_timeout: float = 0.1
    max_watches_per_credential: int = 16384
    watch_write_timeout: float = 30.0
    max_concurrent_scans: int = 2
    scan_slice: float = 0.001
    watch: WatchLimits = dataclasses.field(default_factory=WatchLimits)


class CachedReads:
    """Answers reads from the registry's informers (see the module docstring).

    Args:
        registry: Whose informers serve.
        settings: Timeouts and caps.
    """

    def __init__(self, registry: WatcherRegistry, settings: CachedSettings | None = None):
        self.registry = registry
        self.settings = settings or CachedSettings()
        self.stores = ServedStores(self.settings.watch)
        self.pins: SnapshotPins[PinnedSnapshot] = SnapshotPins()
        self.tokens = ContinueTokens()
        self.marks = WriteMarks()
        self.stores.on_cleared = lambda served: self.marks.forget(served.context)
        self.freshness = Freshness(
            registry,
            self.marks,
            floor_timeout=self.settings.read_your_writes_timeout,
            consistent=self.settings.consistent_reads,
            consistent_timeout=self.settings.consistent_wait_timeout,
        )
        self.scans = Scans(self.settings.max_concurrent_scans, self.settings.scan_slice)
        self._watches: dict[tuple[str, str], int] = {}  # (credential, context) -> open

    def __repr__(self) -> str:
        return f"<CachedReads stores={len(self.stores)} pins={len(self.pins)} {self.marks!r}>"

    def status(self) -> tuple[ServedStatus, ...]:
        """Every store served from, with its version, lag and watches."""
        return self.stores.status()

    def close(self) -> None:
        """End every watch served from the cache."""
        self.stores.close()

    # ------------------------------------------------------------------ caps
    @property
    def watching(self) -> int:
        """Watches open now (from the cache or upstream), all credentials together."""
        return sum(self._watches.values())

    @contextlib.contextmanager
    def watch_slot(self, credential: str, context: str) -> Iterator[None]:
        """Count one watch of ``credential`` on ``context``; a 429 past the cap
        (kube-apiserver's wording and ``Retry-After``). The cap is per (credential,
        context): every client of ``kubemux proxy`` sends the same token, so one context's
        watches must never refuse another context's."""
        key = (credential, context)
        if self._watches.get(key, 0) >= self.settings.max_watches_per_credential:
            raise as_status_error(too_many_requests(TOO_MANY))
        release = self._hold(key)
        try:
            yield
        finally:
            release()

    def _hold(self, key: tuple[str, str]) -> Callable[[], None]:
        """Count one watch of ``key`` (no cap: a watch already admitted that goes on
        without its task holds a slot of its own); the release."""
        self._watches[key] = self._watches.get(key, 0) + 1
        return functools.partial(self._release, key)  # lighter than a closure, per watch

    def _release(self, key: tuple[str, str]) -> None:
        left = self._watches[key] - 1
        if left:
            self._watches[key] = left
        else:
            del self._watches[key]

    # ------------------------------------------------------------------ stores
    def _heard(self, context: str, resource: Resource, view: View) -> float | None:
        status = self.registry.status().contexts.get(context)
        if status is None:
            return None
        times = [
            t
            for i in status.informers
            if i.resource == resource.name and i.view == view and i.namespace is None
            for t in (i.last_event, i.last_sync, i.watch_started)
            if t is not None
        ]
        return max(times) if times else None

    async def served(
        self, context: str, resource: Resource, view: View, namespace: str | None
    ) -> ServedStore | None:
        """The store that serves ``view`` of ``resource`` in ``namespace`` (None: all),
        starting its informer if needed; None when the cache cannot serve it (the
        informer fails with an API error: the API server's answer is the one to give)."""
        try:
            with anyio.fail_after(self.settings.store_timeout):
                if view == "table":
                    store: Any = await self.registry.table(context, resource)
                else:
                    store = await self.registry.watch(context, resource)
        except TimeoutError:
            return None
        except ApiError:
            return None  # forbidden, gone, ...
        except KubemuxError as exc:
            raise status_for_error(exc, context) from None
        part_namespace: str | None = None
        if isinstance(store, MultiStore):  # a limited user's namespaces
            if namespace is None or namespace not in store.stores:
                return None
            store = store.stores[namespace]
            part_namespace = namespace
        if view == "table" and getattr(store, "is_fallback", False):
            return None  # the server has no Table support: let it answer for itself
        if not store.has_synced:
            return None
        return self.stores.get(
            context,
            store,
            view,
            namespace=part_namespace,
            heard=lambda: self._heard(context, resource, view),
        )

    # ------------------------------------------------------------------ entry point
    async def serve(
        self,
        context: str,
        resource: Resource,
        read: ReadRequest,
        scope: Scope,
        receive: Receive,
        send: Send,
        who: str = "",
    ) -> bool:
        """Answer ``read`` from the cache (as user ``who``, with ``--user-tokens``); False
        (nothing sent) when it must go upstream (why: ``scope["kubemux.upstream"]``, counted).

        Raises:
            StatusError: the API server's error for this request (bad options, a version
                the cache did not reach in time, a context that cannot start).
        """
        counters = self.freshness.counters
        try:
            answered = await self._serve(context, resource, read, scope, receive, send, who)
        except GoUpstream as why:
            scope["kubemux.upstream"] = why.reason
            counters.upstream(context, resource.name, why.reason)
            return False
        if answered and read.verb != "watch":  # a watch is counted as it starts
            counters.cached(context, resource.name)
        elif not answered:
            scope["kubemux.upstream"] = "unsupported"
            counters.upstream(context, resource.name, "unsupported")
        return answered

    async def _serve(
        self,
        context: str,
        resource: Resource,
        read: ReadRequest,
        scope: Scope,
        receive: Receive,
        send: Send,
        who: str = "",
    ) -> bool:
        if read.namespace is not None and not resource.namespaced:
            return False  # the API server's 404
        custom = resource.group not in BUILTIN_GROUPS
        options: ListOptions | None = None
        try:
            if read.verb != "get":
                params = dict(read.params)
                if read.name is not None:  # a watch of one object: its name selects it
                    name = read.name.replace("\\", "\\\\").replace(",", "\\,")
                    name = name.replace("=", "\\=")
                    given = params.get("fieldSelector", "")
                    params["fieldSelector"] = (given + "," if given else "") + (
                        f"metadata.name={name}"
                    )
                options = parse_list_options(params, resource, custom=custom)
        except ProxyStatusError as exc:
            if custom and "fieldSelector" in read.params and exc.code == 400:
                return False  # a CRD's selectableFields: the API server knows them
            raise as_status_error(exc) from None
        needs_objects = read.view == "table" and (
            read.include_object == "Object"
            or (options is not None and options.field_selector.needs_object)
        )
        if needs_objects and read.verb == "watch":
            return False
        served = await self.served(context, resource, read.view, read.namespace)
        if served is None:
            return False
        stores = [served]
        objects: ServedStore | None = None
        if needs_objects:
            objects = await self.served(context, resource, View.OBJECTS, read.namespace)
            if objects is None:
                return False
            stores.append(objects)
        if shows_state(read.verb, read.params, options):
            unset = read.params.get("resourceVersion", "") == ""
            reason = await self.freshness.check(context, resource, stores, unset=unset)
            if reason is not None:
                raise GoUpstream(reason)
        for one in stores:
            one.touch()
            one.shown = max(one.shown, one.current_rv())  # never answer older after this
        try:
            if read.verb == "get":
                return await self._get(served, objects, resource, read, send)
            assert options is not None
            if read.verb == "list":
                bound = bound_context(context, who)  # continue tokens are the user's
                return await self._list(
                    bound, served, objects, resource, read, options, send, custom=custom
                )
            self.freshness.counters.cached(context, resource.name)
            return await self._watch(served, resource, read, options, scope, receive, send)
        except ProxyStatusError as exc:
            raise as_status_error(exc) from None
        except Inconsistent:
            return False

    # ------------------------------------------------------------------ GET
    async def _get(
        self,
        served: ServedStore,
        objects: ServedStore | None,
        resource: Resource,
        read: ReadRequest,
        send: Send,
    ) -> bool:
        assert read.name is not None
        plan = plan_get(read.params.get("resourceVersion", ""), served.current_rv())
        if plan.source is Source.WAIT:
            await served.wait_for(plan.resource_version, self.settings.wait_timeout)
        namespace = read.namespace if resource.namespaced else None
        raw = served.store.get_raw(namespace, read.name)
        if raw is None:
            return False  # the API server's 404 (or an object the cache has not seen yet)
        if read.view == "objects":
            await send_chunks(send, (raw,), read.content_type, lag=served.lag)
            return True
        cells, meta = split_table_row(raw)
        ages = served_ages(served)
        if ages is not None:
            cells = ages.refresh(cells, meta)
        obj: bytes | None = meta
        rv = raw_resource_version(raw)
        if read.include_object == "Object":
            assert objects is not None
            obj = objects.store.get_raw(namespace, read.name)
            if obj is None or raw_resource_version(obj) != rv:
                return False
        body = join_table(
            served_columns(served),
            [(cells, obj)],
            read.include_object,
            rv,
            api_version=f"meta.k8s.io/{read.table_version}",
        )
        await send_chunks(send, (body,), read.content_type, lag=served.lag)
        return True

    # ------------------------------------------------------------------ LIST
    def _scope_name(self, resource: Resource, read: ReadRequest) -> str:
        """What a continue token is bound to, beside its context."""
        return f"{resource.name}\x00{read.view}\x00{read.namespace or ''}"

    async def _list(
        self,
        context: str,
        served: ServedStore,
        objects: ServedStore | None,
        resource: Resource,
        read: ReadRequest,
        options: ListOptions,
        send: Send,
        *,
        custom: bool,
    ) -> bool:
        plan = plan_list(options, served.current_rv())
        if plan.source is Source.WAIT:
            now = await served.wait_for(plan.resource_version, self.settings.wait_timeout)
            plan = plan.after_wait(now)
        scope_name = self._scope_name(resource, read)
        after: Key | None = None
        offset = 0
        pinned: PinnedSnapshot | None = None
        snapshot: Any = None
        if plan.source is Source.CONTINUE:
            position = self.tokens.decode(
                options.continue_, context, scope_name, alive=self.pins.alive
            )
            after, offset = position.last_key, position.offset
            if position.snapshot_id != LATEST:
                pinned = self.pins.get(position.snapshot_id)
                snapshot = pinned.snapshot if pinned is not None else None
        if plan.source is Source.UPSTREAM:  # an exact version the cache has passed
            snapshot = view_at(served.snapshot(), served.history, plan.resource_version)
            if snapshot is None:
                return False  # further back than its history: upstream knows
            pinned = PinnedSnapshot(snapshot)
        if pinned is None:  # a first page, or the 410's token: the latest snapshot
            # read now; what a token pins is the same state as a view sharing structure
            # with the other pins (taken in this same step), not this snapshot
            snapshot = served.snapshot()
            pinned = PinnedSnapshot(served.pins.pin(snapshot))
        if plan.exact and snapshot.resource_version != str(plan.resource_version):
            return False  # moved on between the plan and the snapshot: upstream knows
        filt = ObjectFilter(read.namespace, options.label_selector, options.field_selector)
        match = row_matcher(filt, read, objects)
        lag = served.lag
        rv = snapshot.resource_version
        if options.limit <= 0 and match is None and after is None and read.view == "objects":
            # the whole list, unfiltered: streamed straight from the snapshot
            chunks = iter_list(
                f"{resource.kind}List",
                resource.api_version,
                rv,
                map(itemgetter(1), snapshot.items(read.namespace)),
                unstructured=custom,
            )
            await send_chunks(send, chunks, read.content_type, lag=lag)
            return True
        items = snapshot.items(read.namespace, after)
        if match is None:  # at most a page of objects: nothing to scan
            page, last = take_page(items, options.limit, None)
        else:  # a selector: every object is looked at, in turns and slices
            page, last = await self.scans.take_page(items, options.limit, match)
        token: str | None = None
        remaining: int | None = None
        if last is not None:
            snapshot_id = self.pins.pin(pinned)
            token = self.tokens.encode(
                context, scope_name, snapshot_id, last, rv, offset + len(page)
            )
            remaining = remaining_item_count(
                pinned.count(read.namespace),
                offset,
                len(page),
                selective=filt.filters_content,
            )
        if read.view == "objects":
            chunks = iter_list(
                f"{resource.kind}List",
                resource.api_version,
                rv,
                (raw for _key, raw in page),
                token,
                remaining,
                unstructured=custom,
            )
            await send_chunks(send, chunks, read.content_type, lag=lag)
            return True
        rows = joined_rows(page, read, objects, served_ages(served))
        chunks = iter_table(
            served_columns(served),
            rows,
            read.include_object,
            rv,
            token,
            remaining,
            api_version=f"meta.k8s.io/{read.table_version}",
        )
        await send_chunks(send, chunks, read.content_type, lag=lag)
        return True

    # ------------------------------------------------------------------ WATCH
    async def _watch(
        self,
        served: ServedStore,
        resource: Resource,
        read: ReadRequest,
        options: ListOptions,
        scope: Scope,
        receive: Receive,
        send: Send,
    ) -> bool:
        slot = (sys.intern(credential_key(scope)), served.context)  # one string a credential
        settings = self.settings
        flow = Flow(
            settings.watch.max_buffered_bytes,
            min(settings.watch.idle_timeout, settings.watch_write_timeout),
        )
        await serve_watch(
            served, resource, read, options, scope, receive, send, flow, lambda: self._hold(slot)
        )
        return True
