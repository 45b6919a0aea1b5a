"""A Redis share slot's follower role: hydrate from the object hash, tail the stream,
rehydrate on a gap, and try to take a free lease."""

from __future__ import annotations

import contextlib
import time
from typing import Any

import anyio
import anyio.lowlevel

from .._codec import Entry, StoreChange
from .._store import announced_entries
from ._redis_keys import _SLICE, _unwrap, log
from ._redis_slot import _SlotBase
from ._redis_table import parse_columns, set_columns


class _Follower(_SlotBase):
    async def _follow_phase(self) -> None:
        self.role = "follower"
        with anyio.CancelScope() as scope, _unwrap():
            self.scope = scope
            async with anyio.create_task_group() as tg:
                tg.start_soon(self._acquire_loop, scope)
                await self._tail()
        self.scope = None
        self.following_since = None

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
                    self.following_since = time.time()
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
            entry = self.decode_entry(fields[b"f"], fields[b"v"])
        except (KeyError, ValueError):  # not written by a kubemux leader: reload the hash
            log.warning("share slot %s: malformed stream entry %r", self.k_lease, eid)
            return False
        self.seq, self.last_id = seq, eid
        now = self.last_event = time.time()
        with contextlib.suppress(ValueError):
            self.lag = max(0.0, now - float(fields.get(b"ts", b"")))
        change = self.store.writer.apply(etype, entry)
        self.events += 1
        if change is not None:
            self._emit(change.type, change.entry, change.old)
        return True

    async def _hydrate(self) -> bool:
        """Replace the store with the hash (changes reported as after a relist); False if
        there is no data yet."""
        with anyio.fail_after(self.engine.command_timeout * 4):
            pipe = self.client.pipeline(transaction=True)
            pipe.hmget(self.k_meta, ["epoch", "seq", "rv", "columns"])
            pipe.xrevrange(self.k_log, count=1)
            pipe.hgetall(self.k_objs)
            (epoch, seq, rv, cols), last, objs = await pipe.execute()
        if epoch is None or seq is None or not seq.isdigit():
            return False  # no data (or not a kubemux leader's): wait for a snapshot
        columns = None
        if self.table is not None:  # a table view syncs with its columns or not at all
            try:
                columns = parse_columns(cols) if cols is not None else None
            except ValueError as exc:
                log.warning("share slot %s: malformed columns (%s)", self.k_lease, exc)
            if columns is None:
                return False
        store = self.store
        replacement = store.writer.replacement()
        decode = self.decode_entry  # SecretDecryptError: nothing of this reload is kept
        for i, (field, value) in enumerate(objs.items()):
            try:
                replacement.add(decode(field, value))
            except ValueError:  # never cache what no reader can decode
                log.warning("share slot %s: skipped a malformed object", self.k_lease)
            if i % _SLICE == _SLICE - 1:
                await anyio.lowlevel.checkpoint()
        del objs
        for _ in replacement.find_deleted(_SLICE):
            await anyio.lowlevel.checkpoint()
        if self.table is not None and columns is not None:
            set_columns(self.table, columns)  # before the rows are announced
            self.sent_columns = columns
        changes = replacement.commit((rv or b"").decode(errors="replace"))
        self.epoch, self.seq = epoch.decode(), int(seq)
        self.last_id = last[0][0] if last else b"0-0"
        self.rehydrations += 1
        if self.rehydrations > 1:
            self.events += len(changes)  # what a reload changed (the first: objects)
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
        return announced_entries(self.store, self.pending, namespace)
