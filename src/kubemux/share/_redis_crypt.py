"""Values authenticated and Secrets encrypted: ``Redis(url, secret_key=KEY)``.

With a key, every value a slot writes is authenticated, so that a Redis writer without the
key cannot make a follower cache anything the leader did not publish:

- an object's value (the object hash, the staged snapshot, a stream entry's ``v``) is
  ``b"<resourceVersion>\\n" + tag + JSON`` (:class:`SignedValues`), the tag the first 16
  bytes of HMAC-SHA256 under a key derived from ``secret_key`` over the slot, the epoch,
  ``namespace/name``, the resourceVersion and the JSON; a Secret slot's value is
  ``b"<resourceVersion>\\n" + nonce + AES-256-GCM(JSON)`` instead (:class:`SealedValues`),
  a fresh random 96-bit nonce per value and the same parts as associated data;
- each stream entry carries ``m``, a tag over its epoch, sequence number, type, field and
  value, so an entry cannot be forged, replayed or given another type;
- the meta hash's ``rv`` (``rvmac``) and a table view's ``columns`` are tagged with the epoch.

Every slot's share key carries a fingerprint of the key (HMAC-SHA256 of a constant under it,
truncated), so replicas with different keys, or one with a key and one without, never share
a slot. A value that does not authenticate is skipped alone and named in status, never cached.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os

from .._wire.codec import Entry
from ._redis_keys import PlainValues, SkippedValue

__all__ = [
    "SealedValues",
    "SecretDecryptError",
    "SignedValues",
    "fingerprint",
    "identity_salt",
    "parse_secret_key",
]

_NONCE = 12
_TAG = 16
_FINGERPRINT_INFO = b"kubemux.share secret_key fingerprint v1"
_MAC_INFO = b"kubemux.share value mac v1"
_SALT_INFO = b"kubemux.share identity salt v1"

DECRYPT_ERROR = (
    "cannot decrypt: the replicas do not share the same secret_key (or a value in Redis was "
    "tampered with)"
)
FORGED = (
    "fails authentication under secret_key: written without the key (forged, or tampered "
    "with) or by a replica with another key"
)


class SecretDecryptError(SkippedValue):
    """A Secret slot's value in Redis does not decrypt under this replica's key."""

    def __init__(self, field: bytes) -> None:
        super().__init__(field, DECRYPT_ERROR)


def parse_secret_key(key: bytes | str) -> bytes:
    """The 32-byte key of ``secret_key``: 32 bytes, or base64 text of 32 bytes.

    Raises:
        ValueError: anything else (the message never holds the key).
    """
    if isinstance(key, str):
        try:
            raw = base64.b64decode(key.strip(), validate=True)
        except (binascii.Error, ValueError):
            raise ValueError("secret_key: not base64 text") from None
    elif isinstance(key, bytes | bytearray | memoryview):
        raw = bytes(key)
    else:
        raise TypeError("secret_key: 32 bytes or base64 text of 32 bytes")
    if len(raw) != 32:
        raise ValueError(f"secret_key: must be 32 bytes (AES-256), got {len(raw)}")
    return raw


def fingerprint(key: bytes) -> str:
    """16 hex digits identifying the key (an HMAC under it: reveals nothing of the key)."""
    return hmac.new(key, _FINGERPRINT_INFO, hashlib.sha256).hexdigest()[:16]


def identity_salt(key: bytes) -> bytes:
    """The credential-digest salt derived from a ``secret_key`` (secret as the key is)."""
    return hmac.new(key, _SALT_INFO, hashlib.sha256).digest()


class SignedValues(PlainValues):
    """A slot's values authenticated under a ``secret_key`` (one per slot)."""

    __slots__ = ("_mac", "_slot")
    signed = True

    def __init__(self, key: bytes, digest: str, max_value_size: int) -> None:
        super().__init__(max_value_size)
        mac_key = hmac.new(key, _MAC_INFO, hashlib.sha256).digest()
        self._slot = digest.encode() + b"\0"
        self._mac = hmac.new(mac_key, self._slot, hashlib.sha256)  # copied for each tag

    def __repr__(self) -> str:
        return f"<{type(self).__name__}>"

    def _ad(self, epoch: str, field: bytes, rv: bytes) -> bytes:
        return b"%s%s\0%s\0%s" % (self._slot, epoch.encode(), field, rv)

    def _tag(self, *parts: bytes) -> bytes:
        mac = self._mac.copy()
        for part in parts:
            mac.update(b"%d:" % len(part))
            mac.update(part)
        return mac.digest()[:_TAG]

    def value(self, entry: Entry, epoch: str) -> bytes:
        rv = entry.resource_version.encode()
        field = f"{entry.namespace}/{entry.name}".encode()
        return rv + b"\n" + self._tag(b"value", self._ad(epoch, field, rv), entry.raw) + entry.raw

    def open(self, field: bytes, rv: bytes, payload: bytes, epoch: str) -> bytes:
        tag, raw = payload[:_TAG], payload[_TAG:]
        good = self._tag(b"value", self._ad(epoch, field, rv), raw)
        if len(tag) != _TAG or not hmac.compare_digest(tag, good):
            raise SkippedValue(field, FORGED)
        return raw

    def log_mac(self, epoch: str, seq: int, etype: str, field: str, value: bytes) -> bytes:
        return self._tag(b"log", epoch.encode(), b"%d" % seq, etype.encode(), field.encode(), value)

    def check_log(self, epoch: str, seq: int, fields: dict[bytes, bytes]) -> None:
        field = fields.get(b"f", b"")
        good = self._tag(
            b"log", epoch.encode(), b"%d" % seq, fields.get(b"t", b""), field, fields.get(b"v", b"")
        )
        if not hmac.compare_digest(fields.get(b"m", b""), good):
            raise SkippedValue(field, "a stream entry that " + FORGED)

    def meta_mac(self, epoch: str, what: str, data: bytes) -> bytes:
        return self._tag(b"meta", what.encode(), epoch.encode(), data)

    def check_meta(self, epoch: str, what: str, data: bytes, mac: bytes | None) -> bool:
        return mac is not None and hmac.compare_digest(mac, self.meta_mac(epoch, what, data))


class SealedValues(SignedValues):
    """A Secret slot's values, encrypted under a ``secret_key`` (one per slot)."""

    __slots__ = ("_aead", "_invalid")

    def __init__(self, key: bytes, digest: str, max_value_size: int) -> None:
        from cryptography.exceptions import InvalidTag
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM

        super().__init__(key, digest, max_value_size)
        self._aead = AESGCM(key)
        self._invalid = (InvalidTag, ValueError)

    def value(self, entry: Entry, epoch: str) -> bytes:
        rv = entry.resource_version.encode()
        field = f"{entry.namespace}/{entry.name}".encode()
        nonce = os.urandom(_NONCE)
        return rv + b"\n" + nonce + self._aead.encrypt(nonce, entry.raw, self._ad(epoch, field, rv))

    def open(self, field: bytes, rv: bytes, payload: bytes, epoch: str) -> bytes:
        try:
            return self._aead.decrypt(
                payload[:_NONCE], payload[_NONCE:], self._ad(epoch, field, rv)
            )
        except self._invalid:
            raise SecretDecryptError(field) from None
