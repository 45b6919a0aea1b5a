"""A Redis share slot's leader role (lease, renewal, fenced writes of snapshots and
changes) and the loop that switches a slot between its roles."""

from __future__ import annotations

import logging
import secrets
import time
from typing import Any

import anyio
import anyio.abc

from .._wire.codec import Entry
from ._redis_follow import Follower
from ._redis_keys import (
    BATCH,
    CATCH_UP,
    MAX_QUEUE,
    STAGE_CHUNK,
    BadSlotData,
    Meta,
    meta_of,
    unwrap,
)
from ._redis_slot import SlotState
from ._redis_table import columns_value

log = logging.getLogger(__name__)


class Leader:
    """A slot's leader role (lease, renewal, fenced writes), and the loop that switches the
    slot between its roles: leads, follows (through ``follower``), or runs alone."""

    __slots__ = ("follower", "slot")

    def __init__(self, slot: SlotState, follower: Follower) -> None:
        self.slot = slot
        self.follower = follower

    async def run_local(self) -> None:
        self.slot.role = "local"
        self.slot.shared = False

        def publish(etype: str, entry: Entry, rv: str) -> None:
            pass

        async def lead_local(*, task_status: anyio.abc.TaskStatus[None]) -> None:
            await self.slot.lead(None, publish, task_status)

        with unwrap():
            async with anyio.create_task_group() as tg:
                await tg.start(lead_local)
                self.slot.report_started()

    async def run(self) -> None:
        while True:
            acquired: bool | None = False
            # placement: a slot another live member should lead is left to it (the
            # follower takes it after the grace period if that member does not)
            if self.slot.can_lead and self.slot.choice(self.slot.digest) != "other":
                try:
                    acquired = await self.slot.try_acquire()
                except self.slot.env.errors as exc:
                    self.slot.down(exc)
                    acquired = None
            if acquired is None and not self.slot.store.has_synced:
                # Redis is down and we have nothing to serve: watch by ourselves for now
                self.slot.needs_snapshot = True
                await self.lead_phase(None)
                continue
            if not acquired:
                await self.follower.follow_phase()  # returns once this replica holds the lease
            await self.lead_phase(await self.catch_up())

    # ------------------------------------------------------------------ leader
    async def catch_up(self) -> str | None:
        """Bring the store to the end of the stream; the resourceVersion to watch from, or
        None to LIST (no data, Redis unreachable, or data that could not all be trusted:
        the LIST's snapshot replaces it)."""
        try:
            with anyio.fail_after(self.slot.env.command_timeout):
                pipe = self.slot.client.pipeline(transaction=True)
                pipe.hmget(self.slot.k_meta, ["epoch", "seq", "rv", "rvmac"])
                # bounded: a longer tail (or a stream filled by someone else) is a reload
                pipe.xrange(self.slot.k_log, min=b"(" + self.slot.last_id, max="+", count=CATCH_UP)
                (epoch, seq, rv, rvmac), entries = await pipe.execute()
            meta = meta_of(self.slot.values, epoch, seq, rv, rvmac)
            if not isinstance(meta, Meta):
                if meta is not None:
                    self.slot.note(BadSlotData(meta))
                self.slot.needs_snapshot = True
                return None
            if (
                meta.epoch == self.slot.epoch
                and self.slot.store.has_synced
                and len(entries) < CATCH_UP
            ):
                ok = all(self.follower.apply_logged(eid, fields) for eid, fields in entries)
            else:
                ok = False
            if (not ok or self.slot.seq != meta.seq) and not await self.follower.hydrate():
                self.slot.needs_snapshot = True
                return None
        except self.slot.env.errors as exc:
            self.slot.down(exc)
            self.slot.needs_snapshot = True
            return None
        self.slot.fresh()
        if self.slot.tainted:  # what was skipped is missing or old here: LIST
            self.slot.needs_snapshot = True
            return None
        if not meta.rv:  # nothing to resume from: LIST (and write a snapshot)
            self.slot.needs_snapshot = True
            return None
        self.slot.needs_snapshot = False
        return meta.rv

    async def lead_phase(self, resume_rv: str | None) -> None:
        self.slot.role = "leader" if self.slot.token is not None else "local"
        self.slot.lead_synced = False
        self.slot.queue.clear()
        self.slot.lag = None
        self.slot.stale_since = None

        lead_scope = anyio.CancelScope()  # the informer's: a handover stops it first

        async def run_lead(*, task_status: anyio.abc.TaskStatus[None]) -> None:
            with lead_scope:
                await self.slot.lead(resume_rv, self._publish, task_status)

        try:
            with anyio.CancelScope() as scope, unwrap():  # cancelled by _demote()
                self.slot.scope = scope
                async with anyio.create_task_group() as tg:
                    tg.start_soon(self._renew_loop)
                    tg.start_soon(self._writer_loop)
                    await tg.start(run_lead)
                    self.slot.lead_synced = True
                    self.slot.report_started()
                    self.slot.wake.set()
                    if self.slot.token is not None:
                        tg.start_soon(self._handover_when_asked, lead_scope)
        finally:
            self.slot.scope = None
            self.slot.handing_over = False
            self.slot.handover = anyio.Event()
        log.info("share slot %s: another replica leads; following", self.slot.k_lease)
        self.slot.token = None
        self.slot.queue.clear()

    async def _handover_when_asked(self, lead_scope: anyio.CancelScope) -> None:
        """Hand the slot over when placement asks (issue 22), pulled by the new leader:
        reserve the slot for it (``next``, checked against our token), keep leading and
        publishing until its next acquire swaps the lease to it, then stop at once. It
        catches up from the stream and resumes the watch from the last published
        resourceVersion, as after a failover: no LIST, no gap, no duplicate. Fencing is
        untouched: after the swap our writes are refused (counted in ``fenced_writes``) and
        come again through its watch. A reservation not taken within ``2 x lease_ttl`` (the
        member died, or never runs the slot) expires; nothing was interrupted."""
        slot, env = self.slot, self.slot.env
        poll = min(env.acquire_period, env.lease_ttl / 3) / 2
        while True:
            await slot.handover.wait()
            slot.handover = anyio.Event()
            target, token = slot.handover_to, slot.token
            if target is None or token is None:
                continue
            slot.handing_over = True
            swapped = False
            try:
                with anyio.fail_after(env.command_timeout):
                    reserved = await env.reserve(
                        keys=[slot.k_lease, slot.k_next],
                        args=[token, target, int(2000 * env.lease_ttl)],
                    )
                if reserved:
                    with anyio.move_on_after(2 * env.lease_ttl):
                        while not swapped:
                            await anyio.sleep(poll)
                            with anyio.fail_after(env.command_timeout):
                                held = await slot.client.get(slot.k_lease)
                            swapped = held != token.encode()
            except env.errors as exc:
                slot.down(exc)
            if swapped:
                log.info("share slot %s: handed over to member %s", slot.k_lease, target)
                lead_scope.cancel("kubemux.share: handed over")  # the informer stops first
                await self._lost_lease()  # counts what was refused, demotes
                return
            slot.handing_over = False
            slot.led_since = time.monotonic()  # not handed again before the hold time
            log.info("share slot %s: member %s did not take it over", slot.k_lease, target)

    def _demote(self) -> None:
        self.slot.token = None
        if self.slot.scope is not None:
            self.slot.scope.cancel("kubemux.share: another replica holds the lease")

    def _publish(self, etype: str, entry: Entry, rv: str) -> None:
        if self.slot.token is None and self.slot.role == "leader":
            self.slot.fenced += 1  # the lease was lost and the demotion is under way: refused
            return
        if self.slot.needs_snapshot or self.slot.token is None:
            return  # the next snapshot carries it
        if self.slot.table is not None and self.slot.columns_moved():
            self.slot.needs_snapshot = True  # new columns: a snapshot carries them and the rows
            self.slot.queue.clear()
            self.slot.wake.set()
            return
        queue = self.slot.queue
        queue.append((etype, entry, rv, time.time()))
        if len(queue) > MAX_QUEUE:
            queue.clear()  # Redis cannot keep up: a snapshot replaces the backlog
            self.slot.needs_snapshot = True
        self.slot.wake.set()

    async def _lost_lease(self) -> None:
        """Our token is no longer in the lease: take it again if free, else demote.

        The changes not yet written (queued or in flight) count as refused: the lease is
        not ours, so no script of ours can write them any more."""
        if self.slot.handing_over:  # a reservation stood: the member took it over
            self.slot.handing_over = False
            self.slot.handed()
        self.slot.fenced += len(self.slot.queue) + self.slot.inflight
        self.slot.inflight = 0
        self.slot.token = None
        self.slot.needs_snapshot = True
        self.slot.queue.clear()
        if await self.slot.try_acquire():
            self.slot.role = "leader"
            self.slot.wake.set()
        else:
            self._demote()

    async def _renew_loop(self) -> None:
        ttl_ms = int(self.slot.env.lease_ttl * 1000)
        while True:
            await anyio.sleep(self.slot.env.lease_ttl / 3)
            try:
                if self.slot.token is None:
                    if self.slot.can_lead and await self.slot.try_acquire():
                        self.slot.role = "leader"
                        self.slot.needs_snapshot = True
                        self.slot.wake.set()
                    elif self.slot.can_lead:
                        self._demote()  # somebody else leads now: follow them
                    continue
                with anyio.fail_after(self.slot.env.command_timeout):
                    ok = await self.slot.env.renew(
                        keys=[self.slot.k_lease, self.slot.k_meta], args=[self.slot.token, ttl_ms]
                    )
                if not ok:
                    await self._lost_lease()
                elif not self._meta_intact(ok):
                    self.slot.needs_snapshot = True  # forged or gone: a snapshot replaces it
                    self.slot.wake.set()
                elif self.slot.needs_snapshot:
                    self.slot.wake.set()  # Redis is back: the writer republishes
                elif self.slot.lead_synced and self.slot.columns_moved():
                    self.slot.needs_snapshot = True  # a relist changed the columns, no row
                    self.slot.wake.set()
            except self.slot.env.errors as exc:
                self.slot.down(exc)

    def _meta_intact(self, renewed: Any) -> bool:
        """Whether the meta a renewal read back is the one this leader wrote last (or a
        write is under way that moves it): checked once per renewal, so a forged meta is
        replaced within a third of the lease even when no change is published."""
        if (
            self.slot.snapshotting
            or self.slot.needs_snapshot
            or not self.slot.lead_synced
            or self.slot.epoch is None
        ):
            return True
        if len(renewed) < 2:
            return False  # the meta hash is gone (or not a hash)
        meta = meta_of(self.slot.values, *renewed[1])
        if not isinstance(meta, Meta) or meta.epoch != self.slot.epoch:
            if isinstance(meta, str):
                self.slot.note(BadSlotData(meta))
            return False
        return True

    async def _writer_loop(self) -> None:
        while True:
            await self.slot.wake.wait()
            self.slot.wake = anyio.Event()
            if self.slot.token is None or not self.slot.lead_synced:
                continue
            try:
                if self.slot.needs_snapshot:
                    await self._write_snapshot()
                await self._flush()
                self.slot.fresh()
            except self.slot.env.errors as exc:
                self.slot.down(exc)
                self.slot.needs_snapshot = True  # what was lost is in the next snapshot
                self.slot.queue.clear()

    async def _write_snapshot(self) -> None:
        """Stage the store's objects in chunks, then commit them as the slot's data, fenced.

        The lease may be lost while the chunks are staged (the renewal or a handover runs
        meanwhile, and the lease's token is cleared before a new acquire is tried): the token
        is read again after the awaits, and one that is gone or another (taken again) means
        this snapshot is fenced: counted, its stage dropped, and the next one is due."""
        token = self.slot.token
        if token is None:
            return  # the lease went before the writer woke: the next lead writes one
        store = self.slot.store
        entries = store.writer.entries()
        rv = store.resource_version
        columns = self.slot.table.columns if self.slot.table is not None else None
        self.slot.queue.clear()
        self.slot.needs_snapshot = False
        self.slot.snapshotting = True
        epoch = secrets.token_hex(8)
        stage = f"{self.slot.k_stage}:{epoch}"
        values = self.slot.values
        value = values.value
        timeout = self.slot.env.command_timeout
        cols = b"" if columns is None else columns_value(columns)
        try:
            for i in range(0, len(entries), STAGE_CHUNK):
                chunk = entries[i : i + STAGE_CHUNK]
                mapping = {f"{e.namespace}/{e.name}": value(e, epoch) for e in chunk}
                with anyio.fail_after(timeout):
                    pipe = self.slot.client.pipeline(transaction=False)
                    pipe.hset(stage, mapping=mapping)  # type: ignore[arg-type]
                    pipe.pexpire(stage, 120_000)
                    await pipe.execute()
            if self.slot.token != token:  # lost (or lost and taken again) while staging
                await self._fenced_snapshot(stage, len(entries))
                return
            with anyio.fail_after(timeout):
                res = await self.slot.env.commit(
                    keys=[
                        self.slot.k_lease,
                        self.slot.k_meta,
                        self.slot.k_objs,
                        self.slot.k_log,
                        stage,
                    ],
                    args=[
                        token,
                        epoch,
                        rv,
                        f"{time.time():.6f}",
                        cols,
                        values.meta_mac(epoch, "rv", rv.encode()),
                        values.meta_mac(epoch, "columns", cols) if cols else b"",
                    ],
                )
        except BaseException:
            self.slot.needs_snapshot = True
            raise
        finally:
            self.slot.snapshotting = False
        if res == -1:
            self.slot.fenced += len(entries)
            await self._lost_lease()
            return
        self.slot.epoch, self.slot.seq = epoch, 0
        self.slot.sent_columns = columns
        log.info("share slot %s: wrote a snapshot of %d objects", self.slot.k_lease, len(entries))

    async def _fenced_snapshot(self, stage: str, count: int) -> None:
        """A snapshot staged under a lease no longer ours: never committed (a commit with
        the old token would be refused anyway), its objects counted as refused writes, a
        snapshot due under the next lease; the stage is dropped (it would expire)."""
        self.slot.fenced += count
        self.slot.needs_snapshot = True
        log.info("share slot %s: lease lost while a snapshot was staged", self.slot.k_lease)
        try:
            with anyio.fail_after(self.slot.env.command_timeout):
                await self.slot.client.unlink(stage)
        except self.slot.env.errors:
            pass  # it expires by itself (120 s)

    async def _flush(self) -> None:
        queue = self.slot.queue
        timeout = self.slot.env.command_timeout
        values = self.slot.values
        while queue and self.slot.token is not None and not self.slot.needs_snapshot:
            epoch = self.slot.epoch
            assert epoch is not None
            n = min(len(queue), BATCH)
            args: list[Any] = [
                self.slot.token,
                epoch,
                self.slot.env.stream_maxlen,
                "",
                n,
                self.slot.seq,
                "",
            ]
            rv = ""
            seq = self.slot.seq
            for _ in range(n):
                etype, entry, rv, ts = queue.popleft()
                field = f"{entry.namespace}/{entry.name}"
                v = values.value(entry, epoch)
                seq += 1
                args += (etype, field, v, f"{ts:.6f}", values.log_mac(epoch, seq, etype, field, v))
            args[3] = rv
            args[6] = values.meta_mac(epoch, "rv", rv.encode())
            self.slot.inflight = n
            try:
                with anyio.fail_after(timeout):
                    res = await self.slot.env.publish(
                        keys=[
                            self.slot.k_lease,
                            self.slot.k_meta,
                            self.slot.k_objs,
                            self.slot.k_log,
                        ],
                        args=args,
                    )
            except BaseException:
                self.slot.inflight = 0
                raise
            if res == -1:
                log.warning("share slot %s: write refused (lease lost)", self.slot.k_lease)
                await self._lost_lease()
                return
            self.slot.inflight = 0
            if res in (-2, -3):  # the data moved under us (Redis restarted, or forged): all
                self.slot.needs_snapshot = True
                self.slot.queue.clear()
                self.slot.wake.set()
                return
            self.slot.seq = int(res)
