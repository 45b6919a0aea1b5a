"""One context's generation: its entry, its informer slots, failure records and status.

The :class:`~kubemux._registry.WatcherRegistry` owns these; they hold no logic that awaits.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import time
import traceback
from collections.abc import Mapping, Sequence
from types import TracebackType
from typing import NoReturn

import anyio
import anyio.abc

from ._client import ContextClient
from ._event_index import EventIndex
from ._informer import Informer, InformerKey, InformerStatus
from ._kubeconfig import ContextConfig
from ._resources import Resource
from ._settings import Backoff
from ._store import Store

__all__ = [
    "ContextEntry",
    "ContextStatus",
    "Failure",
    "RegistryStatus",
    "Slot",
    "context_status",
    "task_name",
]


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class ContextStatus:
    """A frozen snapshot of one context for a UI. Never holds a secret."""

    name: str
    state: str  # "idle", "starting", "running", "backing off", "error", "stopping"
    generation: int | None
    server: str
    cluster_name: str
    user_name: str
    namespace: str | None
    source: str
    informers: tuple[InformerStatus, ...]
    last_error: str | None
    retry_in: float | None  # seconds until a failed start may be retried


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class RegistryStatus:
    """A frozen snapshot of the whole registry."""

    contexts: Mapping[str, ContextStatus]
    current_context: str | None
    kubeconfig_errors: Mapping[str, str]  # file -> error (its last good contexts are kept)
    invalid_contexts: Mapping[str, str]  # context -> why it cannot be used
    kubeconfig_syncs: int


@dataclasses.dataclass(slots=True)
class Failure:
    """A failure kept for backoff and status; raised again without growing its traceback."""

    error: BaseException
    count: int = 0
    retry_at: float = 0.0
    tb: TracebackType | None = None

    @classmethod
    def record(cls, exc: BaseException, previous: Failure | None, backoff: Backoff) -> Failure:
        count = previous.count + 1 if previous else 1
        retry_at = time.monotonic() + backoff.delay(count)
        # Keep the error's own stack, its frames cleared, for the re-raise; of the errors it
        # chains (the aiohttp or OpenSSL error underneath) only type and message: their
        # frames hold closures over the HTTP session, which clearing locals does not drop.
        exc.with_traceback(_cleared(exc.__traceback__))
        seen = {id(exc)}
        link = exc.__cause__ or exc.__context__
        while link is not None and id(link) not in seen:
            seen.add(id(link))
            link.with_traceback(None)
            link = link.__cause__ or link.__context__
        return cls(exc, count, retry_at, exc.__traceback__)

    @property
    def pending(self) -> bool:
        """Still inside its backoff window."""
        return time.monotonic() < self.retry_at

    def reraise(self) -> NoReturn:
        # A copy, from the saved traceback: raising the kept exception itself would hang
        # this caller's frames (and every local in them) on it for as long as the record
        # lives, and add them to its traceback each time.
        raise _copy(self.error).with_traceback(self.tb)


def _copy(error: BaseException) -> BaseException:
    """A shallow copy of an exception, with its cause and context; itself if it cannot be
    copied (kubemux's own errors always can)."""
    try:
        twin = copy.copy(error)
    except Exception:  # noqa: BLE001 - a foreign exception that does not copy: raise it as is
        return error
    twin.__cause__ = error.__cause__
    twin.__context__ = error.__context__
    twin.__suppress_context__ = error.__suppress_context__
    return twin


def _cleared(tb: TracebackType | None) -> TracebackType | None:
    """``tb`` with its frames' locals cleared, less its leading frames that are still running.

    The frame that caught the exception is still running when the failure is recorded: it
    cannot be cleared, and kept in the traceback it would keep all its locals (an entry, its
    informer, its closed HTTP session: ~25 KB per failed context) for as long as the record.
    """
    while tb is not None:
        try:
            tb.tb_frame.clear()
        except RuntimeError:  # still running
            tb = tb.tb_next
            continue
        traceback.clear_frames(tb)
        return tb
    return None


class Slot:
    """One informer of one entry (single-flight start, then the running informer)."""

    __slots__ = ("failure", "informer", "key", "persistent", "ready", "resource", "store")

    def __init__(
        self, key: InformerKey, resource: Resource, store: Store, persistent: bool
    ) -> None:
        self.key = key
        self.resource = resource
        self.store = store
        self.persistent = persistent  # keep retrying the first LIST (autowatch, reloads)
        self.informer: Informer | None = None
        self.ready = anyio.Event()  # the first LIST attempt finished (error or not)
        self.failure: Failure | None = None


class ContextEntry:
    __slots__ = (
        "client",
        "config",
        "done",
        "event_index",
        "failure",
        "final_change",
        "generation",
        "key",
        "last_used",
        "reads_seen",
        "ready",
        "reaped",
        "scope",
        "slots",
        "state",
        "stop_reason",
        "tg",
    )

    def __init__(self, key: str, generation: int, config: ContextConfig) -> None:
        self.key = key
        self.generation = generation
        self.config = config
        self.state = "starting"
        self.scope: anyio.CancelScope | None = None
        self.tg: anyio.abc.TaskGroup | None = None
        self.client: ContextClient | None = None
        self.event_index: EventIndex | None = None
        self.slots: dict[InformerKey, Slot] = {}
        self.ready = anyio.Event()  # client built (state running) or failed
        self.done = anyio.Event()  # the entry's task has exited and cleaned up
        self.failure: Failure | None = None  # the client could not be built
        self.stop_reason = ""
        self.final_change: str | None = "REMOVED"
        self.last_used = time.monotonic()  # idle reaping: last registry call or store read
        self.reads_seen = 0  # the stores' read counters at the last look
        self.reaped = False  # stopped for being idle: a later watch() starts it again

    def __repr__(self) -> str:
        return (
            f"<ContextEntry {self.key!r} gen={self.generation} state={self.state} "
            f"informers={len(self.slots)}>"
        )


def context_status(
    cfg: ContextConfig, entry: ContextEntry | None, failures: Sequence[Failure], now: float
) -> ContextStatus:
    """The status of one context from its entry (if any) and its failure records."""
    informers: tuple[InformerStatus, ...] = ()
    generation = None
    errors: list[str] = []
    state = "idle"
    if entry is not None:
        generation = entry.generation
        informers = tuple(
            s.informer.status() for s in entry.slots.values() if s.informer is not None
        )
        state = entry.state
        states = {i.state for i in informers}
        if state == "running" and ("backing off" in states or "error" in states):
            state = "backing off"
        elif state == "running" and informers and not all(i.has_synced for i in informers):
            state = "starting"
        errors = [i.last_error for i in informers if i.last_error]
    if failures and state in ("idle", "running", "stopping"):
        state = "backing off" if any(f.pending for f in failures) else "error"
    errors += [str(f.error) for f in failures]
    retry_in = max(0.0, min(f.retry_at for f in failures) - now) if failures else None
    return ContextStatus(
        name=cfg.name,
        state=state,
        generation=generation,
        server=cfg.server,
        cluster_name=cfg.cluster_name,
        user_name=cfg.user_name,
        namespace=cfg.namespace,
        source=cfg.source,
        informers=informers,
        last_error=errors[0] if errors else None,
        retry_in=retry_in if retry_in is None or math.isfinite(retry_in) else None,
    )


def task_name(entry: ContextEntry, slot: Slot) -> str:
    return f"kubemux informer {entry.key!r} {slot.key}"
