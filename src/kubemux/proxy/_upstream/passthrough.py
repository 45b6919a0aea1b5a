"""Everything the caches do not answer goes upstream, and its answer comes back unchanged.

Writes (POST, PUT, every PATCH type, DELETE, deletecollection), subresources (``status``,
``scale``, ``eviction``, ``log``), and reads the cache cannot serve are sent to the
context's API server through :class:`kubemux._http.upstream.Upstream`, with the context's own
credential. The downstream ``Authorization`` header (the proxy's token, or the embedding
app's session) never goes upstream, nor do cookies, hop-by-hop headers or front-proxy
``X-Remote-*`` headers; impersonation headers do (``kubectl --as``: the kubeconfig's user
decides whether it may impersonate).

The answer is streamed back as it arrives (a ``watch=true`` or ``follow=true`` stream has no
read timeout and ends when either side leaves): status, headers (less hop-by-hop ones,
cookies, and the encoding aiohttp removed), body.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
from collections.abc import Sequence

import aiohttp
import anyio
from starlette.types import Receive, Scope, Send

from ..._errors import KubemuxError
from ..._http.upstream import Upstream
from .._api.responses import StatusError, status_for_error, upstream_header

__all__ = ["Forwarded", "forward", "read_body", "request_headers"]

log = logging.getLogger(__name__)

_HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "trailers",
        "transfer-encoding",
        "upgrade",
    }
)
_NOT_UPSTREAM = _HOP_BY_HOP | {
    "host",
    "authorization",
    "cookie",
    "content-length",  # aiohttp sets it from the body
    "accept-encoding",  # aiohttp asks for gzip itself and decodes it
    "expect",
    "origin",
    "referer",
    "forwarded",
    "x-forwarded-for",
    "x-forwarded-host",
    "x-forwarded-proto",
    "x-real-ip",
}
_NOT_DOWNSTREAM = _HOP_BY_HOP | {"set-cookie", "content-length", "content-encoding", "server"}


def request_headers(scope: Scope) -> list[tuple[str, str]]:
    """The downstream request's headers that may go upstream."""
    out: list[tuple[str, str]] = []
    for raw_name, raw_value in scope.get("headers") or ():
        name = raw_name.decode("latin-1").lower()
        if name in _NOT_UPSTREAM or name.startswith(("x-remote-", "sec-websocket-")):
            continue
        out.append((name, raw_value.decode("latin-1")))
    return out


def _response_headers(resp: aiohttp.ClientResponse, context: str) -> list[tuple[bytes, bytes]]:
    headers = [
        upstream_header(k, v, context)
        for k, v in resp.headers.items()
        if k.lower() not in _NOT_DOWNSTREAM
    ]
    if "Content-Encoding" not in resp.headers and resp.content_length is not None:
        headers.append((b"content-length", str(resp.content_length).encode()))
    return headers


async def read_body(scope: Scope, receive: Receive, *, limit: int, body_timeout: float) -> bytes:
    """The whole request body, at most ``limit`` bytes, within ``body_timeout`` seconds.

    Raises:
        StatusError: 413 for a body over the limit (the declared length is checked first),
            408 for a body that did not arrive in time, 400 if the client left.
    """
    for name, value in scope.get("headers") or ():
        if name == b"content-length":
            try:
                declared = int(value)
            except ValueError:
                raise StatusError(400, "invalid Content-Length") from None
            if declared > limit:
                raise StatusError(413, f"request entity too large: limit is {limit}")
    body = bytearray()
    with anyio.move_on_after(body_timeout) as scope_:
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                raise StatusError(400, "the client went away")
            body += message.get("body", b"")
            if len(body) > limit:
                raise StatusError(413, f"request entity too large: limit is {limit}")
            if not message.get("more_body", False):
                return bytes(body)
    assert scope_.cancelled_caught
    raise StatusError(408, f"Timeout: the request body did not arrive within {body_timeout:g}s")


async def _wait_disconnect(receive: Receive, scope: anyio.CancelScope) -> None:
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            scope.cancel("the client went away")
            return


async def _wait_ending(ending: anyio.Event, scope: anyio.CancelScope, result: Forwarded) -> None:
    await ending.wait()
    result.ended = True
    scope.cancel("the proxy is stopping")


async def _wait_closed(upstream: Upstream, scope: anyio.CancelScope) -> None:
    await upstream.wait_closed()
    scope.cancel("the context stopped")


