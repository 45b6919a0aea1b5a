"""Prometheus metrics for a :class:`~kubemux.WatcherRegistry` (extra: ``kubemux[metrics]``).

A custom collector reads :meth:`WatcherRegistry.status() <kubemux.WatcherRegistry.status>` when
Prometheus scrapes, and at no other time: the informers keep their counters whether or not
anything scrapes them (an integer add per event, no extra clock read), a context that goes
(removed, stopped, reaped) disappears from the next scrape by itself, and the labels are
bounded by what the application watches, never by the objects:

- ``context``: the kubeconfig context (only those in use: starting, running, failing);
- ``resource``: the informer's resource (``pods``, ``deployments.apps``);
- ``scope``: the namespace an informer is limited to, or ``*`` for all namespaces and for
  cluster-scoped resources. Informers that differ only by their selectors are added together;
- ``view``: ``objects`` (full objects, ``watch()``) or ``table`` (the server's rows,
  ``table()``, the dashboard's live table), so the two views of one resource stay apart;
- ``type`` (``kubemux_errors_total`` only): an exception class name (``Forbidden``,
  ``ServerTimeout``), at most 16 per informer, further ones counted as ``other``.

Contexts that are known but idle (never started, or stopped) have no series of their own:
``kubemux_contexts_by_state`` counts them, so a kubeconfig of thousands of contexts costs
nothing until they are used.

Usage::

    import prometheus_client
    import kubemux.metrics

    async with kubemux.WatcherRegistry.from_kubeconfig() as registry:
        with kubemux.metrics.registered(registry):      # into prometheus_client.REGISTRY
            ...                                           # serve generate_latest() somewhere

Scrape from the registry's event loop (an ASGI or aiohttp handler, as
``prometheus_client.make_asgi_app`` does): a scrape from another thread (``start_http_server``)
is handed over to that loop and waits at most ``thread_timeout`` seconds for it.

Fields that a status does not carry are skipped, so the collector works with any version of
:class:`~kubemux.ContextStatus` and :class:`~kubemux.InformerStatus`.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import threading
import time
import weakref
from collections.abc import Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

try:
    from prometheus_client import REGISTRY, CollectorRegistry
    from prometheus_client.metrics_core import (
        CounterMetricFamily,
        GaugeMetricFamily,
        Metric,
    )
    from prometheus_client.registry import Collector
except ImportError as exc:  # pragma: no cover - depends on the install
    raise ImportError(
        "kubemux.metrics needs prometheus-client: pip install 'kubemux[metrics]'"
    ) from exc

if TYPE_CHECKING:
    from ._registry.registry import WatcherRegistry

__all__ = [
    "ALL_SCOPES",
    "KubemuxCollector",
    "ProxyReadsCollector",
    "register",
    "registered",
    "unregister",
]

log = logging.getLogger(__name__)

ALL_SCOPES = "*"
"""The ``scope`` label of an informer over all namespaces, or of a cluster-scoped resource."""

# States known today; a state outside these still gets its series (set to 1).
_CONTEXT_STATES = ("idle", "starting", "running", "backing off", "error", "stopping")
_INFORMER_STATES = ("listing", "watching", "backing off", "relisting", "error", "stopped")

_CTX = ("context",)
_INF = ("context", "resource", "scope", "view")


def _counter(name: str, doc: str, labels: Iterable[str]) -> CounterMetricFamily:
    return CounterMetricFamily(name, doc, labels=list(labels))


def _gauge(name: str, doc: str, labels: Iterable[str]) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, doc, labels=list(labels))


class _Families:
    """Every metric family of one scrape (also the empty ones that ``describe()`` returns)."""

    def __init__(self, prefix: str) -> None:
        p = prefix
        # registry
        self.contexts = _gauge(f"{p}_contexts", "Contexts in the kubeconfig.", ())
        self.kubeconfig_syncs = _counter(
            f"{p}_kubeconfig_syncs", "Times the kubeconfig was read again.", ()
        )
        self.kubeconfig_errors = _gauge(
            f"{p}_kubeconfig_errors",
            "Kubeconfig files that fail to parse now (their last good contexts are kept).",
            (),
        )
        self.invalid_contexts = _gauge(
            f"{p}_invalid_contexts", "Contexts in the kubeconfig that cannot be used.", ()
        )
        self.subscribers = _gauge(f"{p}_subscribers", "Open subscriptions.", ())
        self.subscriber_overflows = _counter(
            f"{p}_subscriber_overflows",
            "Subscriptions closed because their consumer fell behind.",
            (),
        )
        # shared watches (kubemux.share): this replica's part in spreading the leaders
        self.share_slots_led = _gauge(
            f"{p}_share_slots_led", "Shared slots this replica leads.", ()
        )
        self.share_slots_preferred = _gauge(
            f"{p}_share_slots_preferred",
            "Shared slots the placement hash prefers this replica for.",
            (),
        )
        self.share_handovers = _counter(
            f"{p}_share_handovers",
            "Shared slots this replica handed over to their preferred replica.",
            (),
        )
        self.contexts_by_state = _gauge(
            f"{p}_contexts_by_state", "Contexts in each state (idle ones included).", ("state",)
        )
        # context (idle contexts, which hold nothing, have no series of their own)
        self.context_state = _gauge(
            f"{p}_context_state",
            "1 for the context's current state, 0 for the others.",
            (*_CTX, "state"),
        )
        self.context_generation = _gauge(
            f"{p}_context_generation",
            "The running generation of the context (grows on every restart).",
            _CTX,
        )
        self.context_retry_in = _gauge(
            f"{p}_context_retry_in_seconds",
            "Seconds until a failed start may be tried again.",
            _CTX,
        )
        self.context_credential_refreshes = _counter(
            f"{p}_context_credential_refreshes",
            "Credential refreshes of the context's current generation.",
            _CTX,
        )
        # informer
        self.informers = _gauge(
            f"{p}_informers",
            "Informers by state.",
            (*_INF, "state"),
        )
        self.synced = _gauge(f"{p}_informers_synced", "Informers that have synced.", _INF)
        self.objects = _gauge(f"{p}_objects", "Objects cached.", _INF)
        self.cached_bytes = _gauge(f"{p}_cached_bytes", "Bytes of objects cached.", _INF)
        self.events = _counter(
            f"{p}_events",
            "Changes applied to the cache after the first LIST: watch events (ADDED, MODIFIED, "
            "DELETED) and the differences relists found.",
            _INF,
        )
        self.relists = _counter(f"{p}_relists", "Full LISTs after the first one.", _INF)
        self.reconnects = _counter(f"{p}_reconnects", "Watches opened again.", _INF)
        self.skipped_lines = _counter(
            f"{p}_skipped_lines", "Watch lines that could not be decoded (not cached).", _INF
        )
        self.errors = _counter(
            f"{p}_errors", "Informer failures by exception class name.", (*_INF, "type")
        )
        self.failing = _gauge(
            f"{p}_informers_failing", "Informers whose last attempt failed.", _INF
        )
        self.last_list = _gauge(
            f"{p}_last_list_timestamp_seconds",
            "Unix time of the last completed LIST (the latest over the informers).",
            _INF,
        )
        self.watch_age = _gauge(
            f"{p}_watch_age_seconds", "Seconds since the current watch was opened.", _INF
        )
        self.last_event_age = _gauge(
            f"{p}_last_event_age_seconds",
            "Seconds since the last watch event or bookmark.",
            _INF,
        )

    def all(self) -> list[Metric]:
        return [m for m in vars(self).values() if isinstance(m, Metric)]


def _name(value: object) -> str:
    """A state as text, whether the status holds a str or an Enum."""
    if isinstance(value, enum.Enum):
        return str(value.value)
    return str(value)


def _states(value: object, known: tuple[str, ...]) -> tuple[str, ...]:
    if isinstance(value, enum.Enum):
        return tuple(str(m.value) for m in type(value))
    name = str(value)
    return known if name in known else (*known, name)


def _scope(informer: object) -> str:
    namespace = getattr(informer, "namespace", None)
    return namespace or ALL_SCOPES


class KubemuxCollector(Collector):
    """Reads one :class:`~kubemux.WatcherRegistry`'s status at each scrape.

    Args:
        watchers: The registry to report on.
        prefix: The first part of every metric name.
        thread_timeout: How long a scrape from another thread waits for the event loop.
    """

    def __init__(
        self, watchers: WatcherRegistry, *, prefix: str = "kubemux", thread_timeout: float = 5.0
    ) -> None:
        self.watchers = watchers
        self.prefix = prefix
        self.thread_timeout = thread_timeout
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: int | None = None
        with contextlib.suppress(RuntimeError):
            self._loop = asyncio.get_running_loop()
            self._thread = threading.get_ident()

    def describe(self) -> Iterable[Metric]:
        """The metric families, without samples (so registering reads no status)."""
        return _Families(self.prefix).all()

    def collect(self) -> Iterable[Metric]:
        """One scrape: the registry's status as metric families."""
        try:
            status = self._status()
        except Exception:  # a scrape must not fail over a registry that cannot answer
            log.debug("kubemux metrics: no status to report", exc_info=True)
            return []
        return self._families(status)

    def _status(self) -> Any:
        loop = self._loop
        if loop is None or self._thread == threading.get_ident() or not loop.is_running():
            return self.watchers.status()

        async def snapshot() -> Any:
            return self.watchers.status()

        future = asyncio.run_coroutine_threadsafe(snapshot(), loop)
        return future.result(timeout=self.thread_timeout)

    def _families(self, status: Any) -> list[Metric]:
        f = _Families(self.prefix)
        now = time.time()
        contexts: Mapping[str, Any] = getattr(status, "contexts", {})
        f.contexts.add_metric([], len(contexts))
        _add(f.kubeconfig_syncs, [], getattr(status, "kubeconfig_syncs", None))
        f.kubeconfig_errors.add_metric([], len(getattr(status, "kubeconfig_errors", {})))
        f.invalid_contexts.add_metric([], len(getattr(status, "invalid_contexts", {})))
        _add(f.subscribers, [], getattr(status, "subscribers", None))
        _add(f.subscriber_overflows, [], getattr(status, "subscriber_overflows", None))
        share = getattr(status, "share", None)
        if share is not None:  # a registry that shares
            _add(f.share_slots_led, [], getattr(share, "leads", None))
            _add(f.share_slots_preferred, [], getattr(share, "prefers", None))
            _add(f.share_handovers, [], getattr(share, "handovers", None))

        by_state: dict[str, int] = dict.fromkeys(_CONTEXT_STATES, 0)
        for name, ctx in contexts.items():
            state = getattr(ctx, "state", None)
            if state is None:
                continue
            current = _name(state)
            by_state[current] = by_state.get(current, 0) + 1
            if _is_idle(ctx, current):
                continue  # a kubeconfig of 5,000 contexts costs no series until they are used
            for s in _states(state, _CONTEXT_STATES):
                f.context_state.add_metric([name, s], 1.0 if s == current else 0.0)
            _add(f.context_generation, [name], getattr(ctx, "generation", None))
            _add(f.context_retry_in, [name], getattr(ctx, "retry_in", None))
            _add(f.context_credential_refreshes, [name], _refreshes(ctx))
            self._informers(f, name, getattr(ctx, "informers", ()), now)
        for s, n in by_state.items():
            f.contexts_by_state.add_metric([s], n)
        return f.all()

    def _informers(self, f: _Families, context: str, informers: Iterable[Any], now: float) -> None:
        # informers that differ only by selectors share one series: sum or take the latest
        groups: dict[tuple[str, str, str], list[Any]] = {}
        for inf in informers:
            view = str(getattr(inf, "view", "objects"))
            groups.setdefault((str(getattr(inf, "resource", "?")), _scope(inf), view), []).append(
                inf
            )
        for (resource, scope, view), members in groups.items():
            labels = [context, resource, scope, view]
            counts: dict[str, int] = {}
            known: tuple[str, ...] = _INFORMER_STATES
            for inf in members:
                state = getattr(inf, "state", None)
                if state is None:
                    continue
                known = _states(state, known)
                counts[_name(state)] = counts.get(_name(state), 0) + 1
            if counts:
                for s in known:
                    f.informers.add_metric([*labels, s], counts.get(s, 0))
            _sum(f.synced, labels, [bool(getattr(i, "has_synced", False)) for i in members])
            _sum(f.objects, labels, [getattr(i, "objects", None) for i in members])
            _sum(f.cached_bytes, labels, [getattr(i, "bytes_cached", None) for i in members])
            _sum(f.events, labels, [getattr(i, "events_applied", None) for i in members])
            _sum(f.relists, labels, [getattr(i, "relists", None) for i in members])
            _sum(f.reconnects, labels, [getattr(i, "reconnects", None) for i in members])
            _sum(f.skipped_lines, labels, [getattr(i, "skipped_lines", None) for i in members])
            _sum(f.failing, labels, [bool(getattr(i, "last_error", None)) for i in members])
            by_type: dict[str, float] = {}
            for inf in members:
                for kind, n in (getattr(inf, "errors_by_type", None) or {}).items():
                    by_type[str(kind)] = by_type.get(str(kind), 0) + n
            for kind, n in sorted(by_type.items()):
                f.errors.add_metric([*labels, kind], n)
            _latest(f.last_list, labels, [getattr(i, "last_sync", None) for i in members])
            _age(f.watch_age, labels, [getattr(i, "watch_started", None) for i in members], now)
            _age(f.last_event_age, labels, [getattr(i, "last_event", None) for i in members], now)


