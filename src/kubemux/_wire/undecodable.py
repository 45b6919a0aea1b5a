"""Input no reader can decode: what it raises (:data:`DecodeError`), how a skip names it
without its data (:func:`why_undecodable`, :func:`preview`, :func:`quoted_name`,
:func:`object_name`), the UTF-8
check the decoders skip (:func:`bad_utf8`), and the lenient reads for numbers beyond a
double (:func:`lenient_loads`, :func:`deeper_recursion`). Re-exported by :mod:`.codec`.
"""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Iterator
from typing import Any

import msgspec
import orjson

__all__ = [
    "DecodeError",
    "UndecodableObject",
    "bad_utf8",
    "deeper_recursion",
    "lenient_loads",
    "object_name",
    "preview",
    "quoted_name",
    "why_undecodable",
]


class UndecodableObject(ValueError):
    """An object that a reader could not decode (or that a user transform refused)."""


DecodeError = (
    msgspec.DecodeError,
    msgspec.ValidationError,
    RecursionError,  # nested deeper than the decoders go
    UndecodableObject,
    orjson.JSONDecodeError,
)
"""Everything decoding one object (or one line) can raise: skip that object, keep going."""


def bad_utf8(buf: bytes, start: int, stop: int) -> bool:
    """Does ``buf[start:stop]`` hold bytes that are not UTF-8? (Nearly free for ASCII.)"""
    if (buf if 2 * (stop - start) >= len(buf) else buf[start:stop]).isascii():
        return False  # the whole buffer when the slice is most of it (a socket read's block)
    try:
        str(memoryview(buf)[start:stop], "utf-8")
    except UnicodeDecodeError:
        return True
    return False


def why_undecodable(exc: BaseException) -> str:
    """What a skip's message says of one of :data:`DecodeError` (never the data)."""
    if isinstance(exc, RecursionError):
        return "nested too deep"
    return str(exc)[:200] or type(exc).__name__


def preview(line: bytes) -> str:
    """Enough of a line to recognise it in a log, too little to carry an object's data (a
    Secret's values)."""
    return f"{line[:40]!r}... ({len(line)} bytes)" if len(line) > 40 else repr(line)


def quoted_name(namespace: str, name: str) -> str:
    """``"namespace/name"`` as JSON quotes it (controls escaped: nothing reaches a terminal
    raw), for messages naming an object; ``""`` without a name."""
    if not name:
        return ""
    return orjson.dumps(f"{namespace}/{name}" if namespace else name).decode()


def _int64_or_float(text: str) -> int | float:
    if len(text) > 21:  # beyond 64 bits (and int() refuses more than 4,300 digits)
        return float(text)
    value = int(text)
    return value if -(2**63) <= value < 2**64 else float(text)  # orjson's range, else inf


def lenient_loads(raw: bytes) -> Any:
    """orjson's decode, falling back to the standard library for numbers orjson refuses
    (beyond a double's range); they come back as floats (``inf``), so the object encodes
    again with orjson."""
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        # as deep as msgspec let in (its limit counts from wherever it ran): the standard
        # library's decoder counts from here, perhaps deeper in the stack
        with deeper_recursion():
            return json.loads(raw, parse_int=_int64_or_float)


@contextlib.contextmanager
def deeper_recursion(limit: int = 5000) -> Iterator[None]:
    """Let msgspec skip objects nested deeper than Python's default limit (for a LIST
    page, whose items are decoded, and refused if too deep, one by one afterwards)."""
    old = sys.getrecursionlimit()
    sys.setrecursionlimit(max(old, limit))
    try:
        yield
    finally:
        sys.setrecursionlimit(old)


class _NameMeta(msgspec.Struct, gc=False):
    name: str = ""
    namespace: str = ""


class _NameHead(msgspec.Struct, gc=False):
    metadata: _NameMeta = msgspec.field(default_factory=_NameMeta)


_name_decoder = msgspec.json.Decoder(_NameHead)


def object_name(raw: bytes, *, metadata_last: bool = False) -> str:
    """:func:`quoted_name` of an object's bytes as far as they can be read (``""`` if not
    even that), for the message of a skip.

    Bytes msgspec cannot read (nested too deep before the metadata) are looked at from
    their ``"metadata":`` member on (the first one, or the last one for ``metadata_last``:
    a Table row's metadata comes after its cells)."""
    try:
        with deeper_recursion():
            meta = _name_decoder.decode(raw).metadata
        return quoted_name(meta.namespace, meta.name)
    except DecodeError:
        pass
    at = raw.rfind(_METADATA_KEY) if metadata_last else raw.find(_METADATA_KEY)
    if at < 0:
        return ""
    try:
        found, _ = _raw_decoder.raw_decode(raw[at + len(_METADATA_KEY) :].decode(errors="replace"))
    except (ValueError, RecursionError):
        return ""
    if not isinstance(found, dict):
        return ""
    ns, name = found.get("namespace"), found.get("name")
    return quoted_name(ns if isinstance(ns, str) else "", name if isinstance(name, str) else "")


_METADATA_KEY = b'"metadata":'


_raw_decoder = json.JSONDecoder()
