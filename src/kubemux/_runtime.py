"""The process kubemux runs in: which async library, and how many files it may open.

kubemux's HTTP client is aiohttp (through kubernetes-asyncio), which runs only on asyncio.
anyio's API would let the registry be entered under trio, where the first request would
fail deep inside a start and look like a cluster failure to be retried. This check turns
that into an immediate programming error.

Each watch is one HTTP/1.1 connection, and a server (the proxy, the dashboard) holds one
per client: :func:`raise_fd_limit` lifts the soft file-descriptor limit to the hard one,
as Go's runtime does at start-up, so a few thousand watches do not run into the usual soft
limit of 1,024.
"""

from __future__ import annotations

import logging
import sys

import sniffio

__all__ = ["raise_fd_limit", "require_asyncio"]

log = logging.getLogger(__name__)

_DARWIN_OPEN_MAX = 10240  # macOS refuses a soft limit above OPEN_MAX, whatever the hard one


def raise_fd_limit() -> tuple[int, int] | None:
    """Raise the soft limit on open files to the hard limit (what Go does at start-up).

    Returns:
        (soft limit before, soft limit now), or None where there is no such limit
        (Windows) or it could not be read.

    Never raises: a limit that cannot be changed is logged and left as it is. Meant for
    commands (``kubemux proxy``), not for a library embedded in someone else's process.
    """
    try:
        import resource
    except ImportError:  # pragma: no cover - Windows
        return None
    try:
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    except (OSError, ValueError):  # pragma: no cover
        return None
    target = hard
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
