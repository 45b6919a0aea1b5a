"""A Redis share slot's state and the helpers both of its roles use (see ``_redis_keys``).

A slot is three objects: :class:`SlotState` (this module: what the slot holds and shows),
its ``Follower`` (``_redis_follow``) and its ``Leader`` (``_redis_lead``, which holds the
follower: a promoted leader catches up as a follower would). Each knows the session only
through :class:`SlotEnv`, so no module of the engine imports the session's."""

from __future__ import annotations

import collections
import dataclasses
import logging
import math
import secrets
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import anyio
import anyio.abc

from .._cache.store import Store
from .._cache.table import TableColumn
from .._redact import redact_text
from .._wire.codec import Entry
from .._wire.types import count_error
from ._base import Lead, SlotStatus
from ._redis_keys import BadSlotData, ForgedLease, PlainValues, SkippedValue
from ._redis_table import table_of

log = logging.getLogger(__name__)

if TYPE_CHECKING:
    import redis.asyncio as aioredis

    from ._redis_tail import StreamTails

_SKIP_LOG_PERIOD = 60.0  # seconds between two log records of skipped values (as informers)


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class SlotEnv:
    """What every slot of a session uses: the engine's settings, the client, its scripts."""

    client: aioredis.Redis
    errors: tuple[type[BaseException], ...]  # what counts as Redis being down
    prefix: str
    lease_ttl: float
    acquire_period: float
    stream_maxlen: int
    command_timeout: float
    max_value_size: int
    max_objects: int
    publish: Any  # the registered Lua scripts (redis-py's AsyncScript)
    commit: Any
    renew: Any
    release: Any
    acquire: Any
    reserve: Any
    tails: StreamTails  # the followers' blocking reads, a few connections for every slot


