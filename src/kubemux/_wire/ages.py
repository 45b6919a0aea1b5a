"""Ages as the API server prints them, and the Age cells of cached Table rows rendered
again at each read.

kube-apiserver renders a Table's Age cells (``translateTimestampSince``, and a custom
resource's ``date`` columns: ``ConvertToHumanReadableDateType``) when it answers, from the
clock then. A row kept in a cache was rendered when the server last sent it, so its Age
stops: a pod the informer listed at 5h shows 5h an hour later. :class:`AgeCells` finds the
columns that are ages of the object's ``creationTimestamp`` (the built-in printers' Age
column by its description; a custom resource's ``date`` column on
``.metadata.creationTimestamp``) and :meth:`AgeCells.refresh` writes them again for now.

Other cells that count from now (an Event's LAST SEEN, a pod's restarts "(5m ago)", a
Job's DURATION, a CronJob's LAST SCHEDULE) come from fields a row does not carry (it keeps
the metadata only): they stay as the server rendered them at the object's last change.
"""

from __future__ import annotations

import datetime as dt
import functools
import time
from collections.abc import Mapping, Sequence
from typing import Any, Final

import msgspec
import orjson

__all__ = ["CRD_CREATED_DOC", "CREATED_DOC", "AgeCells", "human_duration", "parse_timestamp"]

CREATED_DOC: Final = (
    "CreationTimestamp is a timestamp representing the server time when this object was "
    "created. It is not guaranteed to be set in happens-before order across separate "
    "operations. Clients may not set this value. It is represented in RFC3339 form and is in "
    "UTC.\n\nPopulated by the system. Read-only. Null for lists. More info: "
    "https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata"
)
"""The description of the built-in printers' Age column (``ObjectMeta``'s swagger doc)."""

CRD_CREATED_DOC: Final = (
    "Custom resource definition column (in JSONPath format): .metadata.creationTimestamp"
)
"""The description the API server gives a custom resource's printer column on the creation
time when the CRD gives it none (the default Age column of every custom resource)."""


def human_duration(seconds: float) -> str:
    """apimachinery's ``duration.HumanDuration``: ``"45s"``, ``"5m3s"``, ``"3h"``, ``"2d4h"``."""
    secs = int(seconds)
    if secs < -1:
        return "<invalid>"
    if secs < 0:
        return "0s"
    if secs < 120:
        return f"{secs}s"
    minutes = secs // 60
    if minutes < 10:
        rest = secs % 60
        return f"{minutes}m{rest}s" if rest else f"{minutes}m"
    if minutes < 180:
        return f"{minutes}m"
    hours = secs // 3600
    if hours < 8:
        rest = minutes % 60
        return f"{hours}h{rest}m" if rest else f"{hours}h"
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        rest = hours % 24
        return f"{hours // 24}d{rest}h" if rest else f"{hours // 24}d"
    if hours < 24 * 365 * 2:
        return f"{hours // 24}d"
    if hours < 24 * 365 * 8:
        days = (hours // 24) % 365
        years = hours // 24 // 365
        return f"{years}y{days}d" if days else f"{years}y"
    return f"{hours // 24 // 365}y"


@functools.lru_cache(maxsize=4096)
def _parse(value: str) -> float | None:
    try:
        when = dt.datetime.fromisoformat(value)
    except ValueError:
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    return when.timestamp()


def parse_timestamp(value: Any) -> float | None:
    """An RFC 3339 timestamp as seconds since the epoch; None when unset or not one."""
    if not isinstance(value, str) or not value or len(value) > 64:
        return None
    return _parse(value)


class _Created(msgspec.Struct):
    creationTimestamp: str = ""


_created_decoder = msgspec.json.Decoder(_Created)
_cells_decoder = msgspec.json.Decoder(list[msgspec.Raw])


def _field(column: Any, name: str) -> Any:
    if isinstance(column, Mapping):
        return column.get(name)
    return getattr(column, name, None)


class AgeCells:
    """Which cells of a Table's rows are ages of the object's ``creationTimestamp``.

    Args:
        indexes: Their positions among the cells.
    """

    __slots__ = ("indexes",)

    def __init__(self, indexes: Sequence[int]):
        self.indexes = tuple(indexes)

    def __repr__(self) -> str:
        return f"AgeCells({list(self.indexes)})"

    @classmethod
    def of(cls, columns: Sequence[Any]) -> AgeCells | None:
        """The Age columns among ``columns`` (column definitions: mappings or objects with
        ``name``, ``type``, ``description``), or None when there is none."""
        found = []
        for i, column in enumerate(columns):
            kind, doc = _field(column, "type"), _field(column, "description")
            if (kind == "string" and _field(column, "name") == "Age" and doc == CREATED_DOC) or (
                kind == "date" and doc == CRD_CREATED_DOC
            ):
                found.append(i)
        return cls(found) if found else None

    def refresh(self, cells: bytes, metadata: bytes, now: float | None = None) -> bytes:
        """``cells`` (a row's JSON array) with its Age cells rendered for ``now`` (default:
        the clock) from ``metadata``'s ``creationTimestamp``; the same bytes when nothing
        changed or the row cannot be read (a row the server sent oddly keeps its cells)."""
        try:
            created = parse_timestamp(_created_decoder.decode(metadata).creationTimestamp)
            parts = _cells_decoder.decode(cells)
        except (msgspec.DecodeError, RecursionError):
            return cells
        text = (
            "<unknown>"
            if created is None
            else human_duration((time.time() if now is None else now) - created)
        )
        fresh = orjson.dumps(text)
        if len(self.indexes) == 1:  # the usual case: one Age, spliced in place when unique
            i = self.indexes[0]
            if i >= len(parts):
                return cells
            old = bytes(parts[i])
            if old == fresh or old[:1] != b'"':
                return cells
            if cells.count(old) == 1:
                return cells.replace(old, fresh)
        out: list[bytes] = [bytes(part) for part in parts]
        changed = False
        for i in self.indexes:
            if i < len(out) and out[i] != fresh and out[i][:1] == b'"':
                out[i] = fresh
                changed = True
        if not changed:
            return cells
        return b"[" + b",".join(out) + b"]"
