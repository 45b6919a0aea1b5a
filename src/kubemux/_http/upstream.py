"""Requests of any kind to one context's API server, with that context's credentials.

The informers only LIST and WATCH; :mod:`kubemux.proxy` forwards whatever its clients send
(writes, subresources, log streams, exec over WebSocket). :class:`Upstream` sends such a
request through the context generation's own client: its HTTP session and TLS context
(client certificates, CA, ``tls-server-name``, proxy), and its credential, refreshed as the
informers' is (an exec plugin, a token file, OIDC), with one retry after a 401 as
:meth:`ContextClient._call` does. Reach one with :meth:`WatcherRegistry.upstream`.

Nothing here reads a body or decides what an answer means: the caller gets aiohttp's
response (or WebSocket) and streams it on.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any

import aiohttp
import anyio
import yarl

from .._errors import ClusterUnreachable
from .bearer import bearer_ssl
from .transport import map_exceptions

if TYPE_CHECKING:
    from .client import ContextClient

__all__ = ["Upstream"]

Headers = Sequence[tuple[str, str]]


class Upstream:
    """One context generation's API server, for requests of any method and path.

    Built by :meth:`WatcherRegistry.upstream`, valid inside its ``async with`` only (the
    generation's session closes when it stops or reloads; a request in flight then fails
    with :class:`ClusterUnreachable`).

    Attributes:
        context: The context's name.
        generation: The number of the context generation it belongs to.
        server: The server URL, without a password (for messages).
    """

    __slots__ = ("_bearer", "_client", "_closed", "context", "generation", "server")

    def __init__(
        self,
        client: ContextClient,
        generation: int,
        closed: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self._client = client
        self._closed = closed
        self._bearer: str | None = None
        self.context = client.context
        self.generation = generation
        self.server = client.server

    def as_bearer(self, token: str) -> Upstream:
        """The same API server, reached with ``token`` as the only credential: sent as
        ``Authorization: Bearer``, no client certificate presented (the API server would
        take it over the token), no refresh after a 401 (the 401 is the answer). For
        ``kubemux proxy --user-tokens``: a user's request, authorized and audited upstream
        as that user."""
        other = Upstream(self._client, self.generation, self._closed)
        other._bearer = token
        return other

    async def _credential(
        self, fresh: Any = None, *, token: str | None = None
    ) -> tuple[dict[str, str], Any, dict[str, Any]]:
        """The credential headers, the refreshing credential (or None) and the connection
        options of a request (``token``: a user's bearer token instead of the context's
        credential, on a connection presenting no client certificate)."""
        options = self._client.connection_options()
        if token is None:
            token = self._bearer
        if token is not None:
            ssl_context = bearer_ssl(self._client.session)
            if ssl_context is not None:
                options["ssl"] = ssl_context
            return {"Authorization": f"Bearer {token}"}, None, options
        headers, credential = await self._client.credential_headers(fresh)
        return headers, credential, options

    async def wait_closed(self) -> None:
        """Return once the generation has stopped (its session is closed).

        A stream being read when the session closes is not always woken by aiohttp (a
        read already waiting stays waiting): whoever streams an answer races it against
        this and stops reading when it returns.
        """
        if self._closed is None:
            await anyio.sleep_forever()
        else:
            await self._closed()

    def __repr__(self) -> str:
        return f"<Upstream context={self.context!r} generation={self.generation}>"

    # ------------------------------------------------------------------ plumbing
    def _url(self, path_and_query: str) -> yarl.URL:
        """The server's URL (with any path prefix it has) plus the path, kept as encoded."""
        if not path_and_query.startswith("/"):
            raise ValueError(f"an upstream path starts with '/': {path_and_query[:100]!r}")
        return yarl.URL(self._client.base_url + path_and_query, encoded=True)

    # ------------------------------------------------------------------ requests
    @contextlib.asynccontextmanager
    async def request(
        self,
        method: str,
        path_and_query: str,
        *,
        headers: Headers = (),
        body: bytes | None = None,
        timeouts: aiohttp.ClientTimeout | None = None,
        bearer_token: str | None = None,
    ) -> AsyncIterator[aiohttp.ClientResponse]:
        """Send one request; yield the response with its body unread (stream it).

        Args:
            method: Any HTTP method.
            path_and_query: The path (and query) below the server URL, already encoded;
                sent exactly as given.
            headers: Request headers, sent as given (no ``Authorization``: the context's
                credential is added here).
            body: The whole request body (buffered, so it can be sent again after a 401).
            timeouts: aiohttp's timeouts; default: 10 s to connect, none in total.
            bearer_token: Send this token (a user's, who must be the one the API server
                authorizes and audits) instead of the context's credential; a 401 is then
                the answer, never retried. The connection presents no client certificate
                of the context's (kube-apiserver would authenticate the certificate over
                the token): see :meth:`as_bearer`.

        A 401 refreshes a refreshing credential and sends the request once more, as the
        informers' requests do. The response is released when the ``async with`` ends.

        Raises:
            ClusterUnreachable: the server could not be reached (or the session closed).
            ServerTimeout: no answer in time.
            CredentialError: the credential could not be obtained.

        Cancellation abandons the request and releases its connection.
        """
        url = self._url(path_and_query)
        t = timeouts or aiohttp.ClientTimeout(total=None, sock_connect=10)
        what = f"{method} {url.path[:200]}"
        client = self._client
        token = bearer_token if bearer_token is not None else self._bearer
        credential_headers, credential, extra = await self._credential(token=token)
        retried = False
        while True:
            sent = [(k, v) for k, v in headers if k.lower() != "authorization"]
            sent.extend(credential_headers.items())
            session = client.session
            if session.closed:
                raise ClusterUnreachable(self.server, f"{what}: the context's session closed")
            with map_exceptions(self.server, what, self._client.tls):
                resp = await session.request(
                    method,
                    url,
                    headers=sent,
                    data=body,
                    timeout=t,
                    allow_redirects=False,
                    auto_decompress=True,
                    **extra,
                )
            if credential is None or resp.status != 401 or retried:
                break  # (only a refreshing credential comes back: a static one is None)
            fresh = await client.unauthorized(credential)
            if fresh is None:
                break
            resp.release()
            retried = True
            credential_headers, credential, extra = await self._credential(fresh)
        try:
            if credential is not None and resp.status < 400:
                client.accepted()
            yield resp
        finally:
            resp.release()

    @contextlib.asynccontextmanager
    async def websocket(
        self,
        path_and_query: str,
        *,
        protocols: Sequence[str] = (),
        headers: Headers = (),
        handshake_timeout: float = 30.0,
        max_message_size: int = 16 * 1024 * 1024,
    ) -> AsyncIterator[aiohttp.ClientWebSocketResponse]:
        """Open a WebSocket to the server (``exec``, ``attach``, ``portforward``).

        Args:
            path_and_query: As for :meth:`request`.
            protocols: The subprotocols to offer (``v5.channel.k8s.io``).
            headers: Extra handshake headers (no ``Authorization``).
            handshake_timeout: Seconds for the handshake.
            max_message_size: Larger messages from the server fail the socket.

        Raises:
            aiohttp.WSServerHandshakeError: the server refused the upgrade (its status).
            ClusterUnreachable, ServerTimeout, CredentialError: as :meth:`request`.

        The socket is closed when the ``async with`` ends; cancellation closes it too.
        """
        url = self._url(path_and_query)
        what = f"WebSocket {url.path[:200]}"
        credential_headers, _, options = await self._credential()
        sent = [(k, v) for k, v in headers if k.lower() != "authorization"]
        sent.extend(credential_headers.items())
        session = self._client.session
        if session.closed:
            raise ClusterUnreachable(self.server, f"{what}: the context's session closed")
        refused: aiohttp.WSServerHandshakeError | None = None
        with (
            map_exceptions(self.server, what, self._client.tls),
            anyio.fail_after(handshake_timeout),
        ):
            try:
                ws = await session.ws_connect(
                    url,
                    protocols=tuple(protocols),
                    headers=sent,
                    timeout=aiohttp.ClientWSTimeout(ws_receive=None, ws_close=5.0),
                    autoping=True,
                    max_msg_size=max_message_size,
                    compress=0,
                    **options,
                )
            except aiohttp.WSServerHandshakeError as exc:  # an answer, not a failure
                refused = exc
        if refused is not None:
            raise refused
        try:
            yield ws
        finally:
            await ws.close()