def _refreshes(ctx: Any) -> Any:
    """A context's credential refreshes: ``credential.refreshes`` (or a flat field)."""
    flat = getattr(ctx, "credential_refreshes", None)
    if flat is not None:
        return flat
    return getattr(getattr(ctx, "credential", None), "refreshes", None)


def _is_idle(ctx: Any, state: str) -> bool:
    """Known but not in use: no generation, no informer, no failure waiting for a retry."""
    return (
        state == "idle"
        and getattr(ctx, "generation", None) is None
        and not getattr(ctx, "informers", ())
        and getattr(ctx, "retry_in", None) is None
        and not getattr(ctx, "last_error", None)
    )


def _add(family: GaugeMetricFamily | CounterMetricFamily, labels: list[str], v: Any) -> None:
    if isinstance(v, int | float):
        family.add_metric(labels, float(v))


def _sum(family: GaugeMetricFamily | CounterMetricFamily, labels: list[str], vs: list[Any]) -> None:
    present = [float(v) for v in vs if isinstance(v, int | float)]
    if present:
        family.add_metric(labels, sum(present))


def _latest(family: GaugeMetricFamily, labels: list[str], vs: list[Any]) -> None:
    present = [float(v) for v in vs if isinstance(v, int | float)]
    if present:
        family.add_metric(labels, max(present))


