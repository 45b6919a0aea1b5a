"""List and Table bodies joined from cached JSON bytes, laid out as kube-apiserver writes them.

A LIST body is never built by decoding objects and encoding a list: the cache keeps each
object's JSON bytes, so a body is a head, the items joined with commas, and a tail. The
layout is the API server's:

- built-in kinds (typed lists, Go struct order, ``StreamingCollectionEncodingToJSON``):
  ``{"kind":"PodList","apiVersion":"v1","metadata":{"resourceVersion":"5","continue":"..",
  "remainingItemCount":3},"items":[...]}`` and a newline;
- custom resources (unstructured lists, keys sorted as Go marshals a map):
  ``{"apiVersion":"example.com/v1","items":[...],"kind":"WidgetList","metadata":
  {"continue":"","resourceVersion":"5"}}`` and a newline (``continue`` is always there,
  ``""`` on the last page, as ``UnstructuredList.SetContinue`` writes it);
- Tables (``meta.k8s.io/v1`` and ``v1beta1``): ``kind, apiVersion, metadata,
  columnDefinitions, rows`` where each row is ``{"cells":[...],"object":...}`` and the
  object is a ``PartialObjectMetadata`` (``includeObject=Metadata``, the default), the
  object itself (``Object``) or ``null`` (``None``).

:func:`paginate` takes one page of a snapshot's items (sorted by namespace, then name)
through an :class:`~._selectors.ObjectFilter`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from itertools import islice
from typing import Any, Final, Protocol

from ..._cache.snapshot import Key
from .statuses import FieldError, bad_request, encode_json

__all__ = [
    "CHUNK_BYTES",
    "INCLUDE_OBJECT_VALUES",
    "TABLE_V1",
    "TABLE_V1BETA1",
    "ColumnLike",
    "Page",
    "check_include_object",
    "column_definitions",
    "iter_list",
    "iter_table",
    "join_list",
    "join_table",
    "list_envelope",
    "list_metadata",
    "paginate",
    "partial_object_metadata",
    "split_table_row",
    "table_row",
]

TABLE_V1: Final = "meta.k8s.io/v1"
TABLE_V1BETA1: Final = "meta.k8s.io/v1beta1"
INCLUDE_OBJECT_VALUES: Final = ("Metadata", "None", "Object")


# ------------------------------------------------------------------------------------ lists
def list_metadata(
    resource_version: str,
    continue_: str | None = None,
    remaining: int | None = None,
    *,
    unstructured: bool = False,
) -> bytes:
    """A list's ``metadata`` object. Typed lists write ``ListMeta`` in struct order with
    empty fields left out; unstructured lists write a map, keys sorted, ``continue`` always."""
    if unstructured:
        meta: dict[str, Any] = {"continue": continue_ or ""}
        if remaining is not None:
            meta["remainingItemCount"] = remaining
        if resource_version:
            meta["resourceVersion"] = resource_version
        return encode_json(meta)
    meta = {}
    if resource_version:
        meta["resourceVersion"] = resource_version
    if continue_:
        meta["continue"] = continue_
    if remaining is not None:
        meta["remainingItemCount"] = remaining
    return encode_json(meta)


def list_envelope(
    kind: str,
    api_version: str,
    resource_version: str,
    continue_: str | None = None,
    remaining: int | None = None,
    *,
    unstructured: bool = False,
) -> tuple[bytes, bytes]:
    """``(head, tail)`` of a list body: the body is ``head + b",".join(items) + tail``
    (for writing a large list in chunks)."""
    meta = list_metadata(resource_version, continue_, remaining, unstructured=unstructured)
    kind_json = encode_json(kind)
    version_json = encode_json(api_version)
    if unstructured:
        head = b'{"apiVersion":' + version_json + b',"items":['
        tail = b'],"kind":' + kind_json + b',"metadata":' + meta + b"}\n"
    else:
        head = b'{"kind":' + kind_json + b',"apiVersion":' + version_json
        head += b',"metadata":' + meta + b',"items":['
        tail = b"]}\n"
    return head, tail


def join_list(
    kind: str,
    api_version: str,
    resource_version: str,
    items: Iterable[bytes],
    continue_: str | None = None,
    remaining: int | None = None,
    *,
    unstructured: bool = False,
) -> bytes:
    """A LIST response body from the items' cached JSON bytes (no decode, no re-encode).

    Args:
        kind: The list kind (``PodList``, ``WidgetList``).
        api_version: ``v1``, ``apps/v1``, ``example.com/v1``.
        resource_version: The snapshot's resourceVersion.
        items: Each object's JSON bytes, in the API's order (namespace, then name).
        continue_: The token for the next page, if any.
        remaining: ``remainingItemCount``, if known.
        unstructured: A custom resource's list (the layout Go writes for a map).
    """
    head, tail = list_envelope(
        kind, api_version, resource_version, continue_, remaining, unstructured=unstructured
    )
    return _wrap(head, list(items), tail)


def _wrap(head: bytes, parts: list[bytes], tail: bytes) -> bytes:
    """``head + b",".join(parts) + tail`` with one copy of the items (a 100k-object body is
    150 MB: copying it twice costs more than joining it)."""
    if not parts:
        return head + tail
    parts[0] = head + parts[0]
    parts[-1] = parts[-1] + tail
    return b",".join(parts)


CHUNK_BYTES: Final = 1 << 17
"""What :func:`iter_list` and :func:`iter_table` put in one chunk (about): small enough for
asyncio's TLS to encrypt in cache (it writes a chunk into its memory BIO whole) and for the
client to decrypt one while the next is encrypted, large enough that a join per chunk costs
nothing."""


def _chunks(head: bytes, items: Iterable[bytes], tail: bytes, chunk_bytes: int) -> Iterator[bytes]:
    # batches of a count guessed from the first item (objects of one kind are alike in
    # size): islice and join run in C, a per-item loop here would cost as much as both
    iterator = iter(items)
    first = next(iterator, None)
    if first is None:
        yield head + tail
        return
    per = max(1, chunk_bytes // max(1, len(first)))
    batch = [first, *islice(iterator, per - 1)]
    prefix = head
    while len(batch) == per:
        batch[0] = prefix + batch[0]
        yield b",".join(batch)
        prefix = b","
        batch = list(islice(iterator, per))
    if batch:
        batch[0] = prefix + batch[0]
        batch[-1] = batch[-1] + tail
        yield b",".join(batch)
    else:
        yield tail


def iter_list(
    kind: str,
    api_version: str,
    resource_version: str,
    items: Iterable[bytes],
    continue_: str | None = None,
    remaining: int | None = None,
    *,
    unstructured: bool = False,
    chunk_bytes: int = CHUNK_BYTES,
) -> Iterator[bytes]:
    """:func:`join_list` in chunks of about ``chunk_bytes``, for a streamed response: the
    bytes are the same, but no body-sized buffer is ever built (joining a large list in
    small chunks runs in cache and allocates nothing big: about 20x faster per object)."""
    head, tail = list_envelope(
        kind, api_version, resource_version, continue_, remaining, unstructured=unstructured
    )
    return _chunks(head, items, tail, chunk_bytes)


@dataclasses.dataclass(frozen=True, slots=True)
class Page:
    """One page of a LIST.

    Attributes:
        items: The selected objects' bytes, in order.
        last_key: The key of the last item when more follow (the next page starts after
            it), else None.
    """

    items: list[bytes]
    last_key: Key | None


def paginate(
    items: Iterable[tuple[Key, bytes]],
    limit: int,
    match: Callable[[bytes], bool] | None = None,
) -> Page:
    """Take up to ``limit`` selected items (all when ``limit`` is 0), and tell whether more
    follow (the API server sets ``continue`` only then).

    ``match`` is an :meth:`~._selectors.ObjectFilter.matches_raw` (None: everything). The
    scan stops at the first selected item past the page, so a page costs what it holds plus
    what the filter skipped.
    """
    iterator = iter(items)
    if limit <= 0:
        if match is None:
            return Page([raw for _key, raw in iterator], None)
        return Page([raw for _key, raw in iterator if match(raw)], None)
    page: list[bytes] = []
    append = page.append
    last: Key | None = None
    for key, raw in iterator:
        if match is not None and not match(raw):
            continue
        if len(page) == limit:
            return Page(page, last)
        append(raw)
        last = key
    return Page(page, None)


# ----------------------------------------------------------------------------------- tables
class ColumnLike(Protocol):
    """A Table column (``kubemux.TableColumn`` has these)."""

    @property
    def name(self) -> str: ...
    @property
    def type(self) -> str: ...
    @property
    def format(self) -> str: ...
    @property
    def description(self) -> str: ...
    @property
    def priority(self) -> int: ...


def column_definitions(columns: Sequence[ColumnLike | Mapping[str, Any]]) -> bytes:
    """``columnDefinitions`` as the API server writes them (every field, in
    ``TableColumnDefinition`` order)."""
    defs = []
    for column in columns:
        if isinstance(column, Mapping):
            get = column.get
            defs.append(
                {
                    "name": get("name", ""),
                    "type": get("type", ""),
                    "format": get("format", ""),
                    "description": get("description", ""),
                    "priority": get("priority", 0),
                }
            )
        else:
            defs.append(
                {
                    "name": column.name,
                    "type": column.type,
                    "format": column.format,
                    "description": column.description,
                    "priority": column.priority,
                }
            )
    return encode_json(defs)


def check_include_object(value: str) -> str:
    """``includeObject`` as ``ValidateTableOptions`` takes it: ``""`` means ``Metadata``.

    Raises:
        ProxyStatusError: 400 with the API server's message for any other value.
    """
    if value in ("", "Metadata"):
        return "Metadata"
    if value in INCLUDE_OBJECT_VALUES:
        return value
    error = FieldError.invalid(
        "includeObject", value, "must be 'Metadata', 'Object', 'None', or empty"
    )
    raise bad_request(f"Unable to convert to Table as requested: {error}")


def partial_object_metadata(metadata: bytes, api_version: str = TABLE_V1) -> bytes:
    """A ``PartialObjectMetadata`` around a metadata object's bytes."""
    return (
        b'{"kind":"PartialObjectMetadata","apiVersion":'
        + encode_json(api_version)
        + b',"metadata":'
        + metadata
        + b"}"
    )


