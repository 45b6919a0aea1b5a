"""Server-sent event streams: the live table and the live object page.

The live table is each context's table view of the resource (:meth:`WatcherRegistry.table
<kubemux.WatcherRegistry.table>`: the API server's columns and cells, ``kubectl get``'s), so
a Deployment shows its own columns and a custom resource its printer columns. Rows carry
the cells and labels only, never the annotations: nothing of a Secret's values reaches
the page.

One :class:`Stream` per live table (resource and namespace), however many browser tabs
show it, and one per object page. A table's stream writes into a view shared by its tabs'
connections (:mod:`._broadcast`: the events are queued on each connection, written by the
connection's own task, and a connection that falls behind starts again from a snapshot); an
object page's writes straight into its HTTP response (:class:`~._sse._EventStream`). So a
slow browser never slows another browser nor an informer (the registry's subscription
buffer takes the slack, and a subscriber that overflows it starts again from a snapshot).

The work per stream is bounded, whatever the number of streams and however they read:

- a table's snapshot is read from the stores, not queued per subscriber: it is encoded once
  per (context, resource, namespace, store version and columns), its ``columns`` event and
  then slices of ``BATCH`` rows, yielding
  to the event loop between slices, and every stream shares those bytes
  (:class:`SnapshotCache`);
- a live change is summarised and encoded once, whichever streams send it (:meth:`Encodings.encoded`),
  by the same row encoder as the snapshots' (:mod:`._rows`);
- the contexts panel is built once per state for every stream (:meth:`Stream.contexts_panel`);
- a connection holds at most ``_broadcast.PENDING_BYTES`` of queued (shared) events; the
  app admits new streams at a bounded rate (a burst of connections is spread out), closes
  a stream whose client has taken nothing for ``stream_send_timeout`` and answers 503
  beyond ``max_streams`` (see :mod:`.app`).

Events (``data`` is JSON):

``reset``
    Starts every (re)subscription: mark what you hold as stale; the snapshot follows.
    ``{"resource", "namespace", "namespaced", "title"}`` (``resource`` the full name).
``synced``
    The snapshot is complete: drop what is still stale.
``columns``
    ``{"context", "resource", "id", "columns": [{"name", "type", "format", "description",
    "priority"}]}``: the columns of that context's table view (the server's, as ``kubectl
    get`` prints them; ``priority`` > 0 for ``-o wide`` ones). Sent before the first row of
    a context (in its snapshot, or before its first live change after a ``RESET``) and
    again when the server's columns change (the context's rows follow again). Contexts may
    differ: the page shows the union by name. In a snapshot, a set of columns already sent
    since the ``reset`` comes as its ``id`` alone (``{"context", "resource", "id"}``): a
    fleet's contexts share their columns, the descriptions go out once.
``changes``
    A batch of row changes: ``ADDED``/``MODIFIED`` (with ``row``: ``cells``, one per column
    of the context's last ``columns``, ``labels`` and ``created``), ``DELETED``, ``RESET``
    (forget that context's rows; its columns come again before its next row) and
    ``REMOVED`` (the context stopped: drop its rows and its columns).
``contexts``
    The contexts panel (:mod:`._panel`): whole at the start, then the contexts whose item
    changed (a state, a count, an error; kubeconfig syncs).
``object`` / ``events``
    The object page: the object (``null`` once deleted) with its YAML, links and a pod's
    containers (:func:`~.views.object_payload`), and its Kubernetes Events.
``problem``
    Something the page should show; ``fatal`` means do not reconnect.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Protocol

import anyio

from kubemux import (
    Change,
    ContextNotFound,
    KubemuxError,
    MultiTableStore,
    Resource,
    SubscriberOverflow,
    Subscription,
    TableColumn,
    TableStore,
    UnknownResource,
    WatcherRegistry,
)

from ._context import StreamContext
from ._encoding import BATCH, RETRY_MS, Encodings, definition_event, encode_event
from ._panel import Panel, PanelDiff
from ._snapshots import SnapshotCache  # re-exported: this module was its home
from .views import event_payload, object_payload

__all__ = [
    "EVENT_RESOURCES",
    "Encodings",
    "SnapshotCache",
    "Stream",
    "encode_event",
]

log = logging.getLogger(__name__)

EVENT_RESOURCES = frozenset({"events.events.k8s.io", "events"})
NEWS_DELAY = 0.1  # seconds between a row change and the contexts panel's update
COUNTS_PERIOD = 1.0  # seconds between contexts panels sent only for new object counts


class _HasStreamContext(Protocol):
    @property
    def stream_context(self) -> StreamContext: ...


class Stream:
    """One browser's stream, writing events with ``write``: run :meth:`table` or :meth:`object`."""

    def __init__(
        self, context: StreamContext | _HasStreamContext, write: Callable[[bytes], Awaitable[None]]
    ):
        if not isinstance(context, StreamContext):
            context = context.stream_context  # a Dashboard, as before its StreamContext
        self.dash = context
        self.registry: WatcherRegistry = context.registry  # raises 503 if not running
        self.write = write
        self.watch_errors: dict[str, str] = {}
        self.sent: dict[str, tuple[TableColumn, ...]] = {}  # context -> columns sent
        self.panel = PanelDiff()  # what this stream sent of the contexts panel
        # the column sets sent since the last reset (id -> definitions): later by id only
        self.defined: dict[str, bytes] = {}
        self._first = True

    async def emit(self, event: str, data: object) -> None:
        retry = None
        if self._first:
            retry, self._first = RETRY_MS, False
        await self.write(encode_event(event, data, retry=retry))

    async def fail(self, message: str) -> None:
        """Tell the page why there is nothing to stream; it does not reconnect."""
        await self.emit("problem", {"message": message, "fatal": True})

    async def unknown(self, name: str, message: str) -> None:
        """A table of a resource type no context serves: an empty table, one ``problem``
        (``kind: "resource"``) saying so, and the live contexts panel (the cards stay)."""
        reset = {"resource": name, "namespace": None, "namespaced": True}
        await self.emit("reset", {**reset, "title": self.dash.title})
        await self.emit("problem", {"message": message, "fatal": False, "kind": "resource"})
        await self.emit("synced", {})
        await self.contexts_loop()

    # ------------------------------------------------------------------ table
    async def table(self, resource: Resource, namespace: str | None) -> None:
        """Rows of ``resource`` in every context, live, until the client or server goes."""
        async with anyio.create_task_group() as tg:
            tg.start_soon(self.contexts_loop)
            tg.start_soon(self._keep_watching, resource)
            await self._pump_table(resource, namespace if resource.namespaced else None)
            tg.cancel_scope.cancel("the registry closed")

    async def _pump_table(self, resource: Resource, namespace: str | None) -> None:
        registry = self.registry
        while True:
            subscription = registry.subscribe(
                resource, namespace=namespace, snapshot=False, view="table"
            )
            async with subscription as changes:
                # The snapshot comes from the stores, after subscribing: a change made
                # meanwhile is both in it and queued, and applying it twice is harmless.
                await self.replay_table(resource, namespace)
                try:
                    async for change in changes:
                        batch = _drain(change, changes)
                        await self.send_changes(batch, resource, namespace, self.sent)
                except SubscriberOverflow as exc:
                    log.info("dashboard stream fell behind, resynchronising: %s", exc)
                    continue
            return  # the registry closed the subscription

    async def replay_table(
        self,
        resource: Resource,
        namespace: str | None,
        defined: Mapping[str, bytes] | None = None,
    ) -> None:
        """``reset``, each synced context's columns and rows as its store holds them now,
        ``synced``.

        Whatever changes after the stores are read must reach the page some other way: a
        subscription entered before (:meth:`_pump_table`), or a view's live events queued
        for the connection since it joined (:mod:`._broadcast`).
        """
        await self.emit(
            "reset",
            {
                "resource": resource.name,
                "namespace": namespace,
                "namespaced": resource.namespaced,
                "title": self.dash.title,
            },
        )
        sent = self.sent
        sent.clear()
        self.defined.clear()
        for cid, body in (defined or {}).items():  # a view's: its live events name them
            await self.write(definition_event(resource, cid, body))
            self.defined[cid] = body
        for context in list(self.registry.contexts):
            store = self.table_store(context, resource)
            if store is None:
                continue  # not synced: its columns and rows arrive once it is
            await self.replay(context, resource, namespace, store, sent)
        await self.emit("synced", {})

    def table_store(self, context: str, resource: Resource) -> TableStore | MultiTableStore | None:
        """The context's synced table view of ``resource``, or None; never starts one."""
        store = self.registry.store(context, resource, view="table")
        if isinstance(store, TableStore):
            return store
        scoped = self.dash.snapshots.scoped.get((context, resource.name))
        # a stopped generation's stores are cleared: no longer synced
        return scoped if scoped is not None and scoped.has_synced else None

    async def replay(
        self,
        context: str,
        resource: Resource,
        namespace: str | None,
        store: TableStore | MultiTableStore,
        sent: dict[str, tuple[TableColumn, ...]],
    ) -> None:
        """A context's columns (their id only if this stream defined them) and rows, the
        rows from the shared snapshot cache."""
        columns = store.columns
        events = await self.dash.snapshots.events(context, resource, namespace, store)
        await self.write(
            self.dash.encodings.columns_event(context, resource, columns, defined=self.defined)
        )
        for event in events:
            await self.write(event)
        sent[context] = columns

    async def send_changes(
        self,
        batch: list[Change],
        resource: Resource,
        namespace: str | None,
        sent: dict[str, tuple[TableColumn, ...]],
    ) -> None:
        """A batch of live changes, each context's columns first where the page lacks them.

        A context's store is looked at once per batch. A context whose columns changed
        (the server's printer columns were edited) gets its columns and its rows again.
        """
        pending: list[Change] = []
        checked: set[str] = set()

        async def flush() -> None:
            rows = [r for r in map(self.dash.encodings.encoded, pending) if r is not None]
            pending.clear()
            if rows:
                await self.write(encode_event("changes", b"[" + b",".join(rows) + b"]"))

        for change in batch:
            context = change.context
            if change.type in ("RESET", "REMOVED"):
                sent.pop(context, None)
                checked.discard(context)
            elif change.type != "DELETED" and context not in checked:
                checked.add(context)
                store = self.table_store(context, resource)
                before = sent.get(context)
                if store is not None and store.columns and store.columns is not before:
                    if before is None:
                        await flush()
                        event = self.dash.encodings.columns_event(
                            context, resource, store.columns, defined=self.defined
                        )
                        await self.write(event)
                        sent[context] = store.columns
                    elif store.columns != before:
                        await flush()
                        await self.replay(context, resource, namespace, store, sent)
                    else:
                        sent[context] = store.columns  # the same columns, listed again
            pending.append(change)
        await flush()

    async def _keep_watching(self, resource: Resource) -> None:
        """Make every context keep a table view of ``resource``, also contexts added later.

        The registry's own backoff paces retries: within it ``table()`` fails at once.
        """
        registry = self.registry
        busy: set[str] = set()

        async def start(name: str) -> None:
            try:
                store = await registry.table(name, resource)
                self.watch_errors.pop(name, None)
                if isinstance(store, MultiTableStore):
                    self.dash.snapshots.scoped[name, resource.name] = store
                if name not in self.sent and store.columns:  # an empty table has columns too
                    self.sent[name] = store.columns
                    await self.write(
                        self.dash.encodings.columns_event(
                            name, resource, store.columns, defined=self.defined
                        )
                    )
            except UnknownResource:  # not the context's failure: its card stays clean
                self.watch_errors.pop(name, None)
            except KubemuxError as exc:
                self.watch_errors[name] = str(exc)
            finally:
                busy.discard(name)

        async with anyio.create_task_group() as tg:
            while True:
                syncs = registry.kubeconfig_syncs
                for name in list(registry.contexts):
                    if name not in busy and self.table_store(name, resource) is None:
                        busy.add(name)
                        tg.start_soon(start, name)
                for gone in set(self.watch_errors) - set(registry.contexts):
                    del self.watch_errors[gone]
                scoped = self.dash.snapshots.scoped
                for key in [k for k in scoped if k[0] not in registry.contexts]:
                    del scoped[key]
                await self.wait_sync(syncs)

    async def contexts_loop(self, only: str | None = None) -> None:
        """Send the contexts panel, then what changed in it (:mod:`._panel`); ``only``: the
        panel of that one context (the object page's).

        A state change (the registry's ``status_version``, which also moves on kubeconfig
        syncs) goes out at once, a burst of them coalesced over ``NEWS_DELAY``; object
        counts are looked at every ``COUNTS_PERIOD`` (or ``status_period`` if shorter). The
        panel itself is built once for every stream, and a stream waits with one timer, no
        task: with many streams every wakeup and every send counts. Nothing is sent while
        nothing the page shows changed.
        """
        registry = self.registry
        period = min(COUNTS_PERIOD, self.dash.status_period)
        while True:
            version = registry.status_version
            panel = self.contexts_panel(version)
            if only is not None:
                panel = panel.only(only)
            data = self.panel.next(panel)
            if data is not None:
                await self.emit("contexts", data)
            with anyio.move_on_after(period):
                await registry.wait_status_change(version)
                await anyio.sleep(NEWS_DELAY)  # coalesce: many contexts may flap at once

    def contexts_panel(self, version: int) -> Panel:
        """The contexts panel; one encoding per state serves every stream."""
        panel = self.dash.panel(version)
        if self.watch_errors:
            return panel.with_errors(self.registry.status(), self.watch_errors)
        return panel

    async def wait_sync(self, after: int) -> None:
        """Wait for the next kubeconfig sync, at most one status period."""
        with anyio.move_on_after(self.dash.status_period):
            await self.registry.wait_kubeconfig_sync(after)

    # ------------------------------------------------------------------ object
    async def object(self, context: str, resource: Resource, namespace: str, name: str) -> None:
        """One object and its Kubernetes Events, live."""
        async with anyio.create_task_group() as tg:
            tg.start_soon(self.contexts_loop, context)
            await self.pump_object(context, resource, namespace, name)
            tg.cancel_scope.cancel("the registry closed")

    async def pump_object(
        self, context: str, resource: Resource, namespace: str, name: str
    ) -> None:
        registry = self.registry
        ns = namespace if resource.namespaced else ""
        kind = resource.kind
        while True:
            syncs = registry.kubeconfig_syncs
            subscription = registry.subscribe(None, [context], namespace=ns or None, snapshot=False)
            async with subscription as changes:
                try:
                    store = await registry.watch(context, resource)
                except KubemuxError as exc:
                    await self.emit("problem", {"message": str(exc), "fatal": False})
                    if isinstance(exc, ContextNotFound):
                        await self.emit("object", {"object": None, "gone": str(exc)})
                    await self.wait_sync(syncs)
                    continue
                await self.emit("object", _shown(resource, store.get(ns, name)))
                events = await self.object_events(context, kind, ns, name)
                await self.emit("events", events)
                try:
                    async for change in changes:
                        if change.type in ("RESET", "REMOVED"):
                            if change.type == "REMOVED":
                                gone = f"context {context!r} stopped"
                                await self.emit("object", {"object": None, "gone": gone})
                            break  # start again with the context's next generation
                        if change.resource == resource.name and change.name == name:
                            obj = change.object if change.type != "DELETED" else None
                            await self.emit("object", _shown(resource, obj))
                        elif change.resource in EVENT_RESOURCES:
                            fresh = await self.object_events(context, kind, ns, name)
                            if fresh != events:
                                events = fresh
                                await self.emit("events", events)
                    else:
                        return  # the registry closed the subscription
                except SubscriberOverflow:
                    continue
            await self.wait_sync(syncs)

    async def object_events(
        self, context: str, kind: str, namespace: str, name: str
    ) -> list[dict[str, Any]]:
        try:
            with anyio.fail_after(self.dash.sync_timeout):
                events = await self.registry.events_for(context, kind, namespace or None, name)
        except (KubemuxError, TimeoutError) as exc:
            message = str(exc) or "the events are not synced yet"
            await self.emit("problem", {"message": f"events: {message}", "fatal": False})
            return []
        return [event_payload(e) for e in events]


def _drain(first: Change, changes: Subscription) -> list[Change]:
    batch = [first]
    while len(batch) < BATCH:
        try:
            batch.append(changes.receive_nowait())
        except (anyio.WouldBlock, anyio.EndOfStream, anyio.ClosedResourceError):
            break
    return batch


def _shown(resource: Resource, obj: Mapping[str, Any] | None) -> dict[str, Any]:
    """The ``object`` event: the object page's view of ``obj``, redacted (``None`` once gone)."""
    return object_payload(resource, obj) if obj is not None else {"object": None}
