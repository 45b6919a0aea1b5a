"""Shared watches: N replicas, one watch per (cluster identity, resource, scope).

``kubemux.share.Redis(url)`` is the first engine. An engine opens a session per process
(:class:`ShareSession`); every informer slot runs through :meth:`ShareSession.run_slot`,
which leads (runs the watch and publishes it) or follows (fills the store from the leader).
Importing this package does not import any engine's client library. The protocol is in
``docs/sharing.md``.
"""

from __future__ import annotations

from ._base import Lead as Lead
from ._base import MemberStatus as MemberStatus
from ._base import PlacementStatus as PlacementStatus
from ._base import Publish as Publish
from ._base import ShareEngine as ShareEngine
from ._base import ShareError as ShareError
from ._base import ShareSession as ShareSession
from ._base import SlotStatus as SlotStatus
from ._base import informer_lead as informer_lead
from ._base import share_key as share_key
from ._connector import ShareConnector as ShareConnector
from ._redis import Redis as Redis
from ._redis import RedisSession as RedisSession

__all__ = [
    "Lead",
    "MemberStatus",
    "PlacementStatus",
    "Publish",
    "Redis",
    "RedisSession",
    "ShareConnector",
    "ShareEngine",
    "ShareError",
    "ShareSession",
    "SlotStatus",
    "informer_lead",
    "share_key",
]
