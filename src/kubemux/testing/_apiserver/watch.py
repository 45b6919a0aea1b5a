"""WATCH of the fake API server: streaming-list options, the event stream, bookmarks."""

from __future__ import annotations

import asyncio
import contextlib
import math
from collections.abc import Mapping
from typing import Any

import orjson
from aiohttp import hdrs, web

from .._printers.tables import Printer
from .._state.api_state import ApiState, StreamingList
from .._state.resource import (
    ADDED,
    DELETED,
    INITIAL_END,
    MODIFIED,
    RAW_LINE,
    Event,
    ResourceState,
    Stored,
    Watch,
)
from .._wire.chunked import GoChunkedBody
from .._wire.protocol import BadRequest, Selector, status_body
from .._wire.responses import JSON, abort, int_param, invalid, status_response
from .tables import TABLE_TYPE, table_event

__all__ = ["StreamingList", "serve_watch"]

_BATCH_BYTES = 256 * 1024
_PREFIX = {
    ADDED: b'{"type":"ADDED","object":',
    MODIFIED: b'{"type":"MODIFIED","object":',
    DELETED: b'{"type":"DELETED","object":',
}
_WATCHLIST_OFF = (
    "sendInitialEvents is forbidden for watch unless the WatchList feature gate is enabled"
)
_MATCH_WITHOUT_INITIAL = (
    "resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided"
)


def _transition(selector: Selector, event: Event) -> str | None:
    """The event type a filtered watcher sees (objects entering or leaving the selection)."""
    now = selector.matches(event.cur.obj)
    if event.type == ADDED:
        return ADDED if now else None
    before = event.prev is not None and selector.matches(event.prev.obj)
    if event.type == DELETED:
        return DELETED if before else None
    if now:
        return MODIFIED if before else ADDED
    return DELETED if before else None


def _watch_options(
    streaming_list: StreamingList, query: Mapping[str, str]
) -> tuple[str | None, web.Response | None]:
    """Validate the streaming-list options; return (sendInitialEvents, error response)."""
    send_initial = query.get("sendInitialEvents")
    match = query.get("resourceVersionMatch", "")
    if streaming_list == "ignore":  # a server from before streaming lists existed
        return None, None
    causes: list[tuple[str, str, str]] = []
    if send_initial is not None:
        if match != "NotOlderThan":
            causes.append(
                (
                    "resourceVersionMatch",
                    "Forbidden",
                    "sendInitialEvents requires setting resourceVersionMatch to NotOlderThan",
                )
            )
        if not streaming_list:
            causes.append(
                (
                    "sendInitialEvents",
                    "Forbidden",
                    _WATCHLIST_OFF,
                )
            )
    if match:
        if send_initial is None:
            causes.append(
                (
                    "resourceVersionMatch",
                    "Forbidden",
                    _MATCH_WITHOUT_INITIAL,
                )
            )
        if match != "NotOlderThan":
            causes.append(
                (
                    "resourceVersionMatch",
                    "Unsupported value",
                    f'"{match}": supported values: "NotOlderThan"',
                )
            )
    if causes:
        return None, invalid(causes)
    if send_initial is not None and send_initial.lower() not in ("true", "false"):
        raise BadRequest(f"invalid sendInitialEvents: {send_initial!r}")
    return (send_initial.lower() if send_initial is not None else None), None


async def serve_watch(
    api: ApiState,
    request: web.BaseRequest,
    state: ResourceState,
    selector: Selector,
    query: Mapping[str, str],
    token: str | None,
    table: tuple[Printer, str] | None = None,
) -> web.StreamResponse:
    """WATCH: one event stream, from a resourceVersion or with initial events, until it ends."""
    store = api.store
    send_initial, error = _watch_options(api.streaming_list, query)
    if error is not None:
        return error
    bookmarks = query.get("allowWatchBookmarks", "").lower() in ("true", "1")
    try:
        timeout = float(query.get("timeoutSeconds") or 0)
    except ValueError:
        raise BadRequest(f"invalid timeoutSeconds: {query['timeoutSeconds']!r}") from None
    rv_text = query.get("resourceVersion", "")
    watch = Watch(state, selector, token)
    if table is not None:
        watch.table = [table[0], table[1], True]  # printer, includeObject, columns due
    if send_initial == "true" or (send_initial is None and rv_text in ("", "0")):
        watch.queue.extend(store.initial_events(state, selector))
        if send_initial == "true" and bookmarks:
            watch.queue.append(Event(INITIAL_END, store.rv, ("", ""), Stored(b"{}", {}), None))
    elif rv_text not in ("", "0"):
        rv = int_param(query, "resourceVersion")
        oldest = store.oldest_rv(state)
        if rv < oldest:
            message = f"too old resource version: {rv} ({oldest})"
            if api.expired_as_http:
                return status_response(410, "Expired", message)
            watch.expired = message
        elif rv < store.rv:
            watch.queue.extend(state.events_after(rv))
    # from here on, every change reaches this watch's queue: nothing is missed
    if watch.expired is None:
        state.watchers.add(watch)
    api.watches.add(watch)
    api.notify()
    response = web.StreamResponse(
        status=200,
        headers={
            hdrs.CONTENT_TYPE: TABLE_TYPE if table is not None else JSON,
            hdrs.CACHE_CONTROL: "no-cache, private",
        },
    )
    response.enable_chunked_encoding()
    try:
        await response.prepare(request)
        body = GoChunkedBody(request, response, api.chunk_buffer)
        await _pump(api, request, body, watch, bookmarks, timeout)
    except ConnectionError:
        pass  # the client went away; aiohttp closes the connection
    finally:
        state.watchers.discard(watch)
        api.watches.discard(watch)
        api.notify()
    return response


