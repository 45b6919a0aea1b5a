"""The Redis share engine: one leader per share key, fenced writes, followers tailing a stream.

Keys per slot (``H`` = the first 32 hex digits of sha256 of the share key; the braces make
every key of a slot land on one Redis Cluster node)::

    {prefix}:{H}:lease          string  owner token, SET NX PX, renewed every lease_ttl/3
    {prefix}:{H}:meta           hash    epoch (random hex), seq (changes in this epoch), rv
    {prefix}:{H}:objs           hash    "namespace/name" -> b"<resourceVersion>\\n<JSON>"
    {prefix}:{H}:log            stream  t, f, v (as objs), n (seq), e (epoch), ts; capped
    {prefix}:{H}:stage:<epoch>  hash    a snapshot being written; renamed to objs on commit

Every write is a Lua script that first checks the lease still holds the writer's token
(fencing), so a leader that was paused past its lease cannot overwrite its successor.
``docs/sharing.md`` has the protocol and the failure cases.
"""

from __future__ import annotations

import collections
import contextlib
import hashlib
import logging
import math
import secrets
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator
from typing import TYPE_CHECKING, Any

import anyio
import anyio.abc

from .._codec import Entry, StoreChange
from .._informer import OnChange
from .._redact import redact_text, redact_url
from .._store import Replacement, Store
from ._base import Lead, ShareError, SlotStatus

if TYPE_CHECKING:
    import redis.asyncio as aioredis

__all__ = ["Redis", "RedisSession"]

log = logging.getLogger(__name__)

_PUBLISH = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return -1 end
if redis.call('HGET', KEYS[2], 'epoch') ~= ARGV[2] then return -2 end
local seq = tonumber(redis.call('HGET', KEYS[2], 'seq'))
local i = 6
for _ = 1, tonumber(ARGV[5]) do
  local t, f, v = ARGV[i], ARGV[i + 1], ARGV[i + 2]
  if t == 'DELETED' then
    redis.call('HDEL', KEYS[3], f)
  else
    redis.call('HSET', KEYS[3], f, v)
  end
  seq = seq + 1
  redis.call('XADD', KEYS[4], 'MAXLEN', '~', ARGV[3], '*',
             't', t, 'f', f, 'v', v, 'n', seq, 'e', ARGV[2], 'ts', ARGV[i + 3])
  i = i + 4
end
redis.call('HSET', KEYS[2], 'seq', seq, 'rv', ARGV[4])
return seq
"""

_COMMIT_SNAPSHOT = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  redis.call('DEL', KEYS[5])
  return -1
end
if redis.call('EXISTS', KEYS[5]) == 1 then
  redis.call('RENAME', KEYS[5], KEYS[3])
  redis.call('PERSIST', KEYS[3])
else
  redis.call('DEL', KEYS[3])
end
redis.call('DEL', KEYS[4], KEYS[2])
redis.call('HSET', KEYS[2], 'epoch', ARGV[2], 'seq', 0, 'rv', ARGV[3])
redis.call('XADD', KEYS[4], '*', 't', 'RESET', 'n', 0, 'e', ARGV[2], 'ts', ARGV[4])
return 0
"""

