"""Secrets shared encrypted: ``Redis(url, secret_key=KEY)``.

Every object value a Secret slot writes (the object hash, the stream entries, the staged
snapshot) is ``b"<resourceVersion>\\n" + nonce + AES-256-GCM(JSON)`` with a fresh random
96-bit nonce per value. The associated data binds the value to its slot, its
``namespace/name`` and its resourceVersion, so a value cannot be replayed under another key,
name or version. A Secret slot's share key carries a fingerprint of the key (HMAC-SHA256 of a
constant under it, truncated), so replicas with different keys never share a slot and never
see each other's ciphertext. A value that does not decrypt (another key, a tampered value)
raises :class:`SecretDecryptError`: the slot reports it and caches nothing of it.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os

from .._codec import Entry, foreign_entry

__all__ = ["Sealer", "SecretDecryptError", "fingerprint", "parse_secret_key"]

_NONCE = 12
_FINGERPRINT_INFO = b"kubemux.share secret_key fingerprint v1"

DECRYPT_ERROR = (
    "cannot decrypt: the replicas do not share the same secret_key (or a value in Redis was "
    "tampered with)"
)


class SecretDecryptError(Exception):
    """A Secret slot's value in Redis does not decrypt under this replica's key."""

    def __init__(self) -> None:
        super().__init__(DECRYPT_ERROR)


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


class Sealer:
    """Encrypts a Secret slot's values and decrypts them (one per slot)."""

    __slots__ = ("_ad", "_aead", "_invalid")

    def __init__(self, key: bytes, digest: str) -> None:
        from cryptography.exceptions import InvalidTag
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM

        self._aead = AESGCM(key)
        self._invalid = (InvalidTag, ValueError)
        self._ad = digest.encode() + b"\0"

    def __repr__(self) -> str:
        return "<Sealer>"

    def value(self, entry: Entry) -> bytes:
        """The value written for ``entry`` (as ``_value``, the JSON encrypted)."""
        rv = entry.resource_version.encode()
        nonce = os.urandom(_NONCE)
        ad = b"%s%s/%s\0%s" % (self._ad, entry.namespace.encode(), entry.name.encode(), rv)
        return rv + b"\n" + nonce + self._aead.encrypt(nonce, entry.raw, ad)

    def entry(self, field: bytes, value: bytes) -> Entry:
        """The entry of a value read from Redis (as ``_entry``).

        Raises:
            SecretDecryptError: it does not decrypt (another key, tampered).
            ValueError: a malformed field.
        """
        ns, _, name = field.decode().partition("/")
        rv, _, blob = value.partition(b"\n")
        try:
            raw = self._aead.decrypt(blob[:_NONCE], blob[_NONCE:], self._ad + field + b"\0" + rv)
        except self._invalid:
            raise SecretDecryptError() from None
        return foreign_entry(ns, name, rv.decode(), raw)
