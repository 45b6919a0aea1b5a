"""The requests of an informer (:class:`Lister`): a full list, paginated or streamed, built
beside the store and committed through its writer (which announces the changes, in
slices), and the watch requests.

The loop is this one for every view: what differs (the Accept header and parameters, where
a page keeps its items, how an item becomes a cache entry, how a watch line is decoded) is
the informer's :class:`~kubemux._informer.formats.Format`. A page is decoded a slice at a time
(:mod:`kubemux._wire.pages`), so a page of 100 MiB never stalls the event loop.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Mapping
from typing import Any, NamedTuple, Protocol

import anyio
import orjson

from .._cache.store import Store
from .._errors import ApiError, ProtocolError, ResourceExpired, ResponseTooLarge
from .._http.client import ContextClient, Progress
from .._resources import Resource
from .._settings import WatchSettings
from .._wire.codec import Block, DecodeError, Entry, preview, why_undecodable
from .._wire.pages import decode_page, page_slices
from .._wire.types import InformerKey
from .formats import Format

__all__ = ["Listed", "Lister", "SkipLine", "page_slices", "status_error"]

log = logging.getLogger(__name__)


class SkipLine(Protocol):
    """Counts one skipped line, item or row (``why``; ``detail``: a preview for the log)."""

    def __call__(self, why: str, detail: str = "", /) -> None: ...


class Listed(NamedTuple):
    """What a full list did: the resourceVersion to watch from, and how many changes it
    brought (a first list: its objects)."""

    resource_version: str
    changes: int


class Lister:
    """The requests of one informer: its full list (paginated, or streamed), built beside
    the store and committed through the store's writer (which announces it, in slices),
    and the watch requests both it and the informer open.

    A collaborator of :class:`~kubemux._informer.informer.Informer`, which keeps the state:
    the lister reports skipped items through ``skip`` and the request in flight through
    ``progress``.
    """

    def __init__(
        self,
        client: ContextClient,
        resource: Resource,
        key: InformerKey,
        *,
        settings: WatchSettings,
        store: Store,
        format: Format,
        progress: Progress,
        skip: SkipLine,
    ) -> None:
        self.client = client
        self.resource = resource
        self.key = key
        self.settings = settings
        self.store = store
        self.format = format
        self.progress = progress
        self.skip = skip

    def __repr__(self) -> str:
        return f"<Lister {self.client.context}/{self.key}>"

    def params(self) -> dict[str, str]:
        """The query parameters of every request (the format's, the selectors)."""
        params = self.format.params()
        if self.key.label_selector:
            params["labelSelector"] = self.key.label_selector
        if self.key.field_selector:
            params["fieldSelector"] = self.key.field_selector
        return params

    async def sync(self) -> Listed:
        """Fill the store from a full list.

        Tries a streaming list first (when enabled and not known to be unsupported by this
        server), else a paginated LIST. A streaming list that times out is an error, not a
        reason to try a LIST next (a slow server would double the wait).
        """
        if (
            self.format.streaming_list
            and self.settings.streaming_list
            and self.client.streaming_list is not False
        ):
            try:
                listed = await self.stream_list()
            except ApiError as exc:
                if exc.status not in (400, 422):
                    raise
                listed = None
                self.client.streaming_list = False
                log.info(
                    "%s: no streaming lists on %s (%s); using LIST", self, self.client.server, exc
                )
            if listed is not None:
                return listed
        return await self.list()

    async def list(self) -> Listed:
        """A full paginated LIST, committed to the store.

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
        reader = fmt.reader(store, self.skip)
        params = self.params()
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
                    progress=self.progress,
                    throttle=throttle,
                    accept=fmt.accept,
                )
            except ResourceExpired:
                if "continue" not in params:
                    raise
                # the continue token expired mid-list: start over with one full list
                log.info("%s: continue token expired, listing in one request", self)
                replacement = store.writer.replacement()
                reader = fmt.reader(store, self.skip)
                params = self.params()
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
                            self.skip(f"{items_are} {what} ({why_undecodable(exc)})")
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
        return Listed(list_rv, await replacement.commit(list_rv, slice_size=s.relist_slice))

    async def stream_list(self) -> Listed | None:
        """A streaming list (``sendInitialEvents``), committed to the store; None if the
        server turned out not to do it.

        The server sends every current object as ADDED, then a BOOKMARK annotated
        ``k8s.io/initial-events-end``. A server that ignores the parameter sends a plain watch
        (a bookmark without the annotation, or a MODIFIED/DELETED before the end): that is
        remembered per client, and the caller falls back to LIST. Silence for
        ``read_timeout`` raises :class:`ServerTimeout`.
        """
        s = self.settings
        store = self.store
        replacement = store.writer.replacement()
        params = self.params()
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
            async with self.open_watch(params, inactivity_timeout=s.read_timeout) as blocks:
                async for block in blocks:
                    for etype, line in self.format.decode_block(block, store):
                        if isinstance(line, Entry):  # the fast path decoded it
                            if etype == "ADDED":
                                replacement.add(line)
                                continue
                            unsupported = True  # a change before the end marker
                            break
                        try:
                            etype, raw, entry = self.parse(line)
                            if entry is not None and etype == "ADDED":
                                replacement.add(entry)
                                continue
                            if etype == "ERROR":
                                status = orjson.loads(raw)
                                raise status_error(status if isinstance(status, dict) else {})
                            obj = orjson.loads(raw) if etype == "BOOKMARK" else None
                        except DecodeError as exc:
                            self.skip(
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
        return Listed(end_rv, await replacement.commit(end_rv, slice_size=s.relist_slice))

    def open_watch(
        self, params: Mapping[str, str], *, inactivity_timeout: float | None = None
    ) -> contextlib.AbstractAsyncContextManager[AsyncIterator[Block]]:
        return self.client.watch(
            self.resource,
            self.key.namespace,
            params,
            self.settings,
            progress=self.progress,
            inactivity_timeout=inactivity_timeout,
            accept=self.format.accept,
        )

    def line_name(self, line: bytes) -> str:
        """The quoted name of the object of a watch line, as far as it can be read."""
        return self.format.line_name(line)

    def parse(self, line: bytes) -> tuple[str, bytes, Entry | None]:
        """(event type, object bytes, cache entry for object events) of one watch line.

        Raises:
            DecodeError: not a watch event a reader could decode.
            ResourceExpired: the store must be listed again (a table's columns changed).
        """
        return self.format.parse_line(line, self.store, self.skip)


_INITIAL_EVENTS_END = "k8s.io/initial-events-end"
_SLICE_BYTES = 8 * 1024 * 1024  # LIST items copied and decoded between two yields, at most
_PAGE_SLICE_BYTES = 4 * 1024 * 1024  # a LIST page is decoded this much at a time (~4 ms)


def status_error(obj: Mapping[str, Any]) -> ApiError:
    from .._errors import api_error_from_status

    code = obj.get("code")
    return api_error_from_status(code if isinstance(code, int) else 500, dict(obj))
