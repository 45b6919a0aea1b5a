"""Per-context API discovery and kubectl's resource name resolution.

Two halves:

* **Sync and pure** (:mod:`.discovery_parse`, re-exported here): :func:`parse_aggregated`, :func:`parse_resource_list` turn discovery
  documents into :class:`~kubemux.Resource` values (every served version, in kubectl's
  priority order: groups as the server lists them, core first, each group's preferred
  version first); :func:`preferred` keeps one version per resource; :func:`resolve` finds
  what a kubectl-style name means over such a list, raising :class:`UnknownResource` with
  suggestions.
* **Async**: :class:`Discovery` fetches one context's discovery through its
  :class:`~kubemux._http.client.ContextClient` (aggregated v2 / v2beta1 in two requests, else
  legacy discovery per group version), caches it, refreshes it when it is older than
  ``refresh_period`` and, at most once per call and once per ``min_refresh_interval``, when a
  name does not resolve (a CRD installed a second ago).
"""

from __future__ import annotations

import dataclasses
import logging
import math
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import anyio
import orjson

from .._errors import ApiError, KubemuxError, UnknownResource
from .._resources import Resource, path_segment, shown
from .._settings import WatchSettings
from .discovery_parse import (
    Dropped,
    as_list,
    as_mapping,
    check_name,
    drop_value,
    in_category,
    parse_aggregated,
    parse_resource_list,
    preferred,
    resolve,
    suggest,
)

if TYPE_CHECKING:
    from .._http.client import ContextClient

__all__ = [
    "AGGREGATED_ACCEPT",
    "Discovery",
    "in_category",
    "parse_aggregated",
    "parse_resource_list",
    "preferred",
    "resolve",
    "suggest",
]

log = logging.getLogger(__name__)

AGGREGATED_ACCEPT = (
    "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,"
    "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,"
    "application/json"
)
"""The Accept header kubectl 1.32 sends to ``/api`` and ``/apis``."""


# ------------------------------------------------------------------------------ fetching
def _is_aggregated(content_type: str) -> bool:
    return "as=APIGroupDiscoveryList" in content_type.replace(" ", "")


def _load(body: bytes, what: str) -> dict[str, Any]:
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise ApiError(200, "BadResponse", f"{what} returned invalid JSON: {exc}") from exc
    if not isinstance(doc, dict):
        raise ApiError(200, "BadResponse", f"{what} did not return a JSON object")
    return doc


_DISCOVERY_SETTINGS = WatchSettings()


