"""``kubectl exec``, ``attach`` and ``port-forward`` over WebSocket, bridged both ways.

kubectl 1.32 opens these as WebSockets first (``v5.channel.k8s.io`` for exec and attach,
``SPDY/3.1+portforward.k8s.io`` tunnelled over a WebSocket for port-forward). The proxy
accepts the downstream WebSocket (Starlette/uvicorn) only once the upstream one (aiohttp,
with the context's credential) is open, with the subprotocol the API server chose, then
copies every message both ways, text as text and binary as binary, and closes each side
with the other's close code. If the API server refuses the upgrade, the downstream
handshake is refused with the same HTTP status (and a ``Status`` body, where the ASGI
server can send one).

SPDY upgrades are bridged by :mod:`.raw_upgrade` where the server hands the app the raw
connection (:class:`~._server.ProxyServer` does). Elsewhere (the app mounted in another
ASGI server) the request arrives as plain HTTP: kubectl falls back to SPDY when the
WebSocket upgrade is refused (measured with kubectl 1.32: after a 400 or a 403 it sends
``POST ... Upgrade: SPDY/3.1``), so that fallback gets the refusal remembered from the
WebSocket attempt (kubectl prints the API server's reason), else a 400 saying SPDY is not
supported.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import time

import aiohttp
import anyio
import orjson
from starlette.types import Receive, Scope, Send

from ..._errors import KubemuxError
from ..._http.upstream import Upstream
from .._api.responses import REASONS, StatusError, status_body, status_for_error
from .passthrough import request_headers
from .raw_upgrade import is_streaming

__all__ = ["RefusedUpgrades", "bridge", "deny", "spdy_refusal"]

log = logging.getLogger(__name__)


class RefusedUpgrades:
    """The last refused WebSocket upgrades (so the SPDY fallback gets the same answer)."""

    def __init__(self, *, ttl: float = 30.0, size: int = 128) -> None:
        self.ttl = ttl
        self.size = size
        self._items: collections.OrderedDict[tuple[str, str], tuple[float, StatusError]] = (
            collections.OrderedDict()
        )

    def remember(self, context: str, target: str, error: StatusError) -> None:
        self._items[(context, target)] = (time.monotonic(), error)
        self._items.move_to_end((context, target))
        while len(self._items) > self.size:
            self._items.popitem(last=False)

    def recall(self, context: str, target: str) -> StatusError | None:
        item = self._items.pop((context, target), None)
        if item is None or time.monotonic() - item[0] > self.ttl:
            return None
        return item[1]


async def deny(scope: Scope, send: Send, error: StatusError) -> None:
    """Refuse a WebSocket handshake with ``error``'s status and Status body."""
    if "websocket.http.response" in (scope.get("extensions") or {}):
        body = error.body()
        await send(
            {
                "type": "websocket.http.response.start",
                "status": error.code,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                    *((k.lower().encode(), v.encode("latin-1")) for k, v in error.headers.items()),
                ],
            }
        )
        await send({"type": "websocket.http.response.body", "body": body})
        return
    await send({"type": "websocket.close", "code": 1008})  # the server answers 403


def _refusal(exc: aiohttp.WSServerHandshakeError, context: str) -> StatusError:
    code = exc.status if 400 <= exc.status < 600 else 502
    reason = REASONS.get(code, "")
    message = f"the API server of context {context!r} refused the upgrade: HTTP {exc.status}" + (
        f" {exc.message}" if exc.status < 400 else ""
    )
    headers = {}
    retry = exc.headers.get("Retry-After") if exc.headers else None
    if retry and retry.isascii() and retry.strip().isdigit():
        headers["Retry-After"] = retry
    return StatusError(code, message, reason=reason, headers=headers)


async def bridge(
    upstream: Upstream,
    scope: Scope,
    receive: Receive,
    send: Send,
    target: str,
    refused: RefusedUpgrades,
    *,
    handshake_timeout: float,
) -> None:
    """Open the upstream WebSocket, accept the downstream one, copy messages both ways.

    The downstream ``websocket.connect`` message has been received already.
    """
    protocols = list(scope.get("subprotocols") or ())
    headers = request_headers(scope)
    try:
        async with upstream.websocket(
            target, protocols=protocols, headers=headers, handshake_timeout=handshake_timeout
        ) as ws:
            await send({"type": "websocket.accept", "subprotocol": ws.protocol})
            await _pump(upstream, ws, receive, send, target)
    except aiohttp.WSServerHandshakeError as exc:
        error = _refusal(exc, upstream.context)
        if exc.status >= 400 and is_streaming(target):  # its reason (not for a redirect)
            error = await _reason(upstream, target, headers, error)
        refused.remember(upstream.context, target, error)
        await deny(scope, send, error)
    except KubemuxError as exc:
        error = status_for_error(exc, upstream.context)
        await deny(scope, send, error)


_REASON_MAX = 64 * 1024


async def _reason(
    upstream: Upstream, target: str, headers: list[tuple[str, str]], error: StatusError
) -> StatusError:
    """The API server's own Status for a refused upgrade (aiohttp drops the body of the
    refusal): the same request without the upgrade, which kube-apiserver refuses before
    anything runs (a 403 by RBAC, a 404 for a missing pod; else a 400 "Upgrade request
    required", not used). Bounded: 5 s and 64 KiB."""
    timeouts = aiohttp.ClientTimeout(total=5.0, sock_connect=5.0)
    try:
        with anyio.fail_after(5.0):
            async with upstream.request("GET", target, headers=headers, timeouts=timeouts) as r:
                if r.status != error.code or "json" not in r.headers.get("Content-Type", ""):
                    return error
                body = b""
                async for chunk in r.content.iter_any():
                    body += chunk
                    if len(body) > _REASON_MAX:
                        return error
    except (KubemuxError, aiohttp.ClientError, TimeoutError):
        return error
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError:
        return error
    if not isinstance(doc, dict) or doc.get("kind") != "Status":
        return error
    message = str(doc.get("message") or error.message)
    reason = str(doc.get("reason") or error.reason)
    return StatusError(error.code, message, reason=reason, headers=error.headers, raw=body)