_RENEW = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0
"""

_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""

_STAGE_CHUNK = 2000
_BATCH = 256
_MAX_QUEUE = 100_000
_SLICE = 1000


class Redis:
    """The Redis share engine: ``share=kubemux.share.Redis("redis://host:6379/0")``.

    Needs the ``share`` extra (redis-py >= 5); it is imported only when a session opens.

    Args:
        url: A redis-py URL (``redis://``, ``rediss://``, ``unix://``). Its password never
            appears in ``repr`` or logs.
        prefix: Prefix of every key this engine writes.
        lease_ttl: Seconds a leader's lease lasts without renewal (renewed every third of
            it). A follower takes over within about this long after its leader dies.
        acquire_period: Seconds between a follower's attempts to take a free lease.
        stream_maxlen: Changes kept in each slot's stream (approximately); a follower further
            behind than this rehydrates from the object hash.
        share_secrets: Share objects of kind Secret too (off: each replica watches its own).
        command_timeout: Seconds one Redis command may take before Redis counts as down.
    """

    def __init__(
        self,
        url: str,
        *,
        prefix: str = "kubemux",
        lease_ttl: float = 3.0,
        acquire_period: float = 0.5,
        stream_maxlen: int = 10_000,
        share_secrets: bool = False,
        command_timeout: float = 5.0,
    ) -> None:
        if lease_ttl <= 0 or acquire_period <= 0 or stream_maxlen < 1:
            raise ValueError("lease_ttl, acquire_period and stream_maxlen must be positive")
        self.url = url
        self.prefix = prefix
        self.lease_ttl = lease_ttl
        self.acquire_period = acquire_period
        self.stream_maxlen = stream_maxlen
        self.share_secrets = share_secrets
        self.command_timeout = command_timeout

    def __repr__(self) -> str:
        return f"<kubemux.share.Redis {redact_url(self.url)} prefix={self.prefix!r}>"

    @contextlib.asynccontextmanager
    async def open(self) -> AsyncIterator[RedisSession]:
        """Open a session (no connection is made until a slot runs).

        Raises:
            ShareError: redis-py is not installed, or the URL is not one it accepts.
        """
        try:
            import redis.asyncio as aioredis
        except ImportError as exc:
            raise ShareError(
                "kubemux.share.Redis needs redis-py: pip install 'kubemux[share]'"
            ) from exc
        try:
            client = aioredis.Redis.from_url(
                self.url,
                decode_responses=False,
                socket_connect_timeout=self.command_timeout,
                socket_keepalive=True,
            )
        except ValueError as exc:
            raise ShareError(
                f"kubemux.share.Redis: bad URL {redact_url(self.url)}: {redact_text(str(exc))}"
            ) from exc
        session = RedisSession(self, client)
        try:
            yield session
        finally:
            with anyio.move_on_after(2.0, shield=True):
                await client.aclose()


class RedisSession:
    """One process's Redis session: runs shared slots (see :class:`ShareSession`)."""

    def __init__(self, engine: Redis, client: aioredis.Redis) -> None:
        from redis.exceptions import RedisError

        self.engine = engine
        self.client = client
        self._errors: tuple[type[BaseException], ...] = (RedisError, OSError, TimeoutError)
        self._slots: dict[str, _Slot] = {}
        self._publish = client.register_script(_PUBLISH)
        self._commit = client.register_script(_COMMIT_SNAPSHOT)
        self._renew = client.register_script(_RENEW)
        self._release = client.register_script(_RELEASE)

    def __repr__(self) -> str:
        roles = collections.Counter(s.role for s in self._slots.values())
        return f"<RedisSession {redact_url(self.engine.url)} slots={dict(sorted(roles.items()))}>"

    async def run_slot(
        self,
        *,
        key: bytes | str,
        store: Store,
        on_change: OnChange | None,
        lead: Lead,
        task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
        can_lead: bool = True,
        kind: str = "",
        on_status: Callable[[], None] | None = None,
    ) -> None:
        """See :meth:`kubemux.share.ShareSession.run_slot`."""
        digest = _digest(key)
        if digest in self._slots:
            raise ShareError("kubemux.share: this share key is already running in this session")
        slot = _Slot(self, digest, store, on_change, lead, task_status, can_lead)
        slot.on_status = on_status
        self._slots[digest] = slot
        try:
            if kind == "Secret" and not self.engine.share_secrets:
                await slot.run_local()
            else:
                await slot.run()
        finally:
            del self._slots[digest]
            if slot.token is not None:
                with anyio.move_on_after(1.0, shield=True):
                    try:
                        await self._release(keys=[slot.k_lease], args=[slot.token])
                    except self._errors:
                        pass  # it expires by itself

    def snapshot_entries(self, key: bytes | str, namespace: str | None = None) -> list[Entry]:
        """The slot's objects as announced to ``on_change`` so far (for a subscriber joining
        while a rehydration is being announced in slices); [] for a slot not running."""
        slot = self._slots.get(_digest(key))
        return [] if slot is None else slot.snapshot_entries(namespace)

    def slot_status(self, key: bytes | str) -> SlotStatus | None:
        """See :meth:`kubemux.share.ShareSession.slot_status`."""
        slot = self._slots.get(_digest(key))
        return None if slot is None else slot.status()


@contextlib.contextmanager
def _unwrap() -> Iterator[None]:
    """Raise a task group's single error as itself (the caller sees ``Unauthorized``, not an
    ExceptionGroup around it)."""
    try:
        yield
    except BaseExceptionGroup as group:
        if len(group.exceptions) == 1 and not isinstance(group.exceptions[0], BaseExceptionGroup):
            raise group.exceptions[0] from None
        raise


