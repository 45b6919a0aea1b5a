"""Server-sent event streams: the live table and the live object page.

One stream per browser tab. Each runs as sse-starlette's ``data_sender_callable``: it writes
:class:`ServerSentEvent`s into a small memory stream that the response sends on, so a slow
browser applies back-pressure to the stream, never to an informer (the registry's
subscription buffer takes the slack, and a subscriber that overflows it starts again from a
snapshot).

Events (``data`` is JSON):

``reset``
    Starts every (re)subscription: mark what you hold as stale; the snapshot follows.
``synced``
    The snapshot is complete: drop what is still stale.
``changes``
    A batch of row changes: ``ADDED``/``MODIFIED`` (with ``row``), ``DELETED``, ``RESET``
    (forget that context's rows) and ``REMOVED`` (the context stopped: drop its rows).
``contexts``
    The contexts panel: sent at the start, after every kubeconfig sync and whenever a state
    or a count changes.
``object`` / ``events``
    The object page: the object (``null`` once deleted) and its Kubernetes Events.
``problem``
    Something the page should show; ``fatal`` means do not reconnect.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any

import anyio
import anyio.abc
import orjson
from anyio.streams.memory import MemoryObjectSendStream
from sse_starlette import ServerSentEvent

from kubemux import (
    Change,
    ContextNotFound,
    KubemuxError,
    Resource,
    SubscriberOverflow,
    Subscription,
    WatcherRegistry,
)

from .views import change_payload, event_payload, redact, status_payload

if TYPE_CHECKING:
    from .app import Dashboard

__all__ = ["EVENT_RESOURCES", "Stream"]

log = logging.getLogger(__name__)

EVENT_RESOURCES = frozenset({"events.events.k8s.io", "events"})
BATCH = 500  # changes per ``changes`` event
RETRY_MS = 1000  # EventSource reconnection delay
NEWS_DELAY = 0.1  # seconds between a row change and the contexts panel's update


class Stream:
    """One browser's stream. Run :meth:`table` or :meth:`object` as the data sender."""

    def __init__(self, dashboard: Dashboard, send: MemoryObjectSendStream[ServerSentEvent]):
        self._dash = dashboard
        self._registry: WatcherRegistry = dashboard.registry  # raises 503 if not running
        self._send = send
        self._watch_errors: dict[str, str] = {}
        self._first = True
        self._news = anyio.Event()  # set when rows changed: counts and states may have too

    async def _emit(self, event: str, data: object) -> None:
        retry = None
        if self._first:
            retry, self._first = RETRY_MS, False
        raw = data if isinstance(data, bytes) else orjson.dumps(data)
        await self._send.send(ServerSentEvent(data=raw.decode(), event=event, retry=retry))

    async def fail(self, message: str) -> None:
        """Tell the page why there is nothing to stream; it does not reconnect."""
        async with self._send:
            await self._emit("problem", {"message": message, "fatal": True})

    # ------------------------------------------------------------------ table
    async def table(self, resource: Resource, namespace: str | None) -> None:
        """Rows of ``resource`` in every context, live, until the client or server goes."""
        async with self._send, anyio.create_task_group() as tg:
            tg.start_soon(self._close_on_shutdown, tg.cancel_scope)
            tg.start_soon(self._contexts_loop)
            tg.start_soon(self._keep_watching, resource)
            await self._pump_table(resource, namespace if resource.namespaced else None)
            tg.cancel_scope.cancel("the registry closed")

    async def _pump_table(self, resource: Resource, namespace: str | None) -> None:
        while True:
            subscription = self._registry.subscribe(resource, namespace=namespace, snapshot=True)
            async with subscription as changes:
                expected = changes.pending  # the snapshot, queued in the same step
                await self._emit(
                    "reset",
                    {"resource": resource.name, "namespace": namespace, "title": self._dash.title},
                )
                if not expected:
                    await self._emit("synced", {})
                seen = 0
                try:
                    async for change in changes:
                        batch = _drain(change, changes)
                        await self._emit("changes", [change_payload(c) for c in batch])
                        self._news.set()
                        if seen < expected:
                            seen += sum(c.snapshot for c in batch)
                            if seen >= expected:
                                await self._emit("synced", {})
                except SubscriberOverflow as exc:
                    log.info("dashboard stream fell behind, resynchronising: %s", exc)
                    continue
            return  # the registry closed the subscription

    async def _keep_watching(self, resource: Resource) -> None:
        """Make every context watch ``resource``, also contexts added later.

        The registry's own backoff paces retries: within it ``watch()`` fails at once.
        """
        registry = self._registry
        busy: set[str] = set()

        async def start(name: str) -> None:
            try:
                await registry.watch(name, resource)
                self._watch_errors.pop(name, None)
            except KubemuxError as exc:
                self._watch_errors[name] = str(exc)
            finally:
                busy.discard(name)

        async with anyio.create_task_group() as tg:
            while True:
                syncs = registry.kubeconfig_syncs
                for name in list(registry.contexts):
                    if name not in busy and registry.store(name, resource) is None:
                        busy.add(name)
                        tg.start_soon(start, name)
                for gone in set(self._watch_errors) - set(registry.contexts):
                    del self._watch_errors[gone]
                await self._wait_sync(syncs)

    async def _contexts_loop(self) -> None:
        """Send the contexts panel whenever it changed.

        It is looked at soon after a context or informer changes state (the registry's
        ``status_version``, which also moves on kubeconfig syncs) or rows changed (for
        object counts), at most every ``NEWS_DELAY`` for either, and every ``status_period``
        (for backoff countdowns).
        """
        registry = self._registry
        last: dict[str, Any] | None = None
        while True:
            version = registry.status_version
            self._news = anyio.Event()
            payload = status_payload(registry.status(), self._watch_errors)
            if payload != last:
                await self._emit("contexts", payload)
                last = payload
            with anyio.move_on_after(self._dash.status_period):
                async with anyio.create_task_group() as tg:
                    tg.start_soon(_then_cancel, tg, self._state_change_after_delay, version)
                    tg.start_soon(_then_cancel, tg, self._news_after_delay)

    async def _state_change_after_delay(self, version: int) -> None:
        await self._registry.wait_status_change(version)
        await anyio.sleep(NEWS_DELAY)  # coalesce: many contexts may flap at once

    async def _news_after_delay(self) -> None:
        await self._news.wait()
        await anyio.sleep(NEWS_DELAY)  # coalesce a burst of changes into one update

    async def _wait_sync(self, after: int) -> None:
        """Wait for the next kubeconfig sync, at most one status period."""
        with anyio.move_on_after(self._dash.status_period):
            await self._registry.wait_kubeconfig_sync(after)

    async def _close_on_shutdown(self, scope: anyio.CancelScope) -> None:
        await self._dash.wait_closing()
        scope.cancel("dashboard shutting down")

    # ------------------------------------------------------------------ object
    async def object(self, context: str, resource: Resource, namespace: str, name: str) -> None:
        """One object and its Kubernetes Events, live."""
        async with self._send, anyio.create_task_group() as tg:
            tg.start_soon(self._close_on_shutdown, tg.cancel_scope)
            tg.start_soon(self._contexts_loop)
            await self._pump_object(context, resource, namespace, name)
            tg.cancel_scope.cancel("the registry closed")

    async def _pump_object(
        self, context: str, resource: Resource, namespace: str, name: str
    ) -> None:
        registry = self._registry
        ns = namespace if resource.namespaced else ""
        kind = resource.kind
        while True:
            syncs = registry.kubeconfig_syncs
            subscription = registry.subscribe(None, [context], namespace=ns or None, snapshot=False)
            async with subscription as changes:
                try:
                    store = await registry.watch(context, resource)
                except KubemuxError as exc:
                    await self._emit("problem", {"message": str(exc), "fatal": False})
                    if isinstance(exc, ContextNotFound):
                        await self._emit("object", {"object": None, "gone": str(exc)})
                    await self._wait_sync(syncs)
                    continue
                await self._emit("object", {"object": _shown(resource, store.get(ns, name))})
                events = await self._events(context, kind, ns, name)
                await self._emit("events", events)
                try:
                    async for change in changes:
                        if change.type in ("RESET", "REMOVED"):
                            if change.type == "REMOVED":
                                gone = f"context {context!r} stopped"
                                await self._emit("object", {"object": None, "gone": gone})
                            break  # start again with the context's next generation
                        if change.resource == resource.name and change.name == name:
                            obj = change.object if change.type != "DELETED" else None
                            await self._emit("object", {"object": _shown(resource, obj)})
                        elif change.resource in EVENT_RESOURCES:
                            fresh = await self._events(context, kind, ns, name)
                            if fresh != events:
                                events = fresh
                                await self._emit("events", events)
                    else:
                        return  # the registry closed the subscription
                except SubscriberOverflow:
                    continue
            await self._wait_sync(syncs)

    async def _events(
        self, context: str, kind: str, namespace: str, name: str
    ) -> list[dict[str, Any]]:
        try:
            with anyio.fail_after(self._dash.sync_timeout):
                events = await self._registry.events_for(context, kind, namespace or None, name)
        except (KubemuxError, TimeoutError) as exc:
            message = str(exc) or "the events are not synced yet"
            await self._emit("problem", {"message": f"events: {message}", "fatal": False})
            return []
        return [event_payload(e) for e in events]


async def _then_cancel(
    tg: anyio.abc.TaskGroup, wait: Callable[..., Awaitable[object]], *args: object
) -> None:
    await wait(*args)
    tg.cancel_scope.cancel()


def _drain(first: Change, changes: Subscription) -> list[Change]:
    batch = [first]
    while len(batch) < BATCH:
        try:
            batch.append(changes.receive_nowait())
        except (anyio.WouldBlock, anyio.EndOfStream, anyio.ClosedResourceError):
            break
    return batch


def _shown(resource: Resource, obj: Mapping[str, Any] | None) -> dict[str, Any] | None:
    return redact(resource, obj) if obj is not None else None
