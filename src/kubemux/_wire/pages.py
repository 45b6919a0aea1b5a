"""LIST pages decoded a slice at a time (:func:`decode_page`), for every view.

A page of 100 MiB must not stall the event loop, and one item nested too deep must not fail
its page. msgspec decodes a whole page in one call (~25 ms per 100 MiB of 2 KB objects, more with
small ones), and a call cannot be interrupted. So a large page is cut where the API server's
compact JSON puts one item after another (``},{``) and each cut decoded on its own as
``[...]``. A cut is never trusted blindly:

- the envelope (``kind``, ``metadata``, the items key) is decoded with the items replaced
  by a random sentinel, which must come back as the only item: so the bytes cut are exactly
  the top-level items array;
- each slice must decode as a JSON array. A decoder is deterministic: if the bytes from the
  start of an item to a ``}`` decode as complete values, the ``,`` after that ``}`` is the
  array's own separator in the whole page too (a ``},{`` inside a string leaves the slice
  ending inside that string, which does not decode: the next ``},{`` is tried).

A page that does not have this shape (whitespace between items, an envelope far from the
start) is decoded the plain way, in one call: correct, only not sliced. Where a page keeps its items (``items``; a Table's ``rows``) and how its envelope decodes
is a format's :class:`PageLayout`.
"""

from __future__ import annotations

import dataclasses
import re
import secrets
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import msgspec

from .codec import DecodeError, decode_list, deeper_recursion

__all__ = ["OBJECT_PAGES", "ListMeta", "PageLayout", "decode_page", "page_slices"]

_ITEMS_KEY = b'"items":['
_ITEM_GAP = b"},{"
_MAX_ENVELOPE = 64 * 1024  # bytes before and after the items for the sliced path, at most
_MAX_MISSES = 4  # "},{" inside strings tolerated per slice before the rest is decoded at once

_items_decoder = msgspec.json.Decoder(list[msgspec.Raw])


class ListMeta(msgspec.Struct, gc=False, frozen=True):
    """What a LIST page says besides its items."""

    resource_version: str
    continue_: str


@dataclasses.dataclass(frozen=True, slots=True)
class PageLayout:
    """Where a LIST page keeps its items, and how its envelope decodes (a format's).

    Attributes:
        keys: The members that may hold the items, as the API server writes them
            (``b'"items":['``; a Table's ``b'"rows":['``), tried in order.
        decode: Decodes a whole page (items as ``msgspec.Raw``) or an envelope whose items
            were replaced by one sentinel string.
        items: The items array of a decoded page (None if it has none).
    """

    keys: tuple[bytes, ...]
    decode: Callable[[bytes | bytearray], Any]
    items: Callable[[Any], list[msgspec.Raw] | None]


OBJECT_PAGES = PageLayout(keys=(_ITEMS_KEY,), decode=decode_list, items=lambda page: page.items)
"""A plain LIST page (``kind: PodList``...): ``metadata`` and ``items``."""


def page_slices(
    body: bytes | bytearray, slice_bytes: int
) -> tuple[ListMeta, Iterator[Sequence[msgspec.Raw | bytes]]]:
    """A plain LIST page's metadata, and its items in slices of about ``slice_bytes`` each
    (:func:`decode_page` with :data:`OBJECT_PAGES`)."""
    page, slices = decode_page(body, slice_bytes, OBJECT_PAGES)
    return ListMeta(page.metadata.resourceVersion, page.metadata.continue_), slices


def decode_page(
    body: bytes | bytearray, slice_bytes: int, layout: PageLayout
) -> tuple[Any, Iterator[Sequence[msgspec.Raw | bytes]]]:
    """A LIST page's envelope (as ``layout.decode`` gives it: read its metadata, not its
    items), and its items in slices of about ``slice_bytes`` each.

    Each slice is decoded when the iterator is advanced: yield to the event loop between
    two ``next()``. A page of at most ``slice_bytes`` (or of an unusual shape) is one slice.
    An item nested deeper than msgspec goes even with :func:`deeper_recursion` does not fail
    the page: the items around it are then cut by :func:`_scan` (each is refused alone later,
    by the caller's decode at the normal limit).

    Raises:
        msgspec.DecodeError, msgspec.ValidationError, RecursionError: the page is not a
            valid LIST response (also from the iterator, for a slice).
    """
    found = _locate_items(body, layout) if len(body) > slice_bytes else None
    if found is None:
        try:
            with deeper_recursion():  # one deep item is refused alone, by the caller
                page = layout.decode(body)
        except RecursionError:
            found = _locate_items(body, layout)
            if found is None:
                raise
            page, start, stop = found
            return page, _slices(body, start, stop, _NARROW_BYTES, narrow=False, budget=[0])
        return page, iter([layout.items(page) or []])
    page, start, stop = found
    return page, _slices(body, start, stop, slice_bytes)


