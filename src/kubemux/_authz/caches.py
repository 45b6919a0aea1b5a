"""The bounded, expiring caches of an authorizer: TokenReview answers and SubjectAccessReview
answers, each filled once per key by one caller while the others wait (single flight).

Tokens are never keys: a TokenReview answer is kept under the SHA-256 of its token, so
nothing here (and nothing in a ``repr``, a log or a status) can give a token back. A token's
answer lives for the bounded TTL and never past the token's own expiry, when the token says
it (a JWT's ``exp`` claim, read without trusting the token: the TokenReview decided whether
it is valid; the claim only shortens the time its answer is reused). Sync except the
single-flight wait.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import time
from collections.abc import Awaitable, Callable, Hashable
from typing import Generic, TypeVar

import anyio
import orjson

__all__ = ["ExpiringCache", "token_expiry", "token_key"]

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")

_MAX_JWT = 16 * 1024  # a payload past this is not read for its expiry


def token_key(token: str) -> bytes:
    """What a token's answer is kept under: its SHA-256 (never the token)."""
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).digest()


def token_expiry(token: str) -> float | None:
    """The ``exp`` claim (a Unix time) of a JWT-shaped token, or None (not a JWT, no
    claim, or unreadable). The signature is not checked: the caller only uses this to
    forget an answer sooner."""
    parts = token.split(".")
    if len(parts) != 3 or len(parts[1]) > _MAX_JWT:
        return None
    try:
        payload = orjson.loads(base64.urlsafe_b64decode(parts[1] + "=" * (-len(parts[1]) % 4)))
    except (binascii.Error, ValueError, orjson.JSONDecodeError):
        return None
    exp = payload.get("exp") if isinstance(payload, dict) else None
    if isinstance(exp, bool) or not isinstance(exp, int | float):
        return None
    return float(exp)


class ExpiringCache(Generic[K, V]):
    """Up to ``max_size`` answers, each until its own deadline (monotonic clock); the oldest
    entry goes first when full. ``get_or_fill`` runs one fill per key at a time."""

    def __init__(self, max_size: int, *, clock: Callable[[], float] = time.monotonic) -> None:
        if max_size < 1:
            raise ValueError(f"max_size must be positive, not {max_size}")
        self.max_size = max_size
        self.clock = clock
        self._items: dict[K, tuple[V, float]] = {}
        self._filling: dict[K, anyio.Event] = {}
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        return len(self._items)

    def __repr__(self) -> str:
        return f"<ExpiringCache {len(self._items)}/{self.max_size} hits={self.hits} misses={self.misses}>"

    def get(self, key: K) -> tuple[V, float] | None:
        """The answer and its deadline, if it has not expired."""
        found = self._items.get(key)
        if found is None:
            return None
        if found[1] <= self.clock():
            del self._items[key]
            return None
        return found

    def put(self, key: K, value: V, ttl: float) -> None:
        """Keep ``value`` for ``ttl`` seconds (not at all if ``ttl <= 0``)."""
        if ttl <= 0:
            self._items.pop(key, None)
            return
        if key not in self._items and len(self._items) >= self.max_size:
            now = self.clock()
            for old in [k for k, (_, deadline) in self._items.items() if deadline <= now]:
                del self._items[old]
            while len(self._items) >= self.max_size:
                del self._items[next(iter(self._items))]
        self._items.pop(key, None)
        self._items[key] = (value, self.clock() + ttl)

    def forget(self, key: K) -> None:
        self._items.pop(key, None)

    def clear(self) -> None:
        self._items.clear()

    async def get_or_fill(self, key: K, fill: Callable[[], Awaitable[tuple[V, float]]]) -> V:
        """The cached answer, else ``fill()`` -> ``(value, ttl)``, kept for ``ttl``.

        Concurrent callers for one key share one fill: the others wait for it and read
        what it kept (or fill themselves if it kept nothing or failed). An exception of
        ``fill`` reaches its caller only. Cancellation of a waiter just stops its wait.
        """
        while True:
            found = self.get(key)
            if found is not None:
                self.hits += 1
                return found[0]
            busy = self._filling.get(key)
            if busy is None:
                break
            await busy.wait()  # then read what it kept, or fill if it kept nothing
        value, _ttl = await self._fill(key, fill)
        return value

    async def _fill(
        self, key: K, fill: Callable[[], Awaitable[tuple[V, float]]]
    ) -> tuple[V, float]:
        self.misses += 1
        done = self._filling[key] = anyio.Event()
        try:
            value, ttl = await fill()
            self.put(key, value, ttl)
            return value, ttl
        finally:
            if self._filling.get(key) is done:
                del self._filling[key]
            done.set()
