"""Placement of shared slots on replicas: who *should* lead each slot (issue 22).

Two parts, both additive to the Redis engine (``_redis*``), which decides who *does* lead
(the lease): placement only says which replica should try first, so a wrong or stale
placement costs balance, never safety.

**Preference** (sync, no I/O): :func:`preference` orders the live members for one slot by
rendezvous (highest-random-weight) hashing; :func:`assign` gives every slot one preferred
member so that loads differ by at most one ("consistent hashing with bounded loads"):

- the weight of (slot, member) is the first 8 bytes of ``blake2b(member + "\\0" + slot)``.
  BLAKE2b because every replica must compute the same weights: Python's ``hash()`` is
  salted per process, and a weak mix (CRC, FNV of a shared prefix) correlates the weights
  of members whose ids share a prefix, which unbalances HRW. BLAKE2b is in ``hashlib`` (C),
  faster than SHA-256 on short inputs, and 8 bytes make ties (broken by member id)
  practically impossible.
- slots are taken in a fixed order (by ``blake2b(slot)``, independent of the members);
  each goes to the first member of its preference order that still has room. With ``M``
  slots and ``N`` members, ``M mod N`` members may take ``M // N + 1`` slots and the others
  ``M // N``: the loads differ by at most one, whatever the hashes. A join or a leave moves
  about ``M / N`` slots (measured: 1.1-1.2 times the minimum; tested).
- a slot only goes to a member that can lead it (``eligible``: the members whose published
  slot set holds it). A slot whose eligible members are all full goes to the first of them
  anyway: every slot that some member can lead has a preferred member.

**Membership** (async, Redis): :class:`Membership` keeps this replica's record in the same
Redis as the slots, with a TTL, renewed at the lease period. Only replicas that lead
(``share_lead=True``) join. Keys (``P`` the engine's prefix; the ``{placement}`` hash tag
keeps them on one Redis Cluster node)::

    P:{placement}:members        zset    member id -> expiry (ms, Redis's clock)
    P:{placement}:member:<id>    hash    since (ms, Redis's clock: when it joined, or
                                         rejoined after its record expired), started_at,
                                         led, preferred (for status); PX ttl
    P:{placement}:slots:<id>     set     the slot digests (``H``) this member runs and can
                                         lead; PX ttl

Expiry is computed by Redis (``TIME`` in the script), so replicas' clocks do not matter.
Every value read back is checked (a member id, a count, a digest); what fails is skipped
and counted, never trusted. ``docs/sharing.md`` ("Placement") has the whole scheme.
"""

from __future__ import annotations

import dataclasses
import logging
import re
import secrets
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import anyio
import anyio.abc

if TYPE_CHECKING:
    import redis.asyncio as aioredis

__all__ = [
    "MAX_MEMBERS",
    "MAX_SLOTS_PER_MEMBER",
    "Member",
    "Membership",
    "assign",
    "eligibility",
    "loads",
    "preference",
    "weight",
]

log = logging.getLogger(__name__)

MAX_MEMBERS = 1024
"""Members read per call (the first by expiry order): a forged flood cannot grow the work."""
MAX_SLOTS_PER_MEMBER = 100_000
"""A member's published slot set larger than this is not read (counted as skipped)."""

_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,63}")  # no braces: ids are in key names
_DIGEST = re.compile(rb"[0-9a-f]{32}")  # a slot's H, as the engine names its keys
_NUMBER = re.compile(rb"[0-9]{1,14}")
_FLOAT = re.compile(rb"[0-9]{1,12}(\.[0-9]{1,9})?")
_CHUNK = 1000  # SADD arguments per call inside the script (Lua's unpack limit is ~8000)


from ._rendezvous import assign, loads, preference, weight  # re-exported

