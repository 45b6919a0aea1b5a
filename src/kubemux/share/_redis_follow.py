"""A Redis share slot's follower role: hydrate from the object hash, tail the stream,
rehydrate on a gap, and try to take a free lease.

Everything read is checked before it reaches the store (``_redis_keys``): a value that fails
is skipped alone (counted, named in status; in a load, the object keeps what the store had),
a meta hash no leader wrote is reported and retried, never a crash or a stuck slot."""

from __future__ import annotations

import logging
import math
import time
from typing import Any

import anyio
import anyio.lowlevel

from .._cache.store import Replacement
from ._redis_keys import (
    SLICE,
    BadSlotData,
    Meta,
    SkippedValue,
    checked_type,
    field_key,
    meta_of,
    seq_of,
    unwrap,
)
from ._redis_slot import SlotState
from ._redis_table import parse_columns, set_columns

log = logging.getLogger(__name__)


class Follower:
    """A slot's follower role: fills the slot's store from what its leader wrote."""

    __slots__ = ("slot",)

    def __init__(self, slot: SlotState) -> None:
        self.slot = slot

    async def follow_phase(self) -> None:
        self.slot.role = "follower"
        with anyio.CancelScope() as scope, unwrap():
            self.slot.scope = scope
            async with anyio.create_task_group() as tg:
                tg.start_soon(self._acquire_loop, scope)
                await self._tail()
        self.slot.scope = None
        self.slot.following_since = None

    async def _acquire_loop(self, scope: anyio.CancelScope) -> None:
        # After an outage the leader that was running gets one lease_ttl to take its lease
        # again (it keeps its informer and republishes): followers wait that long.
        # Placement (issue 22): a free lease whose preferred leader is another live member
        # is left to it for the slot's grace period first; then anyone takes it.
        free_since: float | None = None
        while True:
            await anyio.sleep(self.slot.env.acquire_period)
            try:
                if self.slot.can_lead:
                    if self.slot.reachable_since is None:
                        with anyio.fail_after(self.slot.env.command_timeout):
                            await self.slot.client.ping()
                        self.slot.reachable_since = time.monotonic()
                    if time.monotonic() - self.slot.reachable_since < self.slot.env.lease_ttl:
                        continue
                    if self.slot.choice(self.slot.digest) == "other":
                        with anyio.fail_after(self.slot.env.command_timeout):
                            held = bool(await self.slot.client.exists(self.slot.k_lease))
                        if held:
                            free_since = None
                        elif free_since is None:
                            free_since = time.monotonic()
                            self.slot.no_leader()  # placement reads the members again
                        if free_since is None or time.monotonic() - free_since < self.slot.grace:
                            self._leader_seen(held)
                            continue
                    if await self.slot.try_acquire():
                        scope.cancel("kubemux.share: promoted to leader")
                        return
                    held = True
                else:
                    with anyio.fail_after(self.slot.env.command_timeout):
                        held = bool(await self.slot.client.exists(self.slot.k_lease))
                self._leader_seen(held)
            except self.slot.env.errors as exc:
                self.slot.down(exc)

    def _leader_seen(self, held: bool) -> None:
        """Whether a leader holds the lease: a follower's data may be stale without one."""
        if not held:
            if self.slot.stale_since is None:
                self.slot.stale_since = time.time()  # nobody leads: data may be stale
        elif self.slot.last_error is None and self.slot.epoch is not None:
            self.slot.stale_since = None  # a leader is there and the tail is healthy

    async def _tail(self) -> None:
        # the session's readers block on many slots' streams at once (_redis_tail)
        block = max(self.slot.env.acquire_period, 0.1) * 2
        timeout = self.slot.env.command_timeout + block
        hydrate = True
        failures = 0
        with self.slot.env.tails.follow(self.slot.k_log) as tail:
            while True:
                try:
                    if hydrate:
                        if not await self.hydrate():
                            self.slot.epoch = None  # the data followed left Redis
                            if self.slot.store.has_synced and self.slot.stale_since is None:
                                self.slot.stale_since = time.time()
                            # wait for a leader's first snapshot
                            if await tail.read(b"0-0", 1, block):
                                # a log without meta (evicted?): no busy loop on it
                                await anyio.sleep(self.slot.env.acquire_period)
                            continue
                        hydrate = False
                        self.slot.following_since = time.time()
                        self.slot.report_started()
                    entries = await tail.read(self.slot.last_id, SLICE, block)
                    failures = 0
                    if not entries:
                        with anyio.fail_after(timeout):
                            epoch: Any = await self.slot.client.hget(self.slot.k_meta, "epoch")
                        hydrate = self.slot.epoch is None or epoch != self.slot.epoch.encode()
                        continue
                    for eid, fields in entries:
                        if not self.apply_logged(eid, fields):
                            hydrate = True
                            break
                    else:
                        if self.slot.last_error is not None or self.slot.stale_since is not None:
                            self.slot.fresh()
                except self.slot.env.errors as exc:
                    self.slot.down(exc)
                    hydrate = True
                    failures += 1
                    await anyio.sleep(min(2.0, 0.05 * 2**failures))

    def apply_logged(self, eid: bytes, fields: dict[bytes, bytes]) -> bool:
        """Apply one stream entry; False on a gap (other epoch, missing seq, a reset). An
        entry whose value may not be cached is skipped alone: counted and named, its
        sequence number left for the leader's own entry (else the next one is a gap)."""
        epoch = self.slot.epoch
        if epoch is None or fields.get(b"e") != epoch.encode() or fields.get(b"t") == b"RESET":
            return False
        seq = seq_of(fields.get(b"n"))
        if seq is None or seq != self.slot.seq + 1:
            return False
        self.slot.last_id = eid  # read past it, whatever it holds
        values = self.slot.values
        try:
            etype = checked_type(fields)
            values.check_log(epoch, seq, fields)
            entry = values.entry(fields.get(b"f", b""), fields.get(b"v", b""), epoch)
        except SkippedValue as exc:
            self.slot.skip(exc)
            return True
        self.slot.seq = seq
        now = self.slot.last_event = time.time()
        try:
            sent = float(fields.get(b"ts", b""))
        except ValueError:
            sent = math.nan
        if math.isfinite(sent):
            self.slot.lag = min(max(0.0, now - sent), 86400.0)
        self.slot.store.writer.apply(etype, entry)  # the writer announces it
        self.slot.events += 1
        return True

    async def _load(self) -> tuple[Any, Any, dict[bytes, bytes]] | None:
        """The slot's meta fields, its stream's last entry and its objects, read in one
        ``MULTI``; None when there is no data. The object count is looked at first, so a
        slot holding more than ``max_objects`` is never read.

        Raises:
            BadSlotData: the meta is not what a leader writes, or too many objects.
        """
        fields = ["epoch", "seq", "rv", "rvmac", "columns", "columnsmac"]
        with anyio.fail_after(self.slot.env.command_timeout):
            pipe = self.slot.client.pipeline(transaction=False)
            pipe.hmget(self.slot.k_meta, fields[:4])
            pipe.hlen(self.slot.k_objs)
            meta, count = await pipe.execute()
        self._check_load(meta, count)
        with anyio.fail_after(self.slot.env.command_timeout * 4):
            pipe = self.slot.client.pipeline(transaction=True)
            pipe.hmget(self.slot.k_meta, fields)
            pipe.xrevrange(self.slot.k_log, count=1)
            pipe.hgetall(self.slot.k_objs)
            meta, last, objs = await pipe.execute()
        self._check_load(meta[:4], len(objs))  # what moved meanwhile
        return None if meta[0] is None and meta[1] is None else (meta, last, objs)

    def _check_load(self, meta: list[bytes | None], count: int) -> None:
        checked = meta_of(self.slot.values, *meta)
        if isinstance(checked, str):
            raise BadSlotData(checked)
        if count > self.slot.env.max_objects:
            raise BadSlotData(f"it holds {count} objects, more than max_objects")

    async def hydrate(self) -> bool:
        """Replace the store with the hash (changes reported as after a relist); False if
        there is no data yet.

        Raises:
            BadSlotData: the slot's meta is not what a leader writes, or it holds more than
                ``max_objects`` objects.
        """
        loaded = await self._load()
        if loaded is None:
            return False  # no data: wait for a snapshot
        (epoch, seq, rv, rvmac, cols, colsmac), last, objs = loaded
        meta = meta_of(self.slot.values, epoch, seq, rv, rvmac)
        assert isinstance(meta, Meta)  # checked by _load
        columns = None
        if self.slot.table is not None:  # a table view syncs with its columns or not at all
            try:
                if cols is not None and len(cols) > self.slot.env.max_value_size:
                    raise ValueError(f"{len(cols)} bytes, more than max_value_size")
                if cols is not None and not self.slot.values.check_meta(
                    meta.epoch, "columns", cols, colsmac
                ):
                    raise ValueError("they fail authentication under secret_key (forged?)")
                columns = parse_columns(cols) if cols is not None else None
            except ValueError as exc:
                log.warning("share slot %s: malformed columns (%s)", self.slot.k_lease, exc)
            if columns is None:
                return False
        store = self.slot.store
        replacement = store.writer.replacement()
        entry_of = self.slot.values.entry
        skipped = 0
        for i, (field, value) in enumerate(objs.items()):
            try:
                replacement.add(entry_of(field, value, meta.epoch))
            except SkippedValue as exc:  # never cache what no reader could trust
                skipped += 1
                self.slot.skip(exc)
                self._keep(replacement, field)
            if i % SLICE == SLICE - 1:
                await anyio.lowlevel.checkpoint()
        del objs
        if not skipped:
            self.slot.last_skipped = None  # a clean load: nothing forged left
            self.slot.tainted = False
        if self.slot.table is not None and columns is not None:
            set_columns(self.slot.table, columns)  # before the rows are announced
            self.slot.sent_columns = columns
        # swapped in, then announced in slices by the writer, like an informer's relist
        changes = await replacement.commit(meta.rv, slice_size=SLICE)
        self.slot.epoch, self.slot.seq = meta.epoch, meta.seq
        self.slot.last_id = last[0][0] if last else b"0-0"
        self.slot.rehydrations += 1
        if self.slot.rehydrations > 1:
            self.slot.events += changes  # what a reload changed (the first: objects)
        self.slot.fresh()
        return True

    def _keep(self, replacement: Replacement, field: bytes) -> None:
        """A skipped value's object keeps what the store had (stale, never forged)."""
        try:
            ns, name = field_key(field)
        except SkippedValue:
            return
        old = self.slot.store.writer.entry(ns, name)
        if old is not None:
            replacement.add(old)
