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

import asyncio
import logging
import math
import time
from collections.abc import Awaitable, Callable
from typing import NoReturn

import anyio
import orjson

from .._cache.store import Store
from .._errors import (
    ApiError,
    ClusterUnreachable,
    KubemuxError,
    ProtocolError,
    ResourceExpired,
    ResourceNotFound,
    as_kubemux_error,
)
from .._http.client import SLOW_AFTER, ContextClient, Progress
from .._resources import Resource
from .._settings import WatchSettings
from .._wire.codec import DecodeError, Entry, preview, rv_str, why_undecodable
from .._wire.types import InformerKey, InformerState, InformerStatus, View, count_error
from .formats import Format, format_for
from .listing import Lister, status_error
from .repeats import RepeatedWarning
from .skips import Skips

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
    "InformerState",
    "InformerStatus",
    "View",
]

log = logging.getLogger(__name__)

# the states by their old names (InformerStatus.state compares equal to these strings)
LISTING = InformerState.LISTING
RELISTING = InformerState.RELISTING
WATCHING = InformerState.WATCHING
WAITING = InformerState.WAITING
BACKING_OFF = InformerState.BACKING_OFF
ERROR = InformerState.ERROR
STOPPED = InformerState.STOPPED
_ACTIVE = frozenset({LISTING, RELISTING, WATCHING})


