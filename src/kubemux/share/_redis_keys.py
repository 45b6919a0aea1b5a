"""The Redis share engine's key layout, Lua scripts and (de)serialisation helpers.

Keys per slot (``H`` = the first 32 hex digits of sha256 of the share key; the braces make
every key of a slot land on one Redis Cluster node)::

    {prefix}:{H}:lease          string  owner token, SET NX PX, renewed every lease_ttl/3
    {prefix}:{H}:meta           hash    epoch (random hex), seq (changes in this epoch), rv,
                                        rvmac, columns (table views: JSON column
                                        definitions), columnsmac (MACs: with a secret_key)
    {prefix}:{H}:objs           hash    "namespace/name" -> b"<resourceVersion>\\n<JSON>"
    {prefix}:{H}:log            stream  t, f, v (as objs), n (seq), e (epoch), ts, m (MAC);
                                        capped
    {prefix}:{H}:stage:<epoch>  hash    a snapshot being written; renamed to objs on commit
    {prefix}:{H}:next           string  a handover's reservation: the member to take over

Every write is a Lua script that first checks the lease still holds the writer's token
(fencing), so a leader that was paused past its lease cannot overwrite its successor.
``docs/sharing.md`` has the protocol and the failure cases.

Everything read back is treated as hostile (anyone who can write to Redis could have
written it): :class:`PlainValues` checks each value as the informer checks an object (the
same :func:`~kubemux._wire.codec.decode_entry`, its namespace and name against the hash field,
its size), and :func:`meta_of` the slot's epoch, sequence number and resourceVersion. A
value that fails is a :class:`SkippedValue`: skipped alone, counted and named in status,
never cached. With a ``secret_key`` the values are authenticated too (``_redis_crypt``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import re
from collections.abc import Iterator

from .._errors import unwrap as unwrap_group
from .._redact import terminal_safe
from .._wire.codec import DecodeError, Entry, decode_entry, pinned_entry

# the engine's logger: one name for all of its modules

# ARGV: token, epoch, maxlen, rv, n, expected seq, rv's MAC, then n x (t, f, v, ts, m).
# -3: meta.seq is not the one this leader wrote last (forged, or not a number): a snapshot.
PUBLISH = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return -1 end
if redis.call('HGET', KEYS[2], 'epoch') ~= ARGV[2] then return -2 end
if redis.call('HGET', KEYS[2], 'seq') ~= ARGV[6] then return -3 end
local seq = tonumber(ARGV[6])
local i = 8
for _ = 1, tonumber(ARGV[5]) do
  local t, f, v = ARGV[i], ARGV[i + 1], ARGV[i + 2]
  if t == 'DELETED' then
    redis.call('HDEL', KEYS[3], f)
  else
    redis.call('HSET', KEYS[3], f, v)
  end
  seq = seq + 1
  redis.call('XADD', KEYS[4], 'MAXLEN', '~', ARGV[3], '*', 't', t, 'f', f, 'v', v,
             'n', seq, 'e', ARGV[2], 'ts', ARGV[i + 3], 'm', ARGV[i + 4])
  i = i + 5
end
redis.call('HSET', KEYS[2], 'seq', seq, 'rv', ARGV[4], 'rvmac', ARGV[7])
return seq
"""

COMMIT_SNAPSHOT = """
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
redis.call('HSET', KEYS[2], 'epoch', ARGV[2], 'seq', 0, 'rv', ARGV[3], 'rvmac', ARGV[6])
if ARGV[5] ~= '' then redis.call('HSET', KEYS[2], 'columns', ARGV[5], 'columnsmac', ARGV[7]) end
redis.call('XADD', KEYS[4], '*', 't', 'RESET', 'n', 0, 'e', ARGV[2], 'ts', ARGV[4])
return 0
"""

# Renewal also hands back the slot's meta, for the leader to check (forged, or gone).
RENEW = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  if redis.call('TYPE', KEYS[2])['ok'] ~= 'hash' then return {1} end
  return {1, redis.call('HMGET', KEYS[2], 'epoch', 'seq', 'rv', 'rvmac')}
end
return 0
"""

# SET NX; a lease no kubemux replica could have written (not a string, not 32 hex digits,
# or without an expiry) is forged: replaced, and 2 returned so the slot can say so.
# KEYS: lease, next (a handover's reservation). ARGV: token, ttl ms, this member's id ('' if
# none). 1: taken (free), 2: taken (a forged lease replaced), 3: swapped (handed over to
# us: the lease was held and next names us), 0: held by another.
ACQUIRE = """
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  redis.call('DEL', KEYS[2])
  return 1
