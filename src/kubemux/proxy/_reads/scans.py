"""Selector scans that share the event loop: paced, and only a few at once.

A LIST with a label or field selector evaluates the selector on every object of a snapshot
(20,000 pods at 100 requirements: 160 ms). kube-apiserver does that in a goroutine per
request under priority and fairness; here every request shares one event loop, so a scan
done in one step stalls every other client for its whole length (four clients looping
such LISTs moved everyone's cached GET from 1.3 ms to 280 ms). So:

- a scan yields the loop every ``slice_seconds`` (:class:`~.._api.pace.Pacer`): the snapshot is immutable, so the scan resumes exactly where it was;
- at most ``max_concurrent`` scans run at once; the others wait their turn (first come,
  first served) instead of slicing the loop between more of them.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable, Iterator

import anyio

from .._api.pace import Pacer

__all__ = ["Scans"]

Key = tuple[str, str]


class Scans:
    """The scans of one proxy: a bound on how many run at once, and their pace.

    Args:
        max_concurrent: Scans running at once; more wait their turn.
        slice_seconds: Work between two yields of the event loop.
    """

    def __init__(self, max_concurrent: int = 2, slice_seconds: float = 0.001) -> None:
        self.slice_seconds = slice_seconds
        self._limiter = anyio.CapacityLimiter(max_concurrent)

    def __repr__(self) -> str:
        return f"<Scans running={self.running} waiting={self.waiting}>"

    @property
    def running(self) -> int:
        return int(self._limiter.borrowed_tokens)

    @property
    def waiting(self) -> int:
        return int(self._limiter.statistics().tasks_waiting)

    @contextlib.asynccontextmanager
    async def turn(self) -> AsyncIterator[Pacer]:
        """Wait for a turn; the pacer to scan with.

        Cancellation: a waiting scan leaves the queue; a running one ends at its next
        yield."""
        async with self._limiter:
            yield Pacer(self.slice_seconds)

    async def take_page(
        self,
        items: Iterator[tuple[Key, bytes]],
        limit: int,
        match: Callable[[Key, bytes], bool],
    ) -> tuple[list[tuple[Key, bytes]], Key | None]:
        """Up to ``limit`` items ``match`` selects (all for 0) and the last key when more
        follow (``take_page``'s answer), scanned in a turn, paced."""
        page: list[tuple[Key, bytes]] = []
        async with self.turn() as pacer:
            async for key, raw in pacer.paced(items):
                if not match(key, raw):
                    continue
                if limit > 0 and len(page) == limit:
                    return page, page[-1][0]
                page.append((key, raw))
        return page, None
