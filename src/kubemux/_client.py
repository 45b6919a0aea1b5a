"""One HTTP client per context generation, and the raw LIST/WATCH requests.

kubernetes-asyncio builds the client (so static tokens, client certificates, proxies and TLS
settings behave exactly as they do there); credentials that refresh (exec plugins, token
files, OIDC) come from :mod:`kubemux._auth` and are sent by :meth:`ContextClient._call`,
which retries a request once after a 401 and a refresh. kubemux never asks it for OpenAPI
model objects: responses are read raw (``_preload_content=False``) and decoded with orjson.
Every foreign exception is converted here, in :func:`map_exceptions`: HTTP errors into
:class:`ApiError` built from the Status body, connection problems into
:class:`ClusterUnreachable` naming the server, a slow server into :class:`ServerTimeout`, a
malformed or oversized response into :class:`ProtocolError` / :class:`ResponseTooLarge`.
Every request waits for the context's rate limiter first.
"""

from __future__ import annotations

import asyncio
import base64
import collections
import contextlib
import contextvars
import functools
import hashlib
import logging
import os
import shutil
import ssl
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

import aiohttp
import anyio

from ._auth import Credential, CredentialPool, CredentialProvider, CredentialStatus
from ._codec import Block
from ._errors import (
    ApiError,
    ClusterUnreachable,
    CredentialError,
    InternalError,
    KubeconfigError,
    KubemuxError,
    ProtocolError,
    ResponseTooLarge,
    ServerTimeout,
    api_error_from_status,
)
from ._resources import Resource
from ._settings import WatchSettings

if TYPE_CHECKING:
    from ._kubeconfig import ContextConfig

__all__ = [
    "SLOW_AFTER",
    "ContextClient",
    "Progress",
    "RateLimiter",
    "map_exceptions",
    "open_client",
]

log = logging.getLogger(__name__)

_JSON = "application/json"
_DEFAULT_SETTINGS = WatchSettings()


SLOW_AFTER = 1.0
"""Seconds a request may owe an answer before its informer shows "waiting for the server"."""


class Progress:
    """What one informer's current request is waiting for (read by its ``status()``).

    ``since`` is the monotonic time since when the client has been waiting for something
    the server owes it: response headers, the rest of a LIST body, the rest of a watch line.
    ``None`` while nothing is owed (a watch idle between events is not waiting). ``on_slow``
    is called when the wait passes :data:`SLOW_AFTER` seconds and when it ends after that,
    so a UI can redraw (by a timer, not on the hot path).
    """

    __slots__ = ("_timer", "on_slow", "received", "since", "slow")

    def __init__(self, on_slow: Callable[[], None] | None = None) -> None:
        self.since: float | None = None
        self.received = 0  # bytes of the line owed so far (watches)
        self.slow = False
        self.on_slow = on_slow
        self._timer: asyncio.TimerHandle | None = None

    def begin(self) -> None:
        """A request was sent: its answer is owed from now."""
        self.since = time.monotonic()
        if self.on_slow is not None:
            if self._timer is not None:
                self._timer.cancel()
            self._timer = asyncio.get_running_loop().call_later(SLOW_AFTER, self._fire)

    def end(self) -> None:
        """Nothing is owed any more."""
        self.since = None
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self.tick(0.0)

    def tick(self, now: float) -> None:
        """Notice a wait that became slow, or a slow one that ended (called by timers)."""
        since = self.since
        slow = since is not None and now - since > SLOW_AFTER
        if slow != self.slow:
            self.slow = slow
            if self.on_slow is not None:
                self.on_slow()

    def _fire(self) -> None:
        self._timer = None
        self.tick(time.monotonic())


class RateLimiter:
    """A token bucket: ``qps`` requests a second, ``burst`` saved up (client-go's
    ``flowcontrol.NewTokenBucketRateLimiter``). Callers queue by reservation, in order."""

    __slots__ = ("_burst", "_qps", "_tokens", "_updated")

    def __init__(self, qps: float, burst: int) -> None:
        self._qps = qps
        self._burst = max(1, burst)
        self._tokens = float(self._burst)
        self._updated = time.monotonic()

    async def acquire(self) -> None:
        """Take one token, waiting for it if needed. Cancelling gives up the wait."""
        if self._qps <= 0:  # disabled
            return
        now = time.monotonic()
        self._tokens = min(self._burst, self._tokens + (now - self._updated) * self._qps)
        self._updated = now
        self._tokens -= 1
        if self._tokens < 0:
            await anyio.sleep(-self._tokens / self._qps)


