"""Reads that never go back in time, and consistent reads on request (issue 29).

**Monotonic reads** (always on). For each (context, resource) the proxy keeps a *floor*
(:class:`~.marks.WriteMarks`): the highest resourceVersion it has shown for it, from
every answer that passed through (a write's object, a GET's object, a LIST's list) and
every answer it gave from the cache. A read with ``resourceVersion`` unset (GET, LIST, or
a WATCH that starts from "now") is served from the cache only once the cache has reached
the floor: it waits, bounded, and goes upstream when the cache does not get there in time.
So a client never sees an older state than one the proxy has shown it, whichever way that
answer went; read-your-writes is the case of a write's answer. A relist or a restart that
brings the cache back below a floor sends reads upstream until it has caught up again.

**Consistent reads** (``consistent_reads=True``). Such a read must also be at least as fresh
as the API server was when it arrived. The proxy learns the server's resourceVersion
with a ``limit=1`` LIST of the resource (:class:`Probes`: one probe in flight per
(context, resource, namespace); reads arriving meanwhile share the next one, never the
one already sent, whose answer may predate them), then waits, bounded
(``consistent_wait_timeout``), until the cache has reached it, else goes upstream. A
resource whose cache has heard nothing for longer than that wait (a quiet one) goes
upstream at once: only an event or a bookmark at or past the probe's version proves the
cache fresh, and a quiet resource's next one is about a minute away (kube-apiserver's
bookmarks), so waiting would only add latency before the same upstream read.

:class:`ReadCounters` counts, per (context, resource), what happened to each read: served
from the cache (and how many waited, how long), sent upstream and why (``floor``: the
floor not reached in time; ``probe``: a consistent read's probe not reached, or the probe
failed; ``unsupported``: the cache cannot answer that request), probes sent.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Awaitable, Callable, Hashable, Mapping
from typing import Any, Final

import aiohttp
import anyio
import msgspec

from ..._cache.snapshot import Key
from ..._errors import KubemuxError
from ..._registry.registry import WatcherRegistry
from ..._resources import Resource
from ..._wire.versions import rv_int
from .._api.statuses import ProxyStatusError
from .marks import WriteMarks
from .served import ServedStore

__all__ = [
    "REASONS",
    "Freshness",
    "GoUpstream",
    "Probes",
    "ReadCounters",
    "ReadStatistics",
    "read_version",
    "shows_state",
]

REASONS: Final = ("floor", "probe", "unsupported")


# ------------------------------------------------------------------ passed-through answers
class _Meta(msgspec.Struct, gc=False):
    resourceVersion: str = ""


class _Top(msgspec.Struct, gc=False):
    metadata: _Meta | None = None


_top = msgspec.json.Decoder(_Top)
# the head of a built-in List or Table as kube-apiserver writes it (its Go field order)
_LIST_HEAD = re.compile(
    rb'\A\s*\{"kind":"[A-Za-z0-9]{1,100}","apiVersion":"[A-Za-z0-9./-]{1,200}",'
    rb'"metadata":\{"resourceVersion":"([0-9]{1,19})"'
)


def read_version(body: bytes, complete: bool) -> int | None:
    """The resourceVersion a passed-through GET or LIST answer shows: its top-level
    ``metadata.resourceVersion`` (an object's, or a List's or Table's). ``body`` is the
    whole answer when ``complete``, else its head only (a large List: read from the head
    when it starts as kube-apiserver writes a built-in List). None when it cannot tell
    (not JSON, no version, protobuf): the floor is then not raised."""
    if not complete:
        found = _LIST_HEAD.match(body)
        return rv_int(found.group(1).decode()) if found else None
    try:
        top = _top.decode(body)
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
        return None
    if top.metadata is None:
        return None
    return rv_int(top.metadata.resourceVersion) or None


# ------------------------------------------------------------------ counters
@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class ReadStatistics:
    """What the proxy did with the reads of one (context, resource) so far
    (``Proxy.statistics().reads``).

    Attributes:
        context: The kubeconfig context.
        resource: The resource's full name (``pods``, ``deployments.apps``).
        from_cache: Reads (GET, LIST, WATCH) answered from the cache.
        waited: Of those and of the reads that then went upstream, how many waited for
            the cache to reach a floor or a probe's version.
        waited_seconds: The time they waited, all together.
        upstream_floor: Reads sent upstream because the cache did not reach the floor
            (what the proxy had shown) in time.
        upstream_probe: Consistent reads sent upstream because the cache did not reach the
            probe's version in time (or had heard nothing for longer), or the probe failed.
        upstream_unsupported: Reads the cache cannot answer (an exact version it no longer
            holds, a CRD's field selector, a Table joined with objects that disagree ...).
        probes: ``limit=1`` LISTs sent to learn the server's resourceVersion.
        floor: The resourceVersion reads with it unset must be at least at (0: none).
    """

    context: str
    resource: str
    from_cache: int
    waited: int
    waited_seconds: float
    upstream_floor: int
    upstream_probe: int
    upstream_unsupported: int
    probes: int
    floor: int


@dataclasses.dataclass(slots=True)
class _Counts:
    from_cache: int = 0
    waited: int = 0
    waited_seconds: float = 0.0
    floor: int = 0
    probe: int = 0
    unsupported: int = 0
    probes: int = 0


class ReadCounters:
    """Per (context, resource) counts of :class:`ReadStatistics`; bounded in keys (the
    least recently counted go first past ``max_keys``)."""

    def __init__(self, max_keys: int = 4096) -> None:
        self.max_keys = max_keys
        self._counts: dict[tuple[str, str], _Counts] = {}

    def __len__(self) -> int:
        return len(self._counts)

    def _get(self, context: str, resource: str) -> _Counts:
        key = (context, resource)
        counts = self._counts.pop(key, None)
        if counts is None:
            counts = _Counts()
            while len(self._counts) >= self.max_keys:
                del self._counts[next(iter(self._counts))]
        self._counts[key] = counts
        return counts

    def cached(self, context: str, resource: str) -> None:
        self._get(context, resource).from_cache += 1

    def upstream(self, context: str, resource: str, reason: str) -> None:
        counts = self._get(context, resource)
        if reason == "floor":
            counts.floor += 1
        elif reason == "probe":
            counts.probe += 1
        else:
            counts.unsupported += 1

    def waited(self, context: str, resource: str, seconds: float) -> None:
        counts = self._get(context, resource)
        counts.waited += 1
        counts.waited_seconds += seconds

    def probed(self, context: str, resource: str) -> None:
        self._get(context, resource).probes += 1

    def statistics(self, floor: Callable[[str, str], int]) -> tuple[ReadStatistics, ...]:
        """Every (context, resource) counted; ``floor(context, resource)`` its floor."""
        return tuple(
            ReadStatistics(
                context=context,
                resource=resource,
                from_cache=c.from_cache,
                waited=c.waited,
                waited_seconds=round(c.waited_seconds, 6),
                upstream_floor=c.floor,
                upstream_probe=c.probe,
                upstream_unsupported=c.unsupported,
                probes=c.probes,
                floor=floor(context, resource),
            )
            for (context, resource), c in sorted(self._counts.items())
        )


# ------------------------------------------------------------------ probes
class _Round:
    """One probe, and the reads that share its answer."""

    __slots__ = ("done", "result")

    def __init__(self) -> None:
        self.done = anyio.Event()
        self.result: int | None = None


class Probes:
    """The server's current resourceVersion per key, one probe in flight per key.

    A read that finds no probe in flight sends one and takes its answer. A read that finds
    one in flight takes the *next* one (sent once the one in flight has answered, for every
    read that arrived meanwhile): the one in flight may have been answered before the read
    arrived, so its version could be older than the server's when the read came.

    Args:
        probe: Sends one probe for a key; its resourceVersion, or None (it failed). Must
            end within a bounded time (it runs shielded from cancellation, so that reads
            sharing it are never left waiting for a read that went away).
    """

    def __init__(self, probe: Callable[[Hashable], Awaitable[int | None]]) -> None:
        self._probe = probe
        self._running: dict[Hashable, _Round] = {}
        self._next: dict[Hashable, _Round] = {}
        self.sent = 0

    def __repr__(self) -> str:
        return f"<Probes running={len(self._running)} sent={self.sent}>"

    async def current(self, key: Hashable) -> int | None:
        """The server's resourceVersion, from a probe sent after this call began."""
        later = self._next.get(key)
        if later is not None:  # the next probe has a leader already: share it
            await later.done.wait()
            return later.result
        running = self._running.get(key)
        if running is None:
            return await self._lead(key, _Round())
        later = self._next[key] = _Round()
        try:
            with anyio.CancelScope(shield=True):
                await running.done.wait()
        finally:
            del self._next[key]
        return await self._lead(key, later)

    async def _lead(self, key: Hashable, round_: _Round) -> int | None:
        self._running[key] = round_
        self.sent += 1
        try:
            with anyio.CancelScope(shield=True):
                round_.result = await self._probe(key)
        finally:
            if self._running.get(key) is round_:
                del self._running[key]
            round_.done.set()
        return round_.result


# ------------------------------------------------------------------ the check
def shows_state(verb: str, params: Mapping[str, str], options: Any) -> bool:
    """Whether a read shows a state, and so waits for the floors: not a page (it reads what
    its first page pinned) nor a watch resumed from N without its initial events (it sends
    what followed N). ``options``: the :class:`~.._query.options.ListOptions` (None: GET)."""
    if "continue" in params:
        return False
    if verb != "watch" or params.get("resourceVersion", "") in ("", "0"):
        return True
    return bool(options is not None and options.send_initial_events)


class GoUpstream(Exception):
    """The cache is not fresh enough for this read: it goes upstream (``reason``)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


ProbeKey = tuple[str, Resource, str | None]  # context, resource, namespace


class Freshness:
    """Whether a read may be answered from its stores now (see the module docstring).

    Args:
        registry: Whose upstreams the probes go to.
        marks: The floors.
        floor_timeout: Seconds a read waits for the cache to reach a floor.
        consistent: Consistent reads (probe the server for reads with resourceVersion unset).
        consistent_timeout: Seconds a consistent read waits for the cache to reach the
            probe's version; also how long a cache must have been silent to count as quiet.
        probe_timeout: Seconds a probe may take.
    """

    def __init__(
        self,
        registry: WatcherRegistry,
        marks: WriteMarks,
        *,
        floor_timeout: float = 3.0,
        consistent: bool = False,
        consistent_timeout: float = 0.1,
        probe_timeout: float = 10.0,
    ) -> None:
        self.registry = registry
        self.marks = marks
        self.floor_timeout = floor_timeout
        self.consistent = consistent
        self.consistent_timeout = consistent_timeout
        self.probe_timeout = probe_timeout
        self.counters = ReadCounters()
        self.probes = Probes(self._probe)  # type: ignore[arg-type]

    def __repr__(self) -> str:
        return f"<Freshness consistent={self.consistent} {self.probes!r}>"

    def statistics(self) -> tuple[ReadStatistics, ...]:
        def floor(context: str, resource: str) -> int:
            plural, _, group = resource.partition(".")
            return self.marks.floor(context, group, plural)

        return self.counters.statistics(floor)

    async def _probe(self, key: ProbeKey) -> int | None:
        """A ``limit=1`` LIST of the resource: the server's resourceVersion now."""
        context, resource, namespace = key
        self.counters.probed(context, resource.name)
        try:
            with anyio.fail_after(self.probe_timeout):
                async with (
                    self.registry.upstream(context) as up,
                    up.request(
                        "GET",
                        resource.path(namespace) + "?limit=1",
                        headers=[("Accept", "application/json")],
                        timeouts=aiohttp.ClientTimeout(total=None, sock_connect=10.0),
                    ) as resp,
                ):
                    if resp.status != 200:
                        return None
                    body = await resp.content.read(1024 * 1024 + 1)
        except (TimeoutError, KubemuxError, aiohttp.ClientError, OSError):
            return None
        return read_version(body, complete=len(body) <= 1024 * 1024)

    async def check(
        self, context: str, resource: Resource, stores: list[ServedStore], *, unset: bool
    ) -> str | None:
        """None when the read may be served from ``stores`` (they have reached every
        floor, and for a consistent read the server's version), else why it goes upstream
        (``floor`` or ``probe``). ``unset``: the read has resourceVersion unset (and no
        continue token)."""
        started: float | None = None
        try:
            mark = self.marks.get(context, resource.group, resource.plural)
            for served in stores:
                floor = max(served.shown, mark.in_namespace(served.namespace) if mark else 0)
                if floor > served.current_rv():
                    started = started or anyio.current_time()
                    if not await _reach(served, floor, self.floor_timeout):
                        return "floor"
                listed = mark.listed if mark is not None else 0
                if listed > served.current_rv():
                    started = started or anyio.current_time()
                    # only a busy resource is worth waiting for: a quiet one hears the
                    # server's later versions in its next bookmark, a minute away
                    if served.lag > self.consistent_timeout or not await _reach(
                        served, listed, self.floor_timeout
                    ):
                        return "floor"
                if mark is not None and mark.gone:
                    started = started or anyio.current_time()
                    gone = set(mark.gone)  # (more may be added while this read waits)
                    if not await _absent(served, gone, self.floor_timeout):
                        return "floor"
                    self.marks.satisfied(context, resource.group, resource.plural, gone)
            if not (self.consistent and unset):
                return None
            namespace = stores[0].namespace
            started = started or anyio.current_time()
            target = await self.probes.current((context, resource, namespace))
            if target is None:
                return "probe"
            for served in stores:
                if target <= served.current_rv():
                    continue
                if served.lag > self.consistent_timeout:
                    return "probe"  # quiet: see the module docstring
                if not await _reach(served, target, self.consistent_timeout):
                    return "probe"
            return None
        finally:
            if started is not None:
                self.counters.waited(context, resource.name, anyio.current_time() - started)


async def _reach(served: ServedStore, target: int, timeout: float) -> bool:  # noqa: ASYNC109
    try:
        await served.wait_for(target, timeout)
    except ProxyStatusError:  # not reached in time
        return False
    return True


async def _absent(served: ServedStore, gone: set[Key], timeout: float) -> bool:  # noqa: ASYNC109
    get_raw = served.store.get_raw

    def absent() -> bool:
        return all(get_raw(ns or None, name) is None for ns, name in gone)

    return await served.wait_until(absent, timeout)
