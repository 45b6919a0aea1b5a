"""Follow the kubeconfig as it changes: :class:`KubeconfigSource` and :class:`ContextDiff`.

The source watches the parent *folders* of the kubeconfig files and of the files their contexts
reference (CA, client cert/key, token file) with watchfiles, non-recursively, so that editors'
atomic rename-saves, deletion and re-creation are all seen. A file whose folder does not exist
yet is covered by watching its nearest existing ancestor (the folder's creation triggers a sync
that moves the watch). Symlinks are followed: the folders of every hop and of the final target
are watched too, which covers Kubernetes' ``..data`` swaps in mounted Secrets.

Bursts of events are debounced: a sync starts ``debounce_delay`` seconds after the last relevant
event (but no later than ``max(2, 10 * debounce_delay)`` seconds after the first, so a file
rewritten continuously still gets synced). A sync reads each file once
(:meth:`KubeconfigLoader.load` in a worker thread), and syncs never overlap. A file the loader
found still changing (:attr:`KubeconfigLoader.unsettled`: rewritten in place while it was read)
keeps its last good contents and is read again after another debounce, so a half-written
prefix that happens to be valid YAML never removes contexts.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import types
from collections.abc import AsyncIterator, Iterable, Mapping
from typing import Self

import anyio
import anyio.abc
import watchfiles

from .._errors import KubeconfigError, unwrap
from .diff import ContextDiff, DiffStream, diff_snapshots
from .load import (
    ContextConfig,
    KubeconfigLoader,
    KubeconfigSnapshot,
    PathsArg,
)

__all__ = ["ContextDiff", "KubeconfigSource", "diff_snapshots"]

log = logging.getLogger(__name__)

_WATCH_STEP_MS = 50  # watchfiles groups raw events for this long before handing them over
_WATCH_RETRY_DELAY = 1.0  # after the folder watch itself failed

_Signature = tuple[tuple[str, int, int, int] | tuple[str], ...]


@dataclasses.dataclass(frozen=True, slots=True)
class _WatchPlan:
    """What to watch for one snapshot (computed in a worker thread: it stats files)."""

    dirs: frozenset[str]  # folders handed to watchfiles
    interest: frozenset[str]  # paths whose events matter
    ancestors: frozenset[str]  # folders whose creation or replacement matters


class KubeconfigSource(anyio.AsyncContextManagerMixin):
    """The kubeconfig, followed live, as an async context manager.

    ::

        async with KubeconfigSource() as source:
            source.contexts            # what the kubeconfig says now
            async for diff in source.diffs:
                ...                    # one ContextDiff per sync

    Entering loads the kubeconfig once (in a worker thread) and, when ``follow`` is true,
    starts watching it; no task outlives the ``async with``. A source can be entered only once.
    Entering raises :class:`KubeconfigError` when no file could be loaded at all (every file
    missing or broken); one broken file among good ones only shows in :attr:`errors`. If the
    entry is cancelled, the source ends up closed and nothing keeps running. The list of files
    is fixed when the source is built (``$KUBECONFIG`` is read then).

    Consistency: :attr:`snapshot` is replaced atomically at the end of each sync; a file that
    fails to parse keeps its last good contexts (its error is in :attr:`errors`); a context is
    removed only by a clean parse that lacks it or by its file being deleted.

    :attr:`diffs` has a single consumer. It gets one :class:`ContextDiff` per completed sync,
    empty ones included (a sync that changed nothing, e.g. a broken file being fixed), except
    the source's own re-reads of a file that was still changing when it was read: those emit
    a diff only when something changed. The initial load is not a diff: read :attr:`contexts` after entering. At most
    ``max_pending_diffs`` diffs wait for the consumer; past that the newest waiting diff is
    merged with the new one (the watcher never blocks on a slow consumer). The stream ends
    (``EndOfStream``) when the source closes.
    """

    def __init__(
        self,
        paths: PathsArg = None,
        *,
        follow: bool = True,
        debounce_delay: float = 0.2,
        max_pending_diffs: int = 16,
    ) -> None:
        """Configure the source; nothing is read until it is entered.

        Args:
            paths: ``None`` for ``$KUBECONFIG`` or ``~/.kube/config``; a path, an
                ``os.pathsep``-separated string or a list of paths (see
                :func:`kubemux._kubeconfig.load.kubeconfig_paths`).
            follow: Watch the files and sync on changes. When false, only :meth:`sync_now`
                re-reads them.
            debounce_delay: Seconds of quiet after the last change before a sync.
            max_pending_diffs: How many diffs may wait for the consumer before they are
                coalesced.
        """
        if debounce_delay < 0:
            raise ValueError("debounce_delay must not be negative")
        self._loader: KubeconfigLoader | None = KubeconfigLoader(paths)
        self._follow = follow
        self._debounce_delay = debounce_delay
        self._max_delay = max(2.0, 10 * debounce_delay)
        self._diffs = DiffStream(max_pending_diffs)
        self._snapshot: KubeconfigSnapshot | None = None
        self._state = "unopened"
        self._sync_lock = anyio.Lock()
        self._task_group: anyio.abc.TaskGroup | None = None
        self._changed = anyio.Event()
        self._event_seen = False  # a file event (not just a re-read of an unsettled file)
        self._first_event = 0.0
        self._last_event = 0.0
        self._plan = _WatchPlan(frozenset(), frozenset(), frozenset())
        self._watching: frozenset[str] | None = None  # dirs of the running watch
        self._watch_stop: anyio.Event | None = None
        self._syncs = 0

    @classmethod
    def static(
        cls, contexts: Mapping[str, ContextConfig], current_context: str | None = None
    ) -> KubeconfigSource:
        """A source that never changes, for embedding (contexts from a database, a secret).

        :meth:`sync_now` still works and returns (and emits) an empty diff.
        """
        source = cls([], follow=False)
        source._loader = None
        source._snapshot = KubeconfigSnapshot(
            contexts=types.MappingProxyType(dict(contexts)),
            invalid=types.MappingProxyType({}),
            current_context=current_context,
            errors=types.MappingProxyType({}),
            files=(),
            referenced_files=frozenset(),
        )
        return source

    # ------------------------------------------------------------------ state

    @property
    def snapshot(self) -> KubeconfigSnapshot:
        """The state after the latest sync.

        Raises:
            RuntimeError: The source has not been entered yet.
        """
        if self._snapshot is None:
            raise RuntimeError("KubeconfigSource has not been entered yet")
        return self._snapshot

    @property
    def contexts(self) -> Mapping[str, ContextConfig]:
        """Valid contexts by name, in merge order."""
        return self.snapshot.contexts

    @property
    def current_context(self) -> str | None:
        """kubectl's current context (it may name a missing or invalid context)."""
        return self.snapshot.current_context

    @property
    def errors(self) -> Mapping[str, str]:
        """File path -> error, for files that currently fail to load."""
        return self.snapshot.errors

    @property
    def diffs(self) -> anyio.abc.ObjectReceiveStream[ContextDiff]:
        """The diffs of successive syncs (single consumer; see the class docstring)."""
        return self._diffs

    @property
    def follow(self) -> bool:
        """Whether the files are watched."""
        return self._follow

    def __repr__(self) -> str:
        if self._snapshot is None:
            return f"<KubeconfigSource {self._state}>"
        snap = self._snapshot
        return (
            f"<KubeconfigSource {self._state} files={len(snap.files)} "
            f"contexts={len(snap.contexts)} invalid={len(snap.invalid)} "
            f"errors={len(snap.errors)} syncs={self._syncs} pending_diffs={len(self._diffs)}>"
        )

    # ------------------------------------------------------------------ lifecycle

    @contextlib.asynccontextmanager
    async def __asynccontextmanager__(self) -> AsyncIterator[Self]:
        if self._state != "unopened":
            raise RuntimeError(f"this KubeconfigSource is {self._state}; it can be entered once")
        self._state = "opening"
        try:
            signature: _Signature = ()
            if self._loader is not None:
                snapshot, self._plan, signature = await anyio.to_thread.run_sync(
                    self._initial_load, self._loader
                )
                self._snapshot = snapshot
            try:
                async with anyio.create_task_group() as tg:
                    self._task_group = tg
                    try:
                        if self._follow and self._loader is not None:
                            tg.start_soon(self._debounce_loop)
                            await self._ensure_watching(signature)
                            if self._loader.unsettled:
                                self._note_change(resync=True)
                        self._state = "open"
                        yield self
                    finally:
                        self._state = "closing"
                        # Stop the watch thread first: the task group cannot finish before
                        # it returns, and it only checks the stop event every step.
                        if self._watch_stop is not None:
                            self._watch_stop.set()
                        tg.cancel_scope.cancel("KubeconfigSource closed")
            except BaseExceptionGroup as group:
                # Our tasks contain their own failures, so a group only carries the
                # exception of the caller's body: give it back as it was raised.
                inner = unwrap(group)
                if inner is group:
                    raise
                raise inner from inner.__cause__
        finally:
            self._task_group = None
            self._state = "closed"
            self._diffs.close_sending()

    @staticmethod
    def _initial_load(
        loader: KubeconfigLoader,
    ) -> tuple[KubeconfigSnapshot, _WatchPlan, _Signature]:
        signature = _signature(loader.files)
        snapshot = loader.load()
        if not loader.files:
            raise KubeconfigError("no kubeconfig file given")
        unusable = set(snapshot.missing) | set(snapshot.errors)
        if unusable.issuperset(loader.files):
            tried = ", ".join(loader.files)
            detail = "; ".join(snapshot.errors.values())
            message = f"no kubeconfig file could be loaded (tried: {tried})"
            raise KubeconfigError(f"{message}: {detail}" if detail else message)
        return snapshot, _plan_watch(snapshot), signature

    # ------------------------------------------------------------------ syncing

    async def sync_now(self) -> ContextDiff:
        """Re-read the kubeconfig now; emit the diff on :attr:`diffs` and return it.

        Serialised with the watcher's own syncs (this waits for a running one to finish).

        Cancelling it before the files have been read does nothing; cancelling it while they
        are being read lets the read finish in its worker thread and then drops the result:
        no diff is emitted and :attr:`snapshot` is unchanged (the next sync catches up).

        Raises:
            RuntimeError: The source is not open.
        """
        if self._state != "open":
            raise RuntimeError(f"KubeconfigSource is {self._state}, not open")
        return await self._sync()

    async def _sync(self, *, emit_empty: bool = True) -> ContextDiff:
        async with self._sync_lock:
            old = self.snapshot
            new: KubeconfigSnapshot
            plan: _WatchPlan
            signature: _Signature
            if self._loader is None:  # static
                new, plan, signature = old, self._plan, ()
            else:
                new, plan, signature = await anyio.to_thread.run_sync(_load_and_plan, self._loader)
            diff = diff_snapshots(old.contexts, new)
            self._snapshot = new
            self._plan = plan
            self._syncs += 1
            if emit_empty or not diff.is_empty or new.errors != old.errors:
                self._diffs.put(old.contexts, diff)
            _log_sync(old, diff)
            if self._follow and self._state == "open":
                await self._ensure_watching(signature)
                if self._loader is not None and self._loader.unsettled:
                    # read it again once it has been quiet for a while
                    self._note_change(resync=True)
            return diff

    async def _debounce_loop(self) -> None:
        while True:
            await self._changed.wait()
            while True:
                now = anyio.current_time()
                deadline = min(
                    self._last_event + self._debounce_delay, self._first_event + self._max_delay
                )
                if now >= deadline:
                    break
                await anyio.sleep(deadline - now)
            self._changed = anyio.Event()
            event_seen, self._event_seen = self._event_seen, False
            try:
                # A re-read that only re-checks an unsettled file emits nothing if it changed
                # nothing: the consumer sees one diff per sync that files caused.
                await self._sync(emit_empty=event_seen)
            except Exception:  # load() does not raise; this is a bug, keep following anyway
                log.exception("kubeconfig sync failed")

    def _note_change(self, *, resync: bool = False) -> None:
        now = anyio.current_time()
        if not resync:
            self._event_seen = True
        if not self._changed.is_set():
            self._first_event = now
        self._last_event = now
        self._changed.set()

    # ------------------------------------------------------------------ watching

    def _is_relevant(self, _change: watchfiles.Change, path: str) -> bool:
        plan = self._plan
        return path in plan.interest or path in plan.ancestors

    async def _ensure_watching(self, signature: _Signature) -> None:
        """(Re)start the folder watch when the folders to watch changed."""
        dirs = self._plan.dirs
        if dirs == self._watching or self._task_group is None:
            return
        old_stop = self._watch_stop
        stop = anyio.Event()
        self._watch_stop = stop
        if dirs:
            # The new watch starts before the old one stops, so no event falls in between.
            await self._task_group.start(self._watch, dirs, stop)
        self._watching = dirs
        if old_stop is not None:
            old_stop.set()
        log.debug("watching kubeconfig folders %s", sorted(dirs))
        # Anything written between reading the files and the watch starting is caught here.
        if signature and await anyio.to_thread.run_sync(_signature, _signed_paths(signature)) != (
            signature
        ):
            self._note_change()

    async def _watch(
        self,
        dirs: frozenset[str],
        stop: anyio.Event,
        *,
        task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        # awatch sets up its inotify watches before its first checkpoint, so by the time the
        # caller of task_group.start() resumes, the watch is in place.
        task_status.started()
        try:
            async for _changes in watchfiles.awatch(
                *sorted(dirs),
                watch_filter=self._is_relevant,
                stop_event=stop,
                recursive=False,
                step=_WATCH_STEP_MS,
                ignore_permission_denied=True,
            ):
                self._note_change()
        except Exception as exc:  # noqa: BLE001 - e.g. a folder vanished before the watch began
            if stop.is_set():
                return
            log.warning(
                "watching kubeconfig folders failed (%s: %s); retrying in %.1fs",
                type(exc).__name__,
                exc,
                _WATCH_RETRY_DELAY,
            )
            if self._watch_stop is stop:
                self._watching = None  # the next sync starts a new watch
            await anyio.sleep(_WATCH_RETRY_DELAY)
            self._note_change()


# ---------------------------------------------------------------------- helpers (sync)


def _load_and_plan(loader: KubeconfigLoader) -> tuple[KubeconfigSnapshot, _WatchPlan, _Signature]:
    signature = _signature(loader.files)
    snapshot = loader.load()
    return snapshot, _plan_watch(snapshot), signature


def _plan_watch(snapshot: KubeconfigSnapshot) -> _WatchPlan:
    interest: set[str] = set()
    for path in (*snapshot.files, *snapshot.referenced_files):
        interest.update(_symlink_chain(path))
    ancestors: set[str] = set()
    dirs: set[str] = set()
    parents: dict[str, str] = {}
    for path in interest:
        parent = os.path.dirname(path)
        folder = parents.get(parent)
        if folder is None:
            folder = parent
            while not os.path.isdir(folder) and os.path.dirname(folder) != folder:
                folder = os.path.dirname(folder)
            parents[parent] = folder
        dirs.add(folder)
        while parent not in ancestors and os.path.dirname(parent) != parent:
            ancestors.add(parent)
            parent = os.path.dirname(parent)
    return _WatchPlan(frozenset(dirs), frozenset(interest), frozenset(ancestors))


def _symlink_chain(path: str) -> set[str]:
    """``path``, every symlink hop from it, and its final target."""
    chain = {path}
    current = path
    for _ in range(16):
        try:
            target = os.readlink(current)
        except (OSError, ValueError):
            break
        current = os.path.normpath(os.path.join(os.path.dirname(current), target))
        chain.add(current)
    with contextlib.suppress(OSError, ValueError):
        chain.add(os.path.realpath(path))
    return chain


def _signature(paths: Iterable[str]) -> _Signature:
    result: list[tuple[str, int, int, int] | tuple[str]] = []
    for path in paths:
        try:
            st = os.stat(path)
        except (OSError, ValueError):
            result.append((path,))
        else:
            result.append((path, st.st_mtime_ns, st.st_size, st.st_ino))
    return tuple(result)


def _signed_paths(signature: _Signature) -> list[str]:
    return [entry[0] for entry in signature]


def _log_sync(old: KubeconfigSnapshot, diff: ContextDiff) -> None:
    new = diff.snapshot
    for path, error in new.errors.items():
        if old.errors.get(path) != error:
            log.warning("kubeconfig file failed to load, keeping its last good contents: %s", error)
    for path in old.errors:
        if path not in new.errors:
            log.info("kubeconfig file %s loads again", path)
    if diff.is_empty:
        log.debug("kubeconfig sync: no context changed")
        return
    log.info(
        "kubeconfig sync: %d added, %d removed, %d changed",
        len(diff.added),
        len(diff.removed),
        len(diff.changed),
    )
    if log.isEnabledFor(logging.DEBUG):
        log.debug(
            "kubeconfig sync: added %s, removed %s, changed %s",
            [c.name for c in diff.added],
            list(diff.removed),
            [c.name for c in diff.changed],
        )