class ContextClient:
    """Raw LIST and WATCH against one context's API server.

    Built by :func:`open_client`, which owns its lifetime (the HTTP session is closed when
    the ``async with`` ends). Every request it starts goes through one rate limiter, shared
    by all informers of the context (made from the first request's settings).
    """

    __slots__ = ("_api", "_auth", "_limiter", "context", "server", "streaming_list")

    def __init__(self, context: str, server: str, api: Any) -> None:
        self.context = context
        self.server = server
        self._api = api
        self._auth: _RequestAuth | None = None  # a refreshing credential (open_client)
        self._limiter: RateLimiter | None = None
        self.streaming_list: bool | None = None  # does this server do streaming lists?

    def credential_status(self) -> CredentialStatus | None:
        """The refreshing credential's status (exec, token file, OIDC), else None."""
        return self._auth.provider.status() if self._auth is not None else None

    def __repr__(self) -> str:
        return f"<ContextClient context={self.context!r} server={self.server!r}>"

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
        with map_exceptions(self.server, what), anyio.move_on_after(settings.response_timeout):
            resp = await self._call(path, params, client_timeout, accept)
        if resp is None:
            raise ServerTimeout(
                self.server, f"{what}: no response within {settings.response_timeout:g} s"
            )
        try:
            if resp.status >= 400:
                try:
                    body = await _read_body(resp, self.server, what, settings, _ERROR_BODY_MAX)
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
            body = await _read_body(resp, self.server, what, settings, settings.max_response_size)
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
            watchdog = _LineWatchdog(resp.content, self.server, settings, progress)
            try:
                yield _blocks(resp, self.server, settings, progress)
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
            body = await _read_body(resp, self.server, what, s, s.max_response_size)
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
        with map_exceptions(self.server, what):
            resp = await self._call(path, {}, t, _JSON, method="POST", body=dict(body))
            try:
                data: bytes = await resp.read()
                if resp.status >= 400:
                    raise api_error_from_status(resp.status, data)
                return data
            finally:
                resp.release()


class _LineWatchdog:
    """Fails a watch whose current line is overdue (see ``WatchSettings.read_timeout``).

    A timer a few times per ``read_timeout``, not a timeout around every read: the hot path
    only notes when a line began (``Progress``). An overdue line sets :class:`ServerTimeout`
    on the response stream, which the pending read raises.
    """

    __slots__ = ("_content", "_handle", "_period", "_progress", "_server", "_settings")

    def __init__(
        self,
        content: aiohttp.StreamReader,
        server: str,
        settings: WatchSettings,
        progress: Progress,
    ) -> None:
        self._content = content
        self._server = server
        self._settings = settings
        self._progress = progress
        self._period = max(0.05, min(1.0, settings.read_timeout / 4))
        self._handle = asyncio.get_running_loop().call_later(self._period, self._check)

    def _check(self) -> None:
        progress = self._progress
        since = progress.since
        now = time.monotonic()
        progress.tick(now)
        if since is not None and now > _deadline(since, progress.received, self._settings):
            self._content.set_exception(
                ServerTimeout(
                    self._server,
                    f"a watch line stalled ({progress.received} bytes in "
                    f"{now - since:.0f} s without its end)",
                )
            )
            return
        self._handle = asyncio.get_running_loop().call_later(self._period, self._check)

    def cancel(self) -> None:
        self._handle.cancel()


_ERROR_BODY_MAX = 1024 * 1024  # an error Status is small; read no more of a hostile one


