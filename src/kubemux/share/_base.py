"""The engine-independent side of shared watches: the interface an engine implements, the
share key, the slot status, and the ``lead`` adapter that runs a real informer.

A registry opens one :class:`ShareSession` per process and runs every informer slot through
:meth:`ShareSession.run_slot`. Per share key exactly one replica *leads* (runs ``lead``: a
real LIST/WATCH, every change its store announces also passed to ``publish``); the others
*follow* (their Store is filled from what the leader published). See ``docs/sharing.md`` for the protocol.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
from collections.abc import Awaitable, Callable, Mapping
from typing import Protocol

import anyio
import anyio.abc
import orjson

from .._cache.store import Store
from .._cache.stream import StoreListener
from .._errors import KubemuxError
from .._http.client import ContextClient
from .._informer.informer import Informer, InformerKey
from .._registry.connector import Connector, SharedConnector
from .._resources import Resource
from .._settings import WatchSettings
from .._wire.codec import Entry, StoreChange
from .._wire.types import View

__all__ = [
    "Lead",
    "MemberStatus",
    "PlacementStatus",
    "Publish",
    "ShareEngine",
    "ShareError",
    "ShareSession",
    "SlotStatus",
    "informer_lead",
    "share_key",
]

Publish = Callable[[str, Entry, str], None]
"""``publish(type, entry, resource_version)``: one change the leader applied to its store
(type ADDED, MODIFIED or DELETED; ``resource_version`` is the store's after the change).
Synchronous and cheap: the engine queues it and writes it in order."""

Lead = Callable[[str | None, Publish, "anyio.abc.TaskStatus[None]"], Awaitable[None]]
"""``lead(resume_rv, publish, task_status)``: run the watch for a slot until cancelled.

``resume_rv`` None: LIST into the store, then WATCH. A string: the store already holds the
state at that resourceVersion; WATCH from it (LIST only after a 410). ``task_status.started()``
once the store is synced. Every applied change goes to ``publish`` as well."""


class ShareError(KubemuxError):
    """A share engine cannot be used (its client library is missing, a bad URL)."""


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class SlotStatus:
    """A frozen snapshot of one shared slot, for ``status()``.

    Attributes:
        role: ``"leader"`` (runs the watch and publishes), ``"follower"`` (filled from the
            leader), ``"local"`` (runs its own watch, not shared: a Secret, or the engine
            unreachable when the slot started) or ``"starting"``.
        epoch: The data lineage followed or written (changes when a leader writes a fresh
            snapshot); None before the first.
        lag: Seconds between the leader publishing the last change and this replica
            applying it (followers; clocks of both machines count).
        stale_since: Wall-clock time since when a follower's data may be stale (engine
            unreachable, or no leader); None when fresh.
        fenced_writes: Writes refused because this replica no longer held the lease.
        rehydrations: Full reloads from the engine (start, gaps, epoch changes).
        promotions: Times this replica took the lead for the slot.
        last_error: The last engine error, redacted; None after a success.
        events: Changes a follower applied from the stream (and from rehydrations after
            the first), as an informer's ``events_applied``.
        errors_by_type: Engine errors by exception class name (bounded, as an informer's).
        following_since: Wall-clock time a follower's store was loaded and it began tailing
            the stream (an informer's ``watch_started``); None when not following.
        last_event: Wall-clock time a follower last applied a change; None before the first.
        skipped_values: Values found in the engine that were not cached (malformed, too
            large, not authentic: written by something other than a kubemux leader).
        last_skipped: The latest of them, named (its field, escaped and cut, and why);
            None once a load found none.
    """

    role: str
    epoch: str | None = None
    lag: float | None = None
    stale_since: float | None = None
    fenced_writes: int = 0
    rehydrations: int = 0
    promotions: int = 0
    last_error: str | None = None
    events: int = 0
    errors_by_type: Mapping[str, int] = dataclasses.field(default_factory=dict)
    following_since: float | None = None
    last_event: float | None = None
    skipped_values: int = 0
    last_skipped: str | None = None


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class MemberStatus:
    """One live replica in the placement hash, as seen by this one (issue 22).

    Attributes:
        member_id: The replica's member id (random per process; not a secret).
        leads: Slots it leads: what its record said at its last renewal (this replica's
            own: now).
        prefers: Slots the hash prefers it for, as it last reported them (this replica's
            own: now).
        age: Seconds it has been live without a gap (Redis's clock, as of now).
    """

    member_id: str
    leads: int
    prefers: int
    age: float


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class PlacementStatus:
    """A frozen snapshot of this replica's part in spreading the leaders (issue 22).

    Attributes:
        member_id: This replica's id in the placement hash; None when it is not a member
            (``share_lead=False``, ``placement=False``, or no slot it may lead).
        leads: Shared slots this replica leads now.
        prefers: Slots the hash prefers this replica for (it leads them unless it is slow
            or a handover is under way).
        members: Live members seen at the last read (this one included).
        handovers: Slots this replica handed over to their preferred member, ever.
        replicas: Every live member seen at the last read (this one included, if it is
            one), sorted by id: how the slots are spread over the deployment. A
            ``share_lead=False`` replica sees them too; a ``placement=False`` one none.
    """

    member_id: str | None
    leads: int
    prefers: int
    members: int
    handovers: int
    replicas: tuple[MemberStatus, ...] = ()

    def to_json(self) -> dict[str, object]:
        return dataclasses.asdict(self)


class ShareSession(Protocol):
    """One process's connection to a share engine: owns its connections and tasks."""

    async def run_slot(
        self,
        *,
        key: bytes | str,
        store: Store,
        lead: Lead,
        task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
        can_lead: bool = True,
        kind: str = "",
        on_status: Callable[[], None] | None = None,
    ) -> None:
        """Keep ``store`` filled for ``key`` until cancelled, leading or following.

        ``on_status()`` (synchronous) is called when the slot's role changes or it turns
        stale or fresh again (not on every lag change).

        ``task_status.started()`` once the store is synced in either role. Every change the
        engine applies (as a follower, a rehydration, a catch-up) goes through the store's
        writer, which announces it to the store's listeners, as the changes ``lead`` makes.
        Objects of ``kind`` ``"Secret"`` are not shared unless the engine was told to:
        ``lead`` runs locally.

        Raises:
            KubemuxError: from ``lead`` before the store first synced.

        Cancellation stops the slot and releases its lease (bounded, shielded).
        """
        ...

    def slot_status(self, key: bytes | str) -> SlotStatus | None:
        """The status of a slot being run, or None."""
        ...

    def placement_status(self) -> PlacementStatus | None:
        """This replica's part in placement; None for an engine without placement."""
        ...


class ShareEngine(Protocol):
    """A share engine (``kubemux.share.Redis``): a value that opens sessions."""

    @property
    def identity_salt(self) -> bytes:
        """The HMAC key of credential digests (the identity where a server has no
        SelfSubjectReview API): the same in every replica that shares, so that the same
        credential gives the same key. See ``docs/sharing.md``."""
        ...

    def open(self) -> contextlib.AbstractAsyncContextManager[ShareSession]:
        """Connect; the session closes its connections and tasks on exit."""
        ...

    def connector(self, http: Connector, *, can_lead: bool) -> SharedConnector:
        """The registry's connector for this engine (how ``WatcherRegistry(share=engine)``
        gets it): ``ShareConnector(http, self, can_lead=can_lead)``."""
        ...


def share_key(
    *,
    server: str,
    ca: bytes | None,
    identity: str,
    resource: Resource | str,
    namespace: str | None = None,
    label_selector: str | None = None,
    field_selector: str | None = None,
    transform: str = "drop_managed_fields",
    view: View | str = View.OBJECTS,
) -> str:
    """The key under which replicas share one watch: a sha256 hex digest.

    Two replicas share when the API server would show them the same objects: same server and
    CA, same identity as the server sees it (user and groups from a SelfSubjectReview; where
    a server has none, a salted digest of the credential sent, never the credential), same
    resource, scope, selectors and store transform. Context names do not count. The parts
    are hashed, so neither servers nor identities reach the engine.
    """
    res = resource if isinstance(resource, str) else resource.path(None)
    parts: Mapping[str, object] = {
        "server": server.rstrip("/"),
        "ca": hashlib.sha256(ca).hexdigest() if ca else "",
        "identity": identity,
        "resource": res,
        "namespace": namespace or "",
        "label_selector": label_selector or "",
        "field_selector": field_selector or "",
        "transform": transform,
    }
    if view != "objects":  # object views keep the keys they had before table views shared
        parts = {**parts, "view": view}
    return hashlib.sha256(orjson.dumps(parts, option=orjson.OPT_SORT_KEYS)).hexdigest()


def informer_lead(
    client: ContextClient,
    resource: Resource,
    key: InformerKey,
    *,
    settings: WatchSettings,
    store: Store,
    on_state: Callable[[], None] | None = None,
    on_informer: Callable[[Informer], None] | None = None,
) -> Lead:
    """A ``lead`` callable running a real :class:`Informer` into ``store`` (of the table
    format for a ``key.view == "table"`` slot, whose store is a :class:`TableStore`).

    Each run builds a fresh informer (``on_informer`` is told, for ``status()``); while it
    runs, every change the store announces also goes to the engine's ``publish``.
    """

    async def lead(
        resume_rv: str | None,
        publish: Publish,
        task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        informer = Informer(  # of key.view's format (a table view's store is a TableStore)
            client,
            resource,
            key,
            settings=settings,
            store=store,
            on_state=on_state,
        )
        if on_informer is not None:
            on_informer(informer)
        unlisten = store.writer.add_listener(_Publishing(publish, store))
        try:
            if resume_rv is None:
                await informer.initial_sync()
                task_status.started()
                await informer.watch_forever()
            else:
                task_status.started()
                await informer.resume(resume_rv)
        finally:
            unlisten()

    return lead


class _Publishing(StoreListener):
    """A leading informer's store listener: each change to the engine's ``publish``, with
    the store's resourceVersion after it."""

    __slots__ = ("publish", "store")

    def __init__(self, publish: Publish, store: Store) -> None:
        self.publish = publish
        self.store = store

    def changed(self, change: StoreChange) -> None:
        self.publish(change.type, change.entry, self.store.resource_version)