_ROW_HEAD = b'{"cells":'
_ROW_META = b',"metadata":'


def split_table_row(row: bytes) -> tuple[bytes, bytes]:
    """``(cells, metadata)`` of a row as ``kubemux``'s table view caches it
    (``{"cells":[...],"metadata":{...}}``).

    The metadata is the last key; ``,"metadata":`` cannot occur inside its value (an
    ObjectMeta has no nested ``metadata`` key, and a quote inside a string is escaped).

    Raises:
        ValueError: ``row`` is not laid out that way.
    """
    cut = row.rfind(_ROW_META)
    if not row.startswith(_ROW_HEAD) or cut < 0 or not row.endswith(b"}"):
        raise ValueError("not a cached Table row")
    return row[len(_ROW_HEAD) : cut], row[cut + len(_ROW_META) : -1]


def table_row(cells: bytes, obj: bytes | None, include: str, api_version: str = TABLE_V1) -> bytes:
    """One row: ``{"cells":[...],"object":...}``.

    ``obj`` is the metadata object's bytes for ``Metadata`` (wrapped in a
    PartialObjectMetadata here), the whole object's for ``Object``; ignored for ``None``.
    """
    if include == "None" or obj is None:
        return _ROW_HEAD + cells + b',"object":null}'
    if include == "Metadata":
        obj = partial_object_metadata(obj, api_version)
    return _ROW_HEAD + cells + b',"object":' + obj + b"}"