@contextlib.contextmanager
def map_exceptions(server: str, what: str) -> Iterator[None]:
    """Convert every foreign exception a request raises into a kubemux error (the one place).

    Connecting fails or times out, the connection drops, TLS fails: :class:`ClusterUnreachable`.
    The server is reached but too slow: :class:`ServerTimeout`. The HTTP response is
    malformed: :class:`ProtocolError`. Anything else (a bug in a library): :class:`InternalError`.
    kubemux's own errors and cancellation pass through.
    """
    try:
        yield
    except KubemuxError:
        raise
    except aiohttp.ConnectionTimeoutError as exc:
        raise ClusterUnreachable(server, f"{what}: connecting timed out") from exc
    except TimeoutError as exc:  # aiohttp's read and total timeouts
        raise ServerTimeout(server, f"{what}: timed out") from exc
    except aiohttp.ClientResponseError as exc:  # aiohttp could not parse the response
        raise ProtocolError(server, f"{what}: malformed HTTP response: {exc.message}") from exc
    except (aiohttp.ClientError, OSError, ssl.SSLError) as exc:
        raise ClusterUnreachable(server, f"{what}: {str(exc) or type(exc).__name__}") from exc
    except Exception as exc:
        raise InternalError(
            f"{what} {server}: unexpected {type(exc).__name__}: {str(exc)[:300]}"
        ) from exc


def _deadline(began: float, received: int, settings: WatchSettings) -> float:
    """When a body or line that began at ``began`` and has ``received`` bytes is overdue."""
    return began + settings.read_timeout + received / max(1, settings.min_read_rate)


async def _read_body(
    resp: aiohttp.ClientResponse, server: str, what: str, settings: WatchSettings, limit: int
) -> bytearray:
    """The whole body, refused once it exceeds ``limit`` bytes or stalls (see
    ``WatchSettings.read_timeout``). One copy: no list of chunks joined at the end."""
    length = resp.content_length
    if length is not None and length > limit:
        raise ResponseTooLarge(
            server, f"{what}: the response ({length} bytes) exceeds {limit} bytes", limit
        )
    body = bytearray()
    content = resp.content
    began = time.monotonic()
    with map_exceptions(server, what):
        while True:
            chunk: bytes | None = None
            with anyio.move_on_after(_deadline(began, len(body), settings) - time.monotonic()):
                chunk = await content.readany()
            if chunk is None:
                raise ServerTimeout(
                    server,
                    f"{what}: the response stalled ({len(body)} bytes in "
                    f"{time.monotonic() - began:.0f} s)",
                )
            if not chunk:
                return body
            body += chunk
            if len(body) > limit:
                raise ResponseTooLarge(
                    server, f"{what}: the response exceeds {limit} bytes; not read further", limit
                )


async def _blocks(
    resp: aiohttp.ClientResponse, server: str, settings: WatchSettings, progress: Progress
) -> AsyncIterator[Block]:
    """The response as blocks of complete lines, about one block per socket read.

    Not ``StreamReader.readline()``: it refuses lines above its buffer limit, and a single
    object can legitimately be larger than that. A block is a slice of what the socket gave
    (no per-line copy); a line cut between two reads is joined into a block of its own.
    A line that has begun must be complete in time (``WatchSettings.read_timeout``):
    ``progress.since`` tells since when one is owed.
    """
    content = resp.content
    max_line_size = settings.max_line_size
    pending: list[bytes] = []  # pieces of a line that has not ended yet
    pending_size = 0
    with map_exceptions(server, "WATCH"):
        while True:
            chunk = await _read(content, server)
            if not chunk:
                tail = b"".join(pending)
                if tail.strip():
                    yield tail, 0, len(tail)
                return
            last = chunk.rfind(b"\n")
            if last < 0:  # no newline yet: part of a (long) line
                if not pending:
                    progress.since = time.monotonic()
                pending.append(chunk)
                pending_size += len(chunk)
                progress.received = pending_size
                if pending_size > max_line_size:
                    raise ResponseTooLarge(
                        server,
                        f"a watch line exceeds {max_line_size} bytes; stream abandoned",
                        max_line_size,
                    )
                continue
            start = 0
            if pending:
                start = chunk.find(b"\n") + 1
                pending.append(chunk[:start])
                line = b"".join(pending)
                yield line, 0, len(line)
            if start <= last:
                yield chunk, start, last + 1
            tail = chunk[last + 1 :]
            pending = [tail] if tail else []
            pending_size = progress.received = len(tail)
            progress.since = time.monotonic() if tail else None


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


