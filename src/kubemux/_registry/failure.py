"""Failure records: an error kept for backoff and status, raised again without leaks."""

from __future__ import annotations

import copy
import dataclasses
import time
import traceback
from types import TracebackType
from typing import NoReturn

from .._settings import Backoff

__all__ = ["Failure"]


@dataclasses.dataclass(slots=True)
class Failure:
    """A failure kept for backoff and status; raised again without growing its traceback."""

    error: BaseException
    count: int = 0
    retry_at: float = 0.0
    tb: TracebackType | None = None

    @classmethod
    def record(cls, exc: BaseException, previous: Failure | None, backoff: Backoff) -> Failure:
        count = previous.count + 1 if previous else 1
        retry_at = time.monotonic() + backoff.delay(count)
        # Keep the error's own stack, its frames cleared, for the re-raise; of the errors it
        # chains (the aiohttp or OpenSSL error underneath) only type and message: their
        # frames hold closures over the HTTP session, which clearing locals does not drop.
        exc.with_traceback(_cleared(exc.__traceback__))
        seen = {id(exc)}
        link = exc.__cause__ or exc.__context__
        while link is not None and id(link) not in seen:
            seen.add(id(link))
            link.with_traceback(None)
            link = link.__cause__ or link.__context__
        return cls(exc, count, retry_at, exc.__traceback__)

    @property
    def pending(self) -> bool:
        """Still inside its backoff window."""
        return time.monotonic() < self.retry_at

    def reraise(self) -> NoReturn:
        # A copy, from the saved traceback: raising the kept exception itself would hang
        # this caller's frames (and every local in them) on it for as long as the record
        # lives, and add them to its traceback each time.
        raise _copy(self.error).with_traceback(self.tb)


def _copy(error: BaseException) -> BaseException:
    """A shallow copy of an exception, with its cause and context; itself if it cannot be
    copied (kubemux's own errors always can)."""
    try:
        twin = copy.copy(error)
    except Exception:  # noqa: BLE001 - a foreign exception that does not copy: raise it as is
        return error
    twin.__cause__ = error.__cause__
    twin.__context__ = error.__context__
    twin.__suppress_context__ = error.__suppress_context__
    return twin


def _cleared(tb: TracebackType | None) -> TracebackType | None:
    """``tb`` with its frames' locals cleared, less its leading frames that are still running.

    The frame that caught the exception is still running when the failure is recorded: it
    cannot be cleared, and kept in the traceback it would keep all its locals (an entry, its
    informer, its closed HTTP session: ~25 KB per failed context) for as long as the record.
    """
    while tb is not None:
        try:
            tb.tb_frame.clear()
        except RuntimeError:  # still running
            tb = tb.tb_next
            continue
        traceback.clear_frames(tb)
        return tb
    return None
