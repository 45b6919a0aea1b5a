"""Context key -> its one live generation, and the one serialised path that changes it.

Every start, stop and reload of one key runs under that key's lock (:meth:`Generations.lock`),
so a generation cannot be overwritten by another, no slot is started on a generation being
stopped, and every generation the registry started is one it can stop. A generation that
ends by itself removes its entry only if it is still the current one (compare-and-delete).
"""

from __future__ import annotations

import collections
import contextlib
import functools
import itertools
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from typing import Any

import anyio
import anyio.abc

from .._cache.stream import StoreListener
from .._errors import (
    ApiError,
    ClusterUnreachable,
    ContextNotFound,
    ContextRemoved,
    CredentialError,
    InvalidContext,
    RegistryClosed,
    StartTimeout,
    Unauthorized,
)
from .._informer.informer import InformerKey, InformerStatus
from .._kubeconfig.load import ContextConfig
from .._kubeconfig.source import KubeconfigSource
from .._resources import Resource
from .._wire.types import View
from .context import ContextGeneration, GenerationSettings, Hooks, Slot
from .failure import Failure
from .handover import Kept, adopt, release, release_untaken, same_cluster, stop_keeping
from .status import ContextState, ContextStatus, build_context_status

__all__ = ["Generations", "Specs"]

log = logging.getLogger(__name__)

Specs = list[tuple[InformerKey, Resource]]

_REMEMBER_FOR = 600.0  # a context that comes back within this restores its informers
_REMEMBER_MAX = 1000


