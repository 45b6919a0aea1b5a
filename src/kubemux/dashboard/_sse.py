"""``GET /api/stream``: server-sent events as a plain ASGI response (see :mod:`.streams`
and, for how the events reach the connections, :mod:`._broadcast`)."""

from __future__ import annotations

import contextlib
import functools
import logging
from collections.abc import Callable, Coroutine

import anyio
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from kubemux import Resource, UnknownResource, parse_resource

from .._informer.discovery import resolve
from .._resources import known_resource
from ._answers import ANSWER_WAIT
from ._api import gather_answers
from ._broadcast import Connection, Hub
from ._responses import Problem
from ._state import Dashboard, dashboard_of
from ._user_streams import UserStream
from ._viewer import Viewer, viewer_of
from .streams import Stream

log = logging.getLogger(__name__)

Run = Callable[[Hub, Connection], Coroutine[None, None, None]]


async def api_stream(request: Request) -> Response:
    dashboard = dashboard_of(request)
    if dashboard.streams >= dashboard.max_streams:
        log.warning("refused an event stream: %d are open (max_streams)", dashboard.streams)
        raise Problem(
            503, f"too many event streams (at most {dashboard.max_streams})", retry_after=5
        )
    dashboard.registry  # noqa: B018 - 503 now if the dashboard is not running
    query = request.query_params
    asked = (query.get("resource") or "").strip() or dashboard.resource.name
    viewer = viewer_of(request)
    found = await resource_of(dashboard, asked)
    if isinstance(found, str):  # one clear error; the contexts panel stays live
        run = functools.partial(_unknown, asked, found, viewer)
        return _EventStream(dashboard, run, viewer)
    resource = found
    context, name = query.get("context"), query.get("name")

    def stream(conn: Connection) -> Stream:
        if viewer is None:
            return Stream(dashboard.stream_context, conn.write)
        return UserStream(dashboard.stream_context, conn.write, viewer)  # never shared

    if context and name:
        ns = query.get("namespace") or ""

        async def run_object(hub: Hub, conn: Connection) -> None:
            await stream(conn).object(context, resource, ns, name)

        return _EventStream(dashboard, run_object, viewer)
    namespace = (query.get("namespace") or None) if resource.namespaced else None

    async def run_table(hub: Hub, conn: Connection) -> None:
        if viewer is None:
            await hub.follow_table(conn, resource, namespace)
        else:
            await stream(conn).table(resource, namespace)

    return _EventStream(dashboard, run_table, viewer)


async def _unknown(
    name: str, message: str, viewer: Viewer | None, hub: Hub, conn: Connection
) -> None:
    if viewer is None:
        await Stream(hub.context, conn.write).unknown(name, message)
    else:
        await UserStream(hub.context, conn.write, viewer).unknown(name, message)


async def resource_of(dashboard: Dashboard, name: str) -> Resource | str:
    """The resource ``name`` stands for, as kubectl reads it (a built-in at once; any other
    name, a CRD's short name too, through the contexts' discovery); or, when no context
    that answered serves it, the one message saying so, with the close names they serve.

    Waits at most ``sync_timeout`` for the contexts' discovery (kept, :mod:`._answers`);
    if none answered by then, a name ``parse_resource`` reads is taken as it is.
    """
    known = known_resource(name)
    if known is not None:
        return known
    try:
        parsed: Resource | None = parse_resource(name)
    except ValueError:
        parsed = None
    unknown: list[str] = []
    suggestions: dict[str, None] = {}
    with anyio.move_on_after(dashboard.sync_timeout):
        while True:
            found = await gather_answers(dashboard, "resources")
            unknown.clear()
            for context in found.contexts:
                served = found.answers.get(context)
                if served is None:
                    continue
                if parsed is not None and any(  # plural.version.group: in some version?
                    (r.group, r.plural) == (parsed.group, parsed.plural) for r in served
                ):
                    return parsed
                try:
                    return resolve(name, served, context=context)
                except UnknownResource as exc:
                    unknown.append(context)
                    suggestions.update(dict.fromkeys(exc.suggestions))
            if not found.pending:
                break
            await anyio.sleep(ANSWER_WAIT)  # the others are being asked
    if not unknown:  # nobody answered: the name as it reads, or what is wrong with it
        if parsed is not None:
            return parsed
        return f"{name!r} is not a resource name kubemux knows, and no context answered"
    return unserved_message(name, unknown, len(found.contexts), tuple(suggestions)[:3])


