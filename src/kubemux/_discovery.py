"""Per-context API discovery and kubectl's resource name resolution.

Two halves:

* **Sync and pure**: :func:`parse_aggregated`, :func:`parse_resource_list` turn discovery
  documents into :class:`~kubemux.Resource` values (every served version, in kubectl's
  priority order: groups as the server lists them, core first, each group's preferred
  version first); :func:`preferred` keeps one version per resource; :func:`resolve` finds
  what a kubectl-style name means over such a list, raising :class:`UnknownResource` with
  suggestions.
* **Async**: :class:`Discovery` fetches one context's discovery through its
  :class:`~kubemux._client.ContextClient` (aggregated v2 / v2beta1 in two requests, else
  legacy discovery per group version), caches it, refreshes it when it is older than
  ``refresh_period`` and, at most once per call and once per ``min_refresh_interval``, when a
  name does not resolve (a CRD installed a second ago).

Name resolution follows kubectl (``resource.Builder.mappingFor`` over client-go's
``shortcutExpander`` and discovery ``PriorityRESTMapper``):

1. ``a.b.c`` is first read as ``resource.version.group``; then any ``a.b...`` as
   ``resource.group``; a name without a dot has no group.
2. The resource part is compared lower-cased. An exact plural or singular name of a
   served resource (in that group, if one was given) stays as it is; otherwise the first short
   name that matches, in discovery order, stands for its resource (a later match is lower
   priority, as kubectl warns); with a group and no match, a short name whose group starts
   with the given group matches (``hpa.autoscal``).
3. The resources whose plural, singular or kind (any case) equal the name, in the group and
   version if given, are taken in priority order: the first wins (``events`` is the core
   ``events``, not ``events.events.k8s.io``).
"""

from __future__ import annotations

import dataclasses
import difflib
import logging
import math
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import anyio
import orjson

from ._errors import ApiError, KubemuxError, UnknownResource
from ._resources import Resource
from ._settings import WatchSettings

if TYPE_CHECKING:
    from ._client import ContextClient

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


# ------------------------------------------------------------------------------ parsing
def _strs(value: Any) -> tuple[str, ...]:
    return tuple(str(v) for v in value) if isinstance(value, list) else ()


def parse_aggregated(doc: Mapping[str, Any]) -> list[Resource]:
    """Every resource of an ``APIGroupDiscoveryList`` (v2 or v2beta1), in priority order.

    Subresources are left out. Versions come as the server lists them (preferred first).
    """
    out: list[Resource] = []
    for item in doc.get("items") or ():
        if not isinstance(item, Mapping):
            continue
        group = str((item.get("metadata") or {}).get("name") or "")
        for entry in item.get("versions") or ():
            if not isinstance(entry, Mapping) or not entry.get("version"):
                continue
            version = str(entry["version"])
            for res in entry.get("resources") or ():
                if not isinstance(res, Mapping) or not res.get("resource"):
                    continue
                kind = str((res.get("responseKind") or {}).get("kind") or "")
                out.append(
                    Resource(
                        group=group,
                        version=version,
                        plural=str(res["resource"]),
                        kind=kind,
                        namespaced=res.get("scope") != "Cluster",
                        singular=str(res.get("singularResource") or kind.lower()),
                        short_names=_strs(res.get("shortNames")),
                        categories=_strs(res.get("categories")),
                        verbs=_strs(res.get("verbs")),
                    )
                )
    return out


def parse_resource_list(doc: Mapping[str, Any]) -> list[Resource]:
    """The resources of one legacy ``APIResourceList`` (``/api/v1``, ``/apis/g/v``).

    Subresources (``pods/log``) are left out; a missing singular name is the lower-cased kind,
    as client-go guesses it.
    """
    group_version = str(doc.get("groupVersion") or "")
    group, _, version = group_version.rpartition("/")
    out: list[Resource] = []
    for res in doc.get("resources") or ():
        if not isinstance(res, Mapping):
            continue
        name = str(res.get("name") or "")
        if not name or "/" in name:
            continue
        kind = str(res.get("kind") or "")
        out.append(
            Resource(
                group=str(res.get("group") or group),
                version=str(res.get("version") or version),
                plural=name,
                kind=kind,
                namespaced=bool(res.get("namespaced")),
                singular=str(res.get("singularName") or kind.lower()),
                short_names=_strs(res.get("shortNames")),
                categories=_strs(res.get("categories")),
                verbs=_strs(res.get("verbs")),
            )
        )
    return out


def preferred(resources: Iterable[Resource]) -> list[Resource]:
    """One entry per (group, plural): the first, i.e. at the group's preferred version.

    A resource that exists only in a non-preferred version is kept at that version.
    """
    seen: set[tuple[str, str]] = set()
    out: list[Resource] = []
    for res in resources:
        ident = (res.group, res.plural)
        if ident not in seen:
            seen.add(ident)
            out.append(res)
    return out


# ------------------------------------------------------------------------------ resolution
def _split(name: str) -> list[tuple[str, str | None, str | None]]:
    """kubectl's readings of a name: (resource, group, version), most specific first."""
    readings: list[tuple[str, str | None, str | None]] = []
    if name.count(".") >= 2:
        resource, version, group = name.split(".", 2)
        readings.append((resource, group, version))
    if "." in name:
        resource, _, group = name.partition(".")
        readings.append((resource, group, None))
    else:
        readings.append((name, None, None))
    return readings