async def _pump(
    api: ApiState,
    request: web.BaseRequest,
    body: GoChunkedBody,
    watch: Watch,
    bookmarks: bool,
    lifetime: float,
) -> None:
    """Send queued events, bookmarks and the end of the stream."""
    loop = asyncio.get_running_loop()
    now = loop.time()
    deadline = now + lifetime if lifetime > 0 else math.inf
    period = api.bookmark_period
    next_bookmark = now + period if bookmarks else math.inf
    while True:
        watch.wake.clear()
        if watch.dropped or api.stopping:
            abort(request)
            return
        if api.stalled:
            await watch.wake.wait()
            continue
        if watch.queue:
            if api.watch_delay > 0:  # delivery held back (FakeCluster.delay_watches)
                await asyncio.sleep(api.watch_delay)
                if watch.dropped or api.stopping or api.stalled:
                    continue
            _drain(watch, body)
            if not watch.queue:
                body.flush()  # as the API server does when no event is left queued
            await body.send()
            if watch.queue:
                await asyncio.sleep(0)  # let object operations and other streams run
            continue
        if watch.finished:  # the resource went away (its CRD was deleted)
            await body.end()
            return
        if watch.expired is not None:
            error = {"type": "ERROR", "object": status_body(410, "Expired", watch.expired)}
            body.write(orjson.dumps(error) + b"\n")
            await body.end()
            return
        now = loop.time()
        if now >= deadline:
            await body.end()
            return
        if now >= next_bookmark:
            body.write(_bookmark(watch.state, api.store.rv, end=False, table=watch.table))
            body.flush()
            await body.send()
            next_bookmark = now + period
            continue
        delay = min(deadline, next_bookmark) - now
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(None if math.isinf(delay) else delay):
                await watch.wake.wait()


def _drain(watch: Watch, body: GoChunkedBody) -> None:
    """Write queued events into the body, one write per event (bounded in size)."""
    size = 0
    queue = watch.queue
    selector = watch.selector
    check = not selector.is_everything
    write = body.write
    while queue and size < _BATCH_BYTES:
        event = queue.popleft()
        kind = event.type
        if kind == INITIAL_END:
            write(_bookmark(watch.state, event.rv, end=True, table=watch.table))
            continue
        if kind == RAW_LINE:
            write(event.cur.raw + b"\n")
            size += len(event.cur.raw)
            continue
        if check:
            seen = _transition(selector, event)
            if seen is None:
                continue
            kind = seen
        raw = event.cur.raw
        if watch.table is not None:
            raw = table_event(watch.table, event.cur.obj)
        write(b"".join((_PREFIX[kind], raw, b"}\n")))
        size += len(raw)


def _bookmark(state: ResourceState, rv: int, *, end: bool, table: Any = None) -> bytes:
    meta: dict[str, Any] = {"resourceVersion": str(rv)}
    if end:
        meta["annotations"] = {"k8s.io/initial-events-end": "true"}
    obj: dict[str, Any] = {
        "kind": state.kind,
        "apiVersion": state.resource.api_version,
        "metadata": meta,
    }
    if table is not None:  # a row-less Table that carries the resourceVersion
        obj = {
            "kind": "Table",
            "apiVersion": "meta.k8s.io/v1",
            "metadata": {"resourceVersion": str(rv)},
            "columnDefinitions": None,
            "rows": [
                {
                    "cells": [],
                    "object": {
                        **obj,
                        "kind": "PartialObjectMetadata",
                        "apiVersion": "meta.k8s.io/v1",
                    },
                }
            ],
        }
    return orjson.dumps({"type": "BOOKMARK", "object": obj}) + b"\n"
