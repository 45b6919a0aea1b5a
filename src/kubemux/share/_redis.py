"""The Redis share engine: one leader per share key, fenced writes, followers tailing a stream.

The keys of a slot are laid out in ``_redis_keys`` (its docstring has the table).

Every write is a Lua script that first checks the lease still holds the writer's token
(fencing), so a leader that was paused past its lease cannot overwrite its successor.
``docs/sharing.md`` has the protocol and the failure cases. This module holds the engine and
its session; ``_redis_keys`` the scripts and key helpers, ``_redis_slot`` a slot's state
(and the :class:`SlotEnv` its roles see of the session), ``_redis_follow`` and
``_redis_lead`` its two roles (objects holding the state, not subclasses of it).
"""

from __future__ import annotations

import collections
import contextlib
import hashlib
import hmac
import time
import urllib.parse
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING

import anyio
import anyio.abc

from .._cache.store import Store
from .._redact import redact_text, redact_url
from .._registry.connector import Connector
from .._settings import WatchSettings
from ._base import Lead, MemberStatus, PlacementStatus, ShareError, SlotStatus
from ._connector import ShareConnector
from ._placement import Membership
from ._redis_crypt import (
    SealedValues,
    SignedValues,
    fingerprint,
    identity_salt,
    parse_secret_key,
)
from ._redis_follow import Follower
from ._redis_keys import (
    ACQUIRE,
    COMMIT_SNAPSHOT,
    PUBLISH,
    RELEASE,
    RENEW,
    RESERVE,
    BadSlotData,
    slot_digest,
)
from ._redis_lead import Leader
from ._redis_place import Placer
from ._redis_slot import SlotEnv, SlotState
from ._redis_tail import StreamTails

_LIMITS = WatchSettings()  # the informer's caps, which the engine's default to
COMMAND_CONNECTIONS = 64
"""Connections a session's commands share unless the URL says ``?max_connections=``: a
command waits (within ``command_timeout``) for a free one; blocking reads use their own."""

if TYPE_CHECKING:
    import redis.asyncio as aioredis

