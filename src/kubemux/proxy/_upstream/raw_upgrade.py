"""``Upgrade: SPDY/3.1`` (kubectl's SPDY path for exec, attach, port-forward) as a byte pipe.

kubectl speaks SPDY when the WebSocket upgrade fails, and from the start with
``KUBECTL_REMOTE_COMMAND_WEBSOCKETS=false`` / ``KUBECTL_PORT_FORWARD_WEBSOCKETS=false``.
ASGI has no way to take a connection over, so :class:`~._server.ProxyServer`'s HTTP
protocol does it: for a request with ``Connection: Upgrade`` and ``Upgrade: SPDY/...`` it
puts a :class:`RawConnection` in the scope's extensions (``kubemux.raw_upgrade``) and, once
the request has been parsed, hands every later byte of the connection to it instead of
to the HTTP parser.

:func:`bridge` sends the same request upstream (the context's credentials, TLS, proxy, as
every forwarded request; the downstream ``Authorization`` never goes up) with the upgrade
headers. A ``101`` is relayed downstream with the headers kubectl reads (``Connection``,
``Upgrade``, ``X-Stream-Protocol-Version``), then bytes are copied both ways, unparsed,
until either side closes (then both are closed) or the context stops. A refusal (403, 404,
...) is relayed as is (status, headers, body up to 64 KiB) and the connection closed; a
redirect is a ``502`` Status (never followed, nor passed on for the client to follow).
Each direction buffers at most 1 MiB (:class:`~kubemux._http.raw.ByteQueue`): past that, the
sending side is no longer read.
"""

from __future__ import annotations

import contextlib
import logging
import re
from typing import Protocol

import aiohttp
import anyio
from starlette.types import Scope

from ..._errors import KubemuxError
from ..._http.raw import ByteQueue
from ..._http.upstream import Upstream
from .._api.responses import StatusError, status_for_error
from .passthrough import request_headers

__all__ = ["RAW_UPGRADE", "RawConnection", "bridge", "is_streaming", "raw_connection"]

log = logging.getLogger(__name__)

RAW_UPGRADE = "kubemux.raw_upgrade"
_BODY_MAX = 64 * 1024
_RELAYED = ("x-stream-protocol-version", "x-accepted-stream-protocol-versions", "content-type")


class RawConnection(Protocol):
    """The downstream connection of an upgrade request, as the server hands it over."""

    def claim(self) -> None:
        """The app answers on the raw connection from now on (no ASGI response)."""

    async def read(self) -> bytes:
        """Bytes from the client; ``b""`` once it closed."""

    async def write(self, data: bytes) -> None:
        """Bytes to the client (waits while the transport's buffer is full)."""

    def close(self) -> None:
        """Close the connection."""


_STREAMING = re.compile(r"/pods/[^/]+/(exec|attach|portforward)$")


def is_streaming(target: str) -> bool:
    """Whether ``target`` (path and query) is a pod's exec, attach or portforward."""
    return _STREAMING.search(target.partition("?")[0]) is not None


def raw_connection(scope: Scope) -> RawConnection | None:
    """The connection the server hands over with an upgrade request, if it does."""
    found: RawConnection | None = (scope.get("extensions") or {}).get(RAW_UPGRADE)
    return found


def _head(status: int, reason: str, headers: list[tuple[str, str]]) -> bytes:
    lines = [f"HTTP/1.1 {status} {reason}"]
    for name, value in headers:
        if not any(c in name + value for c in "\r\n\0"):
            lines.append(f"{name}: {value}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1", "replace")


def _upgrade_value(scope: Scope) -> str:
    for name, value in scope.get("headers") or ():
        if name == b"upgrade":
            return bytes(value).decode("latin-1")
    return "SPDY/3.1"


