"""FakeCluster's observation methods: recorded requests, counts, open watches and connections."""

from __future__ import annotations

from collections.abc import Iterable

from ..._resources import Resource, parse_resource
from .._apiserver.http import ApiServer, RecordedRequest, TrackingServer

__all__ = ["ObservationControls"]


def _resource_name(resource: str | Resource) -> str:
    if isinstance(resource, Resource):
        return resource.name
    try:
        return parse_resource(resource).name
    except (KeyError, ValueError):
        return resource


class ObservationControls:
    """The observation methods of :class:`FakeCluster`."""

    _api: ApiServer
    _server: TrackingServer | None

    @property
    def requests(self) -> list[RecordedRequest]:
        """Every request received so far (a copy), oldest first."""
        return list(self._api.requests)

    def requests_for(self, token: str | None) -> list[RecordedRequest]:
        """The requests that carried ``token`` (None: those without one)."""
        return [r for r in self._api.requests if r.token == token]

    def clear_requests(self) -> None:
        """Forget the recorded requests."""
        self._api.requests.clear()

    @property
    def open_watches(self) -> int:
        """Watch streams currently open."""
        return len(self._api.watches)

    def open_watches_for(self, token: str | None) -> int:
        """Watch streams currently open that were opened with ``token``."""
        return sum(1 for w in self._api.watches if w.token == token)

    @property
    def open_upgrades(self) -> int:
        """Upgraded connections currently open (exec, attach, port-forward)."""
        return self._api.upgrades

    @property
    def open_connections(self) -> int:
        """Server-side TCP connections currently open."""
        return len(self._server.live) if self._server is not None else 0

    def request_count(
        self,
        verb: str | Iterable[str] | None = None,
        resource: str | Resource | None = None,
        *,
        namespace: str | None = None,
        name: str | None = None,
        subresource: str | None = None,
        token: str | None = None,
    ) -> int:
        """How many recorded requests match every filter given.

        For example ``cluster.request_count(("list", "get"), "pods")`` after repeated reads
        through a cache that should have answered them, or ``request_count("watch")``.

        Args:
            verb: A Kubernetes verb (``get``, ``list``, ``watch``, ``create``, ``update``,
                ``patch``, ``delete``, ``deletecollection``) or several; discovery and other
                non-resource requests are ``get`` with no resource.
            resource: A resource as kubectl names it (``pods``, ``po``, ``deployments.apps``,
                a :class:`kubemux.Resource`); its subresources count too unless
                ``subresource`` says otherwise.
            namespace: Only requests in this namespace.
            name: Only requests for this object.
            subresource: Only requests for this subresource (``status``, ``log``, ...).
            token: Only requests that carried this bearer token.
        """
        verbs = {verb} if isinstance(verb, str) else set(verb) if verb is not None else None
        wanted = _resource_name(resource) if resource is not None else None
        count = 0
        for request in self._api.requests:
            if verbs is not None and request.verb not in verbs:
                continue
            if wanted is not None and request.resource != wanted:
                continue
            if namespace is not None and request.namespace != namespace:
                continue
            if name is not None and request.name != name:
                continue
            if subresource is not None and request.subresource != subresource:
                continue
            if token is not None and request.token != token:
                continue
            count += 1
        return count
