"""``GET /api/stream``: server-sent events as a plain ASGI response (see :mod:`.streams`)."""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Callable, Coroutine

import anyio
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from kubemux import parse_resource

from ._state import Dashboard, Problem, _dashboard
from .streams import Stream

log = logging.getLogger("kubemux.dashboard.app")  # the name it had before the split


async def _api_stream(request: Request) -> Response:
    dashboard = _dashboard(request)
    if dashboard.streams >= dashboard.max_streams:
        log.warning("refused an event stream: %d are open (max_streams)", dashboard.streams)
        raise Problem(
            503, f"too many event streams (at most {dashboard.max_streams})", retry_after=5
        )
    dashboard.registry  # noqa: B018 - 503 now if the dashboard is not running
    query = request.query_params
    try:
        resource = parse_resource(query.get("resource") or dashboard.resource)
    except ValueError as exc:
        return _EventStream(dashboard, functools.partial(_fail, str(exc)))
    context, name = query.get("context"), query.get("name")
    if context and name:
        ns = query.get("namespace") or ""
        return _EventStream(dashboard, lambda stream: stream.object(context, resource, ns, name))
    namespace = query.get("namespace") or None
    return _EventStream(dashboard, lambda stream: stream.table(resource, namespace))


async def _fail(message: str, stream: Stream) -> None:
    await stream.fail(message)


class _EventStream(Response):
    """An event stream, counted against ``max_streams``: a plain ASGI response.

    No helper task per stream but one that notices the client leaving: the
    :class:`~.streams.Stream` writes straight into the connection, each write bounded by
    ``stream_send_timeout`` (a client that stopped reading is disconnected, quietly: that is
    a client's business), and :meth:`Dashboard.close_streams` cancels every stream at once.
    At most ``ADMIT_PER_TICK`` streams start per turn of the event loop; the others wait
    their turn (a burst of connections is spread over a few turns, never one long one).
    """

    media_type = "text/event-stream"

    def __init__(
        self, dashboard: Dashboard, run: Callable[[Stream], Coroutine[None, None, None]]
    ) -> None:
        super().__init__()
        self.raw_headers = [
            (b"content-type", b"text/event-stream; charset=utf-8"),
            (b"cache-control", b"no-store"),
            (b"x-accel-buffering", b"no"),
        ]
        self._dashboard = dashboard
        self._run = run
        dashboard.streams += 1  # counted from now: the handler may not reach __call__
        self._counted = True

    def _uncount(self) -> None:
        if self._counted:
            self._counted = False
            self._dashboard.streams -= 1

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        dashboard = self._dashboard
        try:
            await dashboard.admit()
            await send({"type": "http.response.start", "status": 200, "headers": self.raw_headers})
            # An asyncio lock: uncontended (nearly always) it takes no turn of the event
            # loop, where anyio's does; a write costs no timer either (see _Watch).
            lock = asyncio.Lock()
            async with anyio.create_task_group() as tg:
                watch = _Watch(receive, tg.cancel_scope, dashboard.stream_send_timeout)

                async def write(data: bytes) -> None:
                    async with lock:
                        watch.since = time.monotonic()
                        await send({"type": "http.response.body", "body": data, "more_body": True})
                        watch.since = None

                dashboard.stream_scopes.add(tg.cancel_scope)
                try:
                    tg.start_soon(watch.run)
                    await self._run(Stream(dashboard, write))
                    tg.cancel_scope.cancel()
                finally:
                    dashboard.stream_scopes.discard(tg.cancel_scope)
            if watch.stalled:
                log.info(
                    "closed an event stream whose client took nothing for %.0fs",
                    dashboard.stream_send_timeout,
                )
            elif not watch.gone:
                with anyio.move_on_after(1):
                    await send({"type": "http.response.body", "body": b"", "more_body": False})
        except OSError:  # the client went away mid-write
            pass
        finally:
            self._uncount()


class _Watch:
    """A stream's one helper task: it ends the stream when the client disconnects, or when
    a write has waited more than ``timeout`` (looked at every ``timeout / 4``)."""

    def __init__(self, receive: Receive, scope: anyio.CancelScope, timeout: float) -> None:
        self.receive = receive
        self.scope = scope
        self.timeout = timeout
        self.since: float | None = None  # when the pending write began
        self.gone = False
        self.stalled = False

    async def run(self) -> None:
        while True:
            with anyio.move_on_after(self.timeout / 4):
                if (await self.receive())["type"] == "http.disconnect":
                    self.gone = True
                    self.scope.cancel("the client went away")
                    return
                continue
            since = self.since
            if since is not None and time.monotonic() - since > self.timeout:
                self.stalled = True
                self.scope.cancel("the client stopped reading")
                return
