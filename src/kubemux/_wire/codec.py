"""Decoding on the hot path: read as little JSON as the cache needs.

An informer needs three strings from each object (namespace, name, resourceVersion);
everything else is only needed when somebody reads the object. The decoders hand each
object's JSON bytes (a ``bytes`` object is invisible to the cyclic garbage collector) over in
an untracked ``msgspec.Struct`` with those strings (:class:`Entry`); the store then keeps the
bytes alone, since its dicts hold the namespace and name and the bytes the resourceVersion
(read back with :func:`raw_resource_version` when a relist diff or a snapshot needs it). A
read decodes the bytes with orjson.

Watch lines are decoded a block at a time (:func:`decode_block`): one msgspec call decodes
every line's envelope and object metadata and validates the rest of each object, then each
object's bytes are cut out of the block with one copy, ``metadata.managedFields`` left out
(its exact encoding is known from the metadata decode, so no re-encode is needed). LIST
items and unusual lines go through :func:`decode_entry`, one object at a time.

Measured with 2 KB pods: decode-everything-into-dicts runs ~14k events/s once the cache is
large (the collector keeps rescanning the cached dicts); the block path decodes ~330k lines/s
on its own, and a read of one object costs one ``orjson.loads`` (~6 us).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import msgspec
import orjson

from .undecodable import (
    DecodeError,
    UndecodableObject,
    bad_utf8,
    deeper_recursion,
    lenient_loads,
    object_name,
    preview,
    quoted_name,
    why_undecodable,
)

__all__ = [
    "Block",
    "DecodeError",
    "Entry",
    "ListPage",
    "PinnedEntry",
    "StoreChange",
    "UndecodableObject",
    "bad_utf8",
    "check_readable",
    "compact_rv",
    "decode_block",
    "decode_entry",
    "decode_list",
    "decode_raw",
    "deeper_recursion",
    "foreign_entry",
    "lenient_loads",
    "object_name",
    "pinned_entry",
    "preview",
    "quoted_name",
    "raw_resource_version",
    "rv_str",
    "split_block",
    "why_undecodable",
]


_RV_MAX_DIGITS = 18  # below 10**18: an int of at most 32 bytes, far inside int64


def compact_rv(resource_version: str) -> int | str:
    """A resourceVersion in compact form: an ``int`` when the string is a canonical decimal
    (ASCII digits, no leading zero, at most 18 of them: etcd's revisions), so ``str()``
    gives the same string back; else the string itself. An int of a real cluster's revision
    takes 28-32 bytes, its string 55-62 (what a :class:`PinnedEntry` keeps, and what the
    store and the informer keep of the last one). Compact forms compare equal exactly when
    the strings do (a string becomes an int if and only if it is canonical)."""
    if (
        resource_version.isascii()
        and resource_version.isdigit()
        and resource_version[0] != "0"
        and len(resource_version) <= _RV_MAX_DIGITS
    ):
        return int(resource_version)
    return resource_version


def rv_str(rv: int | str) -> str:
    """The resourceVersion string of a :func:`compact_rv` value, exactly as the server sent it."""
    return rv if isinstance(rv, str) else str(rv)


class Entry(msgspec.Struct, gc=False, frozen=True):
    """One object: its identity and its JSON bytes. Not tracked by the collector.

    What the decoders hand over (``rv`` the resourceVersion string) and what a store hands
    back for an object it keeps as bytes alone (see :mod:`kubemux._cache.store`): ``rv`` None,
    meaning "the ``metadata.resourceVersion`` in ``raw``". Read the string as
    :attr:`resource_version`. An ``Entry`` (this exact type) promises that ``rv``, when set,
    is that same value: every decoder here makes it so. An object whose resourceVersion is
    not in its bytes is a :class:`PinnedEntry`.
    """

    namespace: str
    name: str
    rv: int | str | None
    raw: bytes

    @property
    def resource_version(self) -> str:
        """The object's resourceVersion, exactly as the server sent it (``""`` if none)."""
        rv = self.rv
        if rv is None:
            return raw_resource_version(self.raw)
        return rv if isinstance(rv, str) else str(rv)

    def compact_rv(self) -> int | str:
        """The resourceVersion in :func:`compact_rv` form (read from ``raw`` if not kept)."""
        rv = self.rv
        if rv is None:
            return compact_rv(raw_resource_version(self.raw))
        return compact_rv(rv) if isinstance(rv, str) else rv

    def decode(self) -> dict[str, Any]:
        """The object as a fresh dict (callers may change it freely). Never raises: only
        objects a reader can decode are cached."""
        return decode_raw(self.raw)


class PinnedEntry(Entry, gc=False, frozen=True):
    """An entry whose resourceVersion is not (or not known to be) the one in its bytes: a
    store keeps the entry itself, ``rv`` included (build with :func:`pinned_entry`)."""


def decode_raw(raw: bytes) -> dict[str, Any]:
    """A cached object's bytes as a fresh dict (see :meth:`Entry.decode`): the one lenient
    read every reader of a store uses (objects and table rows alike). Never raises for bytes
    that entered a store: :func:`check_readable` let them in."""
    try:
        obj: dict[str, Any] = orjson.loads(raw)
    except orjson.JSONDecodeError:
        obj = lenient_loads(raw)
    return obj


def raw_resource_version(raw: bytes) -> str:
    """``metadata.resourceVersion`` of a cached object's bytes (``""`` if none); ~1 us per
    KB (the rest of the object is skipped, not built)."""
    try:
        return _rv_decoder.decode(raw).metadata.resourceVersion
    except RecursionError:  # as deep as a LIST item may be (see deeper_recursion)
        with deeper_recursion():
            return _rv_decoder.decode(raw).metadata.resourceVersion
    except (msgspec.DecodeError, msgspec.ValidationError):  # what only the stdlib reads
        meta = lenient_loads(raw).get("metadata")
        rv = meta.get("resourceVersion") if isinstance(meta, dict) else None
        return rv if isinstance(rv, str) else ""


def pinned_entry(namespace: str, name: str, resource_version: str, raw: bytes) -> Entry:
    """A :class:`PinnedEntry`, kept compact: the namespace string interned (one for all the
    entries of a namespace), the resourceVersion in :func:`compact_rv` form."""
    return PinnedEntry(_intern(namespace), name, compact_rv(resource_version), raw)


def foreign_entry(namespace: str, name: str, resource_version: str, raw: bytes) -> Entry:
    """An entry of bytes from elsewhere (another replica; a Table row put together here).

    ``raw`` passes :func:`check_readable` (the check every byte string entering a store
    passes), then is looked at for ``resource_version`` (the same decode, ~1 us per KB):
    bytes that hold another one are pinned.

    Raises:
        UndecodableObject: no reader could decode ``raw``.
    """
    if check_readable(raw) == resource_version:
        return Entry(namespace, name, resource_version, raw)
    return pinned_entry(namespace, name, resource_version, raw)


_intern = sys.intern


class StoreChange(msgspec.Struct, gc=False, frozen=True):
    """What one applied event changed in a store: (type, entry, old entry), the cache's own
    form (the public :class:`~kubemux.Change` is built from it for subscribers). Not tracked by
    the collector, so a 50k-object relist allocates nothing the cyclic collector has to count
    or scan."""

    type: str
    entry: Entry
    old: Entry | None


class _HeadMeta(msgspec.Struct, gc=False):
    name: str = ""
    namespace: str = ""
    resourceVersion: str = ""
    managedFields: msgspec.Raw = msgspec.field(default_factory=msgspec.Raw)


class _Head(msgspec.Struct, gc=False):
    metadata: _HeadMeta = msgspec.field(default_factory=_HeadMeta)
    kind: str = ""


class _Event(msgspec.Struct, gc=False):
    """A watch event with its object still encoded."""

    type: str
    object: msgspec.Raw


class _ListMeta(msgspec.Struct, gc=False):
    resourceVersion: str = ""
    continue_: str = msgspec.field(default="", name="continue")


class ListPage(msgspec.Struct, gc=False):
    """A LIST response page with its items still encoded."""

    metadata: _ListMeta = msgspec.field(default_factory=_ListMeta)
    items: list[msgspec.Raw] | None = None
    kind: str = ""


_event_decoder = msgspec.json.Decoder(_Event)
_head_decoder = msgspec.json.Decoder(_Head)


class _RvMeta(msgspec.Struct, gc=False):
    resourceVersion: str = ""


class _RvHead(msgspec.Struct, gc=False):
    metadata: _RvMeta = msgspec.field(default_factory=_RvMeta)


_rv_decoder = msgspec.json.Decoder(_RvHead)


_list_decoder = msgspec.json.Decoder(ListPage)
_MF_KEY = b'"managedFields":'


# What the hot path's decoders skip without looking but a reader refuses: invalid UTF-8
# inside a skipped string (checked by bad_utf8: ~0.1 us per 2 KB object, nothing for ASCII),
# and an envelope repeating its "object" key (the slice cut by the prefix would not be the
# object the decoder saw: such blocks take the general path). Numbers that overflow a double
# (400 digits, 1e400) are not looked for on the hot path (a scan costs ~25% of the ingest
# rate): :meth:`Entry.decode` reads them with the standard library instead.
_OBJECT_KEY = b',"object":'  # once per canonical line; more: a repeated key (or a CRD's own)


def _check_readable(raw: bytes) -> None:
    """Raise :class:`UndecodableObject` if ``raw`` is not UTF-8 (the part of the check that
    the decoders skip: see :func:`check_readable`)."""
    if bad_utf8(raw, 0, len(raw)):
        raise UndecodableObject("the object is not valid UTF-8")


def check_readable(raw: bytes) -> str:
    """The readability check: raise :class:`UndecodableObject` unless :func:`decode_raw` can
    read ``raw``; return its ``metadata.resourceVersion`` (``""`` if none).

    Every byte string that enters a store passes this check or its equivalent, whoever
    brings it (an informer's object or Table row, a share follower's value): a JSON object
    that msgspec parses at the interpreter's recursion limit (so orjson, whose limit is 1,024
    levels, and the standard library can read it), valid UTF-8 throughout (msgspec does not
    look inside strings it skips). :func:`decode_entry` (one object) and the block decoders
    (many lines in one call, UTF-8 checked per block) apply the same rules. Numbers beyond a
    double pass: :func:`decode_raw` reads them as floats.
    """
    try:
        head = _rv_decoder.decode(raw)
    except RecursionError:
        raise UndecodableObject("nested too deep") from None
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise UndecodableObject(f"not a JSON object: {exc}") from None
    _check_readable(raw)
    return head.metadata.resourceVersion


Transform = Callable[[dict[str, Any]], dict[str, Any]]
"""A function applied to every object before it is cached (returns the object to keep)."""


_FAST = tuple(
    (b'{"type":"' + t.encode() + b'","object":', t)
    for t in ("ADDED", "MODIFIED", "DELETED", "BOOKMARK")
)


def split_event(line: bytes, *, fast: bool = True) -> tuple[str, bytes]:
    """A watch line's event type and its object's bytes.

    The API server writes ``{"type":"ADDED","object":{...}}`` exactly; such lines are split
    by their prefix without decoding. Anything else (other key order, spaces) goes through a
    real decode. A fast split fooled by extra keys after the object cannot go unnoticed: the
    trailing bytes make the object's own decode fail, and the caller retries with
    ``fast=False``.

    Raises:
        msgspec.DecodeError, msgspec.ValidationError: not a watch event.
    """
    if fast and line[:9] == b'{"type":"' and line[-1:] == b"}":
        for prefix, etype in _FAST:
            if line.startswith(prefix):
                raw = line[len(prefix) : -1]
                if raw[:1] == b"{" and raw[-1:] == b"}":
                    return etype, raw
                break
    event = _event_decoder.decode(line)
    return event.type, bytes(event.object)


class _WatchObject(msgspec.Struct, gc=False):
    metadata: _HeadMeta = msgspec.field(default_factory=_HeadMeta)


class _WatchLine(msgspec.Struct, gc=False, forbid_unknown_fields=True):
    type: str
    object: _WatchObject


_block_decoder = msgspec.json.Decoder(_WatchLine)
_OBJECT_PREFIX = {t: p for p, t in _FAST if t != "BOOKMARK"}  # ADDED, MODIFIED, DELETED

Block = tuple[bytes, int, int]
"""Complete watch lines: ``buf[start:stop]``, ending at a newline (or at the stream's end)."""


def decode_block(
    buf: bytes, start: int, stop: int, drop_managed_fields: bool
) -> list[tuple[str, Entry | bytes]]:
    """The hot path: the watch lines in ``buf[start:stop]``, decoded in one call.

    Returns one item per non-blank line, in order: ``(event type, entry)`` for ADDED,
    MODIFIED and DELETED lines exactly as the API server writes them
    (``{"type":"ADDED","object":{...}}``), ``("", line)`` for anything else (bookmarks,
    errors, other envelopes, objects without name or resourceVersion, malformed lines): the
    caller's general path decodes those one by one.

    One msgspec call decodes every line's envelope and object metadata (the rest of each
    object is only validated, not built); each entry's bytes are then cut out of ``buf`` with
    one copy, managedFields dropped. The object's position is known from the canonical
    prefix; the envelope has no other keys (``forbid_unknown_fields``) and ends right after
    the object, so the slice is exactly the object the decoder saw. A block that might hold
    what a reader cannot decode (invalid UTF-8; an envelope repeating ``"object"``) goes
    the general way, where each object is checked.
    """
    view = memoryview(buf)
    try:
        if bad_utf8(buf, start, stop):
            raise UndecodableObject
        heads = _block_decoder.decode_lines(view[start:stop])
        if buf.count(_OBJECT_KEY, start, stop) > len(heads):
            raise UndecodableObject  # a repeated "object" key (or a CRD's own "object" field)
    except DecodeError:  # some line is not a plain watch event: all go the general way
        return [("", line) for line in split_block((buf, start, stop))]  # checked one by one
    out: list[tuple[str, Entry | bytes]] = []
    append = out.append
    find = buf.find
    pos = start
    for head in heads:
        end = find(b"\n", pos, stop)
        if end < 0:
            end = stop
        etype = head.type
        prefix = _OBJECT_PREFIX.get(etype)
        if prefix is None or not buf.startswith(prefix, pos):
            pos, end = _non_blank_line(buf, pos, end, stop)  # the line the decoder saw
            if prefix is None or not buf.startswith(prefix, pos):
                append(("", buf[pos:end]))
                pos = end + 1
                continue
        meta = head.object.metadata
        if buf[end - 1] != 125 or not meta.name or not meta.resourceVersion:  # 125: b"}"
            append(("", buf[pos:end]))
            pos = end + 1
            continue
        first, last = pos + len(prefix), end - 1
        mf = meta.managedFields
        if drop_managed_fields and len(mf):
            cut = _without_managed_fields(buf, view, first, last, bytes(mf))
            raw = decode_entry(buf[first:last]).raw if cut is None else cut
        else:
            raw = buf[first:last]
        append((etype, Entry(meta.namespace, meta.name, meta.resourceVersion, raw)))
        pos = end + 1
    return out


def split_block(block: Block) -> list[bytes]:
    """A block's non-blank lines, one bytes object each (for the paths that are not hot)."""
    buf, start, stop = block
    return [line for line in buf[start:stop].split(b"\n") if line.strip()]


def _non_blank_line(buf: bytes, pos: int, end: int, stop: int) -> tuple[int, int]:
    """(start, end) of the first non-blank line from the line ``buf[pos:end]`` on (the
    decoder skips blank lines; so must the positions)."""
    while end < stop and not buf[pos:end].strip():
        pos = end + 1
        end = buf.find(b"\n", pos, stop)
        if end < 0:
            end = stop
    return pos, end


def _without_managed_fields(
    buf: bytes, view: memoryview, first: int, last: int, mf: bytes
) -> bytes | None:
    """``buf[first:last]`` (one object) without its ``"managedFields":<mf>`` member, copied
    once; None if the member is not there verbatim (not compact JSON)."""
    key = buf.find(_MF_KEY, first, last)
    while key >= 0:
        value = key + len(_MF_KEY)
        if buf.startswith(mf, value):  # not a label or a field of the same name elsewhere
            end = value + len(mf)
            if buf[key - 1] == 44:  # b","
                return b"".join((view[first : key - 1], view[end:last]))
            if buf[end] == 44:
                return b"".join((view[first:key], view[end + 1 : last]))
            return b"".join((view[first:key], view[end:last]))
        key = buf.find(_MF_KEY, key + 1, last)
    return None


def decode_list(body: bytes | bytearray) -> ListPage:
    """Decode a LIST page's envelope. Raises ``msgspec.DecodeError`` on bad input."""
    return _list_decoder.decode(body)


def decode_entry(
    raw: bytes,
    *,
    drop_managed_fields: bool = True,
    transform: Transform | None = None,
    type_prefix: bytes = b"",
) -> Entry:
    """Build a cache entry from one object's JSON bytes.

    Args:
        raw: The object, as the server encoded it.
        drop_managed_fields: Cut ``metadata.managedFields`` out of the bytes.
        transform: A user transform; forces a full decode and re-encode.
        type_prefix: ``b'"kind":"Pod","apiVersion":"v1",'`` to add to objects from a LIST,
            whose items carry no kind (the server omits it).

    Raises:
        msgspec.DecodeError, msgspec.ValidationError: not a JSON object with metadata.
        UndecodableObject: a reader could not decode it, or the transform raised.
        RecursionError: nested too deep.
    """
    head = _head_decoder.decode(raw)
    meta = head.metadata
    if type_prefix and not head.kind and raw[:1] == b"{":
        raw = b"{" + type_prefix + raw[1:]
        if raw.endswith(b",}"):
            raw = raw[:-2] + b"}"
    if transform is not None:
        try:
            obj = lenient_loads(raw)
        except ValueError as exc:  # invalid UTF-8 (json's JSONDecodeError is a ValueError)
            raise UndecodableObject(f"no reader can decode this object: {exc}") from None
        if drop_managed_fields and isinstance(obj.get("metadata"), dict):
            obj["metadata"].pop("managedFields", None)
        try:
            obj = transform(obj)
            raw = orjson.dumps(obj)
        except Exception as exc:
            raise UndecodableObject(
                f"the transform raised {type(exc).__name__}: {str(exc)[:200]}"
            ) from exc
        kept = obj.get("metadata") if isinstance(obj, dict) else None
        if isinstance(kept, dict) and kept.get("resourceVersion") == meta.resourceVersion:
            return Entry(meta.namespace, meta.name, meta.resourceVersion, raw)
        # the transform changed or dropped it: the entry keeps the server's
        return pinned_entry(meta.namespace, meta.name, meta.resourceVersion, raw)
    _check_readable(raw)
    if drop_managed_fields and len(meta.managedFields):
        cut = _without_managed_fields(raw, memoryview(raw), 0, len(raw), bytes(meta.managedFields))
        if cut is None:  # not compact JSON: take the slow, sure way
            obj = orjson.loads(raw)
            obj["metadata"].pop("managedFields", None)
            cut = orjson.dumps(obj)
        raw = cut
    return Entry(meta.namespace, meta.name, meta.resourceVersion, raw)
