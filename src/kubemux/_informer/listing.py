"""The LIST half of an informer (:class:`Lister`): a full list, paginated or streamed, built
beside the store and swapped in, its changes announced in slices.

The loop is this one for every view: what differs (the Accept header and parameters, where
a page keeps its items, how an item becomes a cache entry, how a watch line is decoded) is
the informer's :class:`~kubemux._informer.formats.Format`. A page is decoded a slice at a time
(:mod:`kubemux._wire.pages`), so a page of 100 MiB never stalls the event loop.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import AsyncIterator, Mapping
from typing import TYPE_CHECKING, Any

import anyio
import orjson

from .._cache.store import Replacement, Store, announced_entries
from .._errors import ApiError, ProtocolError, ResourceExpired, ResponseTooLarge
from .._http.client import ContextClient, Progress
from .._resources import Resource
from .._settings import WatchSettings
from .._wire.codec import (
    Block,
    DecodeError,
    Entry,
    StoreChange,
    preview,
    why_undecodable,
)
from .._wire.pages import decode_page, page_slices
from .._wire.types import InformerKey, InformerState, OnChange
from .formats import Format

__all__ = ["Lister", "page_slices", "status_error"]

log = logging.getLogger(__name__)


class Lister:
    """The LIST half of :class:`~kubemux._informer.informer.Informer` (a mixin: the informer holds the
    attributes declared here and provides state and skip accounting)."""

    format: Format
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
        params = self.format.params()
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
        if (
            self.format.streaming_list
            and self.settings.streaming_list
            and self.client.streaming_list is not False
        ):
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
        fmt = self.format
        server = self.client.server
        replacement = store.writer.replacement()
        reader = fmt.reader(store, self._skip)
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
                    accept=fmt.accept,
                )
            except ResourceExpired:
                if "continue" not in params:
                    raise
                # the continue token expired mid-list: start over with one full list
                log.info("%s: continue token expired, listing in one request", self)
                replacement = store.writer.replacement()
                reader = fmt.reader(store, self._skip)
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
                page, slices = decode_page(body, _PAGE_SLICE_BYTES, fmt.pages)
                del body  # only the slices' iterator keeps the page
                items_are = reader.page(page)
                budget = _SLICE_BYTES
                count = 0
                for items in slices:
                    await anyio.lowlevel.checkpoint()  # after decoding a slice
                    for raw in items:
                        data = bytes(raw)
                        try:
                            replacement.add(reader.entry(data))
                        except DecodeError as exc:
                            what = reader.name(data) or f"#{count + 1}"
                            self._skip(f"{items_are} {what} ({why_undecodable(exc)})")
                        budget -= len(data)
                        count += 1
                        if count % s.relist_slice == 0 or budget < 0:
                            budget = _SLICE_BYTES
                            await anyio.lowlevel.checkpoint()
            except DecodeError as exc:
                raise ProtocolError(
                    server, f"LIST {self.resource.name} returned invalid JSON: {exc}"
                ) from exc
            list_rv = page.metadata.resourceVersion or list_rv
            token = page.metadata.continue_
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
        reader.commit()
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
        replacement = store.writer.replacement()
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
                                raise status_error(status if isinstance(status, dict) else {})
                            obj = orjson.loads(raw) if etype == "BOOKMARK" else None
                        except DecodeError as exc:
                            self._skip(
                                f"malformed watch line ({why_undecodable(exc)})", preview(line)
                            )
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
            accept=self.format.accept,
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
        return self.format.decode_block(block, self.store)

    def _line_name(self, line: bytes) -> str:
        """The quoted name of the object of a watch line, as far as it can be read."""
        return self.format.line_name(line)

    def _parse(self, line: bytes) -> tuple[str, bytes, Entry | None]:
        """(event type, object bytes, cache entry for object events) of one watch line.

        Raises:
            DecodeError: not a watch event a reader could decode.
            ResourceExpired: the store must be listed again (a table's columns changed).
        """
        return self.format.parse_line(line, self.store, self._skip)


_INITIAL_EVENTS_END = "k8s.io/initial-events-end"
_SLICE_BYTES = 8 * 1024 * 1024  # LIST items copied and decoded between two yields, at most
_PAGE_SLICE_BYTES = 4 * 1024 * 1024  # a LIST page is decoded this much at a time (~4 ms)


def status_error(obj: Mapping[str, Any]) -> ApiError:
    from .._errors import api_error_from_status

    code = obj.get("code")
    return api_error_from_status(code if isinstance(code, int) else 500, dict(obj))


async def _release_sliced(changes: list[StoreChange], step: int) -> None:
    """Drop a relist's changes a slice at a time. Their entries are theirs alone (the store
    keeps the bytes), so freeing 50k at once would stall the loop ~10 ms."""
    while len(changes) > step:
        del changes[-step:]
        await anyio.lowlevel.checkpoint()
    changes.clear()
