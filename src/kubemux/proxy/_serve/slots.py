"""The upstream streams each context (and, with ``--user-tokens``, each user) may hold.

Streams passed through (``watch=true``, ``follow=true``, exec, attach, port-forward) hold a
connection of the context's pool, which its informers share: a context may hold
``max_upstream_streams`` at once; with ``--user-tokens`` one user may hold a quarter of
them (at least one), so one user never takes every stream of a context from the others.
Past either cap: kube-apiserver's 429 with ``Retry-After``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from .._api.responses import StatusError

__all__ = ["StreamSlots"]


class StreamSlots:
    """Counts of open upstream streams, per context and per (context, user)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.per_user = max(1, limit // 4)
        self._open: dict[str, int] = {}

    @property
    def total(self) -> int:
        """Streams open now, every context."""
        return sum(n for key, n in self._open.items() if "\x00" not in key)

    def _take(self, key: str, limit: int) -> None:
        open_now = self._open.get(key, 0)
        if open_now >= limit:
            raise StatusError(
                429, "Too many requests, please try again later.", headers={"Retry-After": "1"}
            )
        self._open[key] = open_now + 1

    def _give(self, key: str) -> None:
        left = self._open[key] - 1
        if left:
            self._open[key] = left
        else:
            del self._open[key]

    @contextlib.contextmanager
    def slot(self, context: str, who: str = "") -> Iterator[None]:
        """Count one stream of ``context`` (and of user ``who``); a 429 past a cap."""
        user = f"{context}\x00{who}" if who else None
        self._take(context, self.limit)
        try:
            if user is not None:
                self._take(user, self.per_user)
            try:
                yield
            finally:
                if user is not None:
                    self._give(user)
        finally:
            self._give(context)
