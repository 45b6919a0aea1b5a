"""Noticing that the server serves a resource again (a CRD deleted, then created again).

An informer whose LIST or WATCH is answered 404 (its CRD was deleted) waits in
:meth:`ServedWatch.wait` until the resource may be served again, then lists again:

- a custom resource: WATCH its CustomResourceDefinition by name (``fieldSelector=
  metadata.name=<plural>.<group>``: one small object, however many CRDs the cluster has)
  and return once it is there, serves the version and is established;
- where the user may not read CRDs (or the resource is not a CRD: an aggregated API),
  look at discovery every ``gone_poll`` seconds (one fetch per connection, whoever waits)
  while anything is gone.

A CRD that is there while the resource still 404s (the server is about to serve it) is
looked at again after 1 s, doubling to ``gone_retry``: never a request loop. The caller bounds
each wait with ``gone_retry`` as well.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Mapping
from typing import Any

import anyio

from .._cache.store import Store
from .._cache.stream import StoreListener
from .._errors import ApiError, KubemuxError, unwrap
from .._http.client import ContextClient
from .._resources import Resource
from .._settings import WatchSettings
from .._wire.codec import StoreChange
from .discovery import Discovery
from .informer import Informer, InformerKey

__all__ = ["CRDS", "ServedWatch"]

log = logging.getLogger(__name__)

CRDS = Resource(
    group="apiextensions.k8s.io",
    version="v1",
    plural="customresourcedefinitions",
    namespaced=False,
    kind="CustomResourceDefinition",
)


class ServedWatch:
    """One connection's watch for resources that came back (see the module docstring)."""

    __slots__ = ("_client", "_crds_readable", "_discovery", "_early", "_polled_at", "_settings")

    def __init__(
        self, client: ContextClient, discovery: Discovery, settings: WatchSettings
    ) -> None:
        self._client = client
        self._discovery = discovery
        self._settings = settings
        self._crds_readable = True  # until a CRD watch is refused
        self._polled_at = -math.inf
        self._early: dict[str, int] = {}  # resource -> waits that found it there already

    async def wait(self, resource: Resource) -> None:
        """Return once ``resource`` may be served again. Cancellation ends the wait (the
        caller bounds it in time)."""
        there_already = False
        if resource.group and self._crds_readable:
            try:
                there_already = await self._watch_crd(resource)
            except ApiError as exc:  # 403 (may not read CRDs), 404 (no apiextensions)
                self._crds_readable = False
                log.info(
                    "%s: cannot watch CRDs (%s); looking at discovery while %s is gone",
                    self._client.context,
                    exc,
                    resource.name,
                )
                there_already = await self._poll_discovery(resource)
            except KubemuxError as exc:  # the server is in trouble: discovery tells more
                log.debug("%s: CRD watch failed: %s", self._client.context, exc)
                there_already = await self._poll_discovery(resource)
        else:
            there_already = await self._poll_discovery(resource)
        if not there_already:
            self._early.pop(resource.name, None)
            return
        # there, yet the server answered 404 a moment ago: it is about to serve it
        count = self._early[resource.name] = self._early.get(resource.name, 0) + 1
        await anyio.sleep(min(self._settings.gone_retry, 2.0 ** (count - 1)))

    async def _watch_crd(self, resource: Resource) -> bool:
        """Until the resource's CRD serves it; True if it did from the start."""
        crd = f"{resource.plural}.{resource.group}"
        appeared = anyio.Event()
        store = Store(CRDS)
        store.writer.add_listener(_Appeared(resource.version, appeared))
        informer = Informer(
            self._client,
            CRDS,
            InformerKey(CRDS.name, field_selector=f"metadata.name={crd}"),
            settings=self._settings,
            store=store,
        )
        try:
            async with anyio.create_task_group() as tg:
                await tg.start(informer.run)
                there = appeared.is_set()  # the first LIST announced it
                await appeared.wait()
                tg.cancel_scope.cancel()
        except ExceptionGroup as group:  # the first LIST failed: its error
            raise unwrap(group) from None
        return there

    async def _poll_discovery(self, resource: Resource) -> bool:
        """Until discovery lists the resource; True if it did at the first look."""
        period = self._settings.gone_poll
        first = True
        while True:
            if time.monotonic() - self._polled_at >= period:
                self._polled_at = time.monotonic()  # one fetch per period, whoever waits
                try:
                    await self._discovery.refresh()
                except KubemuxError as exc:
                    log.debug("%s: discovery failed: %s", self._client.context, exc)
            served = self._discovery.cached() or ()
            if any(r.group == resource.group and r.plural == resource.plural for r in served):
                return first
            first = False
            await anyio.sleep(max(0.0, self._polled_at + period - time.monotonic()))


class _Appeared(StoreListener):
    """Sets ``event`` once the CRD's store holds it serving ``version``."""

    __slots__ = ("event", "version")

    def __init__(self, version: str, event: anyio.Event) -> None:
        self.version = version
        self.event = event

    def changed(self, change: StoreChange) -> None:
        if change.type != "DELETED" and _serves(change.entry.decode(), self.version):
            self.event.set()


def _serves(crd: Mapping[str, Any], version: str) -> bool:
    """Whether a CRD object serves ``version`` and is established (when it says)."""
    spec = crd.get("spec") or {}
    versions = spec.get("versions") or []
    if not any(
        isinstance(v, Mapping) and v.get("name") == version and v.get("served", True)
        for v in versions
    ):
        return False
    conditions = (crd.get("status") or {}).get("conditions")
    if not isinstance(conditions, list):
        return True  # no status yet (or a server that writes none): its spec says served
    for condition in conditions:
        if isinstance(condition, Mapping) and condition.get("type") == "Established":
            return condition.get("status") == "True"
    return True
