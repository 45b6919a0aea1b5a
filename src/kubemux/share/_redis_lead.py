"""A Redis share slot's leader role (lease, renewal, fenced writes of snapshots and
changes) and the loop that switches a slot between its roles."""

from __future__ import annotations

import secrets
import time
from typing import Any

import anyio
import anyio.abc

from .._codec import Entry
from ._redis_follow import _Follower
from ._redis_keys import (
    _BATCH,
    _CATCH_UP,
    _MAX_QUEUE,
    _STAGE_CHUNK,
    BadSlotData,
    Meta,
    _unwrap,
    log,
    meta_of,
)
from ._redis_table import columns_value


class _Slot(_Follower):
    """One running slot: leads, follows, or runs alone (``run_local``)."""

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
        None to LIST (no data, Redis unreachable, or data that could not all be trusted:
        the LIST's snapshot replaces it)."""
        try:
            with anyio.fail_after(self.engine.command_timeout):
                pipe = self.client.pipeline(transaction=True)
                pipe.hmget(self.k_meta, ["epoch", "seq", "rv", "rvmac"])
                # bounded: a longer tail (or a stream filled by someone else) is a reload
                pipe.xrange(self.k_log, min=b"(" + self.last_id, max="+", count=_CATCH_UP)
                (epoch, seq, rv, rvmac), entries = await pipe.execute()
            meta = meta_of(self.values, epoch, seq, rv, rvmac)
            if not isinstance(meta, Meta):
                if meta is not None:
                    self._note(BadSlotData(meta))
                self.needs_snapshot = True
                return None
            if meta.epoch == self.epoch and self.store.has_synced and len(entries) < _CATCH_UP:
                ok = all(self._apply_logged(eid, fields) for eid, fields in entries)
            else:
                ok = False
            if (not ok or self.seq != meta.seq) and not await self._hydrate():
                self.needs_snapshot = True
                return None
        except self.s._errors as exc:
            self._down(exc)
            self.needs_snapshot = True
            return None
        self._fresh()
        if self.tainted:  # what was skipped is missing or old here: LIST
            self.needs_snapshot = True
            return None
        if not meta.rv:  # nothing to resume from: LIST (and write a snapshot)
            self.needs_snapshot = True
            return None
        self.needs_snapshot = False
        return meta.rv

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
        if self.table is not None and self._columns_moved():
            self.needs_snapshot = True  # new columns: a snapshot carries them and the rows
            self.queue.clear()
            self.wake.set()
            return
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
                    ok = await self.s._renew(
                        keys=[self.k_lease, self.k_meta], args=[self.token, ttl_ms]
                    )
                if not ok:
                    await self._lost_lease()
                elif not self._meta_intact(ok):
                    self.needs_snapshot = True  # forged or gone: a snapshot replaces it
                    self.wake.set()
                elif self.needs_snapshot:
                    self.wake.set()  # Redis is back: the writer republishes
                elif self.lead_synced and self._columns_moved():
                    self.needs_snapshot = True  # a relist changed the columns, no row
                    self.wake.set()
            except self.s._errors as exc:
                self._down(exc)

    def _meta_intact(self, renewed: Any) -> bool:
        """Whether the meta a renewal read back is the one this leader wrote last (or a
        write is under way that moves it): checked once per renewal, so a forged meta is
        replaced within a third of the lease even when no change is published."""
        if self.snapshotting or self.needs_snapshot or not self.lead_synced or self.epoch is None:
            return True
        if len(renewed) < 2:
            return False  # the meta hash is gone (or not a hash)
        meta = meta_of(self.values, *renewed[1])
        if not isinstance(meta, Meta) or meta.epoch != self.epoch:
            if isinstance(meta, str):
                self._note(BadSlotData(meta))
            return False
        return True

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
        entries = store.writer.entries()
        rv = store.resource_version
        columns = self.table.columns if self.table is not None else None
        self.queue.clear()
        self.needs_snapshot = False
        self.snapshotting = True
        epoch = secrets.token_hex(8)
        stage = f"{self.k_stage}:{epoch}"
        values = self.values
        value = values.value
        timeout = self.engine.command_timeout
        cols = b"" if columns is None else columns_value(columns)
        try:
            for i in range(0, len(entries), _STAGE_CHUNK):
                chunk = entries[i : i + _STAGE_CHUNK]
                mapping = {f"{e.namespace}/{e.name}": value(e, epoch) for e in chunk}
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
            self.needs_snapshot = True
            raise
        finally:
            self.snapshotting = False
        if res == -1:
            self.fenced += len(entries)
            await self._lost_lease()
            return
        self.epoch, self.seq = epoch, 0
        self.sent_columns = columns
        log.info("share slot %s: wrote a snapshot of %d objects", self.k_lease, len(entries))

    async def _flush(self) -> None:
        queue = self.queue
        timeout = self.engine.command_timeout
        values = self.values
        while queue and self.token is not None and not self.needs_snapshot:
            epoch = self.epoch
            assert epoch is not None
            n = min(len(queue), _BATCH)
            args: list[Any] = [self.token, epoch, self.engine.stream_maxlen, "", n, self.seq, ""]
            rv = ""
            seq = self.seq
            for _ in range(n):
                etype, entry, rv, ts = queue.popleft()
                field = f"{entry.namespace}/{entry.name}"
                v = values.value(entry, epoch)
                seq += 1
                args += (etype, field, v, f"{ts:.6f}", values.log_mac(epoch, seq, etype, field, v))
            args[3] = rv
            args[6] = values.meta_mac(epoch, "rv", rv.encode())
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
            if res in (-2, -3):  # the data moved under us (Redis restarted, or forged): all
                self.needs_snapshot = True
                self.queue.clear()
                self.wake.set()
                return
            self.seq = int(res)
