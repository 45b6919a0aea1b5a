"""A LIST page decoded a slice at a time, so a page of 100 MiB never stalls the event loop.

msgspec decodes a whole page in one call (~25 ms per 100 MiB of 2 KB objects, more with
small ones), and a call cannot be interrupted. So a large page is cut where the API server's
compact JSON puts one item after another (``},{``) and each cut decoded on its own as
``[...]``. A cut is never trusted blindly:

- the envelope (``kind``, ``metadata``, the ``items`` key) is decoded with the items replaced
  by a random sentinel, which must come back as the only item: so the bytes cut are exactly
  the top-level ``items`` array;
- each slice must decode as a JSON array. A decoder is deterministic: if the bytes from the
  start of an item to a ``}`` decode as complete values, the ``,`` after that ``}`` is the
  array's own separator in the whole page too (a ``},{`` inside a string leaves the slice
  ending inside that string, which does not decode: the next ``},{`` is tried).

A page that does not have this shape (whitespace between items, an envelope far from the
start) is decoded the plain way, in one call: correct, only not sliced.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator

import msgspec

from ._codec import DecodeError, decode_list, deeper_recursion

__all__ = ["ListMeta", "page_slices"]

_ITEMS_KEY = b'"items":['
_ITEM_GAP = b"},{"
_MAX_ENVELOPE = 64 * 1024  # bytes before and after the items for the sliced path, at most
_MAX_MISSES = 4  # "},{" inside strings tolerated per slice before the rest is decoded at once

_items_decoder = msgspec.json.Decoder(list[msgspec.Raw])


class ListMeta(msgspec.Struct, gc=False, frozen=True):
    """What a LIST page says besides its items."""

    resource_version: str
    continue_: str


def page_slices(
    body: bytes | bytearray, slice_bytes: int
) -> tuple[ListMeta, Iterator[list[msgspec.Raw]]]:
    """A LIST page's metadata, and its items in slices of about ``slice_bytes`` each.

    Each slice is decoded when the iterator is advanced: yield to the event loop between
    two ``next()``. A page of at most ``slice_bytes`` (or of an unusual shape) is one slice.

    Raises:
        msgspec.DecodeError, msgspec.ValidationError, RecursionError: the page is not a
            valid LIST response (also from the iterator, for a slice).
    """
    found = _locate_items(body) if len(body) > slice_bytes else None
    if found is None:
        with deeper_recursion():  # one deep item is refused alone, by the caller
            page = decode_list(body)
        meta = ListMeta(page.metadata.resourceVersion, page.metadata.continue_)
        return meta, iter([page.items or []])
    meta, start, stop = found
    return meta, _slices(body, start, stop, slice_bytes)


def _locate_items(body: bytes | bytearray) -> tuple[ListMeta, int, int] | None:
    """(metadata, start, stop) of the top-level items array's contents, or None."""
    start = body.find(_ITEMS_KEY, 0, _MAX_ENVELOPE)
    if start < 0:
        return None
    start += len(_ITEMS_KEY)
    stop = body.rfind(b"]", start)
    if stop < 0 or len(body) - stop > _MAX_ENVELOPE:
        return None
    sentinel = b'"' + secrets.token_hex(16).encode() + b'"'
    probe = b"".join((body[:start], sentinel, body[stop:]))
    try:
        page = decode_list(probe)
    except DecodeError:
        return None
    if page.items is None or len(page.items) != 1 or bytes(page.items[0]) != sentinel:
        return None  # the array found is not the top-level items (or there are two)
    return ListMeta(page.metadata.resourceVersion, page.metadata.continue_), start, stop


def _slices(
    body: bytes | bytearray, start: int, stop: int, slice_bytes: int
) -> Iterator[list[msgspec.Raw]]:
    view = memoryview(body)
    pos = start
    while pos < stop:
        gap = body.find(_ITEM_GAP, pos + slice_bytes, stop) if stop - pos > slice_bytes else -1
        misses = 0
        while True:
            end = gap + 1 if gap >= 0 else stop
            try:
                with deeper_recursion():
                    items = _items_decoder.decode(b"".join((b"[", view[pos:end], b"]")))
                break
            except DecodeError:
                if gap < 0:
                    raise  # the rest of the page, whole, is invalid
                misses += 1
                # try the next "},{"; after a few misses, decode the rest in one call
                gap = -1 if misses >= _MAX_MISSES else body.find(_ITEM_GAP, gap + 1, stop)
        yield items
        pos = end + 1  # past the "," between two items
