"""Which async library is running: kubemux needs asyncio.

kubemux's HTTP client is aiohttp (through kubernetes-asyncio), which runs only on asyncio.
anyio's API would let the registry be entered under trio, where the first request would
fail deep inside a start and look like a cluster failure to be retried. This check turns
that into an immediate programming error.
"""

from __future__ import annotations

import sniffio

__all__ = ["require_asyncio"]


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
