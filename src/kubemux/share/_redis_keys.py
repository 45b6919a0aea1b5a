"""The Redis share engine's key layout, Lua scripts and (de)serialisation helpers.

Keys per slot (``H`` = the first 32 hex digits of sha256 of the share key; the braces make
every key of a slot land on one Redis Cluster node)::

    {prefix}:{H}:lease          string  owner token, SET NX PX, renewed every lease_ttl/3
    {prefix}:{H}:meta           hash    epoch (random hex), seq (changes in this epoch), rv,
                                        columns (table views: JSON column definitions)
    {prefix}:{H}:objs           hash    "namespace/name" -> b"<resourceVersion>\\n<JSON>"
    {prefix}:{H}:log            stream  t, f, v (as objs), n (seq), e (epoch), ts; capped
    {prefix}:{H}:stage:<epoch>  hash    a snapshot being written; renamed to objs on commit

Every write is a Lua script that first checks the lease still holds the writer's token
(fencing), so a leader that was paused past its lease cannot overwrite its successor.
``docs/sharing.md`` has the protocol and the failure cases.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
from collections.abc import Iterator

from .._codec import Entry, foreign_entry

# the engine's logger: one name for all of its modules
log = logging.getLogger("kubemux.share._redis")

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
if ARGV[5] ~= '' then redis.call('HSET', KEYS[2], 'columns', ARGV[5]) end
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
    return foreign_entry(ns, name, rv.decode(), raw)  # another process's: checked


def _value(entry: Entry) -> bytes:
    return entry.resource_version.encode() + b"\n" + entry.raw