# exec and attach subprotocols whose channel 3 carries a JSON ``metav1.Status`` (v4 on)
_STATUS_PROTOCOLS = frozenset(("v4.channel.k8s.io", "v5.channel.k8s.io"))
_STATUS = 3
_GOING_AWAY = 1001
_STOP_GRACE = 0.5  # how long a connection ended under a bridge waits to learn why


def _subresource(target: str) -> str:
    return target.partition("?")[0].rpartition("/")[2]


class _Cut:
    """How a bridge tells its client that the upstream side ended under it (the context
    stopped or reloaded, or the API server's connection dropped without a close frame).

    kubectl treats a WebSocket closed without a status as a command that ended well
    (measured with kubectl 1.32: ``exec`` exits 0). So an exec or attach whose subprotocol
    carries a Status on channel 3 (v4, v5) gets a ``Failure`` there first, unless the API
    server has written one already (the command ended), and the WebSocket closes with 1000,
    as an exec ends (client-go reads channel 3 to its end, and any other close code is a
    read error that hides the status); kubectl prints the message and exits 1. Other
    bridges (port-forward's tunnel, older subprotocols) close with 1001 (going away).
    """

    def __init__(self, context: str, target: str, protocol: str | None) -> None:
        self.context = context
        self.sub = _subresource(target)
        self.with_status = protocol in _STATUS_PROTOCOLS and self.sub in ("exec", "attach")
        self.status_seen = False
        self.done = False

    def saw(self, data: bytes) -> None:
        if data[:1] == bytes((_STATUS,)):
            self.status_seen = True

    async def cut(self, send: Send, *, stopped: bool) -> None:
        if self.done:
            return
        self.done = True
        message = f"the connection to the API server of context {self.context!r} ended"
        message += f" before the {self.sub} did" if self.with_status else ""
        if stopped:
            message += " (the context stopped: removed from the kubeconfig, changed, or stopped)"
        code = _GOING_AWAY
        with contextlib.suppress(OSError, RuntimeError):  # the client left meanwhile
            if self.with_status and not self.status_seen:
                status = status_body(503, "ServiceUnavailable", message)
                await send({"type": "websocket.send", "bytes": bytes((_STATUS,)) + status})
                code = 1000  # as an exec ends: client-go reads the status only up to a 1000
            await send({"type": "websocket.close", "code": code, "reason": ""})


async def _pump(
    upstream: Upstream,
    ws: aiohttp.ClientWebSocketResponse,
    receive: Receive,
    send: Send,
    target: str,
) -> None:
    cut = _Cut(upstream.context, target, ws.protocol)
    async with anyio.create_task_group() as tg:

        async def context_stopped() -> None:
            await upstream.wait_closed()
            await cut.cut(send, stopped=True)
            tg.cancel_scope.cancel("the context stopped")

        async def downstream_to_upstream() -> None:
            while True:
                message = await receive()
                kind = message["type"]
                if kind == "websocket.receive":
                    if message.get("bytes") is not None:
                        await ws.send_bytes(message["bytes"])
                    elif message.get("text") is not None:
                        await ws.send_str(message["text"])
                elif kind == "websocket.disconnect":
                    cut.done = True  # nobody left to tell
                    await ws.close(code=_close_code(message.get("code")))
                    tg.cancel_scope.cancel("the client closed")
                    return

        async def upstream_to_downstream() -> None:
            while True:
                msg = await ws.receive()
                if msg.type is aiohttp.WSMsgType.BINARY:
                    cut.saw(msg.data)
                    await send({"type": "websocket.send", "bytes": msg.data})
                elif msg.type is aiohttp.WSMsgType.TEXT:
                    await send({"type": "websocket.send", "text": msg.data})
                elif msg.type in (aiohttp.WSMsgType.PING, aiohttp.WSMsgType.PONG):
                    continue
                else:
                    break
            if msg.type is aiohttp.WSMsgType.CLOSE:  # the API server closed: pass it on
                cut.done = True
                code = ws.close_code or 1000
                with contextlib.suppress(OSError, RuntimeError):  # the client left meanwhile
                    await send({"type": "websocket.close", "code": _close_code(code)})
            else:  # the connection ended under the bridge (CLOSED, ERROR)
                stopped = False
                with anyio.move_on_after(_STOP_GRACE):  # a stop closes the session first
                    await upstream.wait_closed()
                    stopped = True
                await cut.cut(send, stopped=stopped)
            tg.cancel_scope.cancel("the server closed")

        tg.start_soon(context_stopped)
        tg.start_soon(downstream_to_upstream)
        tg.start_soon(upstream_to_downstream)


def _close_code(code: object) -> int:
    """A close code that may be sent on (1005/1006/1015 are reserved for reporting)."""
    if (
        isinstance(code, int)
        and (1000 <= code <= 1014 or 3000 <= code <= 4999)
        and code
        not in (
            1004,
            1005,
            1006,
        )
    ):
        return code
    return 1000


def spdy_refusal() -> StatusError:
    return StatusError(
        400,
        "this server bridges exec, attach and port-forward over WebSocket only "
        "(kubectl 1.30 or later does that by default); SPDY upgrades are not supported "
        "(kubemux proxy bridges them)",
    )
