"""The proxy app's settings and the statistics it reports."""

from __future__ import annotations

import dataclasses

from .._reads.freshness import ReadStatistics
from .._watch.watch import WatchLimits

__all__ = ["ProxySettings", "ProxyStatistics"]


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class ProxySettings:
    """Limits and timeouts of the proxy app.

    Attributes:
        max_body_size: Largest request body accepted (kube-apiserver's default, 3 MiB);
            larger ones get a 413 before anything goes upstream.
        body_timeout: Seconds a request body may take to arrive (then a 408).
        response_timeout: Seconds the API server may take to send the answer's headers.
        read_timeout: Seconds an answer's body may pause (not for ``watch`` or
            ``follow`` streams, which may be silent for long).
        start_timeout: Upper bound on waiting for a context to start (the registry's own
            ``start_timeout``, 30 s by default, usually ends it first with a 503).
        discovery_ttl: Seconds a discovery or OpenAPI document is kept.
        cache_reads: Answer LIST, GET and WATCH from the informers (False: everything
            goes upstream, as ``kubectl proxy`` does).
        max_upstream_streams: Streams (``watch=true``, ``follow=true``, WebSockets) one
            context may have open upstream at once; more get a 429 with ``Retry-After``.
            A context's connections are shared with its informers (kubernetes-asyncio's
            pool holds 100), so clients holding streams must not take them all. With
            ``user_tokens``, one user may hold a quarter of them (at least one).
        wait_timeout: Seconds a read of a resourceVersion newer than the cache waits for
            it (the watch cache's 3 s), then 504 ``Too large resource version``.
        read_your_writes_timeout: Seconds a read waits for the cache to reach what the
            proxy has already shown for its resource (a write's answer, a GET or LIST
            passed through, an earlier answer from the cache): then it goes upstream.
            Reads never go back in time (docs/proxy.md, "Freshness").
        consistent_reads: Reads with resourceVersion unset are also at least as fresh as
            the API server when they arrive: a ``limit=1`` LIST (one in flight per
            resource, shared) learns its resourceVersion, the read waits for the cache to
            reach it (``consistent_wait_timeout``), else goes upstream
            (``kubemux proxy --consistent-reads``).
        consistent_wait_timeout: Seconds a consistent read waits for the cache to reach
            the server's version; a cache silent for longer than this goes upstream at once.
        max_watches_per_credential: Watches (from the cache or upstream) one credential
            (``Authorization`` header) may hold at once on one context; more get a 429
            with ``Retry-After``. Per context: every client of ``kubemux proxy`` sends the
            same token, and one context's load must never refuse another's.
        watch_write_timeout: Seconds a watch's write may take at most (a client that
            stops reading is cut off: its connection closes; checked every quarter of it).
            ``watch.idle_timeout`` (10 s) is shorter and cuts it first, unless raised.
        max_concurrent_scans: Selector scans (a LIST with a label or field selector looks
            at every object) running at once; more wait their turn, first come first
            served. They share the event loop with every other client.
        scan_slice: Seconds a scan works before it yields the event loop to the others
            (the snapshot it reads is immutable: it goes on where it was).
        max_connections: Connections :class:`~kubemux.proxy.ProxyServer` keeps open at once,
            and never more than the open-file limit less a quarter; at the cap the oldest
            connection that has not yet sent a request with the token is closed to make
            room (idle sockets never keep the token holder out).
        handshake_timeout: Seconds a connection to :class:`~kubemux.proxy.ProxyServer` has
            to finish its TLS handshake (asyncio's default is 60).
        http2: Serve HTTP/2 (ALPN ``h2``) beside HTTP/1.1 on the TLS port.
        max_streams_per_connection: Concurrent HTTP/2 streams per connection (the API
            server's 250); a client resetting streams whose work still runs gets
            REFUSED_STREAM past it.
        watch: Downstream watches: what a watcher may hold (events and bytes), the idle
            time after which a watcher that does not read is cut, bookmarks, pacing.
        user_tokens: Every client sends its own bearer token for the context's cluster;
            reads from the cache are authorized per user as the API server would, the
            rest goes upstream with the user's token (``docs/many-users.md``).
        audit_log: With ``user_tokens``, a file to append a JSON line to per request
            (written by ``ProxyServer``; mounted, run ``proxy.users.audit.run()`` yourself).
    """

    max_body_size: int = 3 * 1024 * 1024
    body_timeout: float = 60.0
    response_timeout: float = 60.0
    read_timeout: float = 60.0
    start_timeout: float = 35.0
    discovery_ttl: float = 600.0
    cache_reads: bool = True
    max_upstream_streams: int = 50
    wait_timeout: float = 3.0
    read_your_writes_timeout: float = 3.0
    consistent_reads: bool = False
    consistent_wait_timeout: float = 0.1
    max_watches_per_credential: int = 16384
    watch_write_timeout: float = 30.0
    max_concurrent_scans: int = 2
    scan_slice: float = 0.001
    max_connections: int = 4096
    handshake_timeout: float = 10.0
    http2: bool = True
    max_streams_per_connection: int = 250
    watch: WatchLimits = dataclasses.field(default_factory=WatchLimits)
    user_tokens: bool = False
    audit_log: str | None = None


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class ProxyStatistics:
    """What a :class:`Proxy` is doing, at one instant (``Proxy.statistics()``).

    Attributes:
        watches: Watches open (from the cache or passed through), every credential.
        upstream_streams: Streams open upstream (watches, ``follow``, exec ...), every
            context.
        scans_running: Selector scans running (at most ``max_concurrent_scans``).
        scans_waiting: Selector scans waiting for their turn.
        pins: Snapshots pinned for continue tokens.
        reads: Per (context, resource): reads served from the cache, waited, sent
            upstream and why, probes sent (see :class:`~kubemux.proxy.ReadStatistics`).
    """

    watches: int
    upstream_streams: int
    scans_running: int
    scans_waiting: int
    pins: int
    reads: tuple[ReadStatistics, ...] = ()
