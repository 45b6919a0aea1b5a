"""Ending the event streams when the server is told to exit (Ctrl-C, SIGTERM).

uvicorn (``uvicorn app:app``, ``uvicorn.run(app)``) shuts down by waiting for every open
response to end, and only then runs the app's lifespan shutdown: an open event stream never
ends by itself, so it held the shutdown until its browser left (or until uvicorn's
``--timeout-graceful-shutdown``, unset by default). The server's handlers of SIGINT and
SIGTERM are Python callables (``signal.signal``); :func:`chain_exit_signals` puts one in
front of each that first ends the dashboard's streams (:meth:`Dashboard.close_streams`) and
then calls the server's. It leaves the signals alone where no such handler is installed
(the default handlers, a server using ``loop.add_signal_handler``), outside the main thread,
and where it already chained; the server restoring its own handlers on exit removes it.
"""

from __future__ import annotations

import asyncio
import signal
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any

__all__ = ["chain_exit_signals"]

_MARK = "_kubemux_closes_streams"


def chain_exit_signals(close_streams: Callable[[], None]) -> Callable[[], None]:
    """Chain ``close_streams`` before the installed SIGINT/SIGTERM handlers; returns a
    function putting the previous ones back (where ours are still installed)."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    loop = asyncio.get_running_loop()
    installed: dict[int, tuple[Any, Any]] = {}
    for sig in (signal.SIGINT, signal.SIGTERM):
        previous = signal.getsignal(sig)
        if (
            not callable(previous)
            or previous is signal.default_int_handler
            or getattr(previous, _MARK, False)
        ):
            continue

        def chained(signum: int, frame: FrameType | None, previous: Any = previous) -> None:
            loop.call_soon_threadsafe(close_streams)
            previous(signum, frame)

        setattr(chained, _MARK, True)
        signal.signal(sig, chained)
        installed[sig] = (previous, chained)

    def restore() -> None:
        for sig, (previous, chained) in installed.items():
            if signal.getsignal(sig) is chained:
                signal.signal(sig, previous)

    return restore
