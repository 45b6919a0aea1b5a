"""SOCKS5 proxies (a cluster's ``proxy-url: socks5://...``), as kubectl speaks them.

client-go accepts ``http``, ``https`` and ``socks5`` proxy URLs (clientcmd's
``parseProxyURL``: "unsupported scheme ..., must be http, https, or socks5"). Go's net/http
hands a SOCKS5 proxy the server's host name unresolved (the proxy resolves it: what curl
calls ``socks5h``, and what a tunnel to a bastion, ``ssh -D 1080``, needs), with the URL's
user and password (RFC 1929). kubemux does the same; it also takes ``socks5h://`` (the same
thing, curl's spelling), which kubectl refuses.

:class:`SocksConnector` is an aiohttp connector whose connections are SOCKS5 tunnels opened
by python-socks (the protocol only). TLS with the API server is negotiated *through* the
tunnel by asyncio, with the context's SSL context (CA, client certificate) and server name
(``tls-server-name``, else the URL's host), exactly as for a direct connection: everything
above the socket (HTTP, keep-alive, watches, WebSockets) is aiohttp's as usual.
aiohttp-socks' ``ProxyConnector`` is not used because it verifies the certificate against
the URL's host, ignoring ``tls-server-name``.
"""

from __future__ import annotations

import asyncio
import os
import socket
import urllib.parse
from typing import TYPE_CHECKING, Any

import aiohttp
from aiohttp.abc import AbstractResolver, ResolveResult
from aiohttp.client_proto import ResponseHandler

from .._redact import redact_url

if TYPE_CHECKING:
    from aiohttp import ClientRequest, ClientTimeout

__all__ = ["SOCKS_SCHEMES", "SocksConnector", "SocksFailure", "is_socks"]

SOCKS_SCHEMES = ("socks5", "socks5h")
"""The SOCKS proxy-url schemes kubemux connects through (kubectl: ``socks5`` only)."""

_DEFAULT_PORT = 1080  # Go's default for a socks5:// URL without a port


def is_socks(url: str) -> bool:
    """Whether ``url`` names a SOCKS proxy kubemux connects through."""
    return url.partition("://")[0].lower() in SOCKS_SCHEMES


class SocksFailure(aiohttp.ClientConnectionError):
    """Connecting through a SOCKS proxy failed. The message names the proxy, without its
    password; the python-socks error is chained."""


class _NoResolver(AbstractResolver):
    """Host names go to the proxy unresolved (remote DNS, as Go does)."""

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        return [
            {"hostname": host, "host": host, "port": port, "family": family, "proto": 0, "flags": 0}
        ]

    async def close(self) -> None:
        return None


class _TunnelHandler(ResponseHandler):
    """aiohttp's protocol, holding the tunnel's StreamWriter: since Python 3.11.5 a writer
    that is garbage collected closes its transport."""

    def __init__(self, loop: asyncio.AbstractEventLoop, writer: asyncio.StreamWriter) -> None:
        super().__init__(loop)
        self._tunnel_writer = writer


class SocksConnector(aiohttp.TCPConnector):
    """An aiohttp connector whose every connection is a SOCKS5 tunnel through one proxy.

    Args:
        proxy_url: ``socks5://[user:password@]host[:port]`` (or ``socks5h://``); port 1080
            when absent. User and password are percent-decoded, as Go does.
        **kwargs: :class:`aiohttp.TCPConnector`'s (``limit``, ``ssl``, ...).

    Raises:
        ValueError: the URL is not a SOCKS5 URL with a host (the message is redacted).
    """

    def __init__(self, proxy_url: str, **kwargs: Any) -> None:
        parts = urllib.parse.urlsplit(proxy_url)
        self.proxy_url = proxy_url  # holds the password: show self.display instead
        self.display = redact_url(proxy_url)
        if parts.scheme.lower() not in SOCKS_SCHEMES or not parts.hostname:
            raise ValueError(f"not a socks5:// proxy URL with a host: {self.display}")
        try:
            port = parts.port or _DEFAULT_PORT
        except ValueError:
            raise ValueError(f"proxy-url has an invalid port: {self.display}") from None
        self._proxy_host = parts.hostname
        self._proxy_port = port
        self._username = urllib.parse.unquote(parts.username) if parts.username else None
        self._password = urllib.parse.unquote(parts.password or "") if parts.username else None
        # imported here, not at kubemux's import (50 ms), nor at the first connection (where
        # an EMFILE would fail the import)
        from python_socks.async_.asyncio.v2 import Proxy

        self._proxy_class = Proxy
        kwargs["resolver"] = _NoResolver()
        super().__init__(**kwargs)

    def __repr__(self) -> str:
        return f"<SocksConnector proxy={self.display!r}>"

    async def _wrap_create_connection(
        self,
        *args: Any,
        addr_infos: list[Any],
        req: ClientRequest,
        timeout: ClientTimeout,  # noqa: ASYNC109 - aiohttp's signature
        client_error: type[Exception] = aiohttp.ClientConnectorError,
        **kwargs: Any,
    ) -> tuple[asyncio.Transport, ResponseHandler]:
        from python_socks import ProxyConnectionError, ProxyError, ProxyTimeoutError, ProxyType
        from python_socks._errors import IncompleteReadError  # not exported; stable since 2.0

        host, port = addr_infos[0][4][0], addr_infos[0][4][1]
        ssl_context = kwargs.get("ssl")
        proxy = self._proxy_class(
            ProxyType.SOCKS5,
            host=self._proxy_host,
            port=self._proxy_port,
            username=self._username,
            password=self._password,
            rdns=True,
        )
        via = f"the SOCKS5 proxy {self.display}"
        try:
            stream = await proxy.connect(
                dest_host=host, dest_port=port, timeout=timeout.sock_connect
            )
        except ProxyTimeoutError as exc:
            raise SocksFailure(f"connecting through {via} timed out") from exc
        except ProxyConnectionError as exc:
            reason = os.strerror(exc.errno) if exc.errno else "unreachable"
            raise SocksFailure(f"cannot connect to {via}: {reason}") from exc
        except ProxyError as exc:  # the proxy's reply: auth failed, host unreachable, ...
            if not isinstance(exc.__cause__, IncompleteReadError):
                raise SocksFailure(f"{via} refused the connection to {host}:{port}: {exc}") from exc
            raise SocksFailure(_hung_up(via)) from exc
        except (EOFError, OSError) as exc:
            # it hung up mid-handshake (pproxy, on a bad password): a reset while writing is an
            # OSError; a close seen while reading the reply is python-socks' ProxyError caused
            # by its IncompleteReadError (above): which one comes is a race, the meaning is one
            raise SocksFailure(_hung_up(via)) from exc
        transport: Any = stream.writer.transport
        # aiohttp's TCPConnector keeps its loop as _loop (this subclass connects for it)
        protocol = _TunnelHandler(self._loop, stream.writer)
        if ssl_context is None:
            transport.set_protocol(protocol)
            protocol.connection_made(transport)
            return transport, protocol
        try:
            tls = await self._loop.start_tls(  # the connector's loop, as above
                transport,
                protocol,
                ssl_context,
                server_hostname=kwargs.get("server_hostname") or host,
                ssl_handshake_timeout=timeout.sock_connect,
            )
        except BaseException:
            transport.close()
            raise
        assert tls is not None
        protocol.connection_made(tls)
        return tls, protocol


def _hung_up(via: str) -> str:
    return (
        f"{via} closed the connection during the SOCKS5 handshake (it stopped, or refused the "
        "user and password)"
    )
