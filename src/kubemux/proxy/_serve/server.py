"""``kubemux proxy`` as a server: TLS, a bearer token, a Host check, and the kubeconfig for it.

:class:`ProxyServer` serves :func:`~kubemux.proxy.create_app` with uvicorn in the running
event loop:

- **TLS** with a CA and a server certificate it makes at start (:mod:`.tls`): kubectl
  sends a bearer token only over HTTPS.
- **A bearer token** (random, 256 bits, or yours): a request without it gets a 401
  ``Status``; it is compared in constant time, never logged, and never sent upstream (each
  context's own credential is).
- **The Host header** must name the proxy (``127.0.0.1``, ``localhost``, ``::1``, or the
  address it listens on), so a web page cannot reach it by DNS rebinding.
- **The loopback only**, unless ``allow_remote=True`` (the command prints a warning).
- **Idle connections**: a TLS handshake must end within ``ProxySettings.handshake_timeout``,
  and connections are capped below the open-file limit (``ProxySettings.max_connections``;
  at the cap the oldest connection that has not yet sent the token makes room:
  :mod:`.admission`).
- **Slow or huge headers**: a request's headers must arrive within ``header_timeout``
  and fit ``max_header_bytes`` (uvicorn has neither limit; its HTTP protocol is
  subclassed for them), else the connection is closed (431 for too large).

:meth:`ProxyServer.kubeconfig` is the kubeconfig that points kubectl at it: the same
context names, current context and namespaces, each context's server
``https://127.0.0.1:PORT/clusters/{encoded name}`` with a ``tls-server-name`` of its own
(:mod:`.sni`: kubectl before 1.34 drops the URL's path for ``get --raw``; its SNI still
names the context), the CA as ``certificate-authority-data`` and the token; no upstream
credential.
:meth:`ProxyServer.follow_kubeconfig` keeps such a file current as the registry's
kubeconfig changes (written atomically, mode 0600).
"""

from __future__ import annotations

import asyncio
import asyncio.sslproto
import base64
import hmac
import ipaddress
import logging
import os
import secrets
import socket
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import anyio.to_thread
import httptools
import uvicorn
import yaml
from starlette.applications import Starlette
from starlette.types import ASGIApp, Receive, Scope, Send
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol

from ..._http.raw import ByteQueue
from ..._registry.registry import WatcherRegistry
from .._api.paths import encode_context
from .._api.responses import StatusError, send_error
from .._upstream.raw_upgrade import RAW_UPGRADE
from .._upstream.upgrade import deny
from .admission import Admission, Admitted, connection_limit
from .app import ProxySettings, create_app
from .http2 import Http2Protocol
from .http2_hub import Http2Hub
from .sni import SNI_EXTENSION, SniRouter, server_name
from .tls import LOOPBACK_NAMES, ProxyCertificates, make_certificates, server_name_of

__all__ = ["ProxyServer", "is_loopback"]

log = logging.getLogger(__name__)

STOP_TIMEOUT = 10.0
PROXY_USER = "kubemux-proxy"


def is_loopback(address: str) -> bool:
    """Whether ``address`` (an IP or ``localhost``) is on the loopback."""
    if address == "localhost":
        return True
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return False


def _host(header: str) -> str:
    header = header.strip().lower()
    if header.startswith("["):  # [::1]:8001
        return header[1:].partition("]")[0]
    return header.rpartition(":")[0] if header.count(":") == 1 else header


class _Guard:
    """Host check and bearer token in front of the proxy app."""

    def __init__(
        self,
        app: ASGIApp,
        token: str,
        allowed_hosts: frozenset[str] | None,
        contexts: Callable[[], Mapping[str, Any]],
    ) -> None:
        self.app = app
        self._token = token.encode("utf-8")
        self.allowed_hosts = allowed_hosts
        self.users: Any = None  # the app's UserMode with --user-tokens
        self._contexts = contexts
        self._sni = SniRouter()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        host = authorization = b""
        for name, value in scope.get("headers") or ():
            if name == b"host":
                host = value
            elif name == b"authorization":
                authorization = value
        error: StatusError | None = None
        if self.allowed_hosts is not None and _host(host.decode("latin-1")) not in (
            self.allowed_hosts
        ):
            error = StatusError(400, "kubemux proxy: this Host is not the proxy's")
        elif not self.authorized(authorization):
            error = StatusError(401, "Unauthorized")
        else:
            try:  # the one place a request's context is decided when its path lost it
                scope = self._sni.route(scope, self._contexts())  # type: ignore[arg-type]
            except StatusError as exc:
                error = exc
        if error is None:
            await self.app(scope, receive, send)
            return
        if scope["type"] == "websocket":
            await receive()
            await deny(scope, send, error)
        else:
            await send_error(send, error)

    def authorized(self, header: bytes) -> bool:
        if self.users is not None:  # --user-tokens: the app authenticates each user
            return True
        scheme, _, credential = header.strip().partition(b" ")
        if scheme.lower() != b"bearer":
            return False
        return hmac.compare_digest(credential.strip(), self._token)


