"""The process kubemux runs in: which async library, and how many files it may open.

kubemux's HTTP client is aiohttp (through kubernetes-asyncio), which runs only on asyncio.
anyio's API would let the registry be entered under trio, where the first request would
fail deep inside a start and look like a cluster failure to be retried. This check turns
that into an immediate programming error.

Each watch is one HTTP/1.1 connection, and a server (the proxy, the dashboard) holds one
per client: :func:`raise_fd_limit` lifts the soft file-descriptor limit to the hard one,
as Go's runtime does at start-up, so a few thousand watches do not run into the usual soft
limit of 1,024. It stops at 2**20 (:data:`FD_LIMIT_CAP`): containers often have a hard limit
near 2**30, and child processes (exec plugins) inherit the soft one; some programs close or
scan every possible descriptor at start. On macOS the kernel refuses more than OPEN_MAX
(10,240) whatever the hard limit says, so that is the target there. Running out anyway
(``EMFILE``, wherever it happens: connecting, a TLS file, an exec plugin) is told apart by
:func:`fd_exhaustion` and reported as :class:`TooManyOpenFiles` naming the limit and the
watches open (:func:`open_watches`, counted by the HTTP layer).
"""

from __future__ import annotations

import errno
import logging
import sys

import sniffio

from ._errors import TooManyOpenFiles

__all__ = [
    "FD_LIMIT_CAP",
    "fd_exhaustion",
    "open_watches",
    "raise_fd_limit",
    "require_asyncio",
    "too_many_open_files",
    "watch_closed",
    "watch_opened",
]

log = logging.getLogger(__name__)

__version__ = "0.1.0"  # kubemux's (also in pyproject.toml); kubemux.__version__

_DARWIN_OPEN_MAX = 10240  # macOS refuses a soft limit above OPEN_MAX, whatever the hard one
FD_LIMIT_CAP = 1 << 20
"""The highest soft limit :func:`raise_fd_limit` sets (Linux's default ``nr_open``)."""


def raise_fd_limit() -> tuple[int, int] | None:
    """Raise the soft limit on open files to the hard limit (what Go does at start-up),
    at most to :data:`FD_LIMIT_CAP` (10,240 on macOS).

    Each watch holds one connection, so the soft limit (often 1,024) caps how many resources
    of how many contexts one process can watch. The ``kubemux`` commands call this at
    start; an application embedding kubemux calls it once, early (it changes the whole
    process, so the library never does it on its own)::

        import kubemux
        kubemux.raise_fd_limit()

    Returns:
        (soft limit before, soft limit now), or None where there is no such limit
        (Windows) or it could not be read.

    Never raises: a limit that cannot be changed is logged and left as it is. A soft limit
    already at or above the target is never lowered.
    """
    try:
        import resource
    except ImportError:  # pragma: no cover - Windows
        return None
    try:
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    except (OSError, ValueError):  # pragma: no cover
        return None
    target = FD_LIMIT_CAP if hard == resource.RLIM_INFINITY else min(hard, FD_LIMIT_CAP)
    if sys.platform == "darwin":  # pragma: no cover - macOS
        target = min(hard, _DARWIN_OPEN_MAX) if hard != resource.RLIM_INFINITY else _DARWIN_OPEN_MAX
    if target != resource.RLIM_INFINITY and soft != resource.RLIM_INFINITY and soft >= target:
        return soft, soft
    if soft == resource.RLIM_INFINITY:
        return soft, soft
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    except (OSError, ValueError) as exc:
        log.info("could not raise the open-file limit from %d to %d: %s", soft, target, exc)
        return soft, soft
    return soft, target


_open_watches = 0  # watch streams open in this process (one connection each)


def open_watches() -> int:
    """How many watch streams this process has open (each holds one connection)."""
    return _open_watches


def watch_opened() -> None:
    """A watch stream opened (the HTTP layer counts them: each holds a descriptor)."""
    global _open_watches
    _open_watches += 1


def watch_closed() -> None:
    """A watch stream counted by :func:`watch_opened` closed."""
    global _open_watches
    _open_watches -= 1


def fd_exhaustion(exc: BaseException) -> int | None:
    """``EMFILE`` or ``ENFILE`` if ``exc`` or an exception it chains is an ``OSError`` for
    running out of file descriptors (aiohttp wraps it: ``ClientConnectorError.os_error``)."""
    seen: set[int] = set()
    stack: list[BaseException | None] = [exc]
    while stack:
        link = stack.pop()
        if link is None or id(link) in seen:
            continue
        seen.add(id(link))
        if isinstance(link, OSError) and link.errno in (errno.EMFILE, errno.ENFILE):
            return link.errno
        stack.extend((link.__cause__, link.__context__, getattr(link, "os_error", None)))
    return None


def too_many_open_files(server: str, what: str, code: int) -> TooManyOpenFiles:
    """The :class:`TooManyOpenFiles` for ``EMFILE`` (this process) or ``ENFILE`` (the
    system), naming the soft limit and the watches open now."""
    limit: int | None = None
    hard: int | None = None
    if code == errno.EMFILE:
        try:
            limit, hard = _resource.getrlimit(_resource.RLIMIT_NOFILE)
        except (OSError, ValueError, AttributeError):  # pragma: no cover
            limit = -1
    return TooManyOpenFiles(server, what, limit=limit, hard_limit=hard, open_watches=_open_watches)


try:  # imported now: an import needs a file descriptor, which EMFILE lacks
    import resource as _resource
except ImportError:  # pragma: no cover - Windows
    _resource = None  # type: ignore[assignment]


def require_asyncio(what: str) -> None:
    """Raise :class:`RuntimeError` unless the current async library is asyncio.

    Args:
        what: What is being used, for the message (``"WatcherRegistry"``).

    Raises:
        RuntimeError: ``what`` was used under another async library (trio), or outside
            any async library. Not a :class:`~kubemux.KubemuxError`: it is a programming
            error, never retried.
    """
    try:
        library = sniffio.current_async_library()
    except sniffio.AsyncLibraryNotFoundError:
        library = None
    if library == "asyncio":
        return
    where = f"under {library}" if library else "outside any async event loop"
    raise RuntimeError(
        f"kubemux runs on asyncio (its HTTP client is aiohttp); {what} was used {where}. "
        "Run it with asyncio.run() or anyio.run(..., backend='asyncio')."
    )
