"""Continue tokens for paginated LISTs served from store snapshots: opaque, tamper-proof,
bound to one context and one resource.

A token says where a LIST stopped: which pinned snapshot it reads (its id), the key of the
last object returned, how many objects came before (for ``remainingItemCount``), and the
resourceVersion the first page answered. It is ``base64url(payload || mac)`` without
padding; the MAC is HMAC-SHA256 under a per-process random key over a domain tag, the
context, the resource and the payload, truncated to 128 bits. So:

- a token that was not issued here (edited, truncated, invented) is refused with a 400
  worded like the API server's (``invalid continue token: continue key is not valid: ...``);
- a token issued for another context or another resource fails its MAC the same way: the
  answer never depends on what the other context holds;
- a token whose snapshot is gone (past :class:`SnapshotPins`' time to live) is a 410
  Expired with the API server's "The provided continue parameter is too old ..." message
  and, like the etcd3 store, a fresh token in ``metadata.continue`` that continues the list
  at the latest snapshot (inconsistently, as the message says).

A token from before a restart of the proxy (each process draws its own key) cannot be told
from a forged one, so it is a 400 too: the client starts its list again.

Tokens are bounded: at most :data:`MAX_TOKEN_LENGTH` characters are looked at, the key
parts at most 253 + 63 bytes, so decoding is constant work whatever a client sends.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import hmac
import re
import secrets
import struct
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from hashlib import sha256
from typing import Any, Final, Generic, TypeVar

from ..._cache.snapshot import Key
from .statuses import ProxyStatusError, bad_request, gone_continue_too_old

__all__ = [
    "LATEST",
    "MAX_TOKEN_LENGTH",
    "ContinuePosition",
    "ContinueTokens",
    "PinnedSnapshot",
    "SnapshotPins",
    "remaining_item_count",
    "take_page",
]


LATEST: Final = -1
"""The snapshot id of a token that continues at the latest snapshot (what a 410 offers)."""

MAX_TOKEN_LENGTH: Final = 1024
"""Longest token accepted, in characters (a real one is well under 500)."""

_VERSION = 1
_MAC_BYTES = 16
_DOMAIN = b"kubemux-proxy-continue\x00"
_HEAD = struct.Struct(">BqQHHB")  # version, snapshot id, offset, len(ns), len(name), len(rv)
_LEN = struct.Struct(">I")
_MAX_NAMESPACE = 253
_MAX_NAME = 1024
_MAX_RV = 64
_INVALID = "invalid continue token: continue key is not valid"


@dataclasses.dataclass(frozen=True, slots=True)
class ContinuePosition:
    """Where a paginated LIST stopped.

    Attributes:
        snapshot_id: The pinned snapshot the pages read, or :data:`LATEST`.
        last_key: ``(namespace, name)`` of the last object returned; the next page starts
            strictly after it.
        offset: How many objects the pages so far returned (for ``remainingItemCount``).
        resource_version: The resourceVersion of the snapshot (what every page answers).
    """

    snapshot_id: int
    last_key: tuple[str, str]
    offset: int
    resource_version: str


_B64URL = re.compile(r"[A-Za-z0-9_-]*")


def _b64decode(token: str) -> bytes:
    # Go's base64.RawURLEncoding: the URL alphabet only, no padding
    if len(token) % 4 == 1 or not _B64URL.fullmatch(token):
        raise ValueError("illegal base64 data")
    return base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))


class ContinueTokens:
    """Issues and checks continue tokens under one secret key.

    Args:
        key: The HMAC key; by default 32 random bytes, so tokens die with the process.
    """

    __slots__ = ("_key",)

    def __init__(self, key: bytes | None = None):
        self._key = key if key is not None else secrets.token_bytes(32)

    def __repr__(self) -> str:
        return "<ContinueTokens>"  # never the key

    def _mac(self, context: str, resource: str, payload: bytes) -> bytes:
        ctx = context.encode("utf-8", "surrogateescape")
        res = resource.encode("utf-8", "surrogateescape")
        # length-prefixed: no two (context, resource) pairs give the same message
        message = b"".join((_DOMAIN, _LEN.pack(len(ctx)), ctx, _LEN.pack(len(res)), res, payload))
        return hmac.new(self._key, message, sha256).digest()[:_MAC_BYTES]

    def encode(
        self,
        context: str,
        resource_name: str,
        snapshot_id: int,
        last_key: tuple[str, str],
        resource_version: str,
        offset: int = 0,
    ) -> str:
        """A token for the page after ``last_key``.

        Raises:
            ValueError: a key part or the resourceVersion is longer than the API allows.
        """
        namespace = last_key[0].encode("utf-8", "surrogateescape")
        name = last_key[1].encode("utf-8", "surrogateescape")
        rv = resource_version.encode("utf-8", "surrogateescape")
        if len(namespace) > _MAX_NAMESPACE or len(name) > _MAX_NAME or len(rv) > _MAX_RV:
            raise ValueError("continue key too long")
        head = _HEAD.pack(_VERSION, snapshot_id, offset, len(namespace), len(name), len(rv))
        payload = head + namespace + name + rv
        mac = self._mac(context, resource_name, payload)
        return base64.urlsafe_b64encode(payload + mac).rstrip(b"=").decode("ascii")

    def decode(
        self,
        token: str,
        context: str,
        resource_name: str,
        *,
        alive: Callable[[int], bool] | None = None,
    ) -> ContinuePosition:
        """Check a token and return where its LIST stopped.

        Args:
            token: The ``continue`` query parameter.
            context: The context the request is for.
            resource_name: The resource the request is for (``pods``, ``deployments.apps``).
            alive: Tells whether a snapshot id is still pinned; when it says no, the token
                has expired.

        Raises:
            ProxyStatusError: 400 BadRequest when the token was not issued here for this
                context and resource; 410 Expired (with a token that continues at the
                latest snapshot) when its snapshot is gone.
        """
        position = self._check(token, context, resource_name)
        if alive is not None and position.snapshot_id != LATEST and not alive(position.snapshot_id):
            raise self.expired(position, context, resource_name)
        return position

    def expired(
        self, position: ContinuePosition, context: str, resource_name: str
    ) -> ProxyStatusError:
        """The 410 for a token whose snapshot is gone: the API server's message and a token
        that continues after the same key at the latest snapshot."""
        fresh = self.encode(
            context,
            resource_name,
            LATEST,
            position.last_key,
            position.resource_version,
            position.offset,
        )
        return gone_continue_too_old(fresh)

    def _check(self, token: str, context: str, resource_name: str) -> ContinuePosition:
        if len(token) > MAX_TOKEN_LENGTH:
            raise bad_request(f"{_INVALID}: too long")
        try:
            data = _b64decode(token)
        except (ValueError, binascii.Error):
            raise bad_request(f"{_INVALID}: illegal base64 data") from None
        if len(data) < _HEAD.size + _MAC_BYTES:
            raise bad_request(f"{_INVALID}: too short")
        payload, mac = data[:-_MAC_BYTES], data[-_MAC_BYTES:]
        if not hmac.compare_digest(mac, self._mac(context, resource_name, payload)):
            raise bad_request(f"{_INVALID}: not issued for this resource by this server")
        version, snapshot_id, offset, ns_len, name_len, rv_len = _HEAD.unpack_from(payload)
        body = payload[_HEAD.size :]
        if version != _VERSION or len(body) != ns_len + name_len + rv_len:
            raise bad_request(f"{_INVALID}: unknown encoding")
        namespace = body[:ns_len].decode("utf-8", "surrogateescape")
        name = body[ns_len : ns_len + name_len].decode("utf-8", "surrogateescape")
        rv = body[ns_len + name_len :].decode("utf-8", "surrogateescape")
        return ContinuePosition(snapshot_id, (namespace, name), offset, rv)


def remaining_item_count(total: int, offset: int, page: int, *, selective: bool) -> int | None:
    """``metadata.remainingItemCount`` as the API server computes it: the objects after this
    page, or None when a label or field selector filters the list (the count is then
    unknown without evaluating the rest, and the API server leaves it out)."""
    if selective:
        return None
    return max(0, total - offset - page)


S = TypeVar("S")


class SnapshotPins(Generic[S]):
    """Snapshots kept alive for the continue tokens that read them, for a while.

    A snapshot is dropped ``ttl`` seconds after it was last read (each page refreshes it),
    and the oldest are dropped beyond ``max_pins``. What is pinned is a view that shares
    structure with the other pins (:mod:`..._reads.pins`): it keeps alive the versions of
    the objects that changed since, not a copy of the namespace.

    Args:
        ttl: Seconds a pin lives after its last use (default 300: etcd's compaction
            interval, the life a continue token has against the API server).
        max_pins: Most pins kept; the least recently used go first.
        clock: A monotonic clock (tests pass their own).
    """

    __slots__ = ("_clock", "_next", "_pins", "max_pins", "ttl")

    def __init__(
        self,
        *,
        ttl: float = 300.0,
        max_pins: int = 1024,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.ttl = ttl
        self.max_pins = max_pins
        self._clock = clock
        self._pins: OrderedDict[int, tuple[S, float]] = OrderedDict()
        self._next = secrets.randbelow(1 << 31)

    def __len__(self) -> int:
        self._expire()
        return len(self._pins)

    def __repr__(self) -> str:
        return f"<SnapshotPins pinned={len(self._pins)} ttl={self.ttl}>"

    def pin(self, snapshot: S) -> int:
        """Keep ``snapshot`` and return its id (never :data:`LATEST`)."""
        self._expire()
        self._next = (self._next + 1) & ((1 << 62) - 1)
        snapshot_id = self._next
        self._pins[snapshot_id] = (snapshot, self._clock())
        while len(self._pins) > self.max_pins:
            self._pins.popitem(last=False)
        return snapshot_id

    def get(self, snapshot_id: int) -> S | None:
        """The pinned snapshot, its life extended; None when it is gone."""
        self._expire()
        found = self._pins.get(snapshot_id)
        if found is None:
            return None
        self._pins[snapshot_id] = (found[0], self._clock())
        self._pins.move_to_end(snapshot_id)
        return found[0]

    def alive(self, snapshot_id: int) -> bool:
        """Whether ``snapshot_id`` is still pinned (for :meth:`ContinueTokens.decode`)."""
        self._expire()
        return snapshot_id in self._pins

    def _expire(self) -> None:
        deadline = self._clock() - self.ttl
        pins = self._pins
        while pins:
            oldest = next(iter(pins))
            if pins[oldest][1] > deadline:
                break
            del pins[oldest]


def take_page(
    items: Iterator[tuple[Key, bytes]], limit: int, match: Callable[[Key, bytes], bool] | None
) -> tuple[list[tuple[Key, bytes]], Key | None]:
    """Up to ``limit`` selected items (all for 0) and the last key when more follow."""
    if limit <= 0:
        if match is None:
            return list(items), None
        return [(k, r) for k, r in items if match(k, r)], None
    page: list[tuple[Key, bytes]] = []
    for key, raw in items:
        if match is not None and not match(key, raw):
            continue
        if len(page) == limit:
            return page, page[-1][0]
        page.append((key, raw))
    return page, None


@dataclasses.dataclass(slots=True)
class PinnedSnapshot:
    """A snapshot kept for continue tokens, with the object counts per scope."""

    snapshot: Any
    counts: dict[str | None, int] = dataclasses.field(default_factory=dict)

    def count(self, namespace: str | None) -> int:
        found = self.counts.get(namespace)
        if found is None:
            counter = getattr(self.snapshot, "count", None)
            if counter is not None:  # it knows (a pinned view: its base's count, adjusted)
                found = int(counter(namespace))
            elif namespace is None:
                found = len(self.snapshot)
            else:
                found = sum(1 for _ in self.snapshot.items(namespace))
            self.counts[namespace] = found
        return found