__all__ = ["Redis", "RedisSession"]


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
        share_secrets: Share objects of kind Secret too, in plaintext (off: each replica
            watches its own). Prefer ``secret_key``.
        secret_key: Authenticate every value (HMAC-SHA256) and share objects of kind Secret
            encrypted (AES-256-GCM) under this key: 32 bytes, or base64 text of 32 bytes
            (``base64.b64encode(os.urandom(32))``). A Redis writer without it cannot make a
            follower cache anything. Every replica that shares needs the same key; replicas
            with another key (or none) share no slot with it. Never in ``repr`` or logs.
            See ``docs/sharing.md``.
        command_timeout: Seconds one Redis command may take before Redis counts as down.
        identity_salt: The key of the credential digests that identify a context whose
            server has no SelfSubjectReview API (every replica that shares needs the same
            one). Default: derived from ``secret_key`` if set, else from ``prefix`` and the
            Redis host, port and database (known to anyone who can read Redis).
        max_value_size: A value in Redis larger than this is skipped (the informer's
            ``max_line_size``: a watch line carries one object).
        max_objects: A slot holding more objects than this is not loaded (the most a
            LIST may bring: ``max_list_pages`` pages of ``page_size``).
        placement: Spread the leaders over the replicas (issue 22): each replica that may
            lead keeps a membership record in Redis and takes first the slots that
            rendezvous hashing prefers it for; a replica joining or leaving moves about
            1/N of them (handed over without a LIST). False: this replica is not in the
            hash (``kubemux relay``): it leads what no live member is preferred for, and
            what a preferred member leaves untaken past the grace period. See
            ``docs/sharing.md``.
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
        secret_key: bytes | str | None = None,
        command_timeout: float = 5.0,
        identity_salt: bytes | str | None = None,
        max_value_size: int = _LIMITS.max_line_size,
        max_objects: int = _LIMITS.max_list_pages * _LIMITS.page_size,
        placement: bool = True,
    ) -> None:
        if lease_ttl <= 0 or acquire_period <= 0 or stream_maxlen < 1:
            raise ValueError("lease_ttl, acquire_period and stream_maxlen must be positive")
        if max_value_size < 1 or max_objects < 1:
            raise ValueError("max_value_size and max_objects must be positive")
        self.max_value_size = max_value_size
        self.max_objects = max_objects
        self.placement = placement
        self.url = url
        self.prefix = prefix
        self.lease_ttl = lease_ttl
        self.acquire_period = acquire_period
        self.stream_maxlen = stream_maxlen
        self.share_secrets = share_secrets
        self._secret_key = None if secret_key is None else parse_secret_key(secret_key)
        # in every slot's digest: replicas with another key (or none) share no slot with it
        self._key_tag = (
            None
            if self._secret_key is None
            else b"\0secret_key:v2:" + fingerprint(self._secret_key).encode()
        )
        self.command_timeout = command_timeout
        self._salt = _salt(identity_salt, self._secret_key, prefix, url)

    def __repr__(self) -> str:
        secrets = " secret_key=<set>" if self._secret_key is not None else ""
        return f"<kubemux.share.Redis {redact_url(self.url)} prefix={self.prefix!r}{secrets}>"

    @property
    def identity_salt(self) -> bytes:
        """See :attr:`kubemux.share.ShareEngine.identity_salt` (never shown)."""
        return self._salt

    def connector(self, http: Connector, *, can_lead: bool) -> ShareConnector:
        """See :meth:`kubemux.share.ShareEngine.connector`."""
        return ShareConnector(http, self, can_lead=can_lead)

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
            # Commands wait for a free connection (within their command_timeout) instead of
            # failing past the pool's size; a URL's ?max_connections= sets that size. The
            # followers' blocking reads do not hold these (_redis_tail: a few connections
            # of their own, each reading up to STREAMS_PER_READER slots' streams).
            pool = aioredis.BlockingConnectionPool.from_url(
                self.url,
                max_connections=COMMAND_CONNECTIONS,
                timeout=self.command_timeout,
                decode_responses=False,
                socket_connect_timeout=self.command_timeout,
                socket_keepalive=True,
            )
        except ValueError as exc:
            raise ShareError(
                f"kubemux.share.Redis: bad URL {redact_url(self.url)}: {redact_text(str(exc))}"
            ) from exc
        client = aioredis.Redis.from_pool(pool)
        try:
            async with anyio.create_task_group() as tg:
                session = RedisSession(self, client)
                await tg.start(session.env.tails.run, name="kubemux share stream readers")
                tg.start_soon(session.placer.run, name="kubemux share placement")
                try:
                    yield session
                finally:
                    tg.cancel_scope.cancel("share session closed")
        finally:
            with anyio.move_on_after(2.0, shield=True):
                await client.aclose()