class SlotState:
    """State, status and helpers of one slot; its roles are :class:`Follower` and
    :class:`Leader`, which hold it."""

    def __init__(
        self,
        env: SlotEnv,
        digest: str,
        store: Store,
        lead: Lead,
        task_status: anyio.abc.TaskStatus[None],
        can_lead: bool,
    ) -> None:
        self.env = env
        self.client = env.client
        self.digest = digest
        base = f"{env.prefix}:{{{digest}}}"
        self.k_lease, self.k_meta = base + ":lease", base + ":meta"
        self.k_objs, self.k_log, self.k_stage = base + ":objs", base + ":log", base + ":stage"
        self.k_next = base + ":next"  # a handover's reservation: the member to take over
        self.store = store
        # how values are written and read: with a secret_key, signed (or sealed) ones
        self.values: PlainValues = PlainValues(env.max_value_size)
        self.skipped = 0  # values in Redis skipped (malformed, forged): never cached
        self.last_skipped: str | None = None  # the latest, named (cleared by a clean load)
        self._skip_logged_at = -math.inf
        self._skips_unlogged = 0
        self.table = table_of(store)  # a table view's store: its columns are shared too
        self.sent_columns: tuple[TableColumn, ...] | None = None  # in Redis, as known
        self.lead = lead
        self.task_status = task_status
        self.can_lead = can_lead
        self.on_status: Callable[[], None] | None = None
        self._role = "starting"
        self._stale_since: float | None = None
        self.token: str | None = None
        self.epoch: str | None = None
        self.seq = 0
        self.last_id: bytes = b"0-0"
        self.lag: float | None = None
        self.last_error: str | None = None
        self.fenced = 0
        self.rehydrations = 0
        self.promotions = 0
        self.events = 0  # changes applied as a follower (metrics)
        self.errors: dict[str, int] = {}  # engine errors by exception class name
        self.following_since: float | None = None
        self.last_event: float | None = None
        self.started = False
        self.inflight = 0  # changes in the write being sent
        self.reachable_since: float | None = -math.inf  # None: Redis failed since
        self.queue: collections.deque[tuple[str, Entry, str, float]] = collections.deque()
        self.wake = anyio.Event()
        self.needs_snapshot = True
        self.lead_synced = False
        self.scope: anyio.CancelScope | None = None
        self.snapshotting = False  # a snapshot is being written: meta moves under us
        self.tainted = False  # skipped values since the last clean load: a leader LISTs
        # placement (issue 22): who should lead ("mine", "other" or "none"), the grace a
        # non-preferred replica leaves the preferred one to take a free lease, a handover
        self.choice: Callable[[str], str] = _no_placement
        self.member: Callable[[], str | None] = lambda: None  # this replica's member id
        self.no_leader: Callable[[], None] = lambda: None  # tells placement (read again)
        self.handed: Callable[[], None] = lambda: None  # tells placement: a handover done
        self.handover_to: str | None = None
        self.grace = 0.0
        self.shared = True  # False: run locally (a Secret), never led through Redis
        self.led_since = math.inf  # monotonic time this replica took the lease
        self.handing_over = False
        self.handover = anyio.Event()  # set: hand the lead over (publish, release)

    @property
    def role(self) -> str:
        return self._role

    @role.setter
    def role(self, role: str) -> None:
        changed = role != self._role
        self._role = role
        if changed and self.on_status is not None:
            self.on_status()

    @property
    def stale_since(self) -> float | None:
        return self._stale_since

    @stale_since.setter
    def stale_since(self, when: float | None) -> None:
        changed = (when is None) != (self._stale_since is None)
        self._stale_since = when
        if changed and self.on_status is not None:
            self.on_status()

    def status(self) -> SlotStatus:
        return SlotStatus(
            role=self.role,
            epoch=self.epoch,
            lag=self.lag,
            stale_since=self.stale_since,
            fenced_writes=self.fenced,
            rehydrations=self.rehydrations,
            promotions=self.promotions,
            last_error=self.last_error,
            events=self.events,
            errors_by_type=dict(self.errors),
            following_since=self.following_since,
            last_event=self.last_event,
            skipped_values=self.skipped,
            last_skipped=self.last_skipped,
        )

    def request_handover(self, member_id: str) -> None:
        """Placement asks this leader to hand the slot over to ``member_id`` (``Leader``)."""
        self.handover_to = member_id
        self.handover.set()

    # ------------------------------------------------------------------ helpers
    def report_started(self) -> None:
        if not self.started:
            self.started = True
            self.task_status.started()

    def skip(self, exc: SkippedValue) -> None:
        """Count a value skipped; log the first at once, then a summary at most once a
        minute (forged values must not flood the log)."""
        self.skipped += 1
        self.tainted = True
        self.last_skipped = str(exc)  # names the field (escaped, cut) and why, never a value
        now = time.monotonic()
        if now - self._skip_logged_at < _SKIP_LOG_PERIOD:
            self._skips_unlogged += 1
            return
        if self._skips_unlogged:
            log.warning(
                "share slot %s: skipped %d more values in the last %.0f s",
                self.k_lease,
                self._skips_unlogged,
                now - self._skip_logged_at,
            )
            self._skips_unlogged = 0
        self._skip_logged_at = now
        log.warning("share slot %s: %s", self.k_lease, self.last_skipped)

    def note(self, exc: BaseException) -> None:
        """An error that is not an outage (a forged meta a leader replaces): counted, shown."""
        count_error(self.errors, exc)
        self.last_error = str(exc)
        log.warning("share slot %s: %s", self.k_lease, exc)

    def down(self, exc: BaseException) -> None:
        if isinstance(exc, BadSlotData):
            self.last_error = str(exc)  # names the cause, never a value
        else:
            self.last_error = redact_text(f"redis: {type(exc).__name__}: {exc}")
        count_error(self.errors, exc)
        self.following_since = None
        self.reachable_since = None
        if self.stale_since is None and self.role != "leader":
            self.stale_since = time.time()
        log.warning("share slot %s: %s", self.k_lease, self.last_error)

    def fresh(self) -> None:
        self.stale_since = None
        self.last_error = None

    def columns_moved(self) -> bool:
        """A table view's columns differ from those in Redis (a relist brought new ones)."""
        table = self.table
        if table is None or table.columns is self.sent_columns:
            return False
        if table.columns == self.sent_columns:
            self.sent_columns = table.columns  # the same columns, another tuple
            return False
        return True

    async def try_acquire(self) -> bool:
        token = secrets.token_hex(16)
        with anyio.fail_after(self.env.command_timeout):
            ok = await self.env.acquire(
                keys=[self.k_lease, self.k_next],
                args=[token, int(self.env.lease_ttl * 1000), self.member() or ""],
            )
        if ok:
            self.token = token
            self.led_since = time.monotonic()
            self.promotions += 1
            how = " (handed over)" if ok == 3 else ""
            log.info("share slot %s: took the lease%s", self.k_lease, how)
        if ok == 2:  # a lease no replica writes would keep every replica following forever
            self.note(ForgedLease())
        return bool(ok)


def _no_placement(digest: str) -> str:
    return "none"