def _age(family: GaugeMetricFamily, labels: list[str], vs: list[Any], now: float) -> None:
    """Seconds since the most recent of ``vs`` (Unix times)."""
    present = [float(v) for v in vs if isinstance(v, int | float)]
    if present:
        family.add_metric(labels, max(0.0, now - max(present)))


_collectors: weakref.WeakKeyDictionary[CollectorRegistry, list[KubemuxCollector]] = (
    weakref.WeakKeyDictionary()
)


def register(
    watchers: WatcherRegistry,
    registry: CollectorRegistry = REGISTRY,
    *,
    prefix: str = "kubemux",
) -> KubemuxCollector:
    """Report ``watchers`` in a Prometheus ``registry`` (default: the global one).

    Call it from the event loop that runs ``watchers``: scrapes from other threads are then
    handed to that loop. One :class:`~kubemux.WatcherRegistry` per Prometheus registry and
    prefix: a second one raises ``ValueError`` (duplicated timeseries).
    """
    collector = KubemuxCollector(watchers, prefix=prefix)
    registry.register(collector)
    _collectors.setdefault(registry, []).append(collector)
    return collector


def unregister(watchers: WatcherRegistry, registry: CollectorRegistry = REGISTRY) -> bool:
    """Stop reporting ``watchers`` in ``registry``; False if it was not registered there."""
    found = False
    kept: list[KubemuxCollector] = []
    for collector in _collectors.get(registry, []):
        if collector.watchers is watchers:
            registry.unregister(collector)
            found = True
        else:
            kept.append(collector)
    if kept:
        _collectors[registry] = kept
    else:
        _collectors.pop(registry, None)
    return found