def _table_rows(
    rows: Iterable[tuple[bytes, bytes | None]], include: str, api_version: str
) -> Iterator[bytes]:
    if include == "None":
        for cells, _obj in rows:
            yield _ROW_HEAD + cells + b',"object":null}'
    elif include == "Metadata":
        pom = (
            b'{"kind":"PartialObjectMetadata","apiVersion":'
            + encode_json(api_version)
            + b',"metadata":'
        )
        for cells, obj in rows:
            if obj is None:
                yield _ROW_HEAD + cells + b',"object":null}'
            else:
                yield _ROW_HEAD + cells + b',"object":' + pom + obj + b"}}"
    else:
        for cells, obj in rows:
            yield table_row(cells, obj, include, api_version)


def _table_envelope(
    columns: Sequence[ColumnLike | Mapping[str, Any]] | bytes | None,
    resource_version: str,
    continue_: str | None,
    remaining: int | None,
    api_version: str,
) -> tuple[bytes, bytes]:
    if columns is None:
        defs = b"null"
    elif isinstance(columns, bytes):
        defs = columns
    else:
        defs = column_definitions(columns)
    head = b"".join(
        (
            b'{"kind":"Table","apiVersion":',
            encode_json(api_version),
            b',"metadata":',
            list_metadata(resource_version, continue_, remaining),
            b',"columnDefinitions":',
            defs,
            b',"rows":[',
        )
    )
    return head, b"]}\n"


def join_table(
    columns: Sequence[ColumnLike | Mapping[str, Any]] | bytes | None,
    rows: Iterable[tuple[bytes, bytes | None]],
    include: str,
    resource_version: str,
    continue_: str | None = None,
    remaining: int | None = None,
    *,
    api_version: str = TABLE_V1,
) -> bytes:
    """A Table response body (LIST or GET) from rows' cached bytes.

    Args:
        columns: The column definitions (or their JSON bytes, from
            :func:`column_definitions`); None writes ``null`` (a watch event after the first).
        rows: ``(cells, object)`` JSON bytes per row, see :func:`table_row`.
        include: ``includeObject`` after :func:`check_include_object`.
        resource_version, continue_, remaining: The list metadata.
        api_version: :data:`TABLE_V1` or :data:`TABLE_V1BETA1`.
    """
    head, tail = _table_envelope(columns, resource_version, continue_, remaining, api_version)
    return _wrap(head, list(_table_rows(rows, include, api_version)), tail)


def iter_table(
    columns: Sequence[ColumnLike | Mapping[str, Any]] | bytes | None,
    rows: Iterable[tuple[bytes, bytes | None]],
    include: str,
    resource_version: str,
    continue_: str | None = None,
    remaining: int | None = None,
    *,
    api_version: str = TABLE_V1,
    chunk_bytes: int = CHUNK_BYTES,
) -> Iterator[bytes]:
    """:func:`join_table` in chunks of about ``chunk_bytes`` (see :func:`iter_list`)."""
    head, tail = _table_envelope(columns, resource_version, continue_, remaining, api_version)
    return _chunks(head, _table_rows(rows, include, api_version), tail, chunk_bytes)