class Discovery:
    """What one context's API server serves, cached, and kubectl's name resolution over it.

    Build one per context generation (it holds that generation's client). Nothing runs in
    the background: the cache is refreshed by the call that finds it older than
    ``refresh_period``, or by :meth:`resolve` on a miss, at most once per call and once per
    ``min_refresh_interval`` seconds. Concurrent refreshes share one fetch.

    Args:
        client: The context's client.
        refresh_period: Seconds after which the cached discovery is fetched again on use.
        min_refresh_interval: A miss refreshes only if the last fetch is older than this.
        request_timeout: Seconds allowed for each discovery request.
        clock: Monotonic time source (tests may pass their own).
    """

    def __init__(
        self,
        client: ContextClient,
        *,
        refresh_period: float = 600.0,
        min_refresh_interval: float = 5.0,
        request_timeout: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.client = client
        self.refresh_period = refresh_period
        self.min_refresh_interval = min_refresh_interval
        self.request_timeout = request_timeout
        self._clock = clock
        self._all: tuple[Resource, ...] | None = None
        self._preferred: tuple[Resource, ...] = ()
        self._fetched_at = -math.inf
        self._fetches = 0
        self._aggregated: bool | None = None
        self._failed_groups: tuple[str, ...] = ()
        self._dropped: tuple[str, ...] = ()
        self._lock = anyio.Lock()

    def __repr__(self) -> str:
        state = "not fetched" if self._all is None else f"{len(self._preferred)} resources"
        return f"<Discovery context={self.client.context!r} {state} fetches={self._fetches}>"

    # ------------------------------------------------------------------ reads
    @property
    def fetches(self) -> int:
        """How many times discovery was fetched."""
        return self._fetches

    @property
    def is_aggregated(self) -> bool | None:
        """Whether the server answered with aggregated discovery (None: not fetched yet)."""
        return self._aggregated

    @property
    def failed_groups(self) -> tuple[str, ...]:
        """Group versions whose legacy discovery failed at the last fetch (left out)."""
        return self._failed_groups

    @property
    def dropped(self) -> tuple[str, ...]:
        """Why entries of the last fetch were left out (names kube-apiserver could not
        serve: a version such as ``../../api/v1/secrets``), at most 100; each is logged as
        a warning once per context and value."""
        return self._dropped

    def cached(self) -> tuple[Resource, ...] | None:
        """The cached resources (preferred versions) without fetching; None before a fetch."""
        return None if self._all is None else self._preferred

    async def resources(self) -> tuple[Resource, ...]:
        """Every resource the server serves, at its preferred version, in priority order.

        Fetches discovery first if it was never fetched or is older than ``refresh_period``.

        Raises:
            ApiError, ClusterUnreachable: discovery could not be fetched and nothing is cached.

        Cancellation abandons a fetch this call started; the cache is left as it was.
        """
        await self._ensure()
        return self._preferred

    async def resolve(self, name: str | Resource) -> Resource:
        """What a kubectl-style name means on this cluster (see :func:`resolve`).

        A :class:`Resource` is returned at once, without discovery. A name that does not
        resolve triggers one refresh (unless the last fetch is younger than
        ``min_refresh_interval``) before :class:`UnknownResource` is raised.

        Raises:
            UnknownResource: the cluster serves nothing of that name.
            ApiError, ClusterUnreachable: discovery could not be fetched.
        """
        if isinstance(name, Resource):
            return name
        fetched = await self._ensure()
        try:
            return resolve(name, self._all or (), context=self.client.context)
        except UnknownResource:
            if fetched or self._clock() - self._fetched_at < self.min_refresh_interval:
                raise
        await self.refresh()
        return resolve(name, self._all or (), context=self.client.context)

    async def refresh(self) -> tuple[Resource, ...]:
        """Fetch discovery now (callers arriving during a fetch share it).

        Raises:
            ApiError, ClusterUnreachable: the fetch failed; the cache is left as it was.
        """
        before = self._fetches
        async with self._lock:
            if self._fetches == before:  # nobody refreshed while we waited
                await self._fetch()
        return self._preferred

    async def _ensure(self) -> bool:
        """Fetch if never fetched or stale; True if this call fetched."""
        if self._all is not None and self._clock() - self._fetched_at < self.refresh_period:
            return False
        before = self._fetches
        try:
            await self.refresh()
        except KubemuxError:
            if self._all is None:
                raise
            log.warning("%s: refresh failed; keeping the cached discovery", self, exc_info=True)
            return False
        return self._fetches != before

    # ------------------------------------------------------------------ fetching
    async def _get(self, path: str, accept: str) -> tuple[str, bytes]:
        settings = dataclasses.replace(_DISCOVERY_SETTINGS, request_timeout=self.request_timeout)
        return await self.client.get_raw(path, accept=accept, settings=settings)

    async def _fetch(self) -> None:
        found: list[Resource] = []
        failed: list[str] = []
        dropped: Dropped = []
        aggregated = True
        for path in ("/api", "/apis"):
            content_type, body = await self._get(path, AGGREGATED_ACCEPT)
            doc = _load(body, f"GET {path}")
            if _is_aggregated(content_type) or doc.get("kind") == "APIGroupDiscoveryList":
                found.extend(parse_aggregated(doc, core=path == "/api", dropped=dropped))
                continue
            aggregated = False
            found.extend(await self._legacy(path, doc, failed, dropped))
        self._all = tuple(found)
        self._preferred = tuple(preferred(found))
        self._aggregated = aggregated
        self._failed_groups = tuple(failed)
        self._dropped = tuple(why for _, why in dropped[:_DROPPED_KEPT])
        self._fetched_at = self._clock()
        self._fetches += 1
        _warn_once(self.client.context, self.client.server, dropped)
        log.debug("%s: fetched (%s)", self, "aggregated" if aggregated else "legacy")

    async def _legacy(
        self, path: str, doc: Mapping[str, Any], failed: list[str], dropped: Dropped
    ) -> list[Resource]:
        """Legacy discovery: one request per group version, preferred version first.

        Only group versions whose names kube-apiserver could serve are asked for (each path
        segment quoted); the rest are noted in ``dropped``.
        """
        wanted: list[str] = []  # group versions: "v1", "apps/v1"
        if path == "/api":
            for version in as_list(doc.get("versions")):
                if check_name("version", version, "a core API version", dropped):
                    wanted.append(version)
        else:
            for group in as_list(doc.get("groups")):
                if not isinstance(group, Mapping):
                    continue
                name = group.get("name")
                if not name or not check_name("group", name, "an API group", dropped):
                    continue
                versions: list[str] = []
                for entry in as_list(group.get("versions")):
                    gv = as_mapping(entry).get("groupVersion")
                    if not gv:
                        continue
                    own, _, version = gv.rpartition("/") if isinstance(gv, str) else ("", "", gv)
                    if own != name:
                        drop_value(
                            dropped,
                            gv,
                            f"group version {shown(gv)} of {name!r} dropped: another group",
                        )
                        continue
                    if check_name("version", version, f"group {name!r}", dropped):
                        versions.append(gv)
                pref = as_mapping(group.get("preferredVersion")).get("groupVersion")
                if pref in versions:
                    versions.remove(pref)
                    versions.insert(0, pref)
                wanted.extend(versions)
        results: list[list[Resource]] = [[] for _ in wanted]
        errors: list[KubemuxError] = []
        limiter = anyio.CapacityLimiter(8)

        async def one(index: int, gv: str) -> None:
            group, _, version = gv.rpartition("/")
            url = (
                f"/apis/{path_segment(group)}/{path_segment(version)}"
                if group
                else f"/api/{path_segment(version)}"
            )
            async with limiter:
                try:
                    _, body = await self._get(url, "application/json")
                    doc = _load(body, f"GET {url}")
                    results[index] = parse_resource_list(doc, gv, dropped=dropped)
                except ApiError as exc:  # one broken group (an aggregated API down): left out
                    failed.append(gv)
                    log.warning("%s: discovery of %s failed: %s", self, url, exc)
                except KubemuxError as exc:  # unreachable: raised once, after the others
                    errors.append(exc)

        async with anyio.create_task_group() as tg:
            for index, gv in enumerate(wanted):
                tg.start_soon(one, index, gv)
        if errors:
            raise errors[0]
        return [res for chunk in results for res in chunk]


_DROPPED_KEPT = 100  # reasons kept in Discovery.dropped
_WARNINGS_PER_FETCH = 20  # new warnings one fetch logs; the rest wait for the next fetch
_WARNED_MAX = 4096  # (context, server, value) remembered as warned, oldest forgotten first
_warned: dict[tuple[str, str, str], None] = {}  # insertion-ordered: a bounded FIFO


def _warn_once(context: str, server: str, dropped: Dropped) -> None:
    """Log each dropped value once per (context, server), not on every fetch.

    A hostile document may hold many bad names: one fetch logs at most
    ``_WARNINGS_PER_FETCH`` new ones, then says how many more wait for later fetches; the
    memory of what was logged is bounded (``_WARNED_MAX``).
    """
    fresh: dict[tuple[str, str, str], str] = {}
    for value, why in dropped:
        key = (context, server, value)
        if key not in _warned and key not in fresh:
            fresh[key] = why
    items = list(fresh.items())
    for key, why in items[:_WARNINGS_PER_FETCH]:
        log.warning("context %r: discovery: %s", context, why)
        _warned[key] = None
        while len(_warned) > _WARNED_MAX:
            del _warned[next(iter(_warned))]
    if len(items) > _WARNINGS_PER_FETCH:
        log.warning(
            "context %r: discovery: %d more invalid names dropped (named by later fetches)",
            context,
            len(items) - _WARNINGS_PER_FETCH,
        )