def _unreachable(server: str, exc: BaseException) -> ClusterUnreachable:
    detail = str(exc) or type(exc).__name__
    if isinstance(exc, asyncio.TimeoutError):
        detail = "timed out"
    return ClusterUnreachable(server, detail)


async def _read(content: aiohttp.StreamReader, server: str) -> bytes:
    try:
        return await content.readany()
    except aiohttp.SocketTimeoutError as exc:
        raise ServerTimeout(server, "watch stream inactive (no bytes received)") from exc


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
        rest.pool_manager = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(
                limit=old.connector.limit if old.connector else 100, ssl=self.ssl_context
            ),
            trust_env=True,
            read_bufsize=2**21,
        )
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
    from kubernetes_asyncio.client import ApiClient, Configuration
    from kubernetes_asyncio.config.config_exception import ConfigException
    from kubernetes_asyncio.config.kube_config import KubeConfigLoader

    cfg = type.__call__(Configuration)
    base = os.path.dirname(config.source) if os.path.isabs(config.source) else None
    # kubernetes-asyncio would write inline credentials (*-data, private keys included) to
    # the shared temp folder and keep them there, and in a module-level cache, until the
    # process exits. We write them to a private folder that lives only while the client is
    # built: the TLS context has read them by the time ApiClient() returns.
    folder = tempfile.mkdtemp(prefix="kubemux-")
    try:
        client_config = config.client_config()
        _check_proxy(config, client_config)
        if provider is not None:
            _strip_dynamic_credentials(client_config)
        _materialise_inline_credentials(client_config, folder)
        loader = KubeConfigLoader(
            config_dict=client_config,
            config_base_path=base,
            active_context=config.name,
            temp_file_path=folder,
        )
        await loader.load_and_set(cfg)
        ssl_context = await _ssl_context_for(cfg, private=provider is not None)
        token = _PREBUILT_SSL.set(ssl_context)
        try:
            api = ApiClient(configuration=cfg)
        finally:
            _PREBUILT_SSL.reset(token)
    except (ConfigException, OSError, ssl.SSLError, ValueError, KeyError) as exc:
        raise KubeconfigError(
            f"context {config.name!r} (from {config.source}): cannot build a client: "
            f"{_redact(str(exc))}",
            path=config.source,
        ) from exc
    finally:
        _remove_private_folder(folder)
    try:
        client = ContextClient(config.name, config.display_server, api)  # shown: no password
        if provider is not None:
            client._auth = _RequestAuth(provider, api, ssl_context)
            await client._auth.prepare()
        yield client
    finally:
        # shielded and bounded: closing must finish even when we are being cancelled
        with anyio.move_on_after(5.0, shield=True):
            await api.close()


# kubernetes-asyncio builds an SSL context in RESTClientObject.__init__ with
# ssl.create_default_context(cafile=...). Without a CA file that loads the system trust store:
# 20-30 ms on the event loop and ~1 MB per client, so starting thousands of contexts would
# block the loop for minutes. There is no parameter to pass a context in, so its module's
# `ssl` name is pointed at a stand-in that hands out a context we built beforehand (off the
# loop, and shared when the client will not modify it), and is the real module otherwise.
_PREBUILT_SSL: contextvars.ContextVar[ssl.SSLContext | None] = contextvars.ContextVar(
    "kubemux_prebuilt_ssl", default=None
)
_shared_contexts: collections.OrderedDict[str | None, ssl.SSLContext] = collections.OrderedDict()
_SHARED_MAX = 32  # distinct CA bundles kept; least recently used go first


class _SSLModule:
    """Stands in for :mod:`ssl` inside ``kubernetes_asyncio.client.rest``."""

    def __getattr__(self, name: str) -> Any:
        return getattr(ssl, name)

    @staticmethod
    def create_default_context(*args: Any, **kwargs: Any) -> ssl.SSLContext:
        prebuilt = _PREBUILT_SSL.get()
        if prebuilt is not None:
            return prebuilt
        return ssl.create_default_context(*args, **kwargs)


def _install_ssl_module() -> None:
    from kubernetes_asyncio.client import rest

    if not isinstance(getattr(rest, "ssl", None), _SSLModule):
        rest.ssl = _SSLModule()  # type: ignore[attr-defined]