async def bridge(
    upstream: Upstream,
    scope: Scope,
    raw: RawConnection,
    target: str,
    *,
    handshake_timeout: float,
) -> None:
    """Send the upgrade upstream; relay its answer; pipe the bytes while both sides live.

    Raises:
        StatusError: the upstream could not be reached (before anything was sent
            downstream: the app answers it as usual).

    Cancellation closes both connections.
    """
    headers = [*request_headers(scope), ("Connection", "Upgrade")]
    headers.append(("Upgrade", _upgrade_value(scope)))
    try:
        async with contextlib.AsyncExitStack() as stack:
            try:
                with anyio.fail_after(handshake_timeout):
                    resp = await stack.enter_async_context(
                        upstream.request(scope["method"], target, headers=headers)
                    )
            except TimeoutError:
                raise StatusError(
                    504,
                    f"the API server of context {upstream.context!r} did not answer the "
                    f"upgrade within {handshake_timeout:g}s",
                ) from None
            except KubemuxError as exc:
                raise status_for_error(exc, upstream.context) from None
            raw.claim()
            if 300 <= resp.status < 400:  # never followed, nor handed to the client to follow
                await _redirect_refused(resp, raw, upstream.context)
                return
            if resp.status != 101 or resp.connection is None:
                await _relay_refusal(resp, raw)
                return
            await _pipe(upstream, resp, raw)
    finally:
        raw.close()


async def _redirect_refused(resp: aiohttp.ClientResponse, raw: RawConnection, context: str) -> None:
    message = (
        f"the API server of context {context!r} refused the upgrade: HTTP {resp.status} "
        "(a redirect, not followed)"
    )
    body = StatusError(502, message).body()
    headers = [("Content-Type", "application/json"), ("Content-Length", str(len(body)))]
    await raw.write(_head(502, "Bad Gateway", [*headers, ("Connection", "close")]) + body)


async def _relay_refusal(resp: aiohttp.ClientResponse, raw: RawConnection) -> None:
    body = b""
    with contextlib.suppress(aiohttp.ClientError, TimeoutError):
        with anyio.fail_after(5.0):
            async for chunk in resp.content.iter_any():
                body += chunk
                if len(body) > _BODY_MAX:
                    body = body[:_BODY_MAX]
                    break
    headers = [(k, v) for k, v in resp.headers.items() if k.lower() in _RELAYED]
    headers += [("Content-Length", str(len(body))), ("Connection", "close")]
    await raw.write(_head(resp.status, resp.reason or "", headers) + body)


async def _pipe(upstream: Upstream, resp: aiohttp.ClientResponse, raw: RawConnection) -> None:
    connection = resp.connection
    assert connection is not None
    protocol, transport = connection.protocol, connection.transport
    if protocol is None or transport is None:
        return
    queue = ByteQueue(transport.pause_reading, transport.resume_reading)
    protocol.set_parser(queue, queue)  # what arrived after the 101 comes first
    headers = [("Connection", "Upgrade"), ("Upgrade", resp.headers.get("Upgrade", "SPDY/3.1"))]
    headers += [(k, v) for k, v in resp.headers.items() if k.lower() in _RELAYED]
    await raw.write(_head(101, "Switching Protocols", headers))

    async with anyio.create_task_group() as tg:

        async def context_stopped() -> None:
            await upstream.wait_closed()
            tg.cancel_scope.cancel("the context stopped")

        async def client_to_server() -> None:
            with contextlib.suppress(aiohttp.ClientError, OSError):
                while (data := await raw.read()) and not transport.is_closing():
                    transport.write(data)
                    await protocol._drain_helper()  # aiohttp's own WebSocket writer waits so
            tg.cancel_scope.cancel("the client closed")

        async def server_to_client() -> None:
            with contextlib.suppress(OSError):
                while data := await queue.read():
                    await raw.write(data)
            tg.cancel_scope.cancel("the API server closed")

        tg.start_soon(context_stopped)
        tg.start_soon(client_to_server)
        tg.start_soon(server_to_client)
