"""The followed slots' streams of one Redis session, read by a few blocking XREADs.

A follower tails its slot's stream with a blocking read. One read per slot held one
connection per followed slot: a replica following 100 slots exceeded redis-py 8's default
pool (100 connections, ``MaxConnectionsError`` on every slot) and a large deployment would
exceed Redis's ``maxclients``. Here each *reader* is one connection running one blocking
``XREAD`` over up to :data:`STREAMS_PER_READER` streams; what it reads waits in each
stream's :class:`StreamTail` (at most about two reads' worth: a stream whose follower is
behind is left out of the next read until it catches up). A stream added or moved (a
follower starts, or jumps after a rehydration) while the read blocks interrupts it with
``CLIENT UNBLOCK`` from the command pool, so no follower waits for another's read to time
out. ``docs/design-notes.md`` ("One blocking read for many slots") has the why.
"""

from __future__ import annotations

import collections
import contextlib
import logging
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import anyio
import anyio.abc

from ._redis_keys import SLICE

log = logging.getLogger(__name__)

if TYPE_CHECKING:
    import redis.asyncio as aioredis

__all__ = ["STREAMS_PER_READER", "StreamTail", "StreamTails"]

STREAMS_PER_READER = 256
"""Streams one reader's XREAD covers: a read costs Redis and the client O(streams), so a
replica following many slots reads them over more connections, not in one long command."""

Entries = list[tuple[bytes, dict[bytes, bytes]]]


class StreamTail:
    """One stream followed through a reader: what was read ahead and not yet taken."""

    __slots__ = (
        "_reader",
        "entries",
        "error",
        "fetched",
        "generation",
        "key",
        "ready",
        "refused",
        "taken",
    )

    def __init__(self, key: bytes, reader: _Reader) -> None:
        self.key = key
        self._reader = reader
        self.taken = b"0-0"  # the id of the last entry handed out
        self.fetched = b"0-0"  # the id the next XREAD reads after
        self.entries: collections.deque[tuple[bytes, dict[bytes, bytes]]] = collections.deque()
        self.error: BaseException | None = None  # what the last read met (Redis down)
        self.generation = 0  # moves with each jump: a read in flight from before is dropped
        self.refused = False  # not a stream (forged): left out until its error is raised
        self.ready = anyio.Event()

    async def read(self, last_id: bytes, count: int, wait: float) -> Entries:
        """The entries after ``last_id``, at most ``count``, waiting up to ``wait`` seconds
        for the first; [] when none came (as a blocking XREAD's timeout).

        Cancelling only stops the wait. Raises what the reader met since the last read (a
        Redis error: the follower's outage path), once."""
        if last_id != self.taken:  # a jump (a rehydration, a gap): read from there
            self.entries.clear()
            self.taken = self.fetched = last_id
            self.generation += 1
            self.error = None
            self.refused = False
            self._reader.changed()
        if not self.entries and self.error is None:
            self.ready = anyio.Event()
            with anyio.move_on_after(wait):
                await self.ready.wait()
        if self.error is not None:
            exc, self.error = self.error, None
            if self.refused:  # read again next time (the follower backs off meanwhile)
                self.refused = False
                self._reader.changed()
            raise exc
        was_full = len(self.entries) >= SLICE
        n = min(count, len(self.entries))
        out = [self.entries.popleft() for _ in range(n)]
        if out:
            self.taken = out[-1][0]
        if was_full and len(self.entries) < SLICE:
            self._reader.changed()  # left out while behind: in the next read again
        return out


class StreamTails:
    """The readers of one session; :meth:`follow` registers a stream for a follower."""

    def __init__(
        self,
        client: aioredis.Redis,
        *,
        block: float,
        command_timeout: float,
        errors: tuple[type[BaseException], ...],
    ) -> None:
        self.client = client  # the command pool: CLIENT ID, CLIENT UNBLOCK
        self.block = block
        self.command_timeout = command_timeout
        self.errors = errors
        self._readers: list[_Reader] = []
        self._tg: anyio.abc.TaskGroup | None = None

    def __repr__(self) -> str:
        streams = sum(len(r.tails) for r in self._readers)
        return f"<StreamTails readers={len(self._readers)} streams={streams}>"

    @property
    def readers(self) -> int:
        """Reader connections opened (each blocks on up to ``STREAMS_PER_READER`` streams)."""
        return len(self._readers)

    async def run(self, *, task_status: anyio.abc.TaskStatus[None]) -> None:
        """Own the readers until cancelled (the session's lifetime)."""
        async with anyio.create_task_group() as tg:
            self._tg = tg
            task_status.started()
            try:
                await anyio.sleep_forever()
            finally:
                self._tg = None

    @contextlib.contextmanager
    def follow(self, key: str) -> Iterator[StreamTail]:
        """Register ``key``'s stream for the ``with`` block; yields its :class:`StreamTail`."""
        kb = key.encode()
        reader = min(
            (r for r in self._readers if len(r.tails) < STREAMS_PER_READER),
            key=lambda r: len(r.tails),
            default=None,
        )
        if reader is None:
            if self._tg is None:
                raise RuntimeError("kubemux.share: the session's readers are not running")
            reader = _Reader(self)
            self._readers.append(reader)
            self._tg.start_soon(reader.run, name="kubemux share stream reader")
        if any(kb in r.tails for r in self._readers):
            raise RuntimeError(f"kubemux.share: stream {key} is already followed")
        tail = reader.tails[kb] = StreamTail(kb, reader)
        reader.changed()
        try:
            yield tail
        finally:
            del reader.tails[kb]  # a read in flight still covers it: its entries are dropped