end
local forged = redis.call('TYPE', KEYS[1])['ok'] ~= 'string'
if not forged then
  local held = redis.call('GET', KEYS[1])
  forged = #held ~= 32 or string.find(held, '[^0-9a-f]') ~= nil
           or redis.call('PTTL', KEYS[1]) < 0
end
if forged then
  redis.call('DEL', KEYS[1])
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return 2
end
if ARGV[3] ~= '' and redis.call('TYPE', KEYS[2])['ok'] == 'string'
   and redis.call('GET', KEYS[2]) == ARGV[3] then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  redis.call('DEL', KEYS[2])
  return 3
end
return 0
"""

# A leader reserves its slot for the member it hands over to (issue 22); that member's next
# ACQUIRE swaps the lease to it. KEYS: lease, next. ARGV: token, member id, ttl ms.
RESERVE = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[2], ARGV[2], 'PX', ARGV[3])
return 1
"""

RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""

STAGE_CHUNK = 2000
BATCH = 256
MAX_QUEUE = 100_000
SLICE = 1000
CATCH_UP = 20_000  # stream entries a promoted leader applies; a longer tail is a reload


@contextlib.contextmanager
def unwrap() -> Iterator[None]:
    """Raise a task group's single error as itself (the caller sees ``Unauthorized``, not an
    ExceptionGroup around it)."""
    try:
        yield
    except BaseExceptionGroup as group:
        inner = unwrap_group(group)
        if inner is group:
            raise
        raise inner from None


def slot_digest(key: bytes | str) -> str:
    data = key.encode() if isinstance(key, str) else key
    return hashlib.sha256(data).hexdigest()[:32]


_digest = slot_digest  # the name tests read keys with
_TYPES = frozenset((b"ADDED", b"MODIFIED", b"DELETED"))
_SHOWN = 120  # characters of a forged field or name shown in status and logs


class SkippedValue(ValueError):
    """A value in Redis that no reader may cache: malformed, too large, or (with a
    ``secret_key``) not authenticated. The slot skips it alone, counts it and names it."""

    def __init__(self, field: bytes | str, why: str) -> None:
        self.field = shown(field)
        self.why = why
        super().__init__(f"skipped the value of {self.field} in Redis: {why}")


def shown(text: bytes | str) -> str:
    """Forged text (a field, a name) as it may appear in status and logs: decoded with
    escapes, control characters escaped, cut to a bounded length, quoted."""
    if isinstance(text, bytes):
        text = text[: _SHOWN * 4].decode("utf-8", errors="backslashreplace")
    cut = text[:_SHOWN] + ("..." if len(text) > _SHOWN else "")
    return repr(terminal_safe(cut))


def field_key(field: bytes) -> tuple[str, str]:
    """``(namespace, name)`` of a hash field ``b"namespace/name"`` (``b"/name"`` cluster-wide).

    Raises:
        SkippedValue: not UTF-8, or without a ``/`` and a name.
    """
    try:
        text = field.decode()
    except UnicodeDecodeError:
        raise SkippedValue(field, "the field is not valid UTF-8") from None
    ns, slash, name = text.partition("/")
    if not slash or not name:
        raise SkippedValue(field, 'the field is not "namespace/name"')
    return ns, name


def checked_entry(field: bytes, ns: str, name: str, rv: bytes, raw: bytes) -> Entry:
    """The entry of an object's JSON bytes read from Redis, checked as the informer checks
    an object from the API server (:func:`~kubemux._wire.codec.decode_entry`: a JSON object with
    metadata, readable by every reader) and against the hash field it was found under.

    Raises:
        SkippedValue: any of that fails.
    """
    try:
        resource_version = rv.decode()
        entry = decode_entry(raw, drop_managed_fields=False)
    except UnicodeDecodeError:
        raise SkippedValue(field, "its resourceVersion is not valid UTF-8") from None
    except DecodeError as exc:
        why = str(exc) or type(exc).__name__
        raise SkippedValue(field, f"not an object a reader can decode ({why[:200]})") from None
    if entry.namespace != ns or entry.name != name:
        says = f"{entry.namespace}/{entry.name}"
        raise SkippedValue(field, f"the object it holds is {shown(says)}")
    if entry.rv == resource_version:
        return entry
    return pinned_entry(ns, name, resource_version, raw)  # a transform changed it


