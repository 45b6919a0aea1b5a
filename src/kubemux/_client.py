"""One HTTP client per context generation, and the raw LIST/WATCH requests.

kubernetes-asyncio builds the client (so tokens, token files, client certificates, exec
plugins, proxies and TLS settings behave exactly as they do there), but kubemux never asks it
for OpenAPI model objects: responses are read raw (``_preload_content=False``) and decoded
with orjson into plain dicts. Every foreign exception is converted here, in
:func:`map_exceptions`: HTTP errors into :class:`ApiError` built from the Status body,
connection problems into :class:`ClusterUnreachable` naming the server, a slow server into
:class:`ServerTimeout`, a malformed or oversized response into :class:`ProtocolError` /
:class:`ResponseTooLarge`. Every request waits for the context's rate limiter first.
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

from ._codec import Block
from ._errors import (
    ClusterUnreachable,
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

_ACCEPT = {"Accept": "application/json"}


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

    __slots__ = ("_api", "_limiter", "context", "server", "streaming_list")

    def __init__(self, context: str, server: str, api: Any) -> None:
        self.context = context
        self.server = server
        self._api = api
        self._limiter: RateLimiter | None = None
        self.streaming_list: bool | None = None  # does this server do streaming lists?

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
    ) -> AsyncIterator[aiohttp.ClientResponse]:
        if throttle:
            limiter = self._limiter
            if limiter is None:
                limiter = self._limiter = RateLimiter(settings.qps, settings.burst)
            await limiter.acquire()
        progress.begin()
        resp: aiohttp.ClientResponse | None = None
        with map_exceptions(self.server, what), anyio.move_on_after(settings.response_timeout):
            resp = await self._api.call_api(
                path,
                "GET",
                query_params=list(params.items()),
                header_params=dict(_ACCEPT),
                auth_settings=["BearerToken"],
                _preload_content=False,
                _request_timeout=client_timeout,
            )
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

    async def list(
        self,
        resource: Resource,
        namespace: str | None,
        params: Mapping[str, str],
        settings: WatchSettings,
        *,
        progress: Progress | None = None,
        throttle: bool = True,
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
            what, resource.path(namespace), params, settings, t, progress, throttle
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
            f"WATCH {resource.name}", resource.path(namespace), params, settings, t, progress, True
        ) as resp:
            progress.end()
            watchdog = _LineWatchdog(resp.content, self.server, settings, progress)
            try:
                yield _blocks(resp, self.server, settings, progress)
            finally:
                watchdog.cancel()


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


async def _read(content: aiohttp.StreamReader, server: str) -> bytes:
    try:
        return await content.readany()
    except aiohttp.SocketTimeoutError as exc:
        raise ServerTimeout(server, "watch stream inactive (no bytes received)") from exc


@contextlib.asynccontextmanager
async def open_client(config: ContextConfig) -> AsyncIterator[ContextClient]:
    """Build the kubernetes-asyncio client for one context; close its session on exit.

    Raises:
        KubeconfigError: the context's credentials or TLS files cannot be used.
    """
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
        _materialise_inline_credentials(client_config, folder)
        loader = KubeConfigLoader(
            config_dict=client_config,
            config_base_path=base,
            active_context=config.name,
            temp_file_path=folder,
        )
        await loader.load_and_set(cfg)
        ssl_context = await _ssl_context_for(cfg)
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
        yield ContextClient(config.name, config.server, api)
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


async def _ssl_context_for(cfg: Any) -> ssl.SSLContext:
    """The context RESTClientObject would build, made in a worker thread.

    A client that will not change it (no client certificate, verification on, strict
    flags kept) shares one context per CA file; others get their own.
    """
    _install_ssl_module()
    cafile: str | None = cfg.ssl_ca_cert
    shareable = not cfg.cert_file and cfg.verify_ssl and not cfg.disable_strict_ssl_verification
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