def _names(res: Resource) -> tuple[str, ...]:
    singular = res.singular or res.kind.lower()
    return (res.plural, singular, res.kind.lower()) if res.kind else (res.plural, singular)


def _expand_short(
    resources: Sequence[Resource], resource: str, group: str | None
) -> tuple[str, str | None]:
    """client-go's ``shortcutExpander.expandResourceShortcut``: (resource, group) to look up."""
    for res in resources:
        if group is not None and res.group != group:
            continue
        if resource in (res.plural, res.singular):
            return resource, group
    for res in resources:
        if group is not None and res.group != group:
            continue
        if resource in res.short_names:
            return res.plural, res.group
    if group:
        for res in resources:
            if res.group.startswith(group) and resource in res.short_names:
                return res.plural, res.group
    return resource, group


def resolve(
    name: str | Resource, resources: Sequence[Resource], *, context: str | None = None
) -> Resource:
    """What a kubectl-style name means among ``resources`` (in priority order).

    A :class:`Resource` is returned as it is. ``resources`` should hold every served version
    (as :func:`parse_aggregated` gives them) so that ``plural.version.group`` can pick a
    non-preferred version; a plain name resolves to the first match, the preferred version.

    Raises:
        UnknownResource: nothing matches (with close names as suggestions).
    """
    if isinstance(name, Resource):
        return name
    text = name.strip()
    lower = text.lower()
    if lower:
        for resource, group, version in _split(lower):
            target, target_group = _expand_short(resources, resource, group)
            for res in resources:
                if target_group is not None and res.group != target_group:
                    continue
                if version is not None and res.version != version:
                    continue
                if target in _names(res):
                    return res
    raise UnknownResource(text or name, context, suggest(text, resources))


def in_category(category: str, resources: Sequence[Resource]) -> list[Resource]:
    """The resources of a category (``all``), preferred versions, in priority order: what
    ``kubectl get all`` expands to."""
    wanted = category.strip().lower()
    return [r for r in preferred(resources) if wanted in r.categories]


def suggest(name: str, resources: Sequence[Resource], limit: int = 3) -> tuple[str, ...]:
    """Full names (``widgets.example.com``) of served resources whose names are close to
    ``name``, best first."""
    lower = name.strip().lower()
    head = lower.split(".", 1)[0]
    by_word: dict[str, str] = {}
    for res in preferred(resources):
        full = res.name
        for word in (*_names(res), *res.short_names, full):
            by_word.setdefault(word, full)
    found: list[str] = []
    for probe in (lower, head):
        for word in difflib.get_close_matches(probe, list(by_word), n=limit * 3, cutoff=0.6):
            full = by_word[word]
            if full not in found:
                found.append(full)
    return tuple(found[:limit])


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
        aggregated = True
        for path in ("/api", "/apis"):
            content_type, body = await self._get(path, AGGREGATED_ACCEPT)
            doc = _load(body, f"GET {path}")
            if _is_aggregated(content_type) or doc.get("kind") == "APIGroupDiscoveryList":
                found.extend(parse_aggregated(doc))
                continue
            aggregated = False
            found.extend(await self._legacy(path, doc, failed))
        self._all = tuple(found)
        self._preferred = tuple(preferred(found))
        self._aggregated = aggregated
        self._failed_groups = tuple(failed)
        self._fetched_at = self._clock()
        self._fetches += 1
        log.debug("%s: fetched (%s)", self, "aggregated" if aggregated else "legacy")

    async def _legacy(self, path: str, doc: Mapping[str, Any], failed: list[str]) -> list[Resource]:
        """Legacy discovery: one request per group version, preferred version first."""
        urls: list[str] = []
        if path == "/api":
            urls = [f"/api/{v}" for v in _strs(doc.get("versions"))]
        else:
            for group in doc.get("groups") or ():
                if not isinstance(group, Mapping):
                    continue
                versions = [
                    str(v.get("groupVersion"))
                    for v in group.get("versions") or ()
                    if isinstance(v, Mapping) and v.get("groupVersion")
                ]
                pref = str((group.get("preferredVersion") or {}).get("groupVersion") or "")
                if pref in versions:
                    versions.remove(pref)
                    versions.insert(0, pref)
                urls.extend(f"/apis/{gv}" for gv in versions)
        results: list[list[Resource]] = [[] for _ in urls]
        errors: list[KubemuxError] = []
        limiter = anyio.CapacityLimiter(8)

        async def one(index: int, url: str) -> None:
            async with limiter:
                try:
                    _, body = await self._get(url, "application/json")
                    results[index] = parse_resource_list(_load(body, f"GET {url}"))
                except ApiError as exc:  # one broken group (an aggregated API down): left out
                    failed.append(url.removeprefix("/apis/").removeprefix("/api/"))
                    log.warning("%s: discovery of %s failed: %s", self, url, exc)
                except KubemuxError as exc:  # unreachable: raised once, after the others
                    errors.append(exc)

        async with anyio.create_task_group() as tg:
            for index, url in enumerate(urls):
                tg.start_soon(one, index, url)
        if errors:
            raise errors[0]
        return [res for chunk in results for res in chunk]