def _locate_items(body: bytes | bytearray, layout: PageLayout) -> tuple[Any, int, int] | None:
    """(envelope, start, stop) of the top-level items array's contents, or None."""
    for key in layout.keys:
        start = body.find(key, 0, _MAX_ENVELOPE)
        if start < 0:
            continue
        start += len(key)
        stop = body.rfind(b"]", start)
        if stop < 0 or len(body) - stop > _MAX_ENVELOPE:
            continue
        sentinel = b'"' + secrets.token_hex(16).encode() + b'"'
        probe = b"".join((body[:start], sentinel, body[stop:]))
        try:
            with deeper_recursion():
                page = layout.decode(probe)
        except DecodeError:
            continue
        items = layout.items(page)
        if items is None or len(items) != 1 or bytes(items[0]) != sentinel:
            continue  # the array found is not the top-level items (or there are two)
        return page, start, stop
    return None


def _slices(
    body: bytes | bytearray,
    start: int,
    stop: int,
    slice_bytes: int,
    *,
    narrow: bool = True,
    budget: list[int] | None = None,
) -> Iterator[Sequence[msgspec.Raw | bytes]]:
    """The items of ``body[start:stop]``, decoded a slice at a time.

    A slice holding an item deeper than msgspec goes (RecursionError) is decoded again in
    slices of ``_NARROW_BYTES`` (``narrow``), and the one of those holding it is cut by
    :func:`_scan` instead: the scanner, slow per byte, only ever sees a few KB beside each
    deep item, and at most ``_SCAN_BUDGET`` tokens per page (``budget`` counts them).
    """
    view = memoryview(body)
    spent = [0] if budget is None else budget
    pos = start
    while pos < stop:
        gap = body.find(_ITEM_GAP, pos + slice_bytes, stop) if stop - pos > slice_bytes else -1
        misses = 0
        items: Sequence[msgspec.Raw | bytes]
        while True:
            end = gap + 1 if gap >= 0 else stop
            try:
                with deeper_recursion():
                    items = _items_decoder.decode(b"".join((b"[", view[pos:end], b"]")))
                break
            except RecursionError:
                if narrow:
                    yield from _slices(body, pos, stop, _NARROW_BYTES, narrow=False, budget=spent)
                    return
                items, end = _scan(body, pos, end, stop, spent)
                break
            except DecodeError:
                if gap < 0:
                    raise  # the rest of the page, whole, is invalid
                misses += 1
                # try the next "},{"; after a few misses, decode the rest in one call
                gap = -1 if misses >= _MAX_MISSES else body.find(_ITEM_GAP, gap + 1, stop)
        yield items
        pos = end + 1  # past the "," between two items


# a JSON string (escapes included: possessive, so nothing backtracks), or a run of brackets
_TOKENS = re.compile(rb'"[^"\\]*+(?:\\.[^"\\]*+)*+"|[\[\]{}]++')
_NARROW_BYTES = 16 * 1024  # slices around a deep item: what the scanner sees beside it
_MAX_SCAN_DEPTH = 100_000  # an item nested deeper fails the page (bounds the scan's work)
_SCAN_BUDGET = 500_000  # tokens scanned per page at most (~0.5 s): more fails the page
_SEGMENTS = re.compile(rb"[\[{]+|[\]}]+")  # a run of brackets: its opening and closing parts
_OPEN = frozenset(b"[{")


def _scan(
    body: bytes | bytearray, pos: int, end: int, stop: int, budget: list[int]
) -> tuple[list[bytes], int]:
    """The items from ``body[pos]`` on, cut without recursion however deep they nest, up to
    the first item boundary at or after ``end``; returns them and that boundary.

    Only strings and runs of opening or closing brackets are looked at (regular
    expressions find them): an item's own validity is its decoder's business. A top-level
    scalar is not an item (dropped). About 0.3 us per string or run; used only next to an
    item msgspec cannot decode.

    Raises:
        msgspec.DecodeError: the brackets do not balance, an item nests deeper than
            ``_MAX_SCAN_DEPTH``, or the page's scans took more than ``_SCAN_BUDGET`` tokens
            (``budget[0]`` counts them): a page of many such items is refused as a whole.
    """
    out: list[bytes] = []
    depth = 0
    first = pos
    for match in _TOKENS.finditer(body, pos, stop):
        budget[0] += 1
        if budget[0] > _SCAN_BUDGET:
            raise msgspec.DecodeError(
                "a LIST page with too many items nested too deep to decode (refused whole)"
            )
        if body[match.start()] == 34:  # b'"': a string; nothing inside counts
            continue
        for seg in _SEGMENTS.finditer(body, match.start(), match.end()):
            at, n = seg.start(), seg.end() - seg.start()
            if body[at] in _OPEN:
                if depth == 0:
                    first = at
                depth += n
                if depth > _MAX_SCAN_DEPTH:
                    raise msgspec.DecodeError(
                        f"a LIST item nests deeper than {_MAX_SCAN_DEPTH:,} levels"
                    )
            elif n < depth:
                depth -= n
            elif n > depth:
                raise msgspec.DecodeError("unbalanced brackets in a LIST page")
            else:  # the item ends here
                depth = 0
                out.append(bytes(body[first : seg.end()]))
                if seg.end() >= end:
                    return out, seg.end()
    if depth:
        raise msgspec.DecodeError("a LIST page ends inside an item")
    return out, stop
