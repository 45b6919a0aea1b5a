"""The open-file limit of the ``kubemux`` commands.

Every command raises the soft ``RLIMIT_NOFILE`` to the hard one at start
(:func:`kubemux.raise_fd_limit`, as Go programs do): each watch holds a connection, and a
desktop's soft limit (often 1,024) would cap a dashboard at a few hundred watches.

When descriptors still run out, each context says so in its status
(:class:`kubemux.TooManyOpenFiles`, with backoff). A server command (``dashboard``,
``proxy``) can also fail to *accept* a connection: asyncio then pauses accepting for a
second and logs a traceback each time; here that becomes one warning line, at most once a
minute, naming the limit and the watches open.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Iterator
from typing import Any

from .._runtime import fd_exhaustion, raise_fd_limit, too_many_open_files

__all__ = ["open_file_limits"]

log = logging.getLogger(__name__)

ACCEPT_WARNING_PERIOD = 60.0  # seconds between two "cannot accept" warnings


@contextlib.contextmanager
def open_file_limits() -> Iterator[None]:
    """Raise the soft open-file limit, and report accept() running out of descriptors in
    one line (not a traceback a second) while the command runs."""
    raised = raise_fd_limit()
    if raised is not None and raised[1] != raised[0]:
        log.info("raised the open-file limit from %d to %d", raised[0], raised[1])
    loop = asyncio.get_running_loop()
    previous = loop.get_exception_handler()
    last_warning = [-ACCEPT_WARNING_PERIOD]

    def handler(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        exc = context.get("exception")
        code = fd_exhaustion(exc) if isinstance(exc, BaseException) else None
        if code is not None and "accept" in str(context.get("message", "")):
            now = time.monotonic()
            if now - last_warning[0] >= ACCEPT_WARNING_PERIOD:
                last_warning[0] = now
                error = too_many_open_files("this server", "cannot accept connections", code)
                log.warning("%s (asyncio retries every second)", error.detail)
            return
        if previous is not None:
            previous(loop, context)
        else:
            loop.default_exception_handler(context)

    loop.set_exception_handler(handler)
    try:
        yield
    finally:
        loop.set_exception_handler(previous)
