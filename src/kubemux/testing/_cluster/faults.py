"""FakeCluster's scripted faults: dropped watches, failed requests, stalls, compaction,
hostile discovery documents."""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from typing import Any

from ..._resources import Resource
from .._apiserver.http import ApiServer, Fault
from .._state.resource import RAW_LINE, Event, Stored
from .._state.state import ObjectStore

__all__ = ["FaultControls"]


class FaultControls:
    """The fault-injection methods of :class:`FakeCluster`."""

    _api: ApiServer
    _store: ObjectStore

    def drop_watches(self) -> int:
        """Cut every open watch stream mid-stream (connection closed); return how many."""
        return self._api.drop_watches()

    def end_watches(self) -> int:
        """End every open watch stream cleanly (its last chunk sent); return how many."""
        return self._api.end_watches()

    def fail_next(
        self,
        n: int,
        status: int = 500,
        *,
        reason: str = "InternalError",
        path_prefix: str | None = None,
        watch: bool | None = None,
        query_has: Iterable[str] = (),
    ) -> None:
        """Answer the next ``n`` matching requests with ``status`` and a Status body.

        Args:
            n: How many requests fail.
            status: The HTTP status (429 and 503 also carry ``Retry-After: 1``).
            reason: The Status ``reason``.
            path_prefix: Only requests whose path starts with this.
            watch: Only watch requests (True) or only other requests (False).
            query_has: Only requests whose query has all these parameters (for example
                ``("continue",)`` to fail a LIST's continuation pages).
        """
        if n > 0:
            self._api.faults.append(Fault(n, status, reason, path_prefix, watch, tuple(query_has)))

    def inject_watch_line(self, resource: str | Resource, line: bytes) -> int:
        """Send ``line`` (plus a newline) verbatim on every open watch of ``resource``.

        For testing how clients cope with malformed lines or unknown event types. Returns the
        number of streams it was queued on.
        """
        state = self._store.state(resource)
        event = Event(RAW_LINE, 0, ("", ""), Stored(bytes(line), {}), None)
        for watch in state.watchers:
            watch.push([event])
        return len(state.watchers)

    def serve_discovery(self, path: str, document: Mapping[str, Any] | None) -> None:
        """Answer discovery at ``path`` with ``document`` as given, instead of what the
        cluster serves: a broken or hostile aggregated API server's discovery. None goes
        back to the cluster's own.

        ``path`` is ``/api`` or ``/apis``, or a legacy group (version) path: ``/api/v1``,
        ``/apis/example.com``, ``/apis/example.com/v1``. A document whose ``kind`` is
        ``APIGroupDiscoveryList`` replaces the aggregated answer of ``/api`` or ``/apis``
        (served when the Accept header asks for aggregated discovery, with its content
        type); any other replaces the legacy (plain JSON) answer. Nothing in the document
        is checked or served beyond discovery: the resources it names are only served if
        the cluster serves them anyway.
        """
        aggregated = document is not None and document.get("kind") == "APIGroupDiscoveryList"
        overrides = self._api.discovery_overrides
        if document is None:
            overrides.pop((path, False), None)
            overrides.pop((path, True), None)
        else:
            overrides[path, aggregated] = copy.deepcopy(dict(document))

    def delay_watches(self, seconds: float) -> None:
        """Hold back every watch stream's events: a batch of queued events (and the
        bookmarks behind it) goes out ``seconds`` after the stream saw it queued, as from
        an API server whose watch lags behind its writes. Requests are answered at once.
        0 ends the delay (streams then send what they hold)."""
        self._api.watch_delay = max(0.0, float(seconds))
        for watch in self._api.watches:
            watch.wake.set()

    def stall(self) -> None:
        """Freeze the server: watch streams send nothing, new requests hang.

        Changes keep queueing for the open watches and flow after :meth:`unstall`.
        """
        self._api.stall()

    def unstall(self) -> None:
        """End a :meth:`stall`."""
        self._api.unstall()

    def compact(self) -> None:
        """Forget the history: older resourceVersions are Expired from now on.

        Watch resumes and continue tokens from before get 410; open watches send the events
        they had queued (changes made before the call), then an in-stream ERROR 410, and end.
        """
        self._api.compact()
