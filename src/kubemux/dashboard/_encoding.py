"""Server-sent events as bytes, each encoded once for every stream that sends it.

An event is ``event: name`` and one ``data:`` line of JSON (:func:`encode_event`). A live
change is encoded by the row encoder (:mod:`._rows`) once, whichever streams send it
(:meth:`Encodings.encoded`), and a context's ``columns`` event once per set of columns
(:meth:`Encodings.columns_event`): with a thousand streams the encoding is the cost. The
caches are the app's (one :class:`Encodings` per dashboard), not the process's.
"""

from __future__ import annotations

from collections import OrderedDict

import orjson

from kubemux import Change, Resource, TableColumn

from ._rows import change_bytes
from .views import column_payload

__all__ = ["BATCH", "RETRY_MS", "Encodings", "encode_event"]

BATCH = 500  # changes per ``changes`` event
RETRY_MS = 1000  # EventSource reconnection delay
ENCODED_CHANGES = 1024  # live changes whose encoding is kept for the other streams


def encode_event(event: str, data: object, *, retry: int | None = None) -> bytes:
    """One server-sent event, ``data`` as JSON (already encoded if bytes).

    JSON holds no raw line break, so the data is one ``data:`` line and the bytes are
    joined, not re-encoded.
    """
    raw = data if isinstance(data, bytes) else orjson.dumps(data)
    tail = b"\r\n\r\n" if retry is None else b"\r\nretry: %d\r\n\r\n" % retry
    return b"event: " + event.encode() + b"\r\ndata: " + raw + tail


class Encodings:
    """One dashboard's encodings kept for its streams: live changes and ``columns`` events,
    each bounded (:data:`ENCODED_CHANGES`, least recent first)."""

    __slots__ = ("_columns", "_encoded")

    def __init__(self) -> None:
        self._encoded: OrderedDict[int, tuple[Change, bytes | None]] = OrderedDict()
        self._columns: OrderedDict[tuple[str, str, tuple[TableColumn, ...]], bytes] = OrderedDict()

    def encoded(self, change: Change) -> bytes | None:
        """``change`` as the browser's table consumes it, JSON-encoded once for every stream
        (:func:`~._rows.change_bytes`: None for one that cannot be encoded, skipped).

        The registry hands the same :class:`~kubemux.Change` to every subscriber, so the
        encoding is kept (by identity, the change itself held so the key stays unique) for
        the streams that send it after the first.
        """
        key = id(change)
        hit = self._encoded.get(key)
        if hit is not None and hit[0] is change:
            return hit[1]
        raw = change_bytes(change)
        self._encoded[key] = (change, raw)
        if len(self._encoded) > ENCODED_CHANGES:
            self._encoded.popitem(last=False)
        return raw

    def columns_event(
        self, context: str, resource: Resource, columns: tuple[TableColumn, ...]
    ) -> bytes:
        """The ``columns`` event of one context's table view, encoded once for every stream."""
        key = (context, resource.name, columns)
        raw = self._columns.get(key)
        if raw is None:
            data = {
                "context": context,
                "resource": resource.name,
                "columns": [column_payload(c) for c in columns],
            }
            raw = self._columns[key] = encode_event("columns", data)
            if len(self._columns) > ENCODED_CHANGES:
                self._columns.popitem(last=False)
        return raw
