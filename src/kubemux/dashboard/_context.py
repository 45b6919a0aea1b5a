"""What an event stream reads of its dashboard (:class:`StreamContext`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from kubemux import WatcherRegistry

from ._encoding import Encodings
from ._panel import Panel
from ._snapshots import SnapshotCache

__all__ = ["StreamContext"]


@dataclass(frozen=True, kw_only=True, slots=True)
class StreamContext:
    """The settings and shared caches of one dashboard, as its streams and hub see them.

    Built once by :class:`~.app.Dashboard` and handed to :class:`~._broadcast.Hub` and
    :class:`~.streams.Stream`, which so import nothing of the dashboard: the settings are
    frozen, the caches are shared objects, and the two callables are the dashboard's.
    """

    title: str
    sync_timeout: float
    status_period: float
    stream_send_timeout: float
    snapshots: SnapshotCache
    encodings: Encodings
    running_registry: Callable[[], WatcherRegistry]  # raises the 503 Problem when not running
    contexts_json: Callable[[int], bytes]  # /api/contexts at a status version, shared
    panel: Callable[[int], Panel]  # the streams' contexts panel at a status version, shared

    @property
    def registry(self) -> WatcherRegistry:
        """The running registry (the dashboard's 503 ``Problem`` if it is not running)."""
        return self.running_registry()
