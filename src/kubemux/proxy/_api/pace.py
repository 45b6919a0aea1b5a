"""Long loops that share the event loop: a :class:`Pacer` yields it every few milliseconds of
work (selector scans of LISTs, a watch's initial events)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterable
from typing import Final, TypeVar

__all__ = ["CHECK_EVERY", "Pacer"]

CHECK_EVERY: Final = 64
"""Objects between two looks at the clock."""

T = TypeVar("T")


class Pacer:
    """Yields the loop once ``slice_seconds`` of work have passed since the last yield."""

    __slots__ = ("_count", "_since", "slice_seconds")

    def __init__(self, slice_seconds: float) -> None:
        self.slice_seconds = slice_seconds
        self._since = time.perf_counter()
        self._count = 0

    async def tick(self) -> None:
        """Count one unit of work; yield the loop when the slice is used up."""
        self._count += 1
        if self._count % CHECK_EVERY:
            return
        if time.perf_counter() - self._since >= self.slice_seconds:
            await asyncio.sleep(0)
            self._since = time.perf_counter()

    async def paced(self, items: Iterable[T]) -> AsyncIterator[T]:
        for item in items:
            yield item
            await self.tick()
