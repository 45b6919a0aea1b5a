"""``GET /api/contexts/{context}/pods/{namespace}/{name}/log``: a container's log, streamed.

The request goes to the context's API server through the registry's upstream
(:meth:`WatcherRegistry.upstream <kubemux.WatcherRegistry.upstream>`: the context's own
session and credential, refreshed as the informers' is), and the answer is passed on as it
comes (``text/plain``), never held whole:

- ``tailLines`` is at most ``TAIL_MAX`` (default ``TAIL_DEFAULT``), and ``limitBytes``
  ``LIMIT_BYTES``: the API server ends a stream (followed or not) after that many bytes;
- each chunk read from the server is written to the browser before the next is read, so a
  slow browser slows the read (TCP flow control up to the API server), nothing queues here;
  a browser that takes nothing for ``stream_send_timeout`` is cut off;
- log streams count against ``max_streams`` with the event streams, and end when the
  dashboard shuts down (:meth:`Dashboard.close_streams`), when the client goes away, or
  when the context reloads (its session closes).

Query: ``container``, ``previous`` (``1``/``true``: the last terminated container),
``follow`` (``1``/``true``), ``tailLines``. An error from the server (no such container,
no previous container) is answered with its status and the Status message as JSON
(``{"error", "status"}``); the page shows the text as text.
"""

from __future__ import annotations

import contextlib
import logging
import urllib.parse

import aiohttp
import anyio
import orjson
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from kubemux import KubemuxError

from ._responses import Problem
from ._sessions import Session
from ._state import Dashboard, dashboard_of
from ._viewer import viewer_of

__all__ = ["LIMIT_BYTES", "TAIL_DEFAULT", "TAIL_MAX", "api_logs"]

log = logging.getLogger(__name__)

TAIL_DEFAULT = 500  # lines of the log before following it
TAIL_MAX = 10_000  # the most lines a request may ask for
LIMIT_BYTES = 16 << 20  # the most bytes one log request passes on (the server's limitBytes)
CHUNK = 64 << 10  # bytes read from the server at a time
ERROR_BYTES = 64 << 10  # the most of an error answer read


def _flag(value: str | None) -> bool:
    return (value or "").lower() in ("1", "true", "yes")


def _tail(value: str | None) -> int:
    try:
        return max(1, min(TAIL_MAX, int(value or TAIL_DEFAULT)))
    except ValueError:
        return TAIL_DEFAULT


async def api_logs(request: Request) -> Response:
    dashboard = dashboard_of(request)
    if dashboard.streams >= dashboard.max_streams:
        raise Problem(503, f"too many streams (at most {dashboard.max_streams})", retry_after=5)
    dashboard.registry  # noqa: B018 - 503 now if the dashboard is not running
    params = request.path_params
    context = urllib.parse.unquote(params["context"])
    namespace = urllib.parse.unquote(params["namespace"])
    name = urllib.parse.unquote(params["name"])
    query = request.query_params
    options: dict[str, str] = {"tailLines": str(_tail(query.get("tailLines")))}
    if query.get("container"):
        options["container"] = query["container"]
    if _flag(query.get("previous")):
        options["previous"] = "true"
    if _flag(query.get("follow")):
        options["follow"] = "true"
    options["limitBytes"] = str(LIMIT_BYTES)
    token, session = None, None
    viewer = viewer_of(request)
    if viewer is not None:  # the API server's own rule: pods does not grant pods/log
        await viewer.check(
            context, "get", "pods", namespace=namespace, name=name, subresource="log"
        )
        token = viewer.session.token  # the API server authorizes and audits the user
        session = viewer.session
    path = (
        f"/api/v1/namespaces/{urllib.parse.quote(namespace, safe='')}"
        f"/pods/{urllib.parse.quote(name, safe='')}/log?{urllib.parse.urlencode(options)}"
    )
    return _LogStream(dashboard, context, path, token, session)


