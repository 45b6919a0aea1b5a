"""What an informer is keyed by and what it reports: :class:`InformerKey`,
:class:`InformerStatus` and its :class:`InformerState`."""

from __future__ import annotations

import dataclasses
import enum
import re
from collections.abc import Mapping

from .._redact import redact_text

__all__ = [
    "MAX_ERROR_TYPES",
    "MAX_SKIP_REASON",
    "InformerKey",
    "InformerState",
    "InformerStatus",
    "View",
    "skip_reason",
]

MAX_ERROR_TYPES = 16
"""The most exception names an informer's ``errors_by_type`` holds (bounded label values)."""


class InformerState(enum.StrEnum):
    """The state of one informer. Values are plain strings (``status.state == "watching"``)."""

    LISTING = "listing"
    """The first LIST is running."""
    RELISTING = "relisting"
    """A LIST is replacing the cache (after a 410 Expired or an unexpected failure)."""
    WATCHING = "watching"
    """The cache is synced and a WATCH is open (or about to be)."""
    WAITING = "waiting for the server"
    """A request has been owed an answer (headers, the rest of a LIST body or of a watch line)
    for more than ``SLOW_AFTER`` (1 s) while listing or watching."""
    BACKING_OFF = "backing off"
    """A request failed; the next one waits (``last_error`` says why)."""
    ERROR = "error"
    """The first LIST failed, or the server no longer serves the resource (its CRD deleted:
    looked at again every ``WatchSettings.gone_retry``)."""
    STOPPED = "stopped"
    """Not running any more."""


class View(enum.StrEnum):
    """What an informer caches of each object. Values are plain strings (``view == "table"``),
    and wherever the API takes a view it takes the string too."""

    OBJECTS = "objects"
    """Full objects (:meth:`~kubemux.WatcherRegistry.watch`)."""
    TABLE = "table"
    """The server's rows: cells of its columns and the object's metadata, as ``kubectl
    get`` shows them (:meth:`~kubemux.WatcherRegistry.table`)."""

    @classmethod
    def of(cls, value: str, what: str = "view") -> View:
        """``value`` as a :class:`View`.

        Raises:
            ValueError: not a view (the message names ``what`` and the views).
        """
        try:
            return cls(value)
        except ValueError:
            raise ValueError(f"{what} must be 'objects' or 'table', not {value!r}") from None


MAX_SKIP_REASON = 300
"""The longest skip reason an informer's status shows (characters)."""

_RAISED = re.compile(r"(raised [\w.]+): .*", re.DOTALL)


def skip_reason(why: str, resource: str) -> str:
    """What status shows of why an object was skipped: bounded, URL passwords redacted,
    and for Secrets without the message of the exception a transform raised (it may
    quote the data)."""
    if resource == "secrets":
        why = _RAISED.sub(r"\1 (message withheld: a Secret)", why)
    why = redact_text(why)
    return why if len(why) <= MAX_SKIP_REASON else why[: MAX_SKIP_REASON - 3] + "..."


def count_error(errors: dict[str, int], exc: BaseException) -> None:
    """Count one failure in ``errors`` under its class name (``"other"`` past the bound)."""
    name = type(exc).__name__
    if name not in errors and len(errors) >= MAX_ERROR_TYPES:
        name = "other"
    errors[name] = errors.get(name, 0) + 1


@dataclasses.dataclass(frozen=True, slots=True)
class InformerKey:
    """What one informer watches in one context: resource and scope."""

    resource: str
    namespace: str | None = None
    label_selector: str | None = None
    field_selector: str | None = None
    view: View = View.OBJECTS
    """What is cached (the strings ``"objects"`` and ``"table"`` are taken too, made a
    :class:`View`; another raises ``ValueError``)."""

    def __post_init__(self) -> None:
        if type(self.view) is not View:
            object.__setattr__(self, "view", View(self.view))

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
    state: InformerState
    has_synced: bool
    objects: int
    resource_version: str
    relists: int
    reconnects: int
    skipped_lines: int  # lines and objects skipped: malformed, undecodable, refused by a transform
    last_error: str | None
    last_sync: float | None  # wall-clock time of the last completed LIST
    # activity (what kubemux.metrics exports); defaults for statuses built elsewhere
    events_applied: int = 0
    """Changes applied to the cache after the first LIST: every watch event (ADDED, MODIFIED,
    DELETED) and, for a relist, each difference it found (a relist of unchanged objects adds
    nothing). Bookmarks are not counted."""
    bytes_cached: int = 0
    """The size of the cached JSON (the sum of the objects' bytes as kept, after the
    transform), kept up to date by the store: nothing is scanned to report it."""
    errors_by_type: Mapping[str, int] = dataclasses.field(default_factory=dict)
    """Failures recorded since the informer started, by exception class name
    (``Forbidden``, ``ServerTimeout``, ``ProtocolError``, ...). At most 16 names; failures of
    further types are counted under ``"other"``."""
    watch_started: float | None = None
    """Wall-clock time the current watch was opened (its response began); None while not
    watching (listing, backing off)."""
    last_event: float | None = None
    """Wall-clock time of the last watch event or bookmark (read once per block of lines
    received, so it can lag by the time one block takes to apply); None before the first."""
    last_skip: str | None = None
    """What was skipped last and why (counted in ``skipped_lines``): the line, object,
    Table row or Table column definition, named when it can be read (``LIST item
    "default/web-1" (nested too deep)``), never a preview of its data; at most 300
    characters, redacted; None if nothing was skipped."""
    last_skip_at: float | None = None
    """Wall-clock time of that skip."""
    view: View | str = View.OBJECTS
    """``"objects"`` (full objects, :meth:`~kubemux.WatcherRegistry.watch`) or ``"table"``
    (the server's rows, :meth:`~kubemux.WatcherRegistry.table`): a :class:`View` once built,
    which compares equal to those strings."""
    # shared watches (kubemux.share): None when the registry shares nothing
    share_role: str | None = None  # "leader", "follower", "local" or "starting"
    share_lag: float | None = None  # seconds behind the leader (followers)
    stale_since: float | None = None  # wall clock since when a follower may be stale

    def __post_init__(self) -> None:
        if type(self.view) is not View:
            object.__setattr__(self, "view", View(self.view))