class PlainValues:
    """How a slot writes and reads its values without a ``secret_key``:
    ``b"<resourceVersion>\n<JSON>"``, checked on every read (never authenticated)."""

    __slots__ = ("max_value_size",)
    signed = False

    def __init__(self, max_value_size: int) -> None:
        self.max_value_size = max_value_size

    def value(self, entry: Entry, epoch: str) -> bytes:
        """The value written for ``entry`` in ``epoch``."""
        return entry.resource_version.encode() + b"\n" + entry.raw

    def entry(self, field: bytes, value: bytes, epoch: str) -> Entry:
        """The entry of a value read from Redis.

        Raises:
            SkippedValue: it may not be cached (see :func:`checked_entry`).
        """
        ns, name = field_key(field)
        if len(value) > self.max_value_size:
            raise SkippedValue(field, f"{len(value)} bytes, more than {self.max_value_size}")
        rv, newline, raw = value.partition(b"\n")
        if not newline:
            raise SkippedValue(field, "not a kubemux value (no resourceVersion)")
        return checked_entry(field, ns, name, rv, self.open(field, rv, raw, epoch))

    def open(self, field: bytes, rv: bytes, payload: bytes, epoch: str) -> bytes:
        """The object's JSON from a value's payload (signed values check it here)."""
        return payload

    def log_mac(self, epoch: str, seq: int, etype: str, field: str, value: bytes) -> bytes:
        """The ``m`` of a stream entry (empty without a key)."""
        return b""

    def check_log(self, epoch: str, seq: int, fields: dict[bytes, bytes]) -> None:
        """Raise :class:`SkippedValue` for a stream entry that is not authentic."""

    def meta_mac(self, epoch: str, what: str, data: bytes) -> bytes:
        """The MAC of a meta field (``rvmac``; a table view's columns): empty without a key."""
        return b""

    def check_meta(self, epoch: str, what: str, data: bytes, mac: bytes | None) -> bool:
        """Whether a meta field is authentic (always, without a key)."""
        return True


class BadSlotData(ValueError):
    """A slot's data in Redis cannot be loaded (its meta holds what no kubemux leader
    writes, or it holds more than ``max_objects``): the slot reports it, retries with
    backoff, and a leader replaces it with a snapshot."""

    def __init__(self, why: str) -> None:
        super().__init__(
            f"the slot's data in Redis cannot be used: {why}; waiting for a leader's next snapshot"
        )


class ForgedLease(ValueError):
    """A slot's lease held what no kubemux replica writes; it was replaced."""

    def __init__(self) -> None:
        super().__init__(
            "the slot's lease in Redis held what no kubemux replica writes (no expiry, or not "
            "a lease token: forged?); this replica replaced it and leads"
        )


_EPOCH = re.compile(rb"[0-9a-f]{1,64}")
_RV = re.compile(rb"[!-~]{0,256}")  # printable ASCII: what the leader copies from a server
_SEQ_DIGITS = 14  # Lua writes numbers with 14 significant digits


@dataclasses.dataclass(frozen=True, slots=True)
class Meta:
    """A slot's meta hash, checked."""

    epoch: str
    seq: int
    rv: str


def seq_of(raw: bytes | None) -> int | None:
    """A sequence number read from Redis, or None if it is not one (5,000 digits, a sign)."""
    if raw is None or not 0 < len(raw) <= _SEQ_DIGITS or not raw.isdigit() or not raw.isascii():
        return None
    return int(raw)


def meta_of(
    values: PlainValues, epoch: bytes | None, seq: bytes | None, rv: bytes | None,
    rvmac: bytes | None,
) -> Meta | str | None:  # fmt: skip
    """The slot's meta, checked: None when there is none (no data yet), a message when it
    is not what any kubemux leader writes (forged)."""
    if epoch is None and seq is None:
        return None
    if epoch is None or _EPOCH.fullmatch(epoch) is None:
        return "its meta.epoch is not a kubemux epoch (forged?)"
    number = seq_of(seq)
    if number is None:
        return "its meta.seq is not a sequence number (forged?)"
    rv = rv or b""
    if _RV.fullmatch(rv) is None:
        return "its meta.rv is not a resourceVersion (forged?)"
    text = epoch.decode()
    if not values.check_meta(text, "rv", rv, rvmac):
        return "its meta.rv fails authentication under secret_key (forged?)"
    return Meta(text, number, rv.decode())


def checked_type(fields: dict[bytes, bytes]) -> str:
    """The change type of a stream entry (ADDED, MODIFIED, DELETED).

    Raises:
        SkippedValue: another type.
    """
    etype = fields.get(b"t", b"")
    if etype not in _TYPES:
        raise SkippedValue(fields.get(b"f", b""), f"a stream entry of type {shown(etype)}")
    return etype.decode()