class Informer:
    """Keeps one :class:`Store` in step with the server, through the store's writer (which
    announces every change to the store's listeners).

    Run it with ``await task_group.start(informer.run)``: ``start`` returns once the first
    LIST is in the store, and raises if that LIST fails (bad credentials, unknown resource,
    unreachable server). After that, failures are retried with backoff and the cache is
    kept; they show in :meth:`status`.

    What it caches is its :class:`~kubemux._informer.formats.Format`'s business (``format``; by
    default the one of ``key.view``): full objects, or a table view's rows (its store is
    then a :class:`~kubemux.TableStore`). The loop is the same; the requests (the full list,
    the watch) are its :attr:`lister`'s.
    """

    def __init__(
        self,
        client: ContextClient,
        resource: Resource,
        key: InformerKey,
        *,
        settings: WatchSettings,
        store: Store,
        on_state: Callable[[], None] | None = None,
        format: Format | None = None,
    ) -> None:
        self.format = fmt = format_for(key.view) if format is None else format
        if fmt.view != key.view:
            raise ValueError(f"a {fmt.view} format for a {key.view} informer")
        if fmt.view == View.TABLE and store.view != View.TABLE:
            raise TypeError("a table view's informer needs a TableStore")
        self.client = client
        self.resource = resource
        self.key = key
        self.settings = settings
        self.store = store
        self._on_state = on_state  # called when state, has_synced or last_error change
        self._synced = anyio.Event()
        self._state = LISTING
        self._progress = Progress(on_slow=on_state)
        self._skips = Skips(self._log_name, resource.name, settings.skip_log_period, log)
        self.lister = Lister(
            client,
            resource,
            key,
            settings=settings,
            store=store,
            format=fmt,
            progress=self._progress,
            skip=self._skips.add,
        )
        self._relists = 0
        self._reconnects = 0
        self._last_error: str | None = None
        self._short_lived = False  # last_error is the health rule's (a watch closed at once)
        self._last_sync: float | None = None
        self._failures = 0
        self._last_failure_at = -math.inf
        self._warnings = RepeatedWarning(log)  # the same failure: one line a minute
        self._rv: int | str = ""  # where the next WATCH starts (an entry's rv: see Entry)
        # events_applied = _events + _delivered - _marks, at any time (see _watch_once)
        self._delivered = 0  # events and bookmarks of the current (or last) watch
        self._marks = 0  # its bookmarks, and what was already folded into _events
        self._events = 0  # changes applied: relists' and finished watches'
        self._errors: dict[str, int] = {}  # failures by exception class name
        self._watch_started: float | None = None  # wall clock; None while not watching
        self._last_event: float | None = None  # wall clock of the last event or bookmark

    wait_served: Callable[[Resource], Awaitable[None]] | None = None
    """Set by the connection: returns once a resource the server stopped serving may be
    served again (see :mod:`kubemux._informer.served`); without it, ``gone_retry`` paces the looks."""

    def _log_name(self) -> str:
        return f"{self.client.context}/{self.key}"

    def __repr__(self) -> str:
        noun = "rows" if self.format.view == View.TABLE else "objects"
        return (
            f"<{self.format.label} {self.client.context}/{self.key} state={self._state} "
            f"{noun}={len(self.store)}>"
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
            skipped_lines=self._skips.count,
            last_error=self._last_error,
            last_sync=self._last_sync,
            events_applied=self._events + self._delivered - self._marks,
            bytes_cached=self.store.writer.sizes().bytes,
            errors_by_type=dict(self._errors),
            watch_started=self._watch_started,
            last_event=self._last_event,
            last_skip=latest[0] if (latest := self._skips.latest) else None,
            last_skip_at=latest[1] if latest else None,
            view=self.key.view,
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
            count_error(self._errors, error)
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
        await self._watch_loop(rv_str(self._rv))

    async def resume(self, resource_version: str) -> None:
        """WATCH from ``resource_version`` over a store filled elsewhere (no LIST first).

        For a shared watch taken over from another replica (:mod:`kubemux.share`): the
        store already holds the state at ``resource_version``. A 410 relists as usual.
        Runs until cancelled, like :meth:`watch_forever`.
        """
        self._synced.set()
        self._set_state(self._state, None, notify=True)  # has_synced changed
        await self._watch_loop(resource_version)

    async def _sync(self) -> str:
        """A full list into the store (:meth:`Lister.sync`); the resourceVersion to watch
        from. The lister commits it through the writer, which announces it."""
        first = not self._synced.is_set()
        self._set_state(LISTING if first else RELISTING, self._last_error)
        listed = await self.lister.sync()
        self._last_sync = time.time()
        if not first:
            self._relists += 1
            self._events += listed.changes  # what the relist changed (the first LIST: objects)
        return listed.resource_version

    def _as_kubemux(self, exc: Exception) -> KubemuxError:
        return as_kubemux_error(exc, f"{self.client.context}/{self.key}")

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
                    self._set_state(WATCHING, None)  # listed: the last error no longer holds
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
                        ),
                        until_healthy=True,  # the next watch must outlive the rule to clear it
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
                self._skips.flush()

    async def _watch_once(self) -> None:
        """One WATCH request from ``self._rv``; advances it with every event and bookmark."""
        s = self.settings
        lister = self.lister
        params = lister.params()
        params.update(
            {
                "watch": "true",
                "allowWatchBookmarks": "true",
                "timeoutSeconds": str(s.watch_timeout()),
            }
        )
        if self._rv:
            params["resourceVersion"] = rv_str(self._rv)
        apply, handle = self.store.writer.apply, self._handle_line
        decode = self.format.block_decoder(self.store)  # the hot path, looked up once
        clock = time.monotonic
        yield_at = clock() + _MAX_BUSY
        skips = self._skips
        skipped_before = skips.count
        # The hot path counts nothing new per event: events are what was delivered less the
        # bookmarks (counted on the slow path); last_event comes from the clock read once per
        # block anyway (to yield), plus the wall-clock offset taken when the watch opened.
        self._delivered = self._marks = 0
        seen = 0  # self._delivered when last_event was set
        clear: asyncio.TimerHandle | None = None
        try:
            async with lister.open_watch(params) as blocks:
                self._watch_started = time.time()
                if self._last_error is not None:  # answered: the last error no longer holds
                    if self._short_lived:  # ... unless it was that watches die young
                        clear = asyncio.get_running_loop().call_later(
                            s.min_healthy_watch, self._clear_error, self._last_error
                        )
                    else:
                        self._set_state(WATCHING, None)
                to_wall = self._watch_started - clock()
                async for block in blocks:
                    for etype, item in decode(block):
                        if isinstance(item, bytes):  # not an object event as the server writes it
                            new_rv = handle(item)
                            if new_rv is not None:
                                self._rv = new_rv
                                self._delivered += 1
                            continue
                        apply(etype, item)  # the writer announces it to the store's listeners
                        rv = item.rv  # as the entry has it (a pinned one's may be an int)
                        self._rv = rv if rv is not None else item.compact_rv()
                        self._delivered += 1
                    now = clock()
                    if self._delivered != seen:
                        seen = self._delivered
                        self._last_event = now + to_wall
                    junk = skips.count - skipped_before
                    if junk > _MAX_JUNK_LINES and junk > self._delivered:
                        raise ProtocolError(
                            self.client.server,
                            f"WATCH {self.resource.name}: {junk} malformed lines and "
                            f"{self._delivered} events; stream abandoned",
                        )
                    # reads of buffered data do not yield: let the loop breathe now and then
                    if now > yield_at:
                        await anyio.lowlevel.checkpoint()
                        yield_at = clock() + _MAX_BUSY
        finally:
            if clear is not None:
                clear.cancel()
            # fold this watch's events in (_delivered stays: the caller reports it)
            self._events += self._delivered - self._marks
            self._marks = self._delivered
            self._watch_started = None

    def _handle_line(self, line: bytes) -> str | None:
        """Apply one watch line (the general path); returns its resourceVersion, or None."""
        if not line.strip():
            return None
        writer = self.store.writer
        entry: Entry | None
        try:
            etype, raw, entry = self.lister.parse(line)
            if etype == "BOOKMARK":
                rv = writer.prepare(raw).resource_version
                if rv:
                    writer.set_resource_version(rv)
                    self._marks += 1  # delivered, not an event
                    return rv
                return None
            if etype == "ERROR":
                status = orjson.loads(raw)
                raise status_error(status if isinstance(status, dict) else {})
        except DecodeError as exc:
            what = self.lister.line_name(line)
            what = f" of {what}" if what else ""
            self._skip(f"malformed watch line{what} ({why_undecodable(exc)})", preview(line))
            return None
        if entry is None:
            self._skip(f"unknown watch event type {etype!r}")
            return None
        if not entry.name or not entry.rv:
            self._skip(f"{etype} event without metadata.name/resourceVersion")
            return None
        writer.apply(etype, entry)
        return entry.resource_version

    # ------------------------------------------------------------------ health
    def _set_state(self, state: InformerState, error: str | None, *, notify: bool = False) -> None:
        notify = notify or state != self._state or error != self._last_error
        self._state, self._last_error = state, error
        if error is None:
            self._short_lived = False
        if notify and self._on_state is not None:
            self._on_state()

    def _skip(self, why: str, detail: str = "") -> None:
        """Count a skipped line, object, row or column (see :class:`Skips`)."""
        self._skips.add(why, detail)

    def _clear_error(self, error: str) -> None:
        """The watch that followed ``error`` (a watch closed at once) has lived long enough."""
        if self._last_error == error and self._state == WATCHING:
            self._set_state(WATCHING, None)

    def _note_failure(self, exc: BaseException, *, until_healthy: bool = False) -> None:
        """Record a failure; ``until_healthy``: a watch answering does not clear it, only one
        living ``min_healthy_watch`` does (the health rule's failure)."""
        count_error(self._errors, exc)
        now = time.monotonic()
        if now - self._last_failure_at > self.settings.backoff.reset_after:
            self._failures = 0  # healthy long enough: the backoff starts over
            self._warnings.reset()
        self._last_failure_at = now
        self._failures += 1
        self._set_state(BACKING_OFF, str(exc))
        self._short_lived = until_healthy
        self._warnings.warning(
            f"{self.client.context}/{self.key}: {exc}", f" (failure {self._failures})"
        )

    async def _gone(self, exc: ResourceNotFound) -> None:
        """The server answers 404 for the resource itself (its CRD was deleted): say so, and
        look again when :attr:`wait_served` says it may be back (at the latest after
        ``gone_retry`` seconds), not in a backoff loop. The cache is kept until a LIST
        succeeds again."""
        period = self.settings.gone_retry
        waiter = self.wait_served
        how = "watching for it to come back" if waiter else f"looking again every {period:g} s"
        error = f"the server no longer serves {self.resource.name} ({how})"
        count_error(self._errors, exc)
        if self._last_error != error:
            log.warning("%s/%s: %s: %s", self.client.context, self.key, error, exc)
        self._set_state(ERROR, error)
        with anyio.move_on_after(period):
            try:
                if waiter is not None:
                    await waiter(self.resource)
                else:
                    await anyio.sleep_forever()
            except Exception:
                log.exception("%s: waiting for %s to come back failed", self, self.resource.name)
                await anyio.sleep_forever()

    async def _backoff(self) -> None:
        await anyio.sleep(self.settings.backoff.delay(max(1, self._failures)))
        self._set_state(WATCHING, self._last_error)


_MAX_BUSY = 0.02  # seconds of buffered watch lines handled before yielding to the loop
_MAX_JUNK_LINES = 1000  # a watch skipping more lines than this, and than it delivered, is dropped
