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
        request_timeout: total time allowed for one LIST page (and for a streaming list).
        connect_timeout: time allowed to open a connection.
        response_timeout: time allowed from sending a request to its response headers (the
            first byte). API servers answer within a second or two; meanwhile the informer
            shows "waiting for the server".
        read_timeout: once a LIST body or a watch line has begun, it must be complete
            within this many seconds, plus one more second per ``min_read_rate`` bytes
            received: a large body on a slow link has time, a server trickling bytes does not.
        min_read_rate: see ``read_timeout`` (bytes per second).
        max_response_size: a LIST response larger than this is refused
            (:class:`~kubemux.ResponseTooLarge`) before it is decoded; the informer retries
            the page with half the ``limit`` (down to 1), so pages of large objects (Helm
            release Secrets near 1 MiB each) still list. 128 MiB: 500 objects averaging
            256 KiB, far above a usual page, and what one context may hold in flight.
        max_list_pages: pages allowed in one paginated LIST (a server whose ``continue``
            token never ends is refused); a repeated token is refused at once.
        qps, burst: the client-side rate limit of each context's requests (every LIST and
            WATCH it starts; continuation pages that make progress are not counted), shared
            by all of its informers: client-go's defaults. No server behaviour can make a
            context send more.
        skip_log_period: malformed lines are counted in status; one is logged at once, then
            at most one summary per this many seconds.
        backoff: delays between failed attempts.
        streaming_list: try a streaming list (``sendInitialEvents``) before a paginated LIST;
            a server that refuses or ignores it is remembered per client and gets LISTs.
        max_line_size: a watch line longer than this is an error (protects memory).
        relist_slice: objects applied per slice of a relist before yielding to the event loop.
        min_healthy_watch: a watch that ends sooner than this counts as a failure (backoff),
            however many events it delivered, so a broken server cannot make the client spin.
        gone_retry: the longest wait before looking again at a resource the server stopped
            serving (404 on its LIST or WATCH: a custom resource whose CRD was deleted);
            meanwhile the informer's state is "error" and its cache is kept. Its return is
            noticed sooner: a watch of its CRD where the user may read CRDs, else a look at
            discovery every ``gone_poll`` seconds.
        gone_poll: how often discovery is looked at while a resource is gone and its CRD
            cannot be watched (one fetch per context, however many resources are gone).
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
    response_timeout: float = 15.0
    read_timeout: float = 15.0
    min_read_rate: int = 64 * 1024
    max_response_size: int = 128 * 1024 * 1024
    max_list_pages: int = 10_000
    qps: float = 5.0
    burst: int = 10
    skip_log_period: float = 60.0
    gone_retry: float = 60.0
    gone_poll: float = 5.0

    def watch_timeout(self) -> int:
        """A random ``timeoutSeconds`` for the next WATCH."""
        low, high = self.watch_timeout_range
        return max(1, round(random.uniform(low, high)))