def _digest(key: bytes | str) -> str:
    data = key.encode() if isinstance(key, str) else key
    return hashlib.sha256(data).hexdigest()[:32]


def _entry(field: bytes, value: bytes) -> Entry:
    ns, _, name = field.decode().partition("/")
    rv, _, raw = value.partition(b"\n")
    return Entry(sys.intern(ns), name, rv.decode(), raw)


def _value(entry: Entry) -> bytes:
    return entry.resource_version.encode() + b"\n" + entry.raw


class _Slot:
    def __init__(
        self,
        session: RedisSession,
        digest: str,
        store: Store,
        on_change: OnChange | None,
        lead: Lead,
        task_status: anyio.abc.TaskStatus[None],
        can_lead: bool,
    ) -> None:
        self.s = session
        self.engine = session.engine
        self.client = session.client
        base = f"{self.engine.prefix}:{{{digest}}}"
        self.k_lease, self.k_meta = base + ":lease", base + ":meta"
        self.k_objs, self.k_log, self.k_stage = base + ":objs", base + ":log", base + ":stage"
        self.store = store
        self.on_change = on_change
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
        self.started = False
        self.inflight = 0  # changes in the write being sent
        self.reachable_since: float | None = -math.inf  # None: Redis failed since
        self.queue: collections.deque[tuple[str, Entry, str, float]] = collections.deque()
        self.wake = anyio.Event()
        self.needs_snapshot = True
        self.lead_synced = False
        self.scope: anyio.CancelScope | None = None
        self.pending: dict[str, dict[str, StoreChange]] = {}  # rehydration changes not announced

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
        )

    # ------------------------------------------------------------------ helpers
    def _started(self) -> None:
        if not self.started:
            self.started = True
            self.task_status.started()

    def _down(self, exc: BaseException) -> None:
        self.last_error = redact_text(f"redis: {type(exc).__name__}: {exc}")
        self.reachable_since = None
        if self.stale_since is None and self.role != "leader":
            self.stale_since = time.time()
        log.warning("share slot %s: %s", self.k_lease, self.last_error)

    def _fresh(self) -> None:
        self.stale_since = None
        self.last_error = None

    def _emit(self, etype: str, entry: Entry, old: Entry | None) -> None:
        if self.on_change is not None:
            self.on_change(etype, entry, old)

    async def _try_acquire(self) -> bool:
        token = secrets.token_hex(16)
        with anyio.fail_after(self.engine.command_timeout):
            ok = await self.client.set(
                self.k_lease, token, nx=True, px=int(self.engine.lease_ttl * 1000)
            )
        if ok:
            self.token = token
            self.promotions += 1
            log.info("share slot %s: took the lease", self.k_lease)
        return bool(ok)

    # ------------------------------------------------------------------ roles
    async def run_local(self) -> None:
        self.role = "local"

        def publish(etype: str, entry: Entry, rv: str) -> None:
            pass

        async def lead_local(*, task_status: anyio.abc.TaskStatus[None]) -> None:
            await self.lead(None, publish, task_status)

        with _unwrap():
            async with anyio.create_task_group() as tg:
                await tg.start(lead_local)
                self._started()

    async def run(self) -> None:
        while True:
            acquired: bool | None = False
            if self.can_lead:
                try:
                    acquired = await self._try_acquire()
                except self.s._errors as exc:
                    self._down(exc)
                    acquired = None
            if acquired is None and not self.store.has_synced:
                # Redis is down and we have nothing to serve: watch by ourselves for now
                self.needs_snapshot = True
                await self._lead_phase(None)
                continue
            if not acquired:
                await self._follow_phase()  # returns once this replica holds the lease
            await self._lead_phase(await self._catch_up())

    # ------------------------------------------------------------------ leader
    async def _catch_up(self) -> str | None:
        """Bring the store to the end of the stream; the resourceVersion to watch from, or
        None to LIST (no data, or Redis unreachable)."""
        try:
            with anyio.fail_after(self.engine.command_timeout):
                pipe = self.client.pipeline(transaction=True)
                pipe.hmget(self.k_meta, ["epoch", "seq", "rv"])
                pipe.xrange(self.k_log, min=b"(" + self.last_id, max="+")
                (epoch, seq, rv), entries = await pipe.execute()
            if epoch is None or seq is None or not seq.isdigit():
                self.needs_snapshot = True
                return None
            if epoch.decode() == self.epoch and self.store.has_synced:
                ok = all(self._apply_logged(eid, fields) for eid, fields in entries)
            else:
                ok = False
            if (not ok or self.seq != int(seq)) and not await self._hydrate():
                self.needs_snapshot = True
                return None
        except self.s._errors as exc:
            self._down(exc)
            self.needs_snapshot = True
            return None
        self._fresh()
        if not rv:  # nothing to resume from: LIST (and write a snapshot)
            self.needs_snapshot = True
            return None
        self.needs_snapshot = False
        return str(rv.decode())

    async def _lead_phase(self, resume_rv: str | None) -> None:
        self.role = "leader" if self.token is not None else "local"
        self.lead_synced = False
        self.queue.clear()
        self.lag = None
        self.stale_since = None

        async def run_lead(*, task_status: anyio.abc.TaskStatus[None]) -> None:
            await self.lead(resume_rv, self._publish, task_status)

        try:
            with anyio.CancelScope() as scope, _unwrap():  # cancelled by _demote()
                self.scope = scope
                async with anyio.create_task_group() as tg:
                    tg.start_soon(self._renew_loop)
                    tg.start_soon(self._writer_loop)
                    await tg.start(run_lead)
                    self.lead_synced = True
                    self._started()
                    self.wake.set()
        finally:
            self.scope = None
        log.info("share slot %s: another replica leads; following", self.k_lease)
        self.token = None
        self.queue.clear()

    def _demote(self) -> None:
        self.token = None
        if self.scope is not None:
            self.scope.cancel("kubemux.share: another replica holds the lease")

    def _publish(self, etype: str, entry: Entry, rv: str) -> None:
        if self.token is None and self.role == "leader":
            self.fenced += 1  # the lease was lost and the demotion is under way: refused
            return
        if self.needs_snapshot or self.token is None:
            return  # the next snapshot carries it
        queue = self.queue
        queue.append((etype, entry, rv, time.time()))
        if len(queue) > _MAX_QUEUE:
            queue.clear()  # Redis cannot keep up: a snapshot replaces the backlog
            self.needs_snapshot = True
        self.wake.set()

    async def _lost_lease(self) -> None:
        """Our token is no longer in the lease: take it again if free, else demote.

        The changes not yet written (queued or in flight) count as refused: the lease is
        not ours, so no script of ours can write them any more."""
        self.fenced += len(self.queue) + self.inflight
        self.inflight = 0
        self.token = None
        self.needs_snapshot = True
        self.queue.clear()
        if await self._try_acquire():
            self.role = "leader"
            self.wake.set()
        else:
            self._demote()

    async def _renew_loop(self) -> None:
        ttl_ms = int(self.engine.lease_ttl * 1000)
        while True:
            await anyio.sleep(self.engine.lease_ttl / 3)
            try:
                if self.token is None:
                    if self.can_lead and await self._try_acquire():
                        self.role = "leader"
                        self.needs_snapshot = True
                        self.wake.set()
                    elif self.can_lead:
                        self._demote()  # somebody else leads now: follow them
                    continue
                with anyio.fail_after(self.engine.command_timeout):
                    ok = await self.s._renew(keys=[self.k_lease], args=[self.token, ttl_ms])
                if not ok:
                    await self._lost_lease()
                elif self.needs_snapshot:
                    self.wake.set()  # Redis is back: the writer republishes
            except self.s._errors as exc:
                self._down(exc)

    async def _writer_loop(self) -> None:
        while True:
            await self.wake.wait()
            self.wake = anyio.Event()
            if self.token is None or not self.lead_synced:
                continue
            try:
                if self.needs_snapshot:
                    await self._write_snapshot()
                await self._flush()
                self._fresh()
            except self.s._errors as exc:
                self._down(exc)
                self.needs_snapshot = True  # what was lost is in the next snapshot
                self.queue.clear()

    async def _write_snapshot(self) -> None:
        store = self.store
        entries = store._entries(None)
        rv = store.resource_version
        self.queue.clear()
        self.needs_snapshot = False
        epoch = secrets.token_hex(8)
        stage = f"{self.k_stage}:{epoch}"
        timeout = self.engine.command_timeout
        try:
            for i in range(0, len(entries), _STAGE_CHUNK):
                chunk = entries[i : i + _STAGE_CHUNK]
                mapping = {f"{e.namespace}/{e.name}": _value(e) for e in chunk}
                with anyio.fail_after(timeout):
                    pipe = self.client.pipeline(transaction=False)
                    pipe.hset(stage, mapping=mapping)  # type: ignore[arg-type]
                    pipe.pexpire(stage, 120_000)
                    await pipe.execute()
            with anyio.fail_after(timeout):
                token = self.token
                assert token is not None
                res = await self.s._commit(
                    keys=[self.k_lease, self.k_meta, self.k_objs, self.k_log, stage],
                    args=[token, epoch, rv, f"{time.time():.6f}"],
                )
        except BaseException:
            self.needs_snapshot = True
            raise
        if res == -1:
            self.fenced += len(entries)
            await self._lost_lease()
            return
        self.epoch, self.seq = epoch, 0
        log.info("share slot %s: wrote a snapshot of %d objects", self.k_lease, len(entries))

    async def _flush(self) -> None:
        queue = self.queue
        timeout = self.engine.command_timeout
        while queue and self.token is not None and not self.needs_snapshot:
            n = min(len(queue), _BATCH)
            args: list[Any] = [self.token, self.epoch, self.engine.stream_maxlen, "", n]
            rv = ""
            for _ in range(n):
                etype, entry, rv, ts = queue.popleft()
                args += (etype, f"{entry.namespace}/{entry.name}", _value(entry), f"{ts:.6f}")
            args[3] = rv
            self.inflight = n
            try:
                with anyio.fail_after(timeout):
                    res = await self.s._publish(
                        keys=[self.k_lease, self.k_meta, self.k_objs, self.k_log], args=args
                    )
            except BaseException:
                self.inflight = 0
                raise
            if res == -1:
                log.warning("share slot %s: write refused (lease lost)", self.k_lease)
                await self._lost_lease()
                return
            self.inflight = 0
            if res == -2:  # the data moved under us (Redis restarted): republish all
                self.needs_snapshot = True
                self.queue.clear()
                self.wake.set()
                return
            self.seq = int(res)

    # ------------------------------------------------------------------ follower
    async def _follow_phase(self) -> None:
        self.role = "follower"
        with anyio.CancelScope() as scope, _unwrap():
            self.scope = scope
            async with anyio.create_task_group() as tg:
                tg.start_soon(self._acquire_loop, scope)
                await self._tail()
        self.scope = None

    async def _acquire_loop(self, scope: anyio.CancelScope) -> None:
        # After an outage the leader that was running gets one lease_ttl to take its lease
        # again (it keeps its informer and republishes): followers wait that long.
        while True:
            await anyio.sleep(self.engine.acquire_period)
            try:
                if self.can_lead:
                    if self.reachable_since is None:
                        with anyio.fail_after(self.engine.command_timeout):
                            await self.client.ping()
                        self.reachable_since = time.monotonic()
                    if time.monotonic() - self.reachable_since < self.engine.lease_ttl:
                        continue
                    if await self._try_acquire():
                        scope.cancel("kubemux.share: promoted to leader")
                        return
                    held = True
                else:
                    with anyio.fail_after(self.engine.command_timeout):
                        held = bool(await self.client.exists(self.k_lease))
                if not held:
                    if self.stale_since is None:
                        self.stale_since = time.time()  # nobody leads: data may be stale
                elif self.last_error is None and self.epoch is not None:
                    self.stale_since = None  # a leader is there and the tail is healthy
            except self.s._errors as exc:
                self._down(exc)

    async def _tail(self) -> None:
        block_ms = int(max(self.engine.acquire_period, 0.1) * 2000)
        timeout = self.engine.command_timeout + block_ms / 1000
        hydrate = True
        failures = 0
        while True:
            try:
                if hydrate:
                    if not await self._hydrate():
                        self.epoch = None  # the data followed left Redis
                        if self.store.has_synced and self.stale_since is None:
                            self.stale_since = time.time()
                        with anyio.fail_after(timeout):  # wait for a leader's first snapshot
                            seen = await self.client.xread(
                                {self.k_log: b"0-0"}, count=1, block=block_ms
                            )
                        if seen:  # a log without meta (evicted?): no busy loop on it
                            await anyio.sleep(self.engine.acquire_period)
                        continue
                    hydrate = False
                    self._started()
                with anyio.fail_after(timeout):
                    resp: Any = await self.client.xread(
                        {self.k_log: self.last_id}, count=_SLICE, block=block_ms
                    )
                failures = 0
                if not resp:
                    with anyio.fail_after(timeout):
                        epoch: Any = await self.client.hget(self.k_meta, "epoch")
                    hydrate = epoch is None or epoch.decode() != self.epoch
                    continue
                for eid, fields in resp[0][1]:
                    if not self._apply_logged(eid, fields):
                        hydrate = True
                        break
                else:
                    if self.last_error is not None or self.stale_since is not None:
                        self._fresh()
            except self.s._errors as exc:
                self._down(exc)
                hydrate = True
                failures += 1
                await anyio.sleep(min(2.0, 0.05 * 2**failures))

    def _apply_logged(self, eid: bytes, fields: dict[bytes, bytes]) -> bool:
        """Apply one stream entry; False on a gap (other epoch, missing seq, a reset)."""
        etype = fields.get(b"t", b"").decode(errors="replace")
        try:
            seq = int(fields.get(b"n", b"0"))
        except ValueError:
            return False
        if fields.get(b"e", b"").decode() != self.epoch or etype == "RESET":
            return False
        if seq != self.seq + 1:
            return False
        try:
            entry = _entry(fields[b"f"], fields[b"v"])
        except (KeyError, ValueError):  # not written by a kubemux leader: reload the hash
            log.warning("share slot %s: malformed stream entry %r", self.k_lease, eid)
            return False
        self.seq, self.last_id = seq, eid
        with contextlib.suppress(ValueError):
            self.lag = max(0.0, time.time() - float(fields.get(b"ts", b"")))
        change = self.store._apply(etype, entry)
        if change is not None:
            self._emit(change.type, change.entry, change.old)
        return True

    async def _hydrate(self) -> bool:
        """Replace the store with the hash (changes reported as after a relist); False if
        there is no data yet."""
        with anyio.fail_after(self.engine.command_timeout * 4):
            pipe = self.client.pipeline(transaction=True)
            pipe.hmget(self.k_meta, ["epoch", "seq", "rv"])
            pipe.xrevrange(self.k_log, count=1)
            pipe.hgetall(self.k_objs)
            (epoch, seq, rv), last, objs = await pipe.execute()
        if epoch is None or seq is None or not seq.isdigit():
            return False  # no data (or not a kubemux leader's): wait for a snapshot
        store = self.store
        replacement = Replacement(store)
        for i, (field, value) in enumerate(objs.items()):
            try:
                replacement.add(_entry(field, value))
            except ValueError:  # never cache what no reader can decode
                log.warning("share slot %s: skipped a malformed object", self.k_lease)
            if i % _SLICE == _SLICE - 1:
                await anyio.lowlevel.checkpoint()
        del objs
        for _ in replacement.find_deleted(_SLICE):
            await anyio.lowlevel.checkpoint()
        changes = replacement.commit((rv or b"").decode(errors="replace"))
        self.epoch, self.seq = epoch.decode(), int(seq)
        self.last_id = last[0][0] if last else b"0-0"
        self.rehydrations += 1
        self._fresh()
        if len(changes) <= _SLICE:
            for c in changes:
                self._emit(c.type, c.entry, c.old)
            return True
        # announced in slices, like an informer's relist: until a change is announced,
        # snapshot_entries() reports the object as it was
        pending: dict[str, dict[str, StoreChange]] = {}
        for c in changes:
            pending.setdefault(c.entry.namespace, {})[c.entry.name] = c
        self.pending = pending
        try:
            for i, c in enumerate(changes):
                del pending[c.entry.namespace][c.entry.name]
                self._emit(c.type, c.entry, c.old)
                if i % _SLICE == _SLICE - 1:
                    await anyio.lowlevel.checkpoint()
        finally:
            self.pending = {}
        return True

    def snapshot_entries(self, namespace: str | None) -> list[Entry]:
        entries = self.store._entries(namespace)
        pending = self.pending
        if not pending:
            return entries
        out: list[Entry] = []
        for e in entries:
            change = pending.get(e.namespace, {}).get(e.name)
            if change is None:
                out.append(e)
            elif change.type == "MODIFIED" and change.old is not None:
                out.append(change.old)
        for ns, bucket in pending.items():
            if namespace is None or ns == namespace:
                out.extend(c.old for c in bucket.values() if c.type == "DELETED" and c.old)
        return out
