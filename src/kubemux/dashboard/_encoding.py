"""Server-sent events as bytes, each encoded once for every stream that sends it.

An event is ``event: name`` and one ``data:`` line of JSON (:func:`encode_event`). A live
change is encoded by the row encoder (:mod:`._rows`) once, whichever streams send it
(:meth:`Encodings.encoded`), and a context's ``columns`` event once per set of columns
(:meth:`Encodings.columns_event`): with a thousand streams the encoding is the cost. The
caches are the app's (one :class:`Encodings` per dashboard), not the process's.

A set of columns has an id (a hash of its definitions): a snapshot sends each set whole
once and, for every other context with the same columns, only the id (a fleet's 1,000
contexts serve the same columns: their descriptions went out 1,000 times, ~2 MB).
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict

import orjson

from kubemux import Change, Resource, TableColumn

from ._rows import change_bytes
from .views import column_payload

__all__ = ["BATCH", "RETRY_MS", "Encodings", "definition_event", "encode_event"]

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
    """One dashboard's encodings kept for its streams: live changes, ``columns`` events and
    column sets' ids, each bounded (:data:`ENCODED_CHANGES`, least recent first)."""

    __slots__ = ("_columns", "_definitions", "_encoded")

    def __init__(self) -> None:
        self._encoded: OrderedDict[int, tuple[Change, bytes | None]] = OrderedDict()
        self._columns: OrderedDict[tuple[str, str, tuple[TableColumn, ...]], bytes] = OrderedDict()
        self._definitions: OrderedDict[tuple[TableColumn, ...], tuple[str, bytes]] = OrderedDict()

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

    def columns_id(self, columns: tuple[TableColumn, ...]) -> tuple[str, bytes]:
        """A set of columns' id and its definitions as JSON, computed once per set."""
        found = self._definitions.get(columns)
        if found is None:
            body = orjson.dumps([column_payload(c) for c in columns])
            cid = hashlib.blake2b(body, digest_size=8).hexdigest()
            found = self._definitions[columns] = (cid, body)
            if len(self._definitions) > ENCODED_CHANGES:
                self._definitions.popitem(last=False)
        return found

    def columns_event(
        self,
        context: str,
        resource: Resource,
        columns: tuple[TableColumn, ...],
        *,
        defined: dict[str, bytes] | None = None,
    ) -> bytes:
        """The ``columns`` event of one context's table view: ``{"context", "resource",
        "id", "columns"}``, encoded once for every stream; only ``{"context", "resource",
        "id"}`` when ``id`` is in ``defined`` (the sets this stream sent since its last
        ``reset``, id -> definitions; the event adds its own)."""
        cid, body = self.columns_id(columns)
        if defined is not None:
            if cid in defined:
                head = orjson.dumps({"context": context, "resource": resource.name, "id": cid})
                return encode_event("columns", head)
            defined[cid] = body
        key = (context, resource.name, columns)
        raw = self._columns.get(key)
        if raw is None:
            head = orjson.dumps({"context": context, "resource": resource.name, "id": cid})
            raw = self._columns[key] = encode_event(
                "columns", head[:-1] + b',"columns":' + body + b"}"
            )
            if len(self._columns) > ENCODED_CHANGES:
                self._columns.popitem(last=False)
        return raw


def definition_event(resource: Resource, cid: str, body: bytes) -> bytes:
    """A set of columns defined for later references, no context's: ``{"resource", "id",
    "columns"}``."""
    head = orjson.dumps({"resource": resource.name, "id": cid})
    return encode_event("columns", head[:-1] + b',"columns":' + body + b"}")