@contextlib.contextmanager
def registered(
    watchers: WatcherRegistry,
    registry: CollectorRegistry = REGISTRY,
    *,
    prefix: str = "kubemux",
) -> Iterator[KubemuxCollector]:
    """:func:`register` for the duration of a ``with`` block, then :func:`unregister`."""
    collector = register(watchers, registry, prefix=prefix)
    try:
        yield collector
    finally:
        unregister(watchers, registry)


class ProxyReadsCollector(Collector):
    """The reads of a :class:`~kubemux.proxy.Proxy` (``Proxy.statistics().reads``), per
    ``context`` and ``resource``: served from the cache, waited (and how long), sent
    upstream by ``reason`` (``floor``, ``probe``, ``unsupported``), probes sent, and the
    floor. ``kubemux proxy`` serves them (with the registry's) at ``/metrics``.
    Register it as any collector: ``registry.register(ProxyReadsCollector(proxy))``."""

    def __init__(self, proxy: Any, *, prefix: str = "kubemux") -> None:
        self.proxy = proxy
        self.prefix = prefix

    def describe(self) -> Iterable[Metric]:
        return self._families(())

    def collect(self) -> Iterable[Metric]:
        try:
            reads = self.proxy.statistics().reads
        except Exception:  # a scrape must not fail over a proxy that cannot answer
            log.debug("kubemux metrics: no proxy statistics", exc_info=True)
            return []
        return self._families(reads)

    def _families(self, reads: Iterable[Any]) -> list[Metric]:
        p, labels = f"{self.prefix}_proxy", ("context", "resource")
        cached = _counter(f"{p}_reads_from_cache", "Reads answered from the cache.", labels)
        waited = _counter(
            f"{p}_reads_waited",
            "Reads that waited for the cache to reach a floor or a probe's version.",
            labels,
        )
        seconds = _counter(f"{p}_reads_waited_seconds", "Time those reads waited.", labels)
        upstream = _counter(
            f"{p}_reads_upstream",
            "Reads sent upstream, by reason: floor (the cache did not reach what the proxy "
            "had shown in time), probe (nor the server's version, consistent reads), "
            "unsupported (the cache cannot answer that read).",
            (*labels, "reason"),
        )
        probes = _counter(
            f"{p}_probes", "limit=1 LISTs sent to learn the server's version.", labels
        )
        floor = _gauge(f"{p}_read_floor", "The resourceVersion reads must reach.", labels)
        for r in reads:
            key = [str(r.context), str(r.resource)]
            cached.add_metric(key, r.from_cache)
            waited.add_metric(key, r.waited)
            seconds.add_metric(key, r.waited_seconds)
            for reason in ("floor", "probe", "unsupported"):
                upstream.add_metric([*key, reason], getattr(r, f"upstream_{reason}"))
            probes.add_metric(key, r.probes)
            floor.add_metric(key, r.floor)
        return [cached, waited, seconds, upstream, probes, floor]