class _Reader:
    """One connection's blocking XREAD over its streams (see the module docstring)."""

    def __init__(self, tails: StreamTails) -> None:
        self.owner = tails
        self.tails: dict[bytes, StreamTail] = {}
        self._changed = anyio.Event()  # set: the streams or a cursor moved since the read
        self._kick = anyio.Event()
        self._client_id: int | None = None  # this reader's connection, for CLIENT UNBLOCK
        self._blocked = 0  # the read in flight (0: none); numbered, for the kicker

    def changed(self) -> None:
        self._changed.set()
        if self._blocked:
            self._kick.set()

    async def run(self) -> None:
        import redis.asyncio as aioredis

        pool = self.owner.client.connection_pool
        conn: aioredis.Redis = aioredis.Redis(
            connection_pool=aioredis.ConnectionPool(
                connection_class=pool.connection_class, max_connections=1, **pool.connection_kwargs
            ),
            single_connection_client=True,
        )
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(self._kicker)
                await self._read_loop(conn)
        finally:
            with anyio.move_on_after(2.0, shield=True):
                await conn.aclose()
                await conn.connection_pool.disconnect()

    async def _read_loop(self, conn: aioredis.Redis) -> None:
        owner = self.owner
        block_ms = max(1, int(owner.block * 1000))
        failures = 0
        reads = 0
        while True:
            self._changed = anyio.Event()
            wanted = {
                k: t for k, t in self.tails.items() if len(t.entries) < SLICE and not t.refused
            }
            if not wanted:
                await self._changed.wait()
                continue
            streams: dict[Any, Any] = {k: t.fetched for k, t in wanted.items()}
            generations = {k: t.generation for k, t in wanted.items()}
            try:
                if self._client_id is None:
                    self._client_id = await self._ask_id(conn)
                if self._changed.is_set():
                    continue  # moved while the id was asked: read what is wanted now
                reads += 1
                self._blocked = reads
                try:
                    with anyio.fail_after(owner.command_timeout + owner.block):
                        resp: Any = await conn.xread(streams, count=SLICE, block=block_ms)
                finally:
                    self._blocked = 0
            except owner.errors as exc:
                if await self._refuse_forged(wanted, exc):
                    continue  # the others are read again at once
                self._client_id = None  # a new connection next time: another id
                for k, tail in wanted.items():
                    if self.tails.get(k) is tail:
                        tail.error = exc
                        tail.ready.set()
                failures += 1
                await anyio.sleep(min(2.0, 0.05 * 2**failures))
                continue
            failures = 0
            # RESP2: [[key, entries], ...]; RESP3 (protocol=3 in the URL): {key: entries}
            for key, entries in resp.items() if isinstance(resp, dict) else resp or ():
                got = wanted.get(key)
                if (
                    got is None
                    or self.tails.get(key) is not got
                    or got.generation != generations[key]
                    or not entries
                ):
                    continue  # no longer followed, or it jumped while this read ran
                got.entries.extend(entries)
                got.fetched = entries[-1][0]
                got.ready.set()

    async def _refuse_forged(self, wanted: dict[bytes, StreamTail], exc: BaseException) -> bool:
        """After a read failed with ``WRONGTYPE``: a key that is not a stream (written by
        someone else: Redis is untrusted input) fails the whole multi-stream XREAD, so the
        keys are looked at and only those tails get the error (their followers retry after
        a backoff, as before); True if one was found."""
        from redis.exceptions import ResponseError

        if not isinstance(exc, ResponseError) or not str(exc).startswith("WRONGTYPE"):
            return False
        keys = list(wanted)
        try:
            with anyio.fail_after(self.owner.command_timeout):
                pipe = self.owner.client.pipeline(transaction=False)
                for key in keys:
                    pipe.type(key)
                types = await pipe.execute()
        except self.owner.errors:
            return False
        found = False
        for key, kind in zip(keys, types, strict=True):
            tail = wanted[key]
            if kind not in (b"stream", b"none", "stream", "none") and self.tails.get(key) is tail:
                tail.refused = True
                tail.error = exc
                tail.ready.set()
                found = True
        return found

    async def _ask_id(self, conn: aioredis.Redis) -> int:
        """This reader's connection id; 0 where ``CLIENT`` is not allowed (an ACL): its
        reads are then not interrupted, and a follower that starts or jumps waits for the
        read in flight (at most ``block``)."""
        from redis.exceptions import ResponseError

        try:
            with anyio.fail_after(self.owner.command_timeout):
                return int(await conn.client_id())
        except ResponseError as exc:
            log.warning("share: CLIENT ID refused (%s): reads are not interrupted", exc)
            return 0

    async def _kicker(self) -> None:
        """Interrupt the read in flight when its streams changed (``CLIENT UNBLOCK``: it
        returns as if timed out, and the next read covers what is wanted now)."""
        owner = self.owner
        while True:
            await self._kick.wait()
            self._kick = anyio.Event()
            read = self._blocked
            while (
                read
                and read == self._blocked
                and self._changed.is_set()  # (a read started since covers the change)
                and self._client_id  # None: not asked yet; 0: CLIENT refused
            ):
                try:
                    with anyio.fail_after(owner.command_timeout):
                        unblocked = await owner.client.client_unblock(self._client_id)
                except owner.errors as exc:
                    log.debug("share: CLIENT UNBLOCK failed (%s); the read times out", exc)
                    break
                if unblocked:
                    break
                await anyio.sleep(0.005)  # the XREAD has not reached Redis yet