class _LogStream(Response):
    """The upstream answer passed on chunk by chunk (a plain ASGI response)."""

    def __init__(
        self,
        dashboard: Dashboard,
        context: str,
        path: str,
        token: str | None = None,
        session: Session | None = None,
    ) -> None:
        super().__init__()
        self._dashboard = dashboard
        self._context = context
        self._path = path
        self._token = token  # a logged-in user's (never logged, never shown)
        self._session = session  # logging out ends the stream
        if session is not None:
            session.admit_stream()  # 503 past the session's share
        dashboard.streams += 1  # counted from now: the handler may not reach __call__
        self._counted = True

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        dashboard = self._dashboard
        cancel = anyio.CancelScope()  # close_streams() ends it
        dashboard.stream_scopes.add(cancel)
        if self._session is not None:
            self._session.scopes.add(cancel)
        started: list[bool] = []
        try:
            with cancel:
                await self._serve(scope, receive, send, started)
            if cancel.cancelled_caught and not started:  # shut down before any answer
                with anyio.move_on_after(1, shield=True):
                    answer = Problem(503, "the dashboard is shutting down", retry_after=1)
                    await answer.response()(scope, receive, send)
        except OSError:  # the client went away mid-write
            pass
        finally:
            dashboard.stream_scopes.discard(cancel)
            if self._session is not None:
                self._session.scopes.discard(cancel)
            if self._counted:
                self._counted = False
                dashboard.streams -= 1
                if self._session is not None:
                    self._session.streams -= 1

    async def _serve(self, scope: Scope, receive: Receive, send: Send, started: list[bool]) -> None:
        dashboard = self._dashboard
        try:
            # as an event stream's: ends at the server's SIGINT/SIGTERM (also mounted), 503
            # once the dashboard is shutting down, new streams spread over a burst
            await dashboard.admit()
            async with (
                dashboard.registry.upstream(self._context) as upstream,
                upstream.request(
                    "GET", self._path, headers=[("Accept", "*/*")], bearer_token=self._token
                ) as resp,
            ):
                if resp.status >= 400:
                    body = await resp.content.read(ERROR_BYTES)
                    status = resp.status if resp.status in (400, 401, 403, 404) else 502
                    problem = Problem(status, _status_message(body, resp.status))
                    await problem.response()(scope, receive, send)
                    return
                headers = [
                    (b"content-type", b"text/plain; charset=utf-8"),
                    (b"cache-control", b"no-store"),
                    (b"x-accel-buffering", b"no"),
                ]
                await send({"type": "http.response.start", "status": 200, "headers": headers})
                started.append(True)
                try:
                    async with anyio.create_task_group() as tg:

                        async def leaving() -> None:
                            while (await receive())["type"] != "http.disconnect":
                                pass
                            tg.cancel_scope.cancel("the client went away")

                        async def closed() -> None:  # the context reloaded: session gone
                            await upstream.wait_closed()
                            tg.cancel_scope.cancel("the context's session closed")

                        tg.start_soon(leaving)
                        tg.start_soon(closed)
                        await self._pass_on(resp, send)
                        tg.cancel_scope.cancel()
                finally:
                    with anyio.move_on_after(1, shield=True), contextlib.suppress(OSError):
                        await send({"type": "http.response.body", "body": b"", "more_body": False})
        except (KubemuxError, Problem) as exc:
            if started:
                log.info("a log stream of context %r ended: %s", self._context, exc)
                return
            if isinstance(exc, KubemuxError):
                exc = dashboard.problem(exc, self._context)
            await exc.response()(scope, receive, send)

    async def _pass_on(self, resp: aiohttp.ClientResponse, send: Send) -> None:
        """Each chunk written before the next is read; a client that takes nothing for
        ``stream_send_timeout`` is cut off."""
        timeout = self._dashboard.stream_send_timeout
        try:
            while chunk := await resp.content.readany():
                with anyio.move_on_after(timeout) as waited:
                    await send({"type": "http.response.body", "body": chunk, "more_body": True})
                if waited.cancelled_caught:
                    log.info("closed a log stream whose client took nothing for %.0fs", timeout)
                    return
        except aiohttp.ClientError as exc:  # the server's stream broke: what came, came
            log.info("a log stream of context %r broke: %s", self._context, exc)


def _status_message(body: bytes, status: int) -> str:
    """The message of a Kubernetes Status body, else the text itself (cut)."""
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError:
        data = None
    if isinstance(data, dict) and isinstance(data.get("message"), str):
        return str(data["message"])
    text = body.decode("utf-8", "replace").strip()
    return text[:2000] or f"the server answered {status}"