async def _ssl_context_for(cfg: Any, *, private: bool = False) -> ssl.SSLContext:
    """The context RESTClientObject would build, made in a worker thread.

    A client that will not change it (no client certificate, verification on, strict
    flags kept) shares one context per CA file; others get their own.
    """
    _install_ssl_module()
    cafile: str | None = cfg.ssl_ca_cert
    shareable = (
        not private
        and not cfg.cert_file
        and cfg.verify_ssl
        and not cfg.disable_strict_ssl_verification
    )
    if shareable:
        key = await anyio.to_thread.run_sync(_ca_key, cafile)
        cached = _shared_contexts.get(key)
        if cached is not None:
            _shared_contexts.move_to_end(key)
            return cached
    context = await anyio.to_thread.run_sync(
        functools.partial(ssl.create_default_context, cafile=cafile)
    )
    if shareable:
        _shared_contexts[key] = context
        while len(_shared_contexts) > _SHARED_MAX:
            _shared_contexts.popitem(last=False)
    return context


def _ca_key(cafile: str | None) -> str | None:
    # by content: inline CAs live in a new private folder for every generation
    if cafile is None:
        return None
    try:
        with open(cafile, "rb") as f:
            return hashlib.sha256(f.read()).hexdigest()
    except OSError:
        return f"unreadable:{cafile}"


_INLINE_FIELDS = (
    ("clusters", "cluster", ("certificate-authority",)),
    ("users", "user", ("client-certificate", "client-key")),
)


def _materialise_inline_credentials(config: dict[str, Any], folder: str) -> None:
    """Replace ``*-data`` fields by files (mode 0600) in ``folder``."""
    for section, inner, fields in _INLINE_FIELDS:
        for i, item in enumerate(config.get(section) or ()):
            body = item.get(inner) if isinstance(item, dict) else None
            if not isinstance(body, dict):
                continue
            for field in fields:
                data = body.pop(f"{field}-data", None)
                if not data:
                    continue
                try:
                    content = base64.b64decode(data, validate=True)
                except (ValueError, TypeError) as exc:
                    raise ValueError(f"{field}-data is not valid base64") from exc
                path = os.path.join(folder, f"{section}-{i}-{field}")
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                with os.fdopen(fd, "wb") as out:
                    out.write(content)
                body[field] = path


def _check_proxy(config: ContextConfig, client_config: Mapping[str, Any]) -> None:
    """aiohttp speaks to HTTP(S) proxies only: refuse others clearly, not at connect time."""
    for item in client_config.get("clusters") or ():
        body = item.get("cluster") if isinstance(item, dict) else None
        proxy = body.get("proxy-url") if isinstance(body, dict) else None
        if not proxy:
            continue
        scheme = str(proxy).partition("://")[0].lower()
        if scheme not in ("http", "https"):
            raise KubeconfigError(
                f"context {config.name!r} (from {config.source}): proxy-url scheme "
                f"{scheme!r} is not supported (kubemux connects through http:// and "
                "https:// proxies only)",
                path=config.source,
            )


def _strip_dynamic_credentials(config: dict[str, Any]) -> None:
    """Leave a refreshing credential to our provider: kubernetes-asyncio must not run it."""
    for item in config.get("users") or ():
        body = item.get("user") if isinstance(item, dict) else None
        if isinstance(body, dict):
            for key in ("exec", "tokenFile", "auth-provider"):
                body.pop(key, None)


def _remove_private_folder(folder: str) -> None:
    shutil.rmtree(folder, ignore_errors=True)
    # anything kubernetes-asyncio wrote there itself (exec plugin certificates) sits in its
    # module-level cache too: drop those entries, their files are gone
    from kubernetes_asyncio.config import kube_config

    cache = getattr(kube_config, "_temp_files", None)
    if isinstance(cache, dict):
        prefix = folder + os.sep
        for key in [k for k, v in cache.items() if str(v).startswith(prefix)]:
            del cache[key]


def _redact(text: str) -> str:
    # kubernetes-asyncio error messages can quote config values; keep them short and plain.
    return text if len(text) < 300 else text[:300] + "..."