class RedisSession:
    """One process's Redis session: runs shared slots (see :class:`ShareSession`)."""

    def __init__(self, engine: Redis, client: aioredis.Redis) -> None:
        from redis.exceptions import RedisError

        self.engine = engine
        self.client = client
        errors = (
            RedisError,
            OSError,
            TimeoutError,
            BadSlotData,  # a slot's meta no leader wrote: reported, retried
        )
        self.env = SlotEnv(
            client=client,
            errors=errors,
            prefix=engine.prefix,
            lease_ttl=engine.lease_ttl,
            acquire_period=engine.acquire_period,
            stream_maxlen=engine.stream_maxlen,
            command_timeout=engine.command_timeout,
            max_value_size=engine.max_value_size,
            max_objects=engine.max_objects,
            publish=client.register_script(PUBLISH),
            commit=client.register_script(COMMIT_SNAPSHOT),
            renew=client.register_script(RENEW),
            release=client.register_script(RELEASE),
            acquire=client.register_script(ACQUIRE),
            reserve=client.register_script(RESERVE),
            tails=StreamTails(
                client,
                block=max(engine.acquire_period, 0.1) * 2,
                command_timeout=engine.command_timeout,
                errors=errors,
            ),
        )
        self._slots: dict[str, tuple[SlotState, Follower]] = {}
        membership = (
            Membership(
                client,
                prefix=engine.prefix,
                ttl=engine.lease_ttl,
                command_timeout=engine.command_timeout,
            )
            if engine.placement
            else None
        )
        self.placer = Placer(
            membership,
            lambda: {d: s for d, (s, _) in self._slots.items()},
            lease_ttl=engine.lease_ttl,
            acquire_period=engine.acquire_period,
            errors=self.env.errors,
        )

    def __repr__(self) -> str:
        roles = collections.Counter(s.role for s, _ in self._slots.values())
        return f"<RedisSession {redact_url(self.engine.url)} slots={dict(sorted(roles.items()))}>"

    def _digest(self, key: bytes | str) -> str:
        """The slot's hash; with a secret_key it includes the key's fingerprint."""
        tag = self.engine._key_tag
        if tag is None:
            return slot_digest(key)
        return slot_digest((key.encode() if isinstance(key, str) else key) + tag)

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
        """See :meth:`kubemux.share.ShareSession.run_slot`."""
        engine = self.engine
        secret = engine._secret_key
        digest = self._digest(key)
        if digest in self._slots:
            raise ShareError("kubemux.share: this share key is already running in this session")
        slot = SlotState(self.env, digest, store, lead, task_status, can_lead)
        slot.on_status = on_status
        slot.choice = self.placer.choice
        slot.member = lambda: self.placer.member_id
        slot.no_leader = self.placer.refresh_soon
        slot.handed = self.placer.handed
        slot.grace = self.placer.grace
        follower = Follower(slot)
        leader = Leader(slot, follower)
        if secret is not None:
            kind_of = SealedValues if kind == "Secret" else SignedValues
            slot.values = kind_of(secret, digest, engine.max_value_size)
        self._slots[digest] = (slot, follower)
        try:
            if kind == "Secret" and not (secret is not None or engine.share_secrets):
                await leader.run_local()
            else:
                if can_lead:  # published first: this replica may be preferred for it
                    await self.placer.published(digest)
                await leader.run()
        finally:
            del self._slots[digest]
            if slot.token is not None:
                with anyio.move_on_after(1.0, shield=True):
                    try:
                        await self.env.release(keys=[slot.k_lease], args=[slot.token])
                    except self.env.errors:
                        pass  # it expires by itself

    def placement_status(self) -> PlacementStatus:
        """This replica's part in placement (see :class:`PlacementStatus`)."""
        placer = self.placer
        led, preferred = placer.counts()
        me = placer.member_id
        since = max(0.0, time.monotonic() - placer.view_at)  # the members' ages go on
        replicas = tuple(
            MemberStatus(
                member_id=m.id,
                leads=led if m.id == me else m.led,
                prefers=preferred if m.id == me else m.preferred,
                age=m.age + since,
            )
            for m in sorted(placer.members, key=lambda m: m.id)
        )
        return PlacementStatus(
            member_id=me,
            leads=led,
            prefers=preferred,
            members=len(placer.members),
            handovers=placer.handovers,
            replicas=replicas,
        )

    def slot_status(self, key: bytes | str) -> SlotStatus | None:
        """See :meth:`kubemux.share.ShareSession.slot_status`."""
        running = self._slots.get(self._digest(key))
        return None if running is None else running[0].status()


def _salt(explicit: bytes | str | None, secret_key: bytes | None, prefix: str, url: str) -> bytes:
    """The identity salt (see ``Redis(identity_salt=)``)."""
    info = b"kubemux.share identity salt v1"
    if explicit is not None:
        raw = explicit.encode() if isinstance(explicit, str) else bytes(explicit)
        if not raw:
            raise ValueError("identity_salt: must not be empty")
        return hmac.new(raw, info, hashlib.sha256).digest()
    if secret_key is not None:
        return identity_salt(secret_key)
    try:
        parts = urllib.parse.urlsplit(url)
        where = f"{(parts.hostname or '').lower()}:{parts.port or 6379}{parts.path or '/0'}"
    except ValueError:
        where = redact_url(url)
    return hashlib.sha256(info + b"\0" + prefix.encode() + b"\0" + where.encode()).digest()