class _RawDownstream:
    """A connection taken over after an ``Upgrade: SPDY/...`` request (see ``_raw_upgrade``)."""

    def __init__(self, protocol: HttpToolsProtocol) -> None:
        self._protocol = protocol
        self.transport = protocol.transport
        flow = protocol.flow
        self.queue = ByteQueue(flow.pause_reading, flow.resume_reading)
        self.claimed = False

    def claim(self) -> None:
        self.claimed = True
        cycle = self._protocol.cycle
        if cycle is not None:  # no ASGI response will come: uvicorn must not send one
            cycle.response_started = cycle.response_complete = True
            cycle.keep_alive = False

    async def read(self) -> bytes:
        return await self.queue.read()

    async def write(self, data: bytes) -> None:
        if self.transport.is_closing():
            raise ConnectionResetError("the client closed the connection")
        self.transport.write(data)
        await self._protocol.flow.drain()

    def close(self) -> None:
        self.transport.close()


def _http_protocol(
    header_timeout: float, max_header_bytes: int, authorized: Callable[[bytes], bool]
) -> type[HttpToolsProtocol]:
    """uvicorn's httptools protocol with a deadline and a size limit on request headers,
    raw ``Upgrade: SPDY/...`` connections handed to the app (:mod:`.._upstream.raw_upgrade`),
    and its connection trusted (:class:`~.admission.Admitted`) once a request carries the
    token (``authorized``)."""

    class GuardedHttp(HttpToolsProtocol):
        admitted: Admitted | None = None
        _header_timer: asyncio.TimerHandle | None = None
        _header_bytes = 0
        _in_headers = False
        _raw: _RawDownstream | None = None
        _raw_active = False

        def _arm(self) -> None:
            self._in_headers = True
            self._header_bytes = 0
            if self._header_timer is None:
                self._header_timer = self.loop.call_later(header_timeout, self._too_slow)

        def _disarm(self) -> None:
            self._in_headers = False
            if self._header_timer is not None:
                self._header_timer.cancel()
                self._header_timer = None

        def _too_slow(self) -> None:
            self._header_timer = None
            if not self.transport.is_closing():
                log.info("closing a connection whose request headers took over %gs", header_timeout)
                self.transport.close()

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._arm()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            if self._raw is not None:
                self._raw.queue.feed_eof()
            super().connection_lost(exc)

        def shutdown(self) -> None:
            if self._raw_active:
                self.transport.close()
            else:
                super().shutdown()

        def on_message_begin(self) -> None:
            super().on_message_begin()
            self._arm()

        def on_headers_complete(self) -> None:
            self._disarm()
            if self.admitted is not None and not self.admitted.trusted:
                for name, value in self.headers:
                    if name == b"authorization" and authorized(value):
                        self.admitted.trust()
            upgrade = self._get_upgrade()  # uvicorn's own (this subclasses its protocol)
            spdy = upgrade is not None and upgrade.startswith(b"spdy/") and self._raw is None
            extensions: dict[str, Any] = {}
            if (sni := server_name_of(self.transport.get_extra_info("ssl_object"))) is not None:
                extensions[SNI_EXTENSION] = sni  # which context, when the path says not (.sni)
            if spdy:
                self._raw = _RawDownstream(self)
                extensions[RAW_UPGRADE] = self._raw
            if extensions:
                self.scope["extensions"] = {**(self.scope.get("extensions") or {}), **extensions}
            super().on_headers_complete()
            if spdy and self.cycle is not None:
                self.cycle.keep_alive = False  # whatever the answer, the connection ends

        def data_received(self, data: bytes) -> None:
            if self._raw_active:
                assert self._raw is not None
                self._raw.queue.feed_data(data)
                return
            if self._in_headers:
                self._header_bytes += len(data)
                if self._header_bytes > max_header_bytes:
                    self._disarm()
                    self.transport.write(
                        b"HTTP/1.1 431 Request Header Fields Too Large\r\n"
                        b"content-length: 0\r\nconnection: close\r\n\r\n"
                    )
                    self.transport.close()
                    return
            # uvicorn's data_received (its private helpers: this subclasses its protocol),
            # but an SPDY upgrade keeps the bytes after the request
            self._unset_keepalive_if_required()
            try:
                self.parser.feed_data(data)
            except httptools.HttpParserError:
                log.warning("Invalid HTTP request received.")
                self.send_400_response("Invalid HTTP request received.")
            except httptools.HttpParserUpgrade as exc:
                if self._raw is not None:
                    offset = exc.args[0] if exc.args and isinstance(exc.args[0], int) else 0
                    self._raw_active = True
                    self._raw.queue.feed_data(data[offset:])
                elif self._should_upgrade():  # uvicorn's, as in its data_received
                    self.handle_websocket_upgrade()
                else:
                    self._unsupported_upgrade_warning()  # uvicorn's, as in its data_received

    return GuardedHttp


