"""How one request to an API server is made and read: the mechanics under ContextClient.

Every request waits for its context's :class:`RateLimiter`, then notes in a
:class:`Progress` what the server owes it (read by an informer's ``status()``). A LIST body
is read whole by :func:`read_body`, bounded in size and time; a WATCH is read as blocks of
complete lines by :func:`read_blocks`, a line that stalls failed by :class:`LineWatchdog`.
Every foreign exception a request raises is converted in one place, :func:`map_exceptions`:
connection problems into :class:`ClusterUnreachable` naming the server, a slow server into
:class:`ServerTimeout`, a malformed or oversized response into :class:`ProtocolError` /
:class:`ResponseTooLarge`, and running out of file descriptors (``EMFILE``, wherever it
happens: connecting, a TLS file, a SOCKS tunnel) into :class:`TooManyOpenFiles`, which names
the limit and the number of watches open (``kubemux._runtime``).
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import time
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from typing import Any

import aiohttp
import anyio
import yarl

from .._errors import (
    ClusterUnreachable,
    KubemuxError,
    ProtocolError,
    ResponseTooLarge,
    ServerTimeout,
    as_kubemux_error,
)
from .._runtime import fd_exhaustion, too_many_open_files, watch_closed, watch_opened
from .._settings import WatchSettings
from .._wire.codec import Block
from .socks import SocksFailure

__all__ = [
    "ERROR_BODY_MAX",
    "SLOW_AFTER",
    "LineWatchdog",
    "Progress",
    "RateLimiter",
    "map_exceptions",
    "read_blocks",
    "read_body",
]


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


class LineWatchdog:
    """Fails a watch whose current line is overdue (see ``WatchSettings.read_timeout``).

    A timer a few times per ``read_timeout``, not a timeout around every read: the hot path
    only notes when a line began (``Progress``). An overdue line sets :class:`ServerTimeout`
    on the response stream, which the pending read raises.
    """

    __slots__ = ("_content", "_counted", "_handle", "_period", "_progress", "_server", "_settings")

    def __init__(
        self,
        content: aiohttp.StreamReader,
        server: str,
        settings: WatchSettings,
        progress: Progress,
    ) -> None:
        watch_opened()  # one per open watch stream: it lives as long as the stream
        self._counted = True
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
        if self._counted:
            self._counted = False
            watch_closed()


ERROR_BODY_MAX = 1024 * 1024  # an error Status is small; read no more of a hostile one


@contextlib.contextmanager
def map_exceptions(server: str, what: str, tls: str | None = None) -> Iterator[None]:
    """Convert every foreign exception a request raises into a kubemux error (the one place).

    Connecting fails or times out, the connection drops, TLS fails: :class:`ClusterUnreachable`.
    The server is reached but too slow: :class:`ServerTimeout`. The HTTP response is
    malformed: :class:`ProtocolError`. No file descriptor left (``EMFILE``/``ENFILE``, however
    deep it is chained): :class:`TooManyOpenFiles`. A SOCKS proxy that cannot be reached or
    refuses: :class:`ClusterUnreachable` naming the proxy (its password redacted). Anything
    else (a bug in a library): :class:`InternalError`. kubemux's own errors and cancellation
    pass through.

    A TLS failure says so, with what the certificate was checked against (``tls``: the
    server name and the CA the context trusts, see :func:`tls_note`), not only the
    library's words: "TLS: the server's certificate was refused: Hostname mismatch, ...".
    """
    try:
        yield
    except KubemuxError:
        raise
    except Exception as exc:
        raise _converted(exc, server, what, tls) from exc


def tls_note(cluster: Mapping[str, Any], server: str) -> str:
    """What a context checks its server's certificate against, for TLS errors: the name
    (``tls-server-name`` or the server's host) and the CA (the kubeconfig's file, its inline
    data, or the system's trust store). Never the certificate itself."""
    name = cluster.get("tls-server-name") or yarl.URL(server).host or server
    if cluster.get("insecure-skip-tls-verify"):
        return f"server name {name!r}; not verified (insecure-skip-tls-verify)"
    if cluster.get("certificate-authority-data"):
        ca = "the kubeconfig's certificate-authority-data"
    elif cluster.get("certificate-authority"):
        ca = f"certificate-authority {cluster['certificate-authority']}"
    else:
        ca = "the system's trust store (the kubeconfig names no certificate-authority)"
    return f"server name {name!r}, CA: {ca}"


def _tls_failure(exc: Exception) -> str | None:
    """The words for a TLS failure anywhere in ``exc``'s chain, or None."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, aiohttp.ClientConnectorCertificateError):
            cert = current.certificate_error
            reason = getattr(cert, "verify_message", None) or str(cert)
            return f"the server's certificate was refused: {reason}"
        if isinstance(current, ssl.SSLCertVerificationError):
            return f"the server's certificate was refused: {current.verify_message or current}"
        if isinstance(current, aiohttp.ClientSSLError | ssl.SSLError):
            reason = getattr(current, "reason", None) or str(current) or type(current).__name__
            return f"the handshake failed: {reason}"
        current = current.__cause__ or current.__context__
    return None


def _converted(exc: Exception, server: str, what: str, tls: str | None = None) -> KubemuxError:
    """The kubemux error for a foreign exception (see :func:`map_exceptions`)."""
    failure = _tls_failure(exc)
    if failure is not None:
        return ClusterUnreachable(server, f"{what}: TLS: {failure}" + (f" ({tls})" if tls else ""))
    code = fd_exhaustion(exc)
    if code is not None:
        return too_many_open_files(server, what, code)
    if isinstance(exc, SocksFailure):
        return ClusterUnreachable(server, f"{what}: {exc}")
    if isinstance(exc, aiohttp.ConnectionTimeoutError):
        return ClusterUnreachable(server, f"{what}: connecting timed out")
    if isinstance(exc, TimeoutError):  # aiohttp's read and total timeouts
        return ServerTimeout(server, f"{what}: timed out")
    if isinstance(exc, aiohttp.ClientResponseError):  # aiohttp could not parse the response
        return ProtocolError(server, f"{what}: malformed HTTP response: {exc.message}")
    if isinstance(exc, aiohttp.ClientError | OSError | ssl.SSLError):
        return ClusterUnreachable(server, f"{what}: {str(exc) or type(exc).__name__}")
    return as_kubemux_error(exc, f"{what} {server}")


def _deadline(began: float, received: int, settings: WatchSettings) -> float:
    """When a body or line that began at ``began`` and has ``received`` bytes is overdue."""
    return began + settings.read_timeout + received / max(1, settings.min_read_rate)


async def read_body(
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


async def read_blocks(
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
