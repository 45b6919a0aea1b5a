"""A Table read from the cache that needs the objects: each row joined with the objects
view's object of the same resourceVersion (``includeObject=Object``, a field selector on
fields other than the name and namespace). When the two views disagree about an object the
read raises :class:`Inconsistent`, and :class:`~._cached.CachedReads` asks upstream.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from ..._cache.snapshot import Key
from ..._wire.ages import AgeCells
from ..._wire.codec import raw_resource_version
from .._api.lists import split_table_row
from .._query.selectors import ObjectFilter
from .reads import ReadRequest
from .served import ServedStore

__all__ = ["Inconsistent", "joined_rows", "row_matcher", "served_ages", "served_columns"]


class Inconsistent(Exception):
    """The table and objects views disagree about an object: ask upstream instead."""


def served_columns(served: ServedStore) -> Any:
    """The columns of a table view's store (none for an objects view)."""
    return getattr(served.store, "columns", ())  # a TableStore's


def served_ages(served: ServedStore) -> AgeCells | None:
    """The Age cells of a table view's rows, rendered again at each read (see
    :mod:`kubemux._wire.ages`); None for an objects view or columns without an Age."""
    return AgeCells.of(served_columns(served))


def row_matcher(
    filt: ObjectFilter, read: ReadRequest, objects: ServedStore | None
) -> Callable[[Key, bytes], bool] | None:
    """What selects a LIST's items beyond the namespace (None: every item); a Table
    filtered on the objects' fields matches each row's object of the same version."""
    if not filt.filters_content:
        return None  # the namespace is the snapshot's to select
    if objects is None or not filt.fields.needs_object:
        matches_raw = filt.matches_raw
        return lambda _key, raw: matches_raw(raw)
    # a Table filtered on the objects' fields: the objects view's object, same version
    get_raw = objects.store.get_raw
    obj_match = filt.matches_raw

    def match(key: Key, row: bytes) -> bool:
        obj = get_raw(key[0] or None, key[1])
        if obj is None or raw_resource_version(obj) != raw_resource_version(row):
            raise Inconsistent
        return obj_match(obj)

    return match


def joined_rows(
    page: list[tuple[Key, bytes]],
    read: ReadRequest,
    objects: ServedStore | None,
    ages: AgeCells | None = None,
) -> list[tuple[bytes, bytes | None]]:
    """A Table page's rows as (cells, object or None), the object joined when asked, the
    Age cells (``ages``) rendered for now."""
    rows: list[tuple[bytes, bytes | None]] = []
    now = time.time()
    get_raw = objects.store.get_raw if objects is not None else None
    for key, raw in page:
        cells, meta = split_table_row(raw)
        if ages is not None:
            cells = ages.refresh(cells, meta, now)
        if read.include_object != "Object":
            rows.append((cells, meta))
            continue
        assert get_raw is not None
        obj = get_raw(key[0] or None, key[1])
        if obj is None or raw_resource_version(obj) != raw_resource_version(raw):
            raise Inconsistent
        rows.append((cells, obj))
    return rows
