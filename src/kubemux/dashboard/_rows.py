"""The one encoder of the live table's row changes, for snapshots and live changes alike.

A table view keeps each row as ``{"cells":[...],"metadata":{...}}`` bytes (see
:class:`kubemux.TableStore`). The page needs the cells, the labels (for its filter) and the
creation time (it ages rows itself), never the rest of the metadata: not the annotations,
which may hold a whole Secret. :func:`row_change` writes
``{"type","context","namespace","name","row":{"cells","labels","created"}}``: the cells are
joined as the server sent them, the labels and time taken from one msgspec decode of the
metadata, so a row is not decoded into dicts and encoded again. A row of another shape
(labels that are not strings, cells with a raw line break or a number that may be beyond
a double, which strict JSON readers refuse) goes the general way
(:func:`~.views.table_row` over the lenient read) and gives the same JSON; a row that
cannot be encoded at all is skipped (logged), never the stream.
"""

from __future__ import annotations

import logging
import re

import msgspec
import orjson

from kubemux import Change

from .._wire.codec import decode_raw
from .views import change_payload, table_row

__all__ = ["change_bytes", "row_change"]

log = logging.getLogger(__name__)


class _RowMeta(msgspec.Struct, gc=False):
    name: str = ""
    namespace: str = ""
    labels: dict[str, str] | None = None
    creationTimestamp: str | None = None


class _RowView(msgspec.Struct, gc=False):
    cells: msgspec.Raw = msgspec.field(default_factory=msgspec.Raw)
    metadata: _RowMeta = msgspec.field(default_factory=_RowMeta)


_decoder = msgspec.json.Decoder(_RowView)
_LONG_NUMBER = re.compile(rb"\d{20}|[eE][+]?\d{3}")  # may be beyond a double: the general way
_RESET_TYPES = frozenset({"RESET", "REMOVED"})


def row_change(
    kind: str, context: str, raw: bytes, namespace: str | None = None, name: str | None = None
) -> bytes | None:
    """A row change as the page's table consumes it, JSON; the namespace and name are the
    row's own unless given. None (logged) if ``raw`` cannot be encoded."""
    try:
        row = _decoder.decode(raw)
        cells = bytes(row.cells) or b"[]"
        # SSE data is one line: cells are joined only if they hold no raw line break, and
        # only if no number in them may be beyond a double (strict readers refuse those)
        if (
            cells[:1] == b"["
            and b"\n" not in cells
            and b"\r" not in cells
            and _LONG_NUMBER.search(cells) is None
        ):
            meta = row.metadata
            return b"".join(
                (
                    b'{"type":',
                    orjson.dumps(kind),
                    b',"context":',
                    orjson.dumps(context),
                    b',"namespace":',
                    orjson.dumps(meta.namespace if namespace is None else namespace),
                    b',"name":',
                    orjson.dumps(meta.name if name is None else name),
                    b',"row":{"cells":',
                    cells,
                    b',"labels":',
                    orjson.dumps(meta.labels or {}),
                    b',"created":',
                    orjson.dumps(meta.creationTimestamp or ""),
                    b"}}",
                )
            )
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
        pass  # another shape: the general way
    try:
        data = decode_raw(raw)
        data = data if isinstance(data, dict) else {}
        found = data.get("metadata")
        found = found if isinstance(found, dict) else {}
        return orjson.dumps(
            {
                "type": kind,
                "context": context,
                "namespace": str(found.get("namespace") or "") if namespace is None else namespace,
                "name": str(found.get("name") or "") if name is None else name,
                "row": table_row(data),
            }
        )
    except Exception as exc:  # noqa: BLE001 - contained: one row, never the stream
        log.warning("dashboard: a row of context %r skipped (%s)", context, type(exc).__name__)
        return None


def change_bytes(change: Change) -> bytes | None:
    """A subscription change as the page's table consumes it, JSON (None, logged, if it
    cannot be encoded): a table view's row through :func:`row_change`, anything else as
    :func:`~.views.change_payload` has it."""
    try:
        if change.view == "table" and change.type not in _RESET_TYPES:
            if change.type == "DELETED" or change.raw is None:
                return orjson.dumps(
                    {
                        "type": change.type,
                        "context": change.context,
                        "namespace": change.namespace,
                        "name": change.name,
                    }
                )
            return row_change(
                change.type, change.context, change.raw, change.namespace, change.name
            )
        return orjson.dumps(change_payload(change))
    except Exception as exc:  # noqa: BLE001 - contained: one change, never the stream
        log.warning(
            "dashboard: a change of context %r skipped (%s)", change.context, type(exc).__name__
        )
        return None