@dataclasses.dataclass(slots=True)
class Forwarded:
    """What came back from upstream.

    Attributes:
        status: The answer's HTTP status (None: no answer, or it broke off).
        body: A 2xx answer's whole body, when it was captured (see :func:`forward`); with
            ``head``, its first ``capture`` bytes.
        truncated: ``body`` is the head of a longer answer.
    """

    status: int | None = None
    body: bytes | None = None
    truncated: bool = False
    started: bool = False  # the answer's head went downstream
    finished: bool = False  # and its last chunk
    ended: bool = False  # the proxy ended it (stopping)


async def forward(
    upstream: Upstream,
    scope: Scope,
    receive: Receive,
    send: Send,
    target: str,
    *,
    body: bytes | None,
    streaming: bool,
    response_timeout: float,
    read_timeout: float,
    headers: Sequence[tuple[str, str]] | None = None,
    capture: int = 0,
    head: bool = False,
    ending: anyio.Event | None = None,
) -> Forwarded:
    """Send the request to ``target`` (path and query, encoded) upstream and stream the
    answer back. ``body`` has been read already (so the downstream ``receive`` only waits
    for the client to leave, which ends the exchange).

    Returns the answer's status (None when it broke off) and, with ``capture``, a
    successful (2xx) answer of at most that many bytes, whole (what a write answered: read
    your writes); with ``head``, the first that many bytes of a longer one too
    (``truncated``: what a read answered, for its resourceVersion).

    An answer that breaks off midway (also because the context stopped or reloaded) ends
    without its last chunk (the ASGI server then closes the connection), so the client
    sees a truncated body, never a complete one. A stream ended by ``ending`` (the proxy
    is stopping) ends with its last chunk: a watch or ``follow`` client goes on from what
    it saw, as when the API server ends a watch.

    Raises:
        StatusError: the request could not be sent or got no answer (nothing was sent
            downstream yet).
    """
    failure: list[StatusError] = []
    result = Forwarded()
    async with anyio.create_task_group() as tg:
        tg.start_soon(_wait_disconnect, receive, tg.cancel_scope)
        tg.start_soon(_wait_closed, upstream, tg.cancel_scope)
        if ending is not None:
            tg.start_soon(_wait_ending, ending, tg.cancel_scope, result)
        try:
            await _exchange(
                upstream,
                scope,
                send,
                target,
                body=body,
                streaming=streaming,
                response_timeout=response_timeout,
                read_timeout=read_timeout,
                headers=request_headers(scope) if headers is None else list(headers),
                capture=capture,
                head=head,
                result=result,
            )
        except StatusError as exc:
            failure.append(exc)
        tg.cancel_scope.cancel("answered")
    if failure:
        raise failure[0]
    if result.ended and result.started and not result.finished:
        await send({"type": "http.response.body", "body": b"", "more_body": False})
        result.finished = True
    return result


async def _exchange(
    upstream: Upstream,
    scope: Scope,
    send: Send,
    target: str,
    *,
    body: bytes | None,
    streaming: bool,
    response_timeout: float,
    read_timeout: float,
    headers: list[tuple[str, str]],
    capture: int = 0,
    head: bool = False,
    result: Forwarded | None = None,
) -> None:
    method = scope["method"]
    timeout = aiohttp.ClientTimeout(
        total=None, sock_connect=10.0, sock_read=None if streaming else read_timeout
    )
    async with contextlib.AsyncExitStack() as stack:
        try:
            with anyio.fail_after(response_timeout):
                resp = await stack.enter_async_context(
                    upstream.request(method, target, headers=headers, body=body, timeouts=timeout)
                )
        except TimeoutError:
            raise StatusError(
                504,
                f"Timeout: the API server of context {upstream.context!r} did not answer "
                f"within {response_timeout:g}s",
            ) from None
        except KubemuxError as exc:
            raise status_for_error(exc, upstream.context) from None
        answer = _response_headers(resp, upstream.context)  # a 502 before anything is sent
        await send({"type": "http.response.start", "status": resp.status, "headers": answer})
        if result is not None:
            result.started = True
        keep: bytearray | None = bytearray() if capture and 200 <= resp.status < 300 else None
        truncated = False
        try:
            async for chunk in resp.content.iter_any():
                if keep is not None and not truncated:
                    keep += chunk
                    if len(keep) > capture and head:
                        del keep[capture:]
                        truncated = True
                    elif len(keep) > capture:
                        keep = None
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
        except (aiohttp.ClientError, TimeoutError, OSError, RuntimeError) as exc:
            log.info(
                "context %r: %s %s: the upstream answer broke off (%s)",
                upstream.context,
                method,
                target[:200],
                type(exc).__name__,
            )
            return  # without the final message: the connection is closed, not completed
        await send({"type": "http.response.body", "body": b"", "more_body": False})
        if result is not None:
            result.finished = True
            result.status = resp.status
            if keep is not None:
                result.body = bytes(keep)
                result.truncated = truncated