class _WebSocketProtocol(WebSocketsSansIOProtocol):
    """uvicorn's websockets protocol, taking the subprotocols kubectl offers.

    kubectl's port-forward offers ``SPDY/3.1+portforward.k8s.io``, which is not an RFC 7230
    token (the ``/``): the websockets library refuses the handshake (400, "invalid
    Sec-WebSocket-Protocol header") and kubectl falls back to SPDY. uvicorn splits the
    header on commas itself for the app, and the app answers with the subprotocol the API
    server chose, so the library's own negotiation is switched off.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.conn.process_subprotocol = _no_subprotocol  # type: ignore[method-assign]


def _no_subprotocol(headers: object) -> None:
    return None


class _Server(uvicorn.Server):
    """uvicorn's server, with an event set once it listens, and the app's streams ended
    cleanly when it begins to stop (by a signal too: uvicorn catches SIGTERM itself)."""

    def __init__(
        self,
        config: uvicorn.Config,
        ending: Callable[[], None],
        admission: Admission,
        hub: Http2Hub | None,
    ) -> None:
        super().__init__(config)
        self.ready = anyio.Event()
        self._ending = ending
        self.admission = admission
        self.hub = hub  # HTTP/2 (None: HTTP/1.1 only)

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        # uvicorn's startup for given sockets, but TLS wrapped by the admission (a cap on
        # connections, a handshake timeout): uvicorn would pass ``ssl=`` to asyncio, whose
        # handshake waits 60 s and whose accept runs to the open-file limit
        config = self.config
        state = self.server_state

        def http() -> asyncio.Protocol:
            return config.http_protocol_class(  # type: ignore[call-arg]
                config=config, server_state=state, app_state=self.lifespan.state
            )

        def bind(app: Any, admitted: Admitted) -> None:
            app.admitted = admitted

        hub = self.hub
        protocol = http if hub is None else lambda: Http2Protocol(hub, http)  # ALPN decides
        loop = asyncio.get_running_loop()
        self.servers = []
        for sock in sockets or ():
            self.servers.append(
                await loop.create_server(
                    self.admission.factory(protocol, bind), sock=sock, backlog=config.backlog
                )
            )
        self.started = True
        self.ready.set()

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        # first every watch and stream ends with its last chunk (clients re-watch); then
        # uvicorn's graceful wait finds the responses complete instead of cutting them
        self._ending()
        if self.hub is not None:
            self.hub.refuse_new_streams()
        await super().shutdown(sockets)
        if self.hub is not None:  # h2 streams end as the watches did; GOAWAY last
            await self.hub.close(self.config.timeout_graceful_shutdown or 5)


class ProxyServer:
    """The proxy app served over TLS with a token, in the running event loop.

    Example::

        async with WatcherRegistry.from_kubeconfig() as registry:
            server = ProxyServer(registry, port=0)
            async with anyio.create_task_group() as tg:
                url = await tg.start(server.serve)
                server.write_kubeconfig("proxy.yaml")   # kubectl --kubeconfig proxy.yaml
                ...
                server.shutdown()

    Args:
        registry: An open registry; the server never opens or closes it.
        address: Where to listen (default the loopback).
        port: TCP port; 0 picks a free one (see :attr:`url`).
        token: The bearer token clients must send (default: 32 random bytes).
        allow_remote: Needed to listen anywhere but the loopback.
        settings: The app's limits (see :class:`ProxySettings`).
        header_timeout: Seconds a request's headers may take to arrive.
        max_header_bytes: Largest request head accepted (Go's default, 1 MiB).
        tls_read_buffer: The read buffer of each TLS connection, in bytes. Python's asyncio
            gives every TLS connection a 256 KiB one (``SSLProtocol.max_size``), which makes
            a thousand idle watches cost 250 MiB; ``kubemux proxy`` sets 16 KiB. asyncio has
            no per-server setting, so this changes it for every TLS connection the process
            opens from :meth:`serve` on (upstream ones too); None (the default) leaves it.

    Raises:
        ValueError: a non-loopback ``address`` without ``allow_remote``.
    """

    def __init__(
        self,
        registry: WatcherRegistry,
        *,
        address: str = "127.0.0.1",
        port: int = 8001,
        token: str | None = None,
        allow_remote: bool = False,
        settings: ProxySettings | None = None,
        header_timeout: float = 10.0,
        max_header_bytes: int = 1024 * 1024,
        log_level: str = "warning",
        tls_read_buffer: int | None = None,
    ) -> None:
        if not is_loopback(address) and not allow_remote:
            raise ValueError(
                f"{address} is not a loopback address: pass allow_remote=True "
                "(--allow-remote) to serve your clusters' credentials to the network"
            )
        self.registry = registry
        self.address = address
        self.port = port
        self.token = token or secrets.token_urlsafe(32)
        self.app: Starlette = create_app(registry, settings=settings)
        wildcard = address in ("0.0.0.0", "::")
        extra = () if wildcard else (address,)
        self.certificates: ProxyCertificates = make_certificates(extra)
        allowed = None if wildcard else frozenset({*LOOPBACK_NAMES, address.lower()})
        self._guarded = _Guard(self.app, self.token, allowed, lambda: registry.contexts)
        users = self._guarded.users = self.proxy.users  # --user-tokens: no token of ours
        self._trusts = users.gate.vouches if users is not None else self._guarded.authorized
        self._header_timeout = header_timeout
        self._max_header_bytes = max_header_bytes
        self._log_level = log_level
        if tls_read_buffer is not None and tls_read_buffer < 4096:
            raise ValueError("tls_read_buffer must be at least 4096 bytes")
        self._tls_read_buffer = tls_read_buffer
        self.url: str | None = None
        self._server: uvicorn.Server | None = None
        self.http2: Http2Hub | None = None  # while serving with ProxySettings.http2
        self._kubeconfig_written = ""
        self.kubeconfig_writes = 0  # how many times follow_kubeconfig wrote the file
        self._written = anyio.Event()

    def __repr__(self) -> str:  # never the token
        return f"<ProxyServer url={self.url!r}>"

    @property
    def proxy(self) -> Any:
        return self.app.state.proxy

    # ------------------------------------------------------------------ serving
    def _bind(self) -> socket.socket:
        family = socket.AF_INET6 if ":" in self.address else socket.AF_INET
        # IPPROTO_TCP, not 0: asyncio sets TCP_NODELAY only on sockets that say they are TCP
        # (without it, Nagle and a delayed ACK held each new connection's answer ~40 ms)
        sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((self.address, self.port))
            sock.listen(128)
        except OSError as exc:
            sock.close()
            raise OSError(
                f"cannot listen on {self.address}:{self.port}: {exc.strerror or exc}"
            ) from exc
        sock.setblocking(False)
        port = sock.getsockname()[1]
        host = f"[{self.address}]" if family == socket.AF_INET6 else self.address
        if self.address in ("0.0.0.0", "::"):
            host = "127.0.0.1"
        self.port = port
        self.url = f"https://{host}:{port}"
        return sock

    async def serve(
        self, *, task_status: anyio.abc.TaskStatus[str] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """Serve until :meth:`shutdown`; report the URL (``https://127.0.0.1:PORT``) once
        listening.

        Raises:
            OSError: the address cannot be bound.

        Cancellation: the server is shut down (bounded in time) before it goes on.
        """
        sock = self._bind()
        if self._tls_read_buffer is not None:
            asyncio.sslproto.SSLProtocol.max_size = self._tls_read_buffer
        config = uvicorn.Config(
            self._guarded,
            http=_http_protocol(self._header_timeout, self._max_header_bytes, self._trusts),
            ws=_WebSocketProtocol,
            ws_per_message_deflate=False,
            lifespan="off",
            log_level=self._log_level,
            log_config=None,
            access_log=False,
            timeout_graceful_shutdown=5,
            server_header=False,
        )
        config.load()
        settings = self.proxy.settings
        context = self.certificates.server_context()
        hub = None
        if settings.http2:
            context.set_alpn_protocols(["h2", "http/1.1"])
            hub = self.http2 = Http2Hub(
                self._guarded,
                max_streams=settings.max_streams_per_connection,
                header_timeout=self._header_timeout,
                max_header_bytes=self._max_header_bytes,
                authorized=self._trusts,
            )
        admission = Admission(
            connection_limit(settings.max_connections), settings.handshake_timeout, context
        )
        server = self._server = _Server(config, self.proxy.close, admission, hub)
        done = anyio.Event()
        shield = anyio.CancelScope(shield=True)

        async def run() -> None:
            try:
                with shield:
                    await server.serve(sockets=[sock])
            finally:
                done.set()

        audit = self.proxy.users.audit if self.proxy.users is not None else None
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(run)
                if audit is not None:
                    tg.start_soon(audit.run)
                try:
                    async with anyio.create_task_group() as wait:

                        async def until(event: anyio.Event) -> None:
                            await event.wait()
                            wait.cancel_scope.cancel()

                        wait.start_soon(until, server.ready)
                        wait.start_soon(until, done)
                    if not server.started:
                        raise RuntimeError("the proxy server stopped before it started")
                    assert self.url is not None
                    task_status.started(self.url)
                    await done.wait()
                finally:
                    with anyio.CancelScope(shield=True):
                        self.shutdown()
                        with anyio.move_on_after(STOP_TIMEOUT):
                            await done.wait()
                        if not done.is_set():  # pragma: no cover - a stuck client
                            server.force_exit = True
                            shield.cancel()
                    tg.cancel_scope.cancel("the proxy stopped")  # the audit log's writer
        finally:
            sock.close()

    def shutdown(self) -> None:
        """Ask the server to stop. Idempotent. Open watches and streams end cleanly (their
        last chunk: clients re-watch rather than see a broken stream), then the server
        waits (5 s at most) for the answers in flight and stops."""
        if self._server is not None:
            self._server.should_exit = True

    # ------------------------------------------------------------------ kubeconfig
    def kubeconfig(self) -> dict[str, Any]:
        """The kubeconfig that points every context of the registry at this proxy.

        Raises:
            RuntimeError: the server is not listening yet (no URL).
        """
        if self.url is None:
            raise RuntimeError("the proxy is not listening yet: no URL to write")
        ca = base64.b64encode(self.certificates.ca_pem).decode("ascii")
        clusters, contexts = [], []
        for name, cfg in self.registry.contexts.items():
            if not name:
                continue
            clusters.append(
                {
                    "name": name,
                    "cluster": {
                        "server": f"{self.url}/clusters/{encode_context(name)}",
                        "certificate-authority-data": ca,
                        "tls-server-name": server_name(name),  # for paths a client drops
                    },
                }
            )
            entry: dict[str, Any] = {"cluster": name, "user": PROXY_USER}
            if cfg.namespace:
                entry["namespace"] = cfg.namespace
            contexts.append({"name": name, "context": entry})
        current = self.registry.current_context
        users = self.proxy.users is not None
        return {
            "apiVersion": "v1",
            "kind": "Config",
            "preferences": {},
            "clusters": clusters,
            # --user-tokens: no credential (each user adds their own token)
            "users": [{"name": PROXY_USER, "user": {} if users else {"token": self.token}}],
            "contexts": contexts,
            "current-context": current if current in self.registry.contexts else "",
        }

    def kubeconfig_text(self) -> str:
        """:meth:`kubeconfig` as YAML."""
        dumper: Any = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
        return str(yaml.dump(self.kubeconfig(), Dumper=dumper, sort_keys=False))

    def write_kubeconfig(self, path: str | os.PathLike[str]) -> bool:
        """Write :meth:`kubeconfig` to ``path`` atomically, mode 0600; False if the file
        already says exactly that (nothing written)."""
        text = self.kubeconfig_text()
        target = Path(path)
        if text == self._kubeconfig_written and target.exists():
            return False
        _write_private(target, text)
        self._kubeconfig_written = text
        return True

    async def follow_kubeconfig(self, path: str | os.PathLike[str]) -> None:
        """Write the kubeconfig now and again after every kubeconfig sync of the registry
        (contexts added, removed, changed; the current context). Runs until cancelled."""
        target = Path(path)
        while True:
            seen = self.registry.kubeconfig_syncs
            text = self.kubeconfig_text()
            if text != self._kubeconfig_written:
                await anyio.to_thread.run_sync(_write_private, target, text)
                self._kubeconfig_written = text
                self.kubeconfig_writes += 1
                self._written.set()
                self._written = anyio.Event()
                log.info("wrote %s (%d contexts)", target, len(self.registry.contexts))
            await self.registry.wait_kubeconfig_sync(seen)

    async def wait_kubeconfig_written(self, after: int) -> int:
        """Wait until :attr:`kubeconfig_writes` exceeds ``after``; returns it."""
        while self.kubeconfig_writes <= after:
            await self._written.wait()
        return self.kubeconfig_writes


def _write_private(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` atomically (a temporary file in the same folder, renamed
    over it), readable by the owner only."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            os.fchmod(handle.fileno(), 0o600)
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
