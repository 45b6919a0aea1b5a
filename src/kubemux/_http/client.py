"""One HTTP client per context generation, and the raw LIST/WATCH requests.

:func:`open_client` builds kubernetes-asyncio's client for a context
(:mod:`kubemux._http.api_client`) and owns its lifetime; :class:`ContextClient` sends the raw
requests through it. Credentials that refresh (exec plugins, token files, OIDC) come from
:mod:`kubemux._auth.pool` and are sent by :meth:`ContextClient._call`, which retries a request
once after a 401 and a refresh. kubemux never asks kubernetes-asyncio for OpenAPI model
objects: responses are read raw (``_preload_content=False``) and decoded with orjson. How a
request is throttled, read, bounded and its foreign exceptions converted is
:mod:`kubemux._http.transport`; HTTP errors become :class:`ApiError` built from the Status body.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import ssl
import tempfile
from collections.abc import AsyncIterator, Mapping
from typing import TYPE_CHECKING, Any

import aiohttp
import anyio

from .._auth.pool import Credential, CredentialPool, CredentialProvider, CredentialStatus
from .._errors import (
    ApiError,
    CredentialError,
    KubemuxError,
    ServerTimeout,
    api_error_from_status,
)
from .._resources import Resource
from .._settings import WatchSettings
from .._wire.codec import Block
from .api_client import build_api_client, replacement_session
from .transport import (
    ERROR_BODY_MAX,
    SLOW_AFTER,
    LineWatchdog,
    Progress,
    RateLimiter,
    map_exceptions,
    read_blocks,
    read_body,
    tls_note,
)

if TYPE_CHECKING:
    from .._kubeconfig.load import ContextConfig

__all__ = [
    "SLOW_AFTER",
    "ContextClient",
    "Progress",
    "open_client",
]

_JSON = "application/json"
_DEFAULT_SETTINGS = WatchSettings()


class ContextClient:
    """Raw LIST and WATCH against one context's API server.

    Built by :func:`open_client`, which owns its lifetime (the HTTP session is closed when
    the ``async with`` ends). Every request it starts goes through one rate limiter, shared
    by all informers of the context (made from the first request's settings).
    """

    __slots__ = ("_api", "_auth", "_limiter", "context", "server", "streaming_list", "tls")

    def __init__(self, context: str, server: str, api: Any, tls: str | None = None) -> None:
        self.context = context
        self.server = server
        self.tls = tls  # what TLS errors name: the server name and the CA (tls_note)
        self._api = api
        self._auth: _RequestAuth | None = None  # a refreshing credential (open_client)
        self._limiter: RateLimiter | None = None
        self.streaming_list: bool | None = None  # does this server do streaming lists?

    def credential_status(self) -> CredentialStatus | None:
        """The refreshing credential's status (exec, token file, OIDC), else None."""
        return self._auth.provider.status() if self._auth is not None else None

    def __repr__(self) -> str:
        return f"<ContextClient context={self.context!r} server={self.server!r}>"

    async def sent_credentials(self) -> tuple[str | None, bytes | None]:
        """What the next request authenticates with: its ``Authorization`` header (a
        refreshing credential's current token, else the static token or basic auth) and a
        refreshing credential's client certificate (PEM); None for what is not sent. For
        identifying a context (shared watches hash it); never log it."""
        auth = self._auth
        if auth is not None:  # exec plugin, token file, OIDC: what the next request sends
            credential = await auth.prepare()
            token = f"Bearer {credential.token}" if credential.token else None
            return token, credential.cert_pem
        api_key: Any = self._api.configuration.api_key
        header = api_key.get("BearerToken") if api_key else None
        return (header if isinstance(header, str) and header else None), None

    # ------------------------------------------------------------------ any request
    # What :class:`~kubemux._http.upstream.Upstream` sends its requests with.
    @property
    def session(self) -> aiohttp.ClientSession:
        """The context's HTTP session now (a new client certificate replaces it)."""
        session: aiohttp.ClientSession = self._api.rest_client.pool_manager
        return session

    @property
    def base_url(self) -> str:
        """The server's URL as requests are sent to it (any path prefix kept), no final /."""
        return str(self._api.configuration.host).rstrip("/")

    def connection_options(self) -> dict[str, Any]:
        """The aiohttp request options of the context: its proxy, its TLS server name."""
        rest = self._api.rest_client
        options: dict[str, Any] = {}
        if rest.proxy:
            options["proxy"] = rest.proxy
        if rest.proxy_headers:
            options["proxy_headers"] = rest.proxy_headers
        if rest.server_hostname:
            options["server_hostname"] = rest.server_hostname
        return options

    async def credential_headers(
        self, fresh: Credential | None = None
    ) -> tuple[dict[str, str], Credential | None]:
        """The ``Authorization`` header to send, and the refreshing credential it came from
        (None for a static one; ``fresh``: what :meth:`unauthorized` gave)."""
        auth = self._auth
        if auth is not None:
            credential = await auth.prepare(fresh)
            if credential.token:
                return {"Authorization": f"Bearer {credential.token}"}, credential
            return {}, credential
        settings = await self._api.configuration.auth_settings()
        bearer = settings.get("BearerToken")
        if bearer and bearer.get("value"):
            return {str(bearer["key"]): str(bearer["value"])}, None
        return {}, None

    async def unauthorized(self, credential: Credential) -> Credential | None:
        """A request with the refreshing ``credential`` was answered 401: a fresh one to try
        once more (single-flight refresh), or None."""
        assert self._auth is not None, "a static credential does not refresh"
        return await self._auth.provider.unauthorized(credential)

    def accepted(self) -> None:
        """A request with the refreshing credential was answered (not 401): it works."""
        if self._auth is not None:
            self._auth.provider.accepted()

    @contextlib.asynccontextmanager
    async def _request(
        self,
        what: str,
        path: str,
        params: Mapping[str, str],
        settings: WatchSettings,
        client_timeout: aiohttp.ClientTimeout,
        progress: Progress,
        throttle: bool,
        accept: str = _JSON,
    ) -> AsyncIterator[aiohttp.ClientResponse]:
        if throttle:
            limiter = self._limiter
            if limiter is None:
                limiter = self._limiter = RateLimiter(settings.qps, settings.burst)
            await limiter.acquire()
        progress.begin()
        resp: aiohttp.ClientResponse | None = None
        with (
            map_exceptions(self.server, what, self.tls),
            anyio.move_on_after(settings.response_timeout),
        ):
            resp = await self._call(path, params, client_timeout, accept)
        if resp is None:
            raise ServerTimeout(
                self.server, f"{what}: no response within {settings.response_timeout:g} s"
            )
        try:
            if resp.status >= 400:
                try:
                    body = await read_body(resp, self.server, what, settings, ERROR_BODY_MAX)
                except KubemuxError:
                    body = bytearray()
                raise api_error_from_status(resp.status, bytes(body))
            yield resp
        finally:
            resp.release()

    async def _call(
        self,
        path: str,
        params: Mapping[str, str],
        client_timeout: aiohttp.ClientTimeout,
        accept: str = _JSON,
        *,
        method: str = "GET",
        body: Any = None,
    ) -> aiohttp.ClientResponse:
        # The credential: kubernetes-asyncio's (static) or a refreshing one, sent by us;
        # after a 401 the provider refreshes (single-flight) and the request is retried once.
        auth = self._auth
        credential = await auth.prepare() if auth is not None else None
        retried = False
        while True:
            headers = {"Accept": accept}
            if body is not None:
                headers["Content-Type"] = "application/json"
            if credential is not None and credential.token:
                headers["Authorization"] = f"Bearer {credential.token}"
            resp: aiohttp.ClientResponse = await self._api.call_api(
                path,
                method,
                query_params=list(params.items()),
                header_params=headers,
                body=body,
                auth_settings=["BearerToken"] if auth is None else [],
                _preload_content=False,
                _request_timeout=client_timeout,
            )
            if auth is None or credential is None:
                return resp
            if resp.status != 401:
                if resp.status < 400:
                    auth.provider.accepted()
                return resp
            if retried:
                auth.provider.rejected(credential)
                raise await _unauthorized(resp, auth.provider)
            fresh = await auth.provider.unauthorized(credential)
            if fresh is None:
                raise await _unauthorized(resp, auth.provider)
            resp.release()
            retried = True
            credential = await auth.prepare(fresh)

    async def list(
        self,
        resource: Resource,
        namespace: str | None,
        params: Mapping[str, str],
        settings: WatchSettings,
        *,
        progress: Progress | None = None,
        throttle: bool = True,
        accept: str = _JSON,
    ) -> bytearray:
        """One LIST request (one page); returns the response body, undecoded.

        ``throttle=False`` skips the rate limiter (a continuation page of a LIST that is
        making progress).

        Raises:
            ApiError: the server answered with an error status.
            ClusterUnreachable: the server could not be reached or the response broke off.
            ServerTimeout: no response headers in time, or the body stalled.
            ResponseTooLarge: the body exceeds ``settings.max_response_size``.

        Cancellation abandons the request and releases its connection.
        """
        progress = progress or Progress()
        t = aiohttp.ClientTimeout(
            total=settings.request_timeout, sock_connect=settings.connect_timeout
        )
        what = f"LIST {resource.name}"
        async with self._request(
            what, resource.path(namespace), params, settings, t, progress, throttle, accept
        ) as resp:
            body = await read_body(resp, self.server, what, settings, settings.max_response_size)
        progress.end()
        return body

    @contextlib.asynccontextmanager
    async def watch(
        self,
        resource: Resource,
        namespace: str | None,
        params: Mapping[str, str],
        settings: WatchSettings,
        *,
        progress: Progress | None = None,
        inactivity_timeout: float | None = None,
        accept: str = _JSON,
    ) -> AsyncIterator[AsyncIterator[Block]]:
        """Open a WATCH; yields an async iterator over blocks of its raw lines.

        The iterator ends when the server ends the stream. No bytes for
        ``inactivity_timeout`` seconds (default: the settings'), a broken connection, or a
        line that stalls (see ``WatchSettings.read_timeout``) raise
        :class:`ClusterUnreachable` or :class:`ServerTimeout`. Lines of any size up to
        ``settings.max_line_size`` are read; a longer one raises :class:`ResponseTooLarge`.
        """
        progress = progress or Progress()
        silence = settings.inactivity_timeout if inactivity_timeout is None else inactivity_timeout
        t = aiohttp.ClientTimeout(
            total=None, sock_connect=settings.connect_timeout, sock_read=silence
        )
        async with self._request(
            f"WATCH {resource.name}",
            resource.path(namespace),
            params,
            settings,
            t,
            progress,
            True,
            accept,
        ) as resp:
            progress.end()
            watchdog = LineWatchdog(resp.content, self.server, settings, progress)
            try:
                yield read_blocks(resp, self.server, settings, progress)
            finally:
                watchdog.cancel()

    async def get_raw(
        self,
        path: str,
        *,
        accept: str = _JSON,
        params: Mapping[str, str] | None = None,
        settings: WatchSettings | None = None,
    ) -> tuple[str, bytes]:
        """GET any path (discovery documents) with an Accept header of your choice.

        Returns:
            The response's Content-Type and its body, undecoded.

        Raises:
            ApiError, ClusterUnreachable, ServerTimeout, ResponseTooLarge: as :meth:`list`.

        Cancellation abandons the request and releases its connection.
        """
        s = settings or _DEFAULT_SETTINGS
        t = aiohttp.ClientTimeout(total=s.request_timeout, sock_connect=s.connect_timeout)
        what = f"GET {path}"
        async with self._request(what, path, params or {}, s, t, Progress(), True, accept) as resp:
            body = await read_body(resp, self.server, what, s, s.max_response_size)
            return resp.headers.get("Content-Type", ""), bytes(body)

    async def post_json(
        self,
        path: str,
        body: Mapping[str, Any],
        *,
        request_timeout: float = 30.0,
        connect_timeout: float = 10.0,
    ) -> bytes:
        """POST a JSON body to any path (a ``SelfSubjectReview``); returns the response body.

        Sent with the context's credentials (refreshed after a 401, as every request).

        Raises:
            ApiError: the server answered with an error status.
            ClusterUnreachable: the server could not be reached or the response broke off.

        Cancellation abandons the request and releases its connection.
        """
        t = aiohttp.ClientTimeout(total=request_timeout, sock_connect=connect_timeout)
        what = f"POST {path}"
        settings = _DEFAULT_SETTINGS
        resp: aiohttp.ClientResponse | None = None
        with (
            map_exceptions(self.server, what, self.tls),
            anyio.move_on_after(settings.response_timeout),
        ):
            resp = await self._call(path, {}, t, _JSON, method="POST", body=dict(body))
        if resp is None:
            raise ServerTimeout(
                self.server, f"{what}: no response within {settings.response_timeout:g} s"
            )
        try:
            # a review is a few hundred bytes: a hostile server cannot make us hold more
            data = bytes(await read_body(resp, self.server, what, settings, ERROR_BODY_MAX))
            if resp.status >= 400:
                raise api_error_from_status(resp.status, data)
            return data
        finally:
            resp.release()


async def _unauthorized(resp: aiohttp.ClientResponse, provider: CredentialProvider) -> ApiError:
    """The 401 a refresh could not fix, saying why (``exec plugin aws returned a token
    the server rejects``, or why the refresh failed)."""
    try:
        body = await resp.read()
    except (TimeoutError, aiohttp.ClientError, OSError):
        body = b""
    finally:
        resp.release()
    error = api_error_from_status(401, body)
    note = provider.status().last_error
    if not note:
        return error
    message = f"{error.message} ({note})" if error.message else note
    return type(error)(error.status, error.reason, message)


class _RequestAuth:
    """A client's view of its refreshing credential: loads a new client certificate."""

    __slots__ = ("_cert", "api", "provider", "ssl_context")

    def __init__(self, provider: CredentialProvider, api: Any, ssl_context: ssl.SSLContext) -> None:
        self.provider = provider
        self.api = api
        self.ssl_context = ssl_context
        self._cert: bytes | None = None

    async def prepare(self, fresh: Credential | None = None) -> Credential:
        """The credential to send (``fresh``: the one a 401 refresh gave)."""
        credential = fresh if fresh is not None else await self.provider.current()
        if credential.cert_pem is not None and credential.cert_pem != self._cert:
            await self._load_certificate(credential)
        return credential

    async def _load_certificate(self, credential: Credential) -> None:
        assert credential.cert_pem is not None and credential.key_pem is not None
        folder = tempfile.mkdtemp(prefix="kubemux-")
        try:
            cert, key = os.path.join(folder, "cert"), os.path.join(folder, "key")
            for path, data in ((cert, credential.cert_pem), (key, credential.key_pem)):
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                with os.fdopen(fd, "wb") as out:
                    out.write(data)
            try:
                self.ssl_context.load_cert_chain(cert, key)
            except (ssl.SSLError, OSError) as exc:
                raise CredentialError(
                    f"{self.provider.source} returned a client certificate that cannot be "
                    f"used: {exc}"
                ) from exc
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        first = self._cert is None
        self._cert = credential.cert_pem
        if not first:
            await self._new_connections()

    async def _new_connections(self) -> None:
        # Connections made with the old certificate stay authenticated as it: replace the
        # session, so new requests connect with the new one; open watches on the old
        # session end, and informers re-watch from their resourceVersion.
        rest = self.api.rest_client
        old: aiohttp.ClientSession = rest.pool_manager
        rest.pool_manager = replacement_session(old, self.ssl_context)  # same proxy
        with anyio.move_on_after(5.0, shield=True):
            await old.close()


@contextlib.asynccontextmanager
async def open_client(
    config: ContextConfig, *, credentials: CredentialPool | None = None
) -> AsyncIterator[ContextClient]:
    """Build the kubernetes-asyncio client for one context; close its session on exit.

    Args:
        config: The context.
        credentials: The pool of refreshing credentials (exec plugins, token files, OIDC)
            shared by the contexts of one registry; None uses a private pool.

    The first credential is fetched here (an exec plugin runs); later ones are refreshed
    in place by the requests that need them. Cancellation kills a running plugin.

    Raises:
        KubeconfigError: the context's credentials or TLS files cannot be used.
        CredentialError: the first credential could not be obtained.
    """
    pool = credentials if credentials is not None else CredentialPool()
    provider = pool.acquire(config)
    try:
        async with _open_client(config, provider) as client:
            yield client
    finally:
        if provider is not None:
            pool.release(provider)


@contextlib.asynccontextmanager
async def _open_client(
    config: ContextConfig, provider: CredentialProvider | None
) -> AsyncIterator[ContextClient]:
    api, ssl_context = await build_api_client(config, refreshing=provider is not None)
    try:
        cluster = (config.config.get("clusters") or [{}])[0].get("cluster") or {}
        tls = tls_note(cluster, config.server) if config.server.startswith("https:") else None
        client = ContextClient(config.name, config.display_server, api, tls)  # no password
        if provider is not None:
            client._auth = _RequestAuth(provider, api, ssl_context)
            await client._auth.prepare()
        yield client
    finally:
        # shielded and bounded: closing must finish even when we are being cancelled
        with anyio.move_on_after(5.0, shield=True):
            await api.close()
