"""Table views in the Redis engine: the column definitions travel beside the rows.

A table view's slot stores rows like objects (the entry bytes are the row JSON) and the
server's columns in the ``columns`` field of the slot's meta hash: a JSON array of
``{"name", "type", "format", "description", "priority"}`` objects, written by the snapshot
commit (atomically with the epoch). A leader whose columns change (a relist after a CRD's
printer columns were edited) writes a fresh snapshot; followers rehydrate and take the new
columns before the rows are announced. A follower never syncs without columns.
"""

from __future__ import annotations

import dataclasses

import msgspec
import orjson

from .._cache.store import Store
from .._cache.table import FALLBACK_COLUMNS, ColumnDef, TableColumn, TableStore, table_columns

__all__ = ["columns_value", "parse_columns", "set_columns", "table_of"]

_decoder = msgspec.json.Decoder(list[ColumnDef])


def table_of(store: Store) -> TableStore | None:
    """The store as a table view's, or None for an object view."""
    return store if isinstance(store, TableStore) else None


def columns_value(columns: tuple[TableColumn, ...]) -> bytes:
    """The ``columns`` meta field of a table view (``[]`` when the server sent none)."""
    return orjson.dumps([dataclasses.asdict(c) for c in columns])


def parse_columns(raw: bytes) -> tuple[TableColumn, ...]:
    """The columns of a ``columns`` meta field.

    Raises:
        ValueError: not a JSON array of column objects.
    """
    try:
        return table_columns(_decoder.decode(raw))
    except msgspec.MsgspecError as exc:
        raise ValueError(f"columns: {exc}") from None


def set_columns(store: TableStore, columns: tuple[TableColumn, ...]) -> None:
    """Give a follower's table the leader's columns (the fallback's are recognised)."""
    store.writer.set_columns(columns, fallback=columns == FALLBACK_COLUMNS)
