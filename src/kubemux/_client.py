"""One HTTP client per context generation, and the raw LIST/WATCH requests.

kubernetes-asyncio builds the client (so tokens, token files, client certificates, exec
plugins, proxies and TLS settings behave exactly as they do there), but kubemux never asks it
for OpenAPI model objects: responses are read raw (``_preload_content=False``) and decoded
with orjson into plain dicts. Every foreign exception is converted here: HTTP errors into
:class:`ApiError` built from the Status body, connection problems into
:class:`ClusterUnreachable` naming the server.
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
from collections.abc import AsyncIterator, Mapping
from typing import TYPE_CHECKING, Any

import aiohttp
import anyio

from ._codec import Block
from ._errors import ApiError, ClusterUnreachable, KubeconfigError, api_error_from_status
from ._resources import Resource

if TYPE_CHECKING:
    from ._kubeconfig import ContextConfig

__all__ = ["ContextClient", "open_client"]

log = logging.getLogger(__name__)

_ACCEPT = {"Accept": "application/json"}


class ContextClient:
    """Raw LIST and WATCH against one context's API server.

    Built by :func:`open_client`, which owns its lifetime (the HTTP session is closed when
    the ``async with`` ends).
    """

    __slots__ = ("_api", "context", "server", "streaming_list")

    def __init__(self, context: str, server: str, api: Any) -> None:
        self.context = context
        self.server = server
        self._api = api
        self.streaming_list: bool | None = None  # does this server do streaming lists?

    def __repr__(self) -> str:
        return f"<ContextClient context={self.context!r} server={self.server!r}>"

    @contextlib.asynccontextmanager
    async def _request(
        self,
        path: str,
        params: Mapping[str, str],
        client_timeout: aiohttp.ClientTimeout,
    ) -> AsyncIterator[aiohttp.ClientResponse]:
        try:
            resp: aiohttp.ClientResponse = await self._api.call_api(
                path,
                "GET",
                query_params=list(params.items()),
                header_params=dict(_ACCEPT),
                auth_settings=["BearerToken"],
                _preload_content=False,
                _request_timeout=client_timeout,
            )
        except (TimeoutError, aiohttp.ClientError, OSError, ssl.SSLError) as exc:
            raise _unreachable(self.server, exc) from exc
        try:
            if resp.status >= 400:
                try:
                    body = await resp.read()
                except (TimeoutError, aiohttp.ClientError, OSError):
                    body = b""
                raise api_error_from_status(resp.status, body)
            yield resp
        finally:
            resp.release()

    async def list(
        self,
        resource: Resource,
        namespace: str | None,
        params: Mapping[str, str],
        *,
        request_timeout: float,
        connect_timeout: float,
    ) -> bytes:
        """One LIST request (one page); returns the response body, undecoded.

        Raises:
            ApiError: the server answered with an error status.
            ClusterUnreachable: the server could not be reached or the response broke off.

        Cancellation abandons the request and releases its connection.
        """
        t = aiohttp.ClientTimeout(total=request_timeout, sock_connect=connect_timeout)
        async with self._request(resource.path(namespace), params, t) as resp:
            try:
                body: bytes = await resp.read()
            except (aiohttp.ClientError, OSError, TimeoutError) as exc:
                raise _unreachable(self.server, exc) from exc
        return body

    @contextlib.asynccontextmanager
    async def watch(
        self,
        resource: Resource,
        namespace: str | None,
        params: Mapping[str, str],
        *,
        inactivity_timeout: float,
        connect_timeout: float,
        max_line_size: int,
    ) -> AsyncIterator[AsyncIterator[Block]]:
        """Open a WATCH; yields an async iterator over blocks of its raw lines.

        The iterator ends when the server ends the stream. No bytes for
        ``inactivity_timeout`` seconds, or a broken connection, raise
        :class:`ClusterUnreachable`. Lines of any size up to ``max_line_size`` are read.
        """
        t = aiohttp.ClientTimeout(
            total=None, sock_connect=connect_timeout, sock_read=inactivity_timeout
        )
        async with self._request(resource.path(namespace), params, t) as resp:
            yield _blocks(resp, self.server, max_line_size)

    # -------------------------------------------------------- any path, any Accept header
    # Discovery documents and Table views (kubemux._discovery, kubemux._table).

    @contextlib.asynccontextmanager
    async def _raw_request(
        self,
        path: str,
        params: Mapping[str, str],
        accept: str,
        client_timeout: aiohttp.ClientTimeout,
    ) -> AsyncIterator[aiohttp.ClientResponse]:
        try:
            resp: aiohttp.ClientResponse = await self._api.call_api(
                path,
                "GET",
                query_params=list(params.items()),
                header_params={"Accept": accept},
                auth_settings=["BearerToken"],
                _preload_content=False,
                _request_timeout=client_timeout,
            )
        except (TimeoutError, aiohttp.ClientError, OSError, ssl.SSLError) as exc:
            raise _unreachable(self.server, exc) from exc
        try:
            if resp.status >= 400:
                try:
                    body = await resp.read()
                except (TimeoutError, aiohttp.ClientError, OSError):
                    body = b""
                raise api_error_from_status(resp.status, body)
            yield resp
        finally:
            resp.release()

    async def get_raw(
        self,
        path: str,
        *,
        accept: str = "application/json",
        params: Mapping[str, str] | None = None,
        request_timeout: float = 60.0,
        connect_timeout: float = 10.0,
    ) -> tuple[str, bytes]:
        """GET any path with an Accept header of your choice.

        Returns:
            The response's Content-Type and its body, undecoded.

        Raises:
            ApiError: the server answered with an error status.
            ClusterUnreachable: the server could not be reached or the response broke off.

        Cancellation abandons the request and releases its connection.
        """
        t = aiohttp.ClientTimeout(total=request_timeout, sock_connect=connect_timeout)
        async with self._raw_request(path, params or {}, accept, t) as resp:
            try:
                body: bytes = await resp.read()
            except (aiohttp.ClientError, OSError, TimeoutError) as exc:
                raise _unreachable(self.server, exc) from exc
            return resp.headers.get("Content-Type", ""), body

    async def post_json(
        self,
        path: str,
        body: Mapping[str, Any],
        *,
        request_timeout: float = 30.0,
        connect_timeout: float = 10.0,
    ) -> bytes:
        """POST a JSON body to any path (a ``SelfSubjectReview``); returns the response body.

        Raises:
            ApiError: the server answered with an error status.
            ClusterUnreachable: the server could not be reached or the response broke off.

        Cancellation abandons the request and releases its connection.
        """
        t = aiohttp.ClientTimeout(total=request_timeout, sock_connect=connect_timeout)
        try:
            resp: aiohttp.ClientResponse = await self._api.call_api(
                path,
                "POST",
                header_params={**_ACCEPT, "Content-Type": "application/json"},
                body=dict(body),
                auth_settings=["BearerToken"],
                _preload_content=False,
                _request_timeout=t,
            )
        except (TimeoutError, aiohttp.ClientError, OSError, ssl.SSLError) as exc:
            raise _unreachable(self.server, exc) from exc
        try:
            try:
                data: bytes = await resp.read()
            except (aiohttp.ClientError, OSError, TimeoutError) as exc:
                raise _unreachable(self.server, exc) from exc
            if resp.status >= 400:
                raise api_error_from_status(resp.status, data)
            return data
        finally:
            resp.release()

    @contextlib.asynccontextmanager
    async def watch_raw(
        self,
        path: str,
        params: Mapping[str, str],
        *,
        accept: str,
        inactivity_timeout: float,
        connect_timeout: float,
        max_line_size: int,
    ) -> AsyncIterator[AsyncIterator[Block]]:
        """:meth:`watch` on any path with an Accept header of your choice (Table watches)."""
        t = aiohttp.ClientTimeout(
            total=None, sock_connect=connect_timeout, sock_read=inactivity_timeout
        )
        async with self._raw_request(path, params, accept, t) as resp:
            yield _blocks(resp, self.server, max_line_size)


async def _blocks(
    resp: aiohttp.ClientResponse, server: str, max_line_size: int
) -> AsyncIterator[Block]:
    """The response as blocks of complete lines, about one block per socket read.

    Not ``StreamReader.readline()``: it refuses lines above its buffer limit, and a single
    object can legitimately be larger than that. A block is a slice of what the socket gave
    (no per-line copy); a line cut between two reads is joined into a block of its own.
    """
    content = resp.content
    pending: list[bytes] = []  # pieces of a line that has not ended yet
    pending_size = 0
    while True:
        try:
            chunk = await content.readany()
        except TimeoutError as exc:
            raise ClusterUnreachable(server, "watch stream inactive (no bytes received)") from exc
        except (aiohttp.ClientError, OSError) as exc:
            raise _unreachable(server, exc) from exc
        if not chunk:
            tail = b"".join(pending)
            if tail.strip():
                yield tail, 0, len(tail)
            return
        last = chunk.rfind(b"\n")
        if last < 0:  # no newline yet: part of a (long) line
            pending.append(chunk)
            pending_size += len(chunk)
            if pending_size > max_line_size:
                raise ApiError(
                    0, "LineTooLong", f"watch line exceeds {max_line_size} bytes; stream abandoned"
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
        pending_size = len(tail)


def _unreachable(server: str, exc: BaseException) -> ClusterUnreachable:
    detail = str(exc) or type(exc).__name__
    if isinstance(exc, asyncio.TimeoutError):
        detail = "timed out"
    return ClusterUnreachable(server, detail)


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
        yield ContextClient(config.name, config.display_server, api)  # shown, never the password
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
