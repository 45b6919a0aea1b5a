"""Which connections the proxy's server keeps: a cap below the open-file limit, a deadline on
the TLS handshake, and room made at the cap by the oldest connection nobody vouched for.

asyncio keeps a connection that never starts its TLS handshake for 60 s
(``SSL_HANDSHAKE_TIMEOUT``) and accepts until the process runs out of descriptors: a
thousand idle sockets then keep everyone out, the token holder too (``accept`` fails with
EMFILE and asyncio stops accepting for a second at a time). :class:`Admission` wraps each
accepted connection before TLS (it builds asyncio's own ``SSLProtocol`` around the HTTP
protocol, with ``handshake_timeout``) and counts it from ``accept`` to close:

- past ``limit`` connections (the settings' cap, and never more than the open-file limit
  less a quarter kept for upstream connections, files and the like), the oldest
  connection that has not yet sent a request with the token is closed to make room; if
  every connection has, the new one is closed;
- a connection is *trusted* once a request on it carried the token (the HTTP protocol
  says so through :meth:`Admitted.trust`), so idle sockets never push out a client at work.

This knows nothing of HTTP/1.1: an HTTP/2 protocol plugs in the same way (it calls
:meth:`Admitted.trust`).
"""

from __future__ import annotations

import asyncio
import asyncio.sslproto
import collections
import logging
import resource
import ssl
from collections.abc import Callable
from typing import Any

__all__ = ["Admission", "Admitted", "connection_limit"]

log = logging.getLogger(__name__)


def connection_limit(wanted: int) -> int:
    """``wanted``, but at most the soft open-file limit less a quarter (at least 64 kept):
    the process also needs descriptors for its upstream connections and files."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return wanted
    return max(1, min(wanted, soft - max(64, soft // 4)))


class Admitted(asyncio.BufferedProtocol):
    """One accepted connection: counted, and handed to TLS and HTTP (the wrapped
    ``SSLProtocol`` does the rest)."""

    __slots__ = ("_admission", "_inner", "transport", "trusted")

    def __init__(self, admission: Admission, inner: asyncio.BufferedProtocol) -> None:
        self._admission = admission
        self._inner = inner
        self.transport: asyncio.Transport | None = None
        self.trusted = False

    def trust(self) -> None:
        """A request with the token came on this connection: never pushed out for room."""
        self.trusted = True

    def close(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.abort()

    # asyncio.BufferedProtocol, passed on to the TLS protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        self._inner.connection_made(transport)
        self._admission.admit(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self._admission.forget(self)
        self._inner.connection_lost(exc)

    def get_buffer(self, sizehint: int) -> Any:
        return self._inner.get_buffer(sizehint)

    def buffer_updated(self, nbytes: int) -> None:
        self._inner.buffer_updated(nbytes)

    def eof_received(self) -> bool | None:
        return self._inner.eof_received()

    def pause_writing(self) -> None:
        self._inner.pause_writing()

    def resume_writing(self) -> None:
        self._inner.resume_writing()


class Admission:
    """The connections of one server (see the module docstring).

    Args:
        limit: Most connections at once (see :func:`connection_limit`).
        handshake_timeout: Seconds a connection has to finish its TLS handshake.
        context: The server's TLS context.
    """

    def __init__(self, limit: int, handshake_timeout: float, context: ssl.SSLContext) -> None:
        self.limit = limit
        self.handshake_timeout = handshake_timeout
        self.context = context
        self._open: collections.OrderedDict[Admitted, None] = collections.OrderedDict()
        self.refused = 0  # connections closed at the cap (for tests and status)

    def __len__(self) -> int:
        return len(self._open)

    def __repr__(self) -> str:
        return f"<Admission open={len(self._open)} limit={self.limit}>"

    def factory(
        self, app_protocol: Callable[[], asyncio.Protocol], bind: Callable[[Any, Admitted], None]
    ) -> Callable[[], Admitted]:
        """The protocol factory for ``loop.create_server`` (without ``ssl=``: TLS is
        wrapped here). ``bind(app, admitted)`` tells each HTTP protocol its connection."""

        def build() -> Admitted:
            loop = asyncio.get_running_loop()
            app = app_protocol()
            tls = asyncio.sslproto.SSLProtocol(
                loop,
                app,
                self.context,
                None,  # type: ignore[arg-type]  # no waiter (what loop.create_server does)
                server_side=True,
                ssl_handshake_timeout=self.handshake_timeout,  # type: ignore[arg-type]  # float
            )
            admitted = Admitted(self, tls)
            bind(app, admitted)
            return admitted

        return build

    def admit(self, admitted: Admitted) -> None:
        self._open[admitted] = None
        if len(self._open) <= self.limit:
            return
        victim = next((c for c in self._open if not c.trusted), admitted)
        self.refused += 1
        if self.refused == 1 or self.refused % 1000 == 0:
            log.warning(
                "kubemux proxy: %d connections open (the cap): closing the oldest without "
                "a request yet (%d so far)",
                self.limit,
                self.refused,
            )
        self.forget(victim)
        victim.close()

    def forget(self, admitted: Admitted) -> None:
        self._open.pop(admitted, None)
