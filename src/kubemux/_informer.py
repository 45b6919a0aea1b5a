"""The reflector loop: LIST, then WATCH from the list's resourceVersion, forever.

State machine (after client-go's ``tools/cache/reflector.go``)::

    LIST (paginated) ──► WATCH(rv) ──stream ends normally──► WATCH(last rv)   (no relist)
        ▲                  │
        │                  ├── 410 Expired (HTTP or in-stream ERROR) ──► RELIST
        │                  ├── 429 / 5xx / connection error / inactivity ──► backoff ──► WATCH
        └──────────────────┴── anything unexpected ──► backoff ──► RELIST

Every event's resourceVersion, bookmarks included, is the resume point; resourceVersions are
opaque strings, never compared. A RELIST swaps the store in one step and reports the deletes
missed while away as DELETED. Malformed lines are logged, counted and skipped.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
import time
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any, NoReturn

import anyio
import orjson

from ._client import SLOW_AFTER, ContextClient, Progress
from ._codec import (
    Block,
    Change3,
    DecodeError,
    Entry,
    decode_block,
    split_block,
    split_event,
)
from ._errors import (
    ApiError,
    ClusterUnreachable,
    InternalError,
    KubemuxError,
    ProtocolError,
    ResourceExpired,
    ResourceNotFound,
    ResponseTooLarge,
)
from ._listing import page_slices
from ._resources import Resource
from ._settings import WatchSettings
from ._store import Replacement, Store

__all__ = [
    "BACKING_OFF",
    "ERROR",
    "LISTING",
    "RELISTING",
    "STOPPED",
    "WAITING",
    "WATCHING",
    "Informer",
    "InformerKey",
    "InformerStatus",
    "OnChange",
]

log = logging.getLogger(__name__)

# InformerStatus.state values
LISTING = "listing"
RELISTING = "relisting"
WATCHING = "watching"
BACKING_OFF = "backing off"
ERROR = "error"
STOPPED = "stopped"
WAITING = "waiting for the server"
"""A request has been owed an answer (headers, the rest of a LIST body or of a watch line)
for more than ``SLOW_AFTER`` (1 s) while listing or watching."""
_ACTIVE = frozenset({LISTING, RELISTING, WATCHING})

OnChange = Callable[[str, Entry, Entry | None], None]
"""Called synchronously for every change applied to the store: (type, entry, old entry)."""


@dataclasses.dataclass(frozen=True, slots=True)
class InformerKey:
    """What one informer watches in one context: resource and scope."""

    resource: str
    namespace: str | None = None
    label_selector: str | None = None
    field_selector: str | None = None
    view: str = "objects"  # or "table": server-side columns and rows (kubectl's view)

    def __str__(self) -> str:
        parts = [self.resource]
        if self.namespace:
            parts.append(f"-n {self.namespace}")
        if self.label_selector:
            parts.append(f"-l {self.label_selector}")
        if self.field_selector:
            parts.append(f"--field-selector {self.field_selector}")
        if self.view != "objects":
            parts.append(f"({self.view})")
        return " ".join(parts)


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class InformerStatus:
    """A frozen snapshot of one informer for a UI."""

    resource: str
    namespace: str | None
    label_selector: str | None
    field_selector: str | None
    state: str  # LISTING, RELISTING, WATCHING, WAITING, BACKING_OFF, ERROR, STOPPED
    has_synced: bool
    objects: int
    resource_version: str
    relists: int
    reconnects: int
    skipped_lines: int  # lines and objects skipped: malformed, undecodable, refused by a transform
    last_error: str | None
    last_sync: float | None  # wall-clock time of the last completed LIST


class Informer:
    """Keeps one :class:`Store` in step with the server.

    Run it with ``await task_group.start(informer.run)``: ``start`` returns once the first
    LIST is in the store, and raises if that LIST fails (bad credentials, unknown resource,
    unreachable server). After that, failures are retried with backoff and the cache is
    kept; they show in :meth:`status`.
    """

    def __init__(
        self,
        client: ContextClient,
        resource: Resource,
        key: InformerKey,
        *,
        settings: WatchSettings,
        store: Store,
        on_change: OnChange | None = None,
        on_state: Callable[[], None] | None = None,
    ) -> None:
        self.client = client
        self.resource = resource
        self.key = key
        self.settings = settings
        self.store = store
        self._on_change = on_change
        self._on_state = on_state  # called when state, has_synced or last_error change
        self._synced = anyio.Event()
        self._state = LISTING
        self._progress = Progress(on_slow=on_state)
        self._skips_unlogged = 0  # skipped since the last log record
        self._last_skip = ""
        self._skip_logged_at = -math.inf
        self._relists = 0
        self._reconnects = 0
        self._skipped = 0
        self._last_error: str | None = None
        self._last_sync: float | None = None
        self._failures = 0
        self._last_failure_at = -math.inf
        self._rv = ""
        self._delivered = 0
        self._pending: dict[str, dict[str, Change3]] = {}

    def __repr__(self) -> str:
        return (
            f"<Informer {self.client.context}/{self.key} state={self._state} "
            f"objects={len(self.store)}>"
        )

    # ------------------------------------------------------------------ public
    @property
    def has_synced(self) -> bool:
        """True once the first LIST is in the store."""
        return self._synced.is_set()

    async def wait_synced(self) -> None:
        """Wait until the first LIST is in the store. Cancelling only stops the wait."""
        await self._synced.wait()

    def status(self) -> InformerStatus:
        """A frozen snapshot for a UI."""
        state = self._state
        since = self._progress.since
        if since is not None and state in _ACTIVE and time.monotonic() - since > SLOW_AFTER:
            state = WAITING
        return InformerStatus(
            resource=self.key.resource,
            namespace=self.key.namespace,
            label_selector=self.key.label_selector,
            field_selector=self.key.field_selector,
            state=state,
            has_synced=self.has_synced,
            objects=len(self.store),
            resource_version=self.store.resource_version,
            relists=self._relists,
            reconnects=self._reconnects,
            skipped_lines=self._skipped,
            last_error=self._last_error,
            last_sync=self._last_sync,
        )

    async def run(
        self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """LIST, report started, then WATCH until cancelled.

        Raises:
            KubemuxError: only from the first LIST, before ``task_status.started()``.

        Cancellation ends the loop at once and closes the open stream.
        """
        await self.initial_sync()
        task_status.started()
        await self.watch_forever()

    async def initial_sync(self) -> None:
        """The first LIST, into the store.

        An object that cannot be decoded (or that the transform refuses) is skipped and
        counted; the LIST goes on.

        Raises:
            KubemuxError: the LIST failed (and nothing else: any other exception becomes an
                :class:`InternalError`); the error is also kept for :meth:`status`.
        """
        try:
            self._rv = await self._sync()
        except Exception as exc:
            error = self._as_kubemux(exc)
            self._set_state(ERROR, str(error))
            if error is exc:
                raise
            raise error from exc
        finally:
            self._progress.end()
        self._synced.set()
        self._set_state(self._state, None, notify=True)  # has_synced changed

    async def watch_forever(self) -> NoReturn:
        """WATCH (and RELIST when needed) until cancelled. Never returns, never raises but
        cancellation: every failure is recorded in :meth:`status`, backed off (jittered)
        and retried; the cache is kept meanwhile."""
        await self._watch_loop(self._rv)

    async def resume(self, resource_version: str) -> None:
        """WATCH from ``resource_version`` over a store filled elsewhere (no LIST first).

        For a shared watch taken over from another replica (:mod:`kubemux.share`): the
        store already holds the state at ``resource_version``. A 410 relists as usual.
        Runs until cancelled, like :meth:`watch_forever`.
        """
        self._synced.set()
        self._set_state(self._state, None, notify=True)  # has_synced changed
        await self._watch_loop(resource_version)

    def _as_kubemux(self, exc: Exception) -> KubemuxError:
        if isinstance(exc, KubemuxError):
            return exc
        return InternalError(
            f"{self.client.context}/{self.key}: unexpected {type(exc).__name__}: {str(exc)[:300]}"
        )

    # ------------------------------------------------------------------ LIST
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
        self._set_state(LISTING if not self.has_synced else RELISTING, self._last_error)
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
                            self._skip(f"undecodable LIST item ({_why(exc)})")
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
                            self._skip(f"malformed watch line ({_why(exc)}): {_preview(line)}")
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
        )

    async def _commit(self, replacement: Replacement, resource_version: str) -> None:
        step = self.settings.relist_slice
        for _ in replacement.find_deleted(step):
            await anyio.lowlevel.checkpoint()
        changes = replacement.commit(resource_version)
        self._last_sync = time.time()
        if self.has_synced:
            self._relists += 1
        await self._emit_sliced(changes)

    async def _emit_sliced(self, changes: list[Change3]) -> None:
        """Announce a relist's changes in slices, yielding to the loop between them.

        The store was swapped already; until a change is announced, :meth:`snapshot_entries`
        reports the object as it was, so a subscriber joining mid-way sees neither a gap nor
        a duplicate.
        """
        on_change = self._on_change
        if on_change is None or not changes:
            return
        step = self.settings.relist_slice
        if len(changes) <= step:
            for c in changes:
                on_change(c.type, c.entry, c.old)
            return
        pending: dict[str, dict[str, Change3]] = {}
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

    def snapshot_entries(self, namespace: str | None = None) -> list[Entry]:
        """The objects as announced so far to subscribers (the store minus unannounced changes)."""
        entries = self.store._entries(namespace)
        pending = self._pending
        if not pending:
            return entries
        out: list[Entry] = []
        for e in entries:
            change = pending.get(e.namespace, {}).get(e.name)
            if change is None:
                out.append(e)
            elif change.type == "MODIFIED" and change.old is not None:
                out.append(change.old)
        for ns, bucket in pending.items():
            if namespace is None or ns == namespace:
                out.extend(c.old for c in bucket.values() if c.type == "DELETED" and c.old)
        return out

    # ------------------------------------------------------------------ WATCH
    async def _watch_loop(self, rv: str) -> NoReturn:
        s = self.settings
        self._rv = rv
        relist = False
        while True:
            if relist:
                try:
                    self._rv = await self._sync()
                    relist = False
                except ResourceNotFound as exc:
                    await self._gone(exc)
                    continue
                except Exception as exc:  # noqa: BLE001 - contained: recorded, backed off
                    self._note_failure(self._as_kubemux(exc))
                    await self._backoff()
                    continue
                finally:
                    self._progress.end()
            started = time.monotonic()
            self._delivered = 0
            try:
                self._set_state(WATCHING, self._last_error)
                await self._watch_once()
                lived = time.monotonic() - started
                if lived < s.min_healthy_watch:
                    # healthy only if it lived long enough, however many events it brought
                    self._note_failure(
                        ClusterUnreachable(
                            self.client.server,
                            f"watch closed at once ({self._delivered} events in {lived:.2f} s)",
                        )
                    )
                    await self._backoff()
                self._reconnects += 1
            except ResourceExpired as exc:
                log.info("%s: %s; relisting", self, exc)
                relist = True
            except ResourceNotFound as exc:
                await self._gone(exc)
                relist = True  # what comes back (a CRD created again) starts from a LIST
            except (ClusterUnreachable, ApiError) as exc:
                self._note_failure(exc)
                await self._backoff()
                self._reconnects += 1
            except Exception as exc:  # noqa: BLE001 - anything else: back off, then RELIST
                self._note_failure(self._as_kubemux(exc))
                await self._backoff()
                relist = True
            finally:
                self._progress.end()
                self._flush_skips()

    async def _watch_once(self) -> None:
        """One WATCH request from ``self._rv``; advances it with every event and bookmark."""
        s = self.settings
        params = self._base_params()
        params.update(
            {
                "watch": "true",
                "allowWatchBookmarks": "true",
                "timeoutSeconds": str(s.watch_timeout()),
            }
        )
        if self._rv:
            params["resourceVersion"] = self._rv
        apply, on_change, handle = self.store._apply, self._on_change, self._handle_line
        clock = time.monotonic
        yield_at = clock() + _MAX_BUSY
        skipped_before = self._skipped
        async with self._open_watch(params) as blocks:
            async for block in blocks:
                for etype, item in self._decode(block):
                    if isinstance(item, bytes):  # not an object event as the server writes it
                        new_rv = handle(item)
                        if new_rv is not None:
                            self._rv = new_rv
                            self._delivered += 1
                        continue
                    change = apply(etype, item)
                    if change is not None and on_change is not None:
                        on_change(change.type, change.entry, change.old)
                    self._rv = item.resource_version
                    self._delivered += 1
                junk = self._skipped - skipped_before
                if junk > _MAX_JUNK_LINES and junk > self._delivered:
                    raise ProtocolError(
                        self.client.server,
                        f"WATCH {self.resource.name}: {junk} malformed lines and "
                        f"{self._delivered} events; stream abandoned",
                    )
                # reads of buffered data do not yield: let the loop breathe now and then
                if clock() > yield_at:
                    await anyio.lowlevel.checkpoint()
                    yield_at = clock() + _MAX_BUSY

    def _decode(self, block: Block) -> list[tuple[str, Entry | bytes]]:
        """A block of watch lines: ``(type, entry)`` per object event decoded on the hot
        path, ``("", line)`` for each line :meth:`_handle_line` has to look at."""
        store = self.store
        if store._transform is None:
            return decode_block(*block, store._drop_mf)
        return [("", line) for line in split_block(block)]  # a user transform decodes all

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

    def _handle_line(self, line: bytes) -> str | None:
        """Apply one watch line (the general path); returns its resourceVersion, or None."""
        if not line.strip():
            return None
        store = self.store
        entry: Entry | None
        try:
            etype, raw, entry = self._parse(line)
            if etype == "BOOKMARK":
                rv = store._prepare(raw).resource_version
                if rv:
                    store.resource_version = rv
                    return rv
                return None
            if etype == "ERROR":
                status = orjson.loads(raw)
                raise _status_error(status if isinstance(status, dict) else {})
        except DecodeError as exc:
            self._skip(f"malformed watch line ({_why(exc)}): {_preview(line)}")
            return None
        if entry is None:
            self._skip(f"unknown watch event type {etype!r}")
            return None
        if not entry.name or not entry.resource_version:
            self._skip(f"{etype} event without metadata.name/resourceVersion")
            return None
        change = store._apply(etype, entry)
        if change is not None and self._on_change is not None:
            self._on_change(change.type, change.entry, change.old)
        return entry.resource_version

    # ------------------------------------------------------------------ health
    def _set_state(self, state: str, error: str | None, *, notify: bool = False) -> None:
        notify = notify or state != self._state or error != self._last_error
        self._state, self._last_error = state, error
        if notify and self._on_state is not None:
            self._on_state()

    def _skip(self, why: str) -> None:
        """Count a skipped line or object; log the first at once, then a summary at most
        once per ``skip_log_period`` (a server streaming junk must not flood the log)."""
        self._skipped += 1
        now = time.monotonic()
        if now - self._skip_logged_at < self.settings.skip_log_period:
            self._skips_unlogged += 1
            self._last_skip = why
            return
        self._flush_skips(now)
        self._skip_logged_at = now
        log.warning("%s/%s: skipped %s", self.client.context, self.key, why)

    def _flush_skips(self, now: float | None = None) -> None:
        """Log the summary of skips not logged yet, if the period is over."""
        if not self._skips_unlogged:
            return
        now = time.monotonic() if now is None else now
        period = now - self._skip_logged_at
        if period < self.settings.skip_log_period:
            return
        log.warning(
            "%s/%s: skipped %d malformed lines or objects in the last %.0f s (latest: %s)",
            self.client.context,
            self.key,
            self._skips_unlogged,
            period,
            self._last_skip,
        )
        self._skips_unlogged = 0
        self._skip_logged_at = now

    def _note_failure(self, exc: BaseException) -> None:
        now = time.monotonic()
        if now - self._last_failure_at > self.settings.backoff.reset_after:
            self._failures = 0  # healthy long enough: the backoff starts over
        self._last_failure_at = now
        self._failures += 1
        self._set_state(BACKING_OFF, str(exc))
        log.warning("%s/%s: %s (failure %d)", self.client.context, self.key, exc, self._failures)

    async def _gone(self, exc: ResourceNotFound) -> None:
        """The server answers 404 for the resource itself (its CRD was deleted): say so, and
        look again only every ``gone_retry`` seconds, not in a backoff loop. The cache is kept
        until a LIST succeeds again."""
        period = self.settings.gone_retry
        error = (
            f"the server no longer serves {self.resource.name} (looking again every {period:g} s)"
        )
        if self._last_error != error:
            log.warning("%s/%s: %s: %s", self.client.context, self.key, error, exc)
        self._set_state(ERROR, error)
        await anyio.sleep(period)

    async def _backoff(self) -> None:
        await anyio.sleep(self.settings.backoff.delay(max(1, self._failures)))
        self._set_state(WATCHING, self._last_error)


_INITIAL_EVENTS_END = "k8s.io/initial-events-end"
_SLICE_BYTES = 8 * 1024 * 1024  # LIST items copied and decoded between two yields, at most
_PAGE_SLICE_BYTES = 4 * 1024 * 1024  # a LIST page is decoded this much at a time (~4 ms)
_MAX_BUSY = 0.02  # seconds of buffered watch lines handled before yielding to the loop
_MAX_JUNK_LINES = 1000  # a watch skipping more lines than this, and than it delivered, is dropped
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
