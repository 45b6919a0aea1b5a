"""Settings: frozen, keyword-only dataclasses with defaults."""

from __future__ import annotations

import dataclasses
import random

__all__ = ["Backoff", "WatchSettings"]


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Backoff:
    """Exponential backoff with full jitter (the AWS "full jitter" scheme client-go also uses).

    The n-th consecutive failure waits a uniform random time in ``[0, min(max_delay,
    initial_delay * factor**n)]``; after ``reset_after`` seconds of health the count resets.
    """

    initial_delay: float = 0.8
    max_delay: float = 30.0
    factor: float = 2.0
    reset_after: float = 120.0
    jitter: bool = True

    def delay(self, failures: int) -> float:
        """Seconds to wait after ``failures`` consecutive failures (``failures >= 1``)."""
        cap = min(self.max_delay, self.initial_delay * self.factor ** max(0, failures - 1))
        return random.uniform(0.0, cap) if self.jitter else cap


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class WatchSettings:
    """How an informer talks to the API server.

    Attributes:
        page_size: ``limit`` of each LIST page; 0 lists in one response.
        watch_timeout_range: ``timeoutSeconds`` of each WATCH, drawn uniformly from this range
            so that many watches do not reconnect in lockstep.
        inactivity_timeout: no bytes at all (events or bookmarks) for this long means the
            connection is dead: reconnect. Real servers send bookmarks about once a minute.
        request_timeout: total time allowed for one LIST page.
        connect_timeout: time allowed to open a connection.
        backoff: delays between failed attempts.
        streaming_list: try a streaming list (``sendInitialEvents``) before a paginated LIST;
            a server that refuses or ignores it is remembered per client and gets LISTs.
        max_line_size: a watch line longer than this is an error (protects memory).
        relist_slice: objects applied per slice of a relist before yielding to the event loop.
        min_healthy_watch: a watch that ends sooner than this having delivered nothing counts
            as a failure, so a broken server cannot make the client spin.
    """

    page_size: int = 500
    watch_timeout_range: tuple[float, float] = (300.0, 600.0)
    inactivity_timeout: float = 180.0
    request_timeout: float = 60.0
    connect_timeout: float = 10.0
    backoff: Backoff = dataclasses.field(default_factory=Backoff)
    streaming_list: bool = True
    max_line_size: int = 64 * 1024 * 1024
    relist_slice: int = 1000
    min_healthy_watch: float = 1.0

    def watch_timeout(self) -> int:
        """A random ``timeoutSeconds`` for the next WATCH."""
        low, high = self.watch_timeout_range
        return max(1, round(random.uniform(low, high)))