_RENEW = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl = tonumber(ARGV[2])
local kind = redis.call('TYPE', KEYS[1])['ok']
if kind ~= 'zset' and kind ~= 'none' then redis.call('DEL', KEYS[1]) end
kind = redis.call('TYPE', KEYS[2])['ok']
if kind ~= 'hash' and kind ~= 'none' then redis.call('DEL', KEYS[2]) end
kind = redis.call('TYPE', KEYS[3])['ok']
if kind ~= 'set' and kind ~= 'none' then redis.call('DEL', KEYS[3]) end
local score = redis.call('ZSCORE', KEYS[1], ARGV[1])
local since = redis.call('HGET', KEYS[2], 'since')
if not score or tonumber(score) <= now or not since then since = now end
redis.call('ZADD', KEYS[1], now + ttl, ARGV[1])
redis.call('PEXPIRE', KEYS[1], ttl * 10)
redis.call('HSET', KEYS[2], 'since', since, 'started_at', ARGV[3], 'led', ARGV[4],
           'preferred', ARGV[5])
redis.call('PEXPIRE', KEYS[2], ttl)
if ARGV[6] == 'set' then
  redis.call('DEL', KEYS[3])
  local i = 7
  while i <= #ARGV do
    local j = math.min(i + 999, #ARGV)
    redis.call('SADD', KEYS[3], unpack(ARGV, i, j))
    i = j + 1
  end
end
if redis.call('PEXPIRE', KEYS[3], ttl) == 1 then return 1 end
return 0
"""

# KEYS: members zset. ARGV: max members. Drops the expired, returns {now ms, id, expiry, ...}.
_LIVE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if redis.call('TYPE', KEYS[1])['ok'] ~= 'zset' then return {now} end
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
local live = redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. now, '+inf', 'WITHSCORES',
                        'LIMIT', 0, tonumber(ARGV[1]))
table.insert(live, 1, now)
return live
"""


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Member:
    """One live member as read from Redis (checked; for placement and status).

    Attributes:
        id: The member's id (its replica's; see :class:`Membership`).
        age: Seconds it has been live without a gap (Redis's clock): since it joined, or
            since it came back after its record expired. Handovers wait for an age (see
            ``docs/sharing.md``), so a flapping replica is never handed slots.
        started_at: Wall-clock time the replica joined, by its own clock (status only).
        led: Slots it reported leading at its last renewal.
        preferred: Slots it reported preferring at its last renewal.
        slots: The slot digests it runs and may lead (empty if not readable).
        expires_in: Seconds until its record expires unless renewed (Redis's clock).
    """

    id: str
    age: float
    started_at: float
    led: int
    preferred: int
    slots: frozenset[str]
    expires_in: float


class Membership:
    """This replica's membership record in Redis, and the live members.

    Use :meth:`run` (join, renew every ``renew_period``, leave on exit) in a task group
    that lives as long as the replica leads, or call :meth:`join`, :meth:`renew` and
    :meth:`leave` yourself. Only a replica that may lead is a member.

    Args:
        client: A ``redis.asyncio.Redis`` (``decode_responses=False``), the share
            session's.
        prefix: The engine's key prefix (``Redis(prefix=)``).
        member_id: This replica's id: 1-64 characters of ``[A-Za-z0-9._:-]``. Default: 16
            random hex digits, new per process (a restarted replica is a new member).
        ttl: Seconds the record lives without renewal (the engine's ``lease_ttl``).
        command_timeout: Seconds one Redis command may take.
    """

    def __init__(
        self,
        client: aioredis.Redis,
        *,
        prefix: str = "kubemux",
        member_id: str | None = None,
        ttl: float = 3.0,
        command_timeout: float = 5.0,
    ) -> None:
        if member_id is None:
            member_id = secrets.token_hex(8)
        if _ID.fullmatch(member_id) is None:
            raise ValueError("member_id: 1-64 characters of [A-Za-z0-9._:-], not '-' first")
        if ttl <= 0 or command_timeout <= 0:
            raise ValueError("ttl and command_timeout must be positive")
        self.client = client
        self.prefix = prefix
        self.id = member_id
        self.ttl = ttl
        self.command_timeout = command_timeout
        base = f"{prefix}:{{placement}}"
        self.k_members = base + ":members"
        self._k_record = base + ":member:"
        self._k_slots = base + ":slots:"
        self.started_at = time.time()
        self.led = 0
        self.preferred = 0
        self._slots: frozenset[str] = frozenset()
        self._slots_sent = False
        self.joined = False
        self.skipped = 0  # values read back that failed the checks (forged?)
        self.last_skipped: str | None = None
        self._renew_script = client.register_script(_RENEW)
        self._live_script = client.register_script(_LIVE)

    def __repr__(self) -> str:
        state = "joined" if self.joined else "not joined"
        return f"<Membership {self.id} {state} slots={len(self._slots)} led={self.led}>"

    @property
    def renew_period(self) -> float:
        """Seconds between renewals: a third of the TTL, as the leases."""
        return self.ttl / 3

    def record_key(self, member_id: str) -> str:
        return self._k_record + member_id

    def slots_key(self, member_id: str) -> str:
        return self._k_slots + member_id

    def set_slots(self, digests: Iterable[str]) -> None:
        """The slot digests this replica runs and may lead; sent at the next renewal (only
        when they changed, or when Redis lost them)."""
        slots = frozenset(digests)
        for d in slots:
            if _DIGEST.fullmatch(d.encode()) is None:
                raise ValueError("set_slots: a slot digest is 32 lowercase hex digits")
        if slots != self._slots:
            self._slots = slots
            self._slots_sent = False

    def report(self, *, led: int, preferred: int) -> None:
        """Counts shown in this member's record (status); sent at the next renewal."""
        self.led, self.preferred = max(0, led), max(0, preferred)

    async def join(self) -> None:
        """Write this member's record (and slot set). Same as :meth:`renew`.

        Raises:
            redis.exceptions.RedisError, OSError, TimeoutError: Redis failed.
        """
        await self.renew()
        if not self.joined:
            self.joined = True
            log.info("placement: member %s joined", self.id)

    async def renew(self) -> None:
        """Renew the record's TTL (and the counts); sends the slot set if it changed or
        Redis lost it (one more round trip). A record that had expired is written again:
        the member is back.

        Raises:
            redis.exceptions.RedisError, OSError, TimeoutError: Redis failed.
        """
        for _ in range(2):
            send = not self._slots_sent
            args: list[Any] = [
                self.id,
                max(1, int(self.ttl * 1000)),
                f"{self.started_at:.3f}",
                self.led,
                self.preferred,
                "set" if send else "keep",
            ]
            if send:
                args.extend(sorted(self._slots))
            with anyio.fail_after(self.command_timeout):
                ok = await self._renew_script(
                    keys=[self.k_members, self.record_key(self.id), self.slots_key(self.id)],
                    args=args,
                )
            self._slots_sent = True
            if ok or not self._slots:
                return
            self._slots_sent = False  # the set is gone (Redis restarted): send it now

    async def leave(self) -> None:
        """Remove this member's record at once (the others see it gone at their next read,
        instead of after the TTL).

        Raises:
            redis.exceptions.RedisError, OSError, TimeoutError: Redis failed.
        """
        with anyio.fail_after(self.command_timeout):
            pipe = self.client.pipeline(transaction=True)
            pipe.zrem(self.k_members, self.id)
            pipe.delete(self.record_key(self.id), self.slots_key(self.id))
            await pipe.execute()
        self.joined = False
        self._slots_sent = False
        log.info("placement: member %s left", self.id)

    async def members(self) -> tuple[Member, ...]:
        """The live members (this one included once joined), by id, checked: an entry
        whose id, record or slot set is not what a member writes is skipped and counted in
        :attr:`skipped` (a member without a readable record is kept with zero counts and no
        slots: it may lead nothing). At most :data:`MAX_MEMBERS`.

        Raises:
            redis.exceptions.RedisError, OSError, TimeoutError: Redis failed.
        """
        with anyio.fail_after(self.command_timeout):
            live = await self._live_script(keys=[self.k_members], args=[MAX_MEMBERS])
        now_ms = float(live[0])
        found: list[tuple[str, float]] = []
        for raw_id, score in zip(live[1::2], live[2::2], strict=False):
            member_id = raw_id.decode("ascii", "replace") if isinstance(raw_id, bytes) else ""
            if _ID.fullmatch(member_id) is None:
                self._skip("a member id that no replica writes")
                continue
            found.append((member_id, (float(score) - now_ms) / 1000))
        if not found:
            return ()
        with anyio.fail_after(self.command_timeout):
            pipe = self.client.pipeline(transaction=False)
            for member_id, _ in found:
                pipe.hmget(self.record_key(member_id), ["since", "started_at", "led", "preferred"])
                pipe.scard(self.slots_key(member_id))
            heads = await pipe.execute(raise_on_error=False)
            pipe = self.client.pipeline(transaction=False)
            wanted = []
            for i, (member_id, _) in enumerate(found):
                size = heads[2 * i + 1]
                if isinstance(size, int) and 0 < size <= MAX_SLOTS_PER_MEMBER:
                    pipe.smembers(self.slots_key(member_id))
                    wanted.append(member_id)
                elif isinstance(size, int) and size > MAX_SLOTS_PER_MEMBER:
                    self._skip(f"member {member_id} publishes {size} slots")
            sets = dict(zip(wanted, await pipe.execute(raise_on_error=False), strict=True))
        out = []
        for i, (member_id, expires_in) in enumerate(found):
            record = heads[2 * i]
            if not isinstance(record, list) or len(record) != 4:
                self._skip(f"the record of member {member_id}, not a hash")
                record = [None, None, None, None]
            if isinstance(heads[2 * i + 1], Exception):
                self._skip(f"the slot set of member {member_id}, not a set")
            since, started, led, preferred = record
            since_ms = self._int(since, member_id) if since is not None else now_ms
            out.append(
                Member(
                    id=member_id,
                    age=max(0.0, (now_ms - since_ms) / 1000),
                    started_at=self._float(started, member_id),
                    led=self._int(led, member_id),
                    preferred=self._int(preferred, member_id),
                    slots=self._digests(sets.get(member_id), member_id),
                    expires_in=expires_in,
                )
            )
        return tuple(sorted(out, key=lambda m: m.id))

    async def run(
        self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """Join, renew every :attr:`renew_period` until cancelled, then leave (shielded,
        at most ``command_timeout``). A renewal that fails is logged and retried at the
        next period (the record expires meanwhile if Redis stays down: the member is gone
        for the others, as it should be). ``task_status.started()`` once joined, or after
        the first failed attempt (Redis down must not hold the replica's start)."""
        try:
            try:
                await self.join()
            except (OSError, TimeoutError, _redis_error()) as exc:
                log.warning("placement: member %s could not join: %s", self.id, exc)
            task_status.started()
            while True:
                await anyio.sleep(self.renew_period)
                try:
                    await self.join()
                except (OSError, TimeoutError, _redis_error()) as exc:
                    log.warning("placement: member %s could not renew: %s", self.id, exc)
        finally:
            with anyio.move_on_after(self.command_timeout, shield=True):
                try:
                    await self.leave()
                except (OSError, TimeoutError, _redis_error()):
                    pass  # it expires by itself

    # ------------------------------------------------------------------ checks
    def _skip(self, why: str) -> None:
        self.skipped += 1
        if self.last_skipped != why:
            log.warning("placement: skipped %s (forged?)", why)
        self.last_skipped = why

    def _int(self, raw: object, member_id: str) -> int:
        if raw is None:
            return 0
        if isinstance(raw, bytes) and _NUMBER.fullmatch(raw):
            return int(raw)
        self._skip(f"a count of member {member_id} that is not a number")
        return 0

    def _float(self, raw: object, member_id: str) -> float:
        if raw is None:
            return 0.0
        if isinstance(raw, bytes) and _FLOAT.fullmatch(raw):
            return float(raw)
        self._skip(f"a start time of member {member_id} that is not a time")
        return 0.0

    def _digests(self, raw: object, member_id: str) -> frozenset[str]:
        if raw is None:
            return frozenset()
        if not isinstance(raw, set):
            self._skip(f"the slot set of member {member_id}, not a set")
            return frozenset()
        good = frozenset(d.decode() for d in raw if isinstance(d, bytes) and _DIGEST.fullmatch(d))
        if len(good) != len(raw):
            self._skip(f"{len(raw) - len(good)} slot digests of member {member_id}")
        return good


def _redis_error() -> type[Exception]:
    from redis.exceptions import RedisError

    return RedisError


def eligibility(members: Iterable[Member]) -> dict[str, set[str]]:
    """slot digest -> ids of the members that publish it (the input of :func:`assign`)."""
    out: dict[str, set[str]] = {}
    for m in members:
        for slot in m.slots:
            out.setdefault(slot, set()).add(m.id)
    return out