class Generations:
    """The registry's table of live generations (see the module docstring)."""

    def __init__(
        self,
        source: KubeconfigSource,
        *,
        settings: GenerationSettings,
        publisher: Callable[[ContextGeneration, Slot], StoreListener],
        final: Callable[[ContextGeneration, str, str, View], None],
        status_changed: Callable[[], None],
        autowatch: Iterable[tuple[InformerKey, Resource]],
        stop_timeout: float,
        idle_timeout: float | None = None,
        named: Callable[[], set[str]] = set,
    ) -> None:
        self._source = source
        self._gen_settings = settings
        self._status_changed = status_changed
        self._autowatch = tuple(autowatch)
        self._pinned = frozenset(key for key, _ in self._autowatch)
        self._stop_timeout = stop_timeout
        if idle_timeout is not None and not idle_timeout > 0:
            raise ValueError(f"idle_timeout must be positive or None, not {idle_timeout!r}")
        self._idle_timeout = idle_timeout
        self._named = named  # the contexts open subscriptions name (they are in use)
        self._hooks = Hooks(
            publisher=publisher,
            final=final,
            state_changed=status_changed,
            start_failed=self._record_start_failure,
            slot_failed=self._record_slot_failure,
            done=self._finished,
        )
        self._state = "unopened"  # generations start only while "open"
        self._tg: anyio.abc.TaskGroup | None = None  # where generations run
        self.gens: dict[str, ContextGeneration] = {}
        self.stragglers: set[ContextGeneration] = set()  # stops that overran stop_timeout
        self.failures: dict[str, Failure] = {}  # context -> failed start
        self.slot_failures: dict[str, dict[InformerKey, Failure]] = {}  # failed first syncs
        self.stops: dict[str, int] = {}  # context -> serial of its last explicit stop
        self.numbers = itertools.count(1)
        self._locks: dict[str, tuple[anyio.Lock, list[int]]] = {}
        self._stop_calls: dict[str, _SharedStop] = {}  # stop_watcher() calls under way
        self._stop_serial = itertools.count(1)
        self._remembered: collections.OrderedDict[str, tuple[float, Specs]] = (
            collections.OrderedDict()
        )

    @property
    def state(self) -> str:
        """``unopened``, ``open`` (generations may start), ``closing`` or ``closed``."""
        return self._state

    @contextlib.asynccontextmanager
    async def open(self) -> AsyncIterator[Generations]:
        """Run generations (and the idle reaper) in a task group of our own until the block
        ends; then stop every generation (shielded, each bounded by ``stop_timeout``).

        Generations start only inside the block: before it, :meth:`current` raises
        :class:`RegistryClosed`; while closing, :class:`ContextRemoved`.
        """
        if self._state != "unopened":
            raise RuntimeError(f"generations can be opened once (they are {self._state})")
        try:
            async with anyio.create_task_group() as tg:
                self._tg, self._state = tg, "open"
                if self._idle_timeout is not None:
                    tg.start_soon(self._reap_forever, self._idle_timeout, name="kubemux reaper")
                try:
                    yield self
                finally:
                    self._state = "closing"
                    with anyio.CancelScope(shield=True):
                        await self._close()
                    tg.cancel_scope.cancel("registry closed")
        finally:
            self._state, self._tg = "closed", None

    def mark_stopped(self, name: str) -> None:
        """Calls in flight for ``name`` raise ContextRemoved from now on."""
        self.stops[name] = next(self._stop_serial)

    async def _close(self) -> None:
        """Stop every generation (the registry is closing)."""
        for name in self.gens:
            self.mark_stopped(name)
        await self.for_each(list(self.gens), self._close_one)
        with anyio.move_on_after(self._stop_timeout):
            for gen in list(self.stragglers):
                await gen.wait_done()

    async def _close_one(self, name: str) -> None:
        await self.stop(name, "stopped: the registry closed", "REMOVED")

    def summary(self) -> str:
        """``(2 running, 1 backing off); informers=12, synced=11``, for reprs."""
        states: collections.Counter[str] = collections.Counter()
        informers = synced = 0
        for gen in self.gens.values():
            states[str(gen.state)] += 1
            for slot in gen.slots.values():
                informers += 1
                synced += slot.store.has_synced
        running = ", ".join(f"{n} {s}" for s, n in sorted(states.items())) or "0 running"
        return f"({running}); informers={informers}, synced={synced}"

    def sizes(self) -> dict[str, int]:
        return {
            "entries": len(self.gens) + len(self.stragglers),
            "failures": len(self.failures) + len(self.slot_failures),
            "slots": sum(len(g.slots) for g in self.gens.values()),
            "locks": len(self._locks),
        }

    async def for_each(self, keys: Iterable[str], op: Callable[[str], Awaitable[Any]]) -> None:
        """Run ``op`` for each key concurrently (each takes its own key's lock)."""

        async def guarded(key: str) -> None:
            try:
                await op(key)
            except Exception:  # one key's trouble must not stop the others
                log.exception("context %r: %s failed", key, getattr(op, "__name__", op))

        async with anyio.create_task_group() as tg:
            for key in keys:
                tg.start_soon(guarded, key)

    @contextlib.asynccontextmanager
    async def lock(self, key: str) -> AsyncIterator[None]:
        """The lock serialising every start, stop and reload of one key (dropped when free)."""
        lock, users = self._locks.get(key) or self._locks.setdefault(key, (anyio.Lock(), [0]))
        users[0] += 1
        try:
            async with lock:
                yield
        finally:
            users[0] -= 1
            if not users[0]:
                del self._locks[key]

    def _spawn(self, name: str, *, persistent: bool) -> ContextGeneration:
        assert self._tg is not None and self._state == "open"
        gen = ContextGeneration(
            name,
            next(self.numbers),
            self._source.contexts[name],
            settings=self._gen_settings,
            hooks=self._hooks,
            persistent=persistent,
        )
        old = self.gens.get(name)
        if old is not None:  # a generation that is stopping on its own: no longer current
            self.stragglers.add(old)
        self.gens[name] = gen
        self._status_changed()
        self._tg.start_soon(gen.run, name=f"kubemux context {name!r}")
        return gen

    def _finished(self, gen: ContextGeneration) -> None:
        if self.gens.get(gen.key) is gen:  # compare-and-delete, never a newer one
            del self.gens[gen.key]
        self.stragglers.discard(gen)

    async def _stop_generation(
        self, gen: ContextGeneration, reason: str, final_change: str | None
    ) -> None:
        """Stop ``gen`` and wait (shielded, bounded) until it has cleaned up."""
        gen.request_stop(reason, final_change)
        with anyio.move_on_after(self._stop_timeout, shield=True):
            await gen.wait_done()
        if not gen.is_done:
            log.error("context %r did not stop within %.1fs", gen.key, self._stop_timeout)
            if self.gens.get(gen.key) is gen:  # no longer current, still tracked
                del self.gens[gen.key]
            self.stragglers.add(gen)

    async def stop(
        self,
        name: str,
        reason: str,
        final_change: str | None,
        only: ContextGeneration | None = None,
    ) -> bool:
        with anyio.CancelScope(shield=True):  # every holder of the lock is bounded in time
            async with self.lock(name):
                gen = self.gens.get(name)
                if gen is None or (only is not None and gen is not only):
                    return False
                await self._stop_generation(gen, reason, final_change)
        return True

    async def stop_watcher(self, context: str) -> bool:
        """See :meth:`WatcherRegistry.stop_watcher`."""
        self.forget_failures(context)
        if context in self.gens or context in self._source.contexts:
            self.stops[context] = next(self._stop_serial)
        shared = self._stop_calls.get(context)
        if shared is not None:  # a stop of this context is under way: share its outcome
            with anyio.CancelScope(shield=True):
                await shared.done.wait()
            return shared.result
        shared = self._stop_calls[context] = _SharedStop()
        try:
            shared.result = await self.stop(context, "stopped by stop_watcher()", "REMOVED")
        finally:
            del self._stop_calls[context]
            shared.done.set()
        return shared.result

    async def current(self, context: str, stops_seen: int | None) -> ContextGeneration:
        """The live generation of ``context``, started if needed (caller holds the lock)."""
        if self._state != "open":
            if self._state == "closing":
                raise ContextRemoved(context, "stopped: the registry closed")
            raise RegistryClosed(f"the registry is {self._state}: use `async with registry:`")
        if self.stops.get(context) != stops_seen:
            raise ContextRemoved(context, "stopped by stop_watcher()")
        gen = self.gens.get(context)
        if gen is not None and not gen.is_stopping:
            return gen
        if gen is not None:  # stopping on its own (idle after a failed start)
            with anyio.move_on_after(self._stop_timeout, shield=True):
                await gen.wait_done()
            # one that overran stop_timeout stays tracked: _spawn keeps it as a straggler
            # (closing waits for it), and its own end deletes nothing (compare-and-delete)
        if context not in self._source.contexts:
            snapshot = self._source.snapshot
            why = snapshot.invalid.get(context)
            if why is not None:  # it was found; it cannot be used
                raise InvalidContext(context, why, snapshot.invalid_sources.get(context))
            raise ContextNotFound(context)
        failure = self.failures.get(context)
        if failure is not None and failure.pending:
            failure.reraise()
        return self._spawn(context, persistent=False)

    def autostart(self, name: str, specs: Specs, kept: Kept | None = None) -> None:
        """Start the autowatched and ``specs`` informers of ``name`` (caller holds its lock
        or runs before any other task could); ``kept``: the stores they take over."""
        wanted = dict(self._autowatch)
        wanted.update(dict(specs))
        if not wanted or self._state != "open" or name not in self._source.contexts:
            release(kept)  # nobody takes them over: cleared (their watches end)
            return
        gen = self.gens.get(name)
        if gen is None or gen.is_stopping:
            gen = self._spawn(name, persistent=True)
        stores = adopt(gen, kept) if kept is not None else {}
        for key, resource in wanted.items():
            gen.ensure_slot(key, resource, persistent=True, store=stores.get(key))
        release_untaken(gen, stores)

    async def remove(self, name: str) -> None:
        self.forget_failures(name)
        self.stops.pop(name, None)
        async with self.lock(name):
            gen = self.gens.get(name)
            if gen is not None:
                self._remember(name, gen.specs())
                await self._stop_generation(gen, "removed from the kubeconfig", "REMOVED")

    async def reload(self, name: str) -> None:
        self.forget_failures(name)
        async with self.lock(name):
            gen = self.gens.get(name)
            if gen is None:
                return
            log.info("kubeconfig: reloading %s", name)
            specs, kept = gen.specs(), None
            if gen.is_running and same_cluster(gen.config, self._source.contexts.get(name)):
                kept = await stop_keeping(gen, self._stop_generation)  # watches go on
            else:
                await self._stop_generation(gen, "reloaded (kubeconfig changed)", "RESET")
            self.autostart(name, specs, kept)

    async def add(self, name: str) -> None:
        async with self.lock(name):
            remembered = self._remembered.pop(name, None)
            fresh = remembered and time.monotonic() - remembered[0] < _REMEMBER_FOR
            specs = remembered[1] if remembered and fresh else []
            self.autostart(name, specs)

    def _remember(self, name: str, specs: Specs) -> None:
        """Keep what a removed context watched, for a while, in case it comes back (a
        kubeconfig rewritten in a way that hid it for one sync)."""
        if specs:
            self._remembered[name] = (time.monotonic(), specs)
            self._remembered.move_to_end(name)
            while len(self._remembered) > _REMEMBER_MAX:
                self._remembered.popitem(last=False)

    def _record_start_failure(self, gen: ContextGeneration, failure: Failure | None) -> None:
        if self.gens.get(gen.key) is not gen:
            return
        if failure is None:
            self.failures.pop(gen.key, None)
        else:
            self.failures[gen.key] = failure

    def _record_slot_failure(
        self, gen: ContextGeneration, key: InformerKey, failure: Failure | None
    ) -> None:
        if self.gens.get(gen.key) is not gen:
            return
        if failure is None:
            self.forget_failures(gen.key, key)
            self._forget_context_wide(gen.key)
            return
        failures = self.slot_failures.setdefault(gen.key, {})
        for k in [k for k, f in failures.items() if not f.pending]:
            del failures[k]  # expired records go: at most one per live backoff
        failures[key] = failure

    def _forget_context_wide(self, context: str) -> None:
        """An informer of ``context`` just synced: the failures of its other informers that
        were about the credential or the server (401, unreachable, a timeout, 5xx, 429) no
        longer hold, so they are not shown (nor backed off) any more. Those about one
        resource (403, 404, a bad response) stay until that resource syncs."""
        failures = self.slot_failures.get(context)
        if not failures:
            return
        stale = [k for k, f in failures.items() if _context_wide(f.error)]
        for k in stale:
            del failures[k]
        if not failures:
            del self.slot_failures[context]
        if stale:
            self._status_changed()

    def forget_failures(self, context: str, key: InformerKey | None = None) -> None:
        """Drop the failure records of a context (or of one of its informers)."""
        if key is None:
            had = self.failures.pop(context, None), self.slot_failures.pop(context, None)
            if had != (None, None):
                self._status_changed()
            return
        failures = self.slot_failures.get(context)
        if failures is not None and failures.pop(key, None) is not None:
            self._status_changed()
            if not failures:
                del self.slot_failures[context]

    # ------------------------------------------------------------------ idle reaping
    async def _reap_forever(self, idle_timeout: float) -> None:
        """Stop generations unused for ``idle_timeout`` seconds (looks every quarter of it)."""
        while True:
            await anyio.sleep(idle_timeout / 4)
            idle = {g.key: g for g in self.idle(time.monotonic())}
            if idle:
                log.info("stopping contexts unused for %gs: %s", idle_timeout, sorted(idle))
            for gen in idle.values():
                gen.reaped = True
            reason = f"unused for {idle_timeout:g}s"
            await self.for_each(idle, functools.partial(self._reap, idle, reason))

    async def _reap(self, idle: Mapping[str, ContextGeneration], reason: str, key: str) -> None:
        await self.stop(key, reason, "REMOVED", only=idle[key])

    def idle(self, now: float) -> list[ContextGeneration]:
        """Running generations nobody used for ``idle_timeout``: no store read, registry call
        or subscription naming them, no slot still in its first sync, none autowatched."""
        idle_timeout = self._idle_timeout
        if idle_timeout is None:
            return []
        named, pinned = self._named(), self._pinned
        idle = []
        for gen in self.gens.values():
            slots = gen.slots.values()
            if not gen.is_running or any(s.key in pinned for s in slots):
                continue
            reads = sum(s.store.writer.reads() for s in slots)
            busy = gen.key in named or not all(s.ready.is_set() for s in slots)
            if busy or reads != gen.reads_seen:
                gen.reads_seen = reads
                gen.last_used = now
            elif now - gen.last_used >= idle_timeout:
                idle.append(gen)
        return idle

    # ------------------------------------------------------------------ status
    def context_status(self, cfg: ContextConfig, now: float) -> ContextStatus:
        """What :meth:`WatcherRegistry.status` shows for one context."""
        name = cfg.name
        gen = self.gens.get(name)
        failures = [f for f in (self.failures.get(name),) if f is not None]
        failures += self.slot_failures.get(name, {}).values()
        state, number = ContextState.IDLE, None
        informers: tuple[InformerStatus, ...] = ()
        errors: list[str] = []
        if gen is not None:
            state, number, informers = gen.state, gen.number, gen.informer_statuses()
            errors = [i.last_error for i in informers if i.last_error]
            errors += [str(s.failure.error) for s in gen.slots.values() if s.failure]
        if failures and state in (ContextState.IDLE, ContextState.RUNNING, ContextState.STOPPING):
            pending = any(f.pending for f in failures)
            state = ContextState.BACKING_OFF if pending else ContextState.ERROR
        errors += [str(f.error) for f in failures if str(f.error) not in errors]
        retry_in = max(0.0, min(f.retry_at for f in failures) - now) if failures else None
        return build_context_status(
            name=name,
            server=cfg.server,
            cluster_name=cfg.cluster_name,
            user_name=cfg.user_name,
            namespace=cfg.namespace,
            source=cfg.source,
            state=state,
            generation=number,
            informers=informers,
            errors=errors,
            retry_in=retry_in,
            notes=dict(gen.notes) if gen is not None else None,
            credential=(
                connection.credential_status()
                if gen is not None and (connection := gen.cached_connection()) is not None
                else None
            ),
        )


def _context_wide(error: BaseException) -> bool:
    """Whether a failure is about the context (credential, server) rather than a resource."""
    if isinstance(error, Unauthorized | CredentialError | ClusterUnreachable | StartTimeout):
        return True
    return isinstance(error, ApiError) and (error.status >= 500 or error.status == 429)


class _SharedStop:
    __slots__ = ("done", "result")

    def __init__(self) -> None:
        self.done = anyio.Event()
        self.result = False
