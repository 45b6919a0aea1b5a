"""The LIST half of an informer (:class:`Lister`): a full list, paginated or streamed, built
beside the store and swapped in, its changes announced in slices.

A LIST page is decoded a slice at a time (:func:`page_slices`), so a page of 100 MiB never
stalls the event loop.

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

import contextlib
import dataclasses
import logging
import re
import secrets
import time
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import anyio
import msgspec
import orjson

from ._client import ContextClient, Progress
from ._codec import (
    Block,
    DecodeError,
    Entry,
    StoreChange,
    decode_block,
    decode_list,
    deeper_recursion,
    object_name,
    split_block,
    split_event,
)
from ._errors import ApiError, ProtocolError, ResourceExpired, ResponseTooLarge
from ._informer_types import InformerKey, InformerState, OnChange
from ._resources import Resource
from ._settings import WatchSettings
from ._store import Replacement, Store, announced_entries

__all__ = ["OBJECT_PAGES", "ListMeta", "Lister", "PageLayout", "decode_page", "page_slices"]

log = logging.getLogger(__name__)

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


class Lister:
    """The LIST half of :class:`~kubemux._informer.Informer` (a mixin: the informer holds the
    attributes declared here and provides state and skip accounting)."""

    _accept = "application/json"  # what LIST and WATCH ask for (a Table view asks for Tables)

    client: ContextClient
    resource: Resource
    key: InformerKey
    settings: WatchSettings
    store: Store
    _on_change: OnChange | None
    _progress: Progress
    _synced: anyio.Event
    _last_error: str | None
    _last_sync: float | None
    _relists: int
    _events: int
    _pending: dict[str, dict[str, StoreChange]]

    if TYPE_CHECKING:

        def _set_state(
            self, state: InformerState, error: str | None, *, notify: bool = False
        ) -> None: ...

        def _skip(self, why: str, detail: str = "") -> None: ...

    def _base_params(self) -> dict[str, str]:
        params: dict[str, str] = {}
        if self.key.label_selector:
            params["labelSelector"] = self.key.label_selector
        if self.key.field_selector:
            params["fieldSelector"] = self.key.field_selector
        return params

    async def _sync(self) -> str:
        """Fill the store from a full list; returns the resourceVersion to watch from.

        Tries a streaming list first (when enabled and not known to be unsupported by this
        server), else a paginated LIST. A streaming list that times out is an error, not a
        reason to try a LIST next (a slow server would double the wait).
        """
        self._set_state(
            InformerState.LISTING if not self._synced.is_set() else InformerState.RELISTING,
            self._last_error,
        )
        if self.settings.streaming_list and self.client.streaming_list is not False:
            try:
                rv = await self._stream_list()
            except ApiError as exc:
                if exc.status not in (400, 422):
                    raise
                rv = None
                self.client.streaming_list = False
                log.info(
                    "%s: no streaming lists on %s (%s); using LIST", self, self.client.server, exc
                )
            if rv is not None:
                return rv
        return await self._list()

    async def _list(self) -> str:
        """A full paginated LIST, applied to the store; returns the list's resourceVersion.

        Raises:
            ProtocolError: a continue token came back twice, or the list did not end within
                ``max_list_pages`` pages, or a page is not valid JSON.
            ResponseTooLarge: a page of one object exceeds ``max_response_size`` (larger
                pages are asked for again with half the ``limit``).
        """
        s = self.settings
        store = self.store
        server = self.client.server
        replacement = Replacement(store)
        params = self._base_params()
        limit = s.page_size
        if limit:
            params["limit"] = str(limit)
        list_rv = ""
        tokens: set[int] = set()  # hashes of the continue tokens seen (a token may be long)
        pages = 0
        throttle = True
        while True:
            pages += 1
            if pages > s.max_list_pages:
                raise ProtocolError(
                    server,
                    f"LIST {self.resource.name} did not end after {s.max_list_pages} pages",
                )
            try:
                body = await self.client.list(
                    self.resource,
                    self.key.namespace,
                    params,
                    s,
                    progress=self._progress,
                    throttle=throttle,
                )
            except ResourceExpired:
                if "continue" not in params:
                    raise
                # the continue token expired mid-list: start over with one full list
                log.info("%s: continue token expired, listing in one request", self)
                replacement = Replacement(store)
                params = self._base_params()
                tokens.clear()
                pages, throttle = 0, True
                continue
            except ResponseTooLarge:
                if limit == 1:
                    raise
                limit = limit // 2 if limit else 500  # 0: unpaginated; page it now
                params["limit"] = str(limit)
                log.warning("%s: a LIST page was too large; asking for %d objects", self, limit)
                throttle = True
                continue
            try:
                # the page is decoded a slice at a time, and each slice's items prepared in
                # slices (by count and by size): the loop never stalls long
                meta, slices = page_slices(body, _PAGE_SLICE_BYTES)
                del body  # only the slices' iterator keeps the page
                budget = _SLICE_BYTES
                count = 0
                for items in slices:
                    await anyio.lowlevel.checkpoint()  # after decoding a slice
                    for raw in items:
                        data = bytes(raw)
                        try:
                            replacement.add(store._prepare(data, from_list=True))
                        except DecodeError as exc:
                            what = object_name(data) or f"#{count + 1}"
                            self._skip(f"undecodable LIST item {what} ({_why(exc)})")
                        budget -= len(data)
                        count += 1
                        if count % s.relist_slice == 0 or budget < 0:
                            budget = _SLICE_BYTES
                            await anyio.lowlevel.checkpoint()
            except DecodeError as exc:
                raise ProtocolError(
                    server, f"LIST {self.resource.name} returned invalid JSON: {exc}"
                ) from exc
            list_rv = meta.resource_version or list_rv
            token = meta.continue_
            if not token:
                break
            key = hash(token)
            if key in tokens:
                raise ProtocolError(
                    server,
                    f"LIST {self.resource.name}: the server sent the same continue token "
                    f"twice (page {pages}); the list would never end",
                )
            tokens.add(key)
            params["continue"] = token
            throttle = not count  # a page that brought nothing is a request like any other
            await anyio.lowlevel.checkpoint()
        await self._commit(replacement, list_rv)
        return list_rv

    async def _stream_list(self) -> str | None:
        """A streaming list (``sendInitialEvents``); None if the server turned out not to do it.

        The server sends every current object as ADDED, then a BOOKMARK annotated
        ``k8s.io/initial-events-end``. A server that ignores the parameter sends a plain watch
        (a bookmark without the annotation, or a MODIFIED/DELETED before the end): that is
        remembered per client, and the caller falls back to LIST. Silence for
        ``read_timeout`` raises :class:`ServerTimeout`.
        """
        s = self.settings
        store = self.store
        replacement = Replacement(store)
        params = self._base_params()
        params.update(
            {
                "watch": "true",
                "sendInitialEvents": "true",
                "resourceVersionMatch": "NotOlderThan",
                "allowWatchBookmarks": "true",
                "timeoutSeconds": str(s.watch_timeout()),
            }
        )
        end_rv: str | None = None
        unsupported = False
        with anyio.move_on_after(s.request_timeout):
            async with self._open_watch(params, inactivity_timeout=s.read_timeout) as blocks:
                async for block in blocks:
                    for etype, line in self._decode(block):
                        if isinstance(line, Entry):  # the fast path decoded it
                            if etype == "ADDED":
                                replacement.add(line)
                                continue
                            unsupported = True  # a change before the end marker
                            break
                        try:
                            etype, raw, entry = self._parse(line)
                            if entry is not None and etype == "ADDED":
                                replacement.add(entry)
                                continue
                            if etype == "ERROR":
                                status = orjson.loads(raw)
                                raise _status_error(status if isinstance(status, dict) else {})
                            obj = orjson.loads(raw) if etype == "BOOKMARK" else None
                        except DecodeError as exc:
                            self._skip(f"malformed watch line ({_why(exc)})", _preview(line))
                            continue
                        meta = obj.get("metadata") if isinstance(obj, dict) else None
                        if isinstance(meta, dict):
                            annotations = meta.get("annotations")
                            if (
                                isinstance(annotations, dict)
                                and annotations.get(_INITIAL_EVENTS_END) == "true"
                            ):
                                end_rv = str(meta.get("resourceVersion") or "")
                        else:
                            unsupported = True
                        if end_rv is not None or unsupported:
                            break
                        unsupported = True  # a plain bookmark before the end marker
                        break
                    if end_rv is not None or unsupported:
                        break
        if unsupported:
            self.client.streaming_list = False
            log.info("%s: %s ignores sendInitialEvents; using LIST", self, self.client.server)
        if end_rv is None:
            return None
        self.client.streaming_list = True
        await self._commit(replacement, end_rv)
        return end_rv

    def _open_watch(
        self, params: Mapping[str, str], *, inactivity_timeout: float | None = None
    ) -> contextlib.AbstractAsyncContextManager[AsyncIterator[Block]]:
        return self.client.watch(
            self.resource,
            self.key.namespace,
            params,
            self.settings,
            progress=self._progress,
            inactivity_timeout=inactivity_timeout,
            accept=self._accept,
        )

    async def _commit(self, replacement: Replacement, resource_version: str) -> None:
        step = self.settings.relist_slice
        for _ in replacement.find_deleted(step):
            await anyio.lowlevel.checkpoint()
        changes = replacement.commit(resource_version)
        self._last_sync = time.time()
        if self._synced.is_set():
            self._relists += 1
            self._events += len(changes)  # what the relist changed (the first LIST: objects)
        await self._emit_sliced(changes)

    async def _emit_sliced(self, changes: list[StoreChange]) -> None:
        """Announce a relist's changes in slices, yielding to the loop between them.

        The store was swapped already; until a change is announced, :meth:`snapshot_entries`
        reports the object as it was, so a subscriber joining mid-way sees neither a gap nor
        a duplicate.
        """
        on_change = self._on_change
        step = self.settings.relist_slice
        if on_change is None or not changes:
            await _release_sliced(changes, step)
            return
        if len(changes) <= step:
            for c in changes:
                on_change(c.type, c.entry, c.old)
            return
        pending: dict[str, dict[str, StoreChange]] = {}
        for c in changes:
            bucket = pending.get(c.entry.namespace)
            if bucket is None:
                bucket = pending[c.entry.namespace] = {}
            bucket[c.entry.name] = c
        self._pending = pending
        try:
            for i, c in enumerate(changes):
                del pending[c.entry.namespace][c.entry.name]
                on_change(c.type, c.entry, c.old)
                if i % step == step - 1:
                    await anyio.lowlevel.checkpoint()
        finally:
            self._pending = {}
        await _release_sliced(changes, step)

    def snapshot_entries(self, namespace: str | None = None) -> list[Entry]:
        """The objects as announced so far to subscribers (the store minus unannounced changes)."""
        return announced_entries(self.store, self._pending, namespace)

    def _decode(self, block: Block) -> list[tuple[str, Entry | bytes]]:
        """A block of watch lines: ``(type, entry)`` per object event decoded on the hot
        path, ``("", line)`` for each line :meth:`_handle_line` has to look at."""
        store = self.store
        if store._transform is None:
            return decode_block(*block, store._drop_mf)
        return [("", line) for line in split_block(block)]  # a user transform decodes all

    def _line_name(self, line: bytes) -> str:
        """:func:`~kubemux._codec.quoted_name` of the object of a watch line, as far as it
        can be read (``""`` if not)."""
        try:
            with deeper_recursion():
                return object_name(split_event(line, fast=False)[1])
        except DecodeError:
            return ""

    def _parse(self, line: bytes) -> tuple[str, bytes, Entry | None]:
        """(event type, object bytes, cache entry for object events) of one watch line.

        Raises:
            msgspec.DecodeError, msgspec.ValidationError: not a watch event.
        """
        try:
            etype, raw = split_event(line)
            return etype, raw, self.store._prepare(raw) if etype in _OBJECT_EVENTS else None
        except DecodeError:
            # the prefix split can be fooled by an unusual envelope: decode it properly
            etype, raw = split_event(line, fast=False)
            return etype, raw, self.store._prepare(raw) if etype in _OBJECT_EVENTS else None


_INITIAL_EVENTS_END = "k8s.io/initial-events-end"
_SLICE_BYTES = 8 * 1024 * 1024  # LIST items copied and decoded between two yields, at most
_PAGE_SLICE_BYTES = 4 * 1024 * 1024  # a LIST page is decoded this much at a time (~4 ms)
_OBJECT_EVENTS = frozenset({"ADDED", "MODIFIED", "DELETED"})


def _why(exc: BaseException) -> str:
    if isinstance(exc, RecursionError):
        return "nested too deep"
    return str(exc)[:200] or type(exc).__name__


def _preview(line: bytes) -> str:
    # enough to recognise the line, too little to carry an object's data (a Secret's values)
    return f"{line[:40]!r}... ({len(line)} bytes)" if len(line) > 40 else repr(line)


def _status_error(obj: Mapping[str, Any]) -> ApiError:
    from ._errors import api_error_from_status

    code = obj.get("code")
    return api_error_from_status(code if isinstance(code, int) else 500, dict(obj))


async def _release_sliced(changes: list[StoreChange], step: int) -> None:
    """Drop a relist's changes a slice at a time. Their entries are theirs alone (the store
    keeps the bytes), so freeing 50k at once would stall the loop ~10 ms."""
    while len(changes) > step:
        del changes[-step:]
        await anyio.lowlevel.checkpoint()
    changes.clear()