def unserved_message(
    name: str, unknown: list[str], contexts: int, suggestions: tuple[str, ...]
) -> str:
    """kubectl's words for a resource type no context serves, naming the context (one) or
    how many, and what they serve that is close."""
    if len(unknown) == 1:
        return str(UnknownResource(name, unknown[0], suggestions).message)
    where = f" (none of the {len(unknown)} contexts that answered serves it)"
    if contexts > len(unknown):
        where = f" ({len(unknown)} of {contexts} contexts answered, none serves it)"
    message = f"the server doesn't have a resource type {name!r}{where}"
    if suggestions:
        message += "; did you mean " + " or ".join(repr(s) for s in suggestions) + "?"
    return message


class _EventStream(Response):
    """An event stream, counted against ``max_streams``: a plain ASGI response.

    Its task writes the stream's events (a table's come from the view it joins, see
    :mod:`._broadcast`); one helper task notices the client leaving. The hub's sweep ends
    it when a write has waited more than ``stream_send_timeout`` (a client that stopped
    reading is disconnected, quietly: that is a client's business), and
    :meth:`Dashboard.close_streams` ends every stream at once. Streams start at a bounded
    rate (:meth:`Dashboard.admit`): a burst of connections is spread out.
    """

    media_type = "text/event-stream"

    def __init__(self, dashboard: Dashboard, run: Run, viewer: Viewer | None = None) -> None:
        super().__init__()
        self._viewer = viewer
        if viewer is not None:
            viewer.session.admit_stream()  # 503 past the session's share
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
            if self._viewer is not None:
                self._viewer.session.streams -= 1

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        dashboard = self._dashboard
        try:
            await dashboard.admit()
            await send({"type": "http.response.start", "status": 200, "headers": self.raw_headers})
            async with contextlib.AsyncExitStack() as stack:
                hub = dashboard.hub
                if not hub.is_running:  # a mounted app (no lifespan): a hub of its own
                    hub = await stack.enter_async_context(Hub(dashboard.stream_context).running())
                conn = Connection(send, hub.pacer)
                dashboard.stream_scopes.add(conn.scope)
                if self._viewer is not None:  # logging out, or the session's end, ends it
                    session = self._viewer.session
                    session.scopes.add(conn.scope)
                    conn.scope.deadline = min(
                        conn.scope.deadline,
                        anyio.current_time() + dashboard.sessions.seconds_left(session),
                    )
                hub.connections.add(conn)
                try:
                    with conn.scope:
                        async with anyio.create_task_group() as tg:
                            tg.start_soon(_notice_leaving, receive, conn)
                            await self._run(hub, conn)
                            tg.cancel_scope.cancel()
                finally:
                    hub.connections.discard(conn)
                    dashboard.stream_scopes.discard(conn.scope)
                    if self._viewer is not None:
                        self._viewer.session.scopes.discard(conn.scope)
            if conn.stalled:
                log.info(
                    "closed an event stream whose client took nothing for %.0fs",
                    dashboard.stream_send_timeout,
                )
            elif not conn.gone:
                with anyio.move_on_after(1):
                    await send({"type": "http.response.body", "body": b"", "more_body": False})
        except OSError:  # the client went away mid-write
            pass
        finally:
            self._uncount()


async def _notice_leaving(receive: Receive, conn: Connection) -> None:
    """End the stream when its client disconnects (one wait, no timer)."""
    while (await receive())["type"] != "http.disconnect":
        pass
    conn.gone = True
    conn.scope.cancel("the client went away")
