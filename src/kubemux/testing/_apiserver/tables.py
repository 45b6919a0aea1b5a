"""Table rendering glue of the fake API server: content negotiation, Table documents.

The columns themselves are kube-apiserver's printers, in ``_printers``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson
from aiohttp import hdrs, web

from .._printers.tables import Printer, crd_printer, printer_for, row_object
from .._state.resource import ResourceState
from .._state.state import ObjectStore
from .._wire.protocol import BadRequest
from .._wire.responses import is_json, media_types

__all__ = ["TABLE_TYPE", "table_doc", "table_event", "table_printer"]

TABLE_TYPE = "application/json;as=Table;v=v1;g=meta.k8s.io"
_INCLUDE_OBJECT = ("Metadata", "Object", "None")


# ------------------------------------------------------------------ Table
def table_printer(
    request: web.BaseRequest,
    store: ObjectStore,
    state: ResourceState,
    version: str,
    query: Mapping[str, str],
) -> tuple[Printer, str] | None:
    """(printer, includeObject) when the client asked for a Table; None for objects."""
    accept = request.headers.get(hdrs.ACCEPT, "")
    wants_table = False
    for media_type, params in media_types(accept):
        if not is_json(media_type):
            continue
        if params.get("as") is None:
            break
        if (
            params.get("as") == "Table"
            and params.get("g") == "meta.k8s.io"
            and (params.get("v") == "v1")
        ):
            wants_table = True
            break
    if not wants_table:
        return None
    include = query.get("includeObject") or "Metadata"
    if include not in _INCLUDE_OBJECT:
        raise BadRequest(
            f'includeObject: Unsupported value: "{include}": supported values: '
            '"Metadata", "None", "Object"'
        )
    res = state.resource
    crd = store.crds.get((res.group, res.plural))
    if crd is not None:
        return crd_printer(crd.columns.get(version)), include
    return printer_for(res.group, res.plural), include


def table_doc(
    printer: Printer,
    include: str,
    objs: list[dict[str, Any]],
    meta: Mapping[str, Any],
    *,
    columns: bool,
) -> dict[str, Any]:
    """A ``meta.k8s.io/v1`` Table of ``objs``."""
    return {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": dict(meta),
        "columnDefinitions": printer.columns if columns else None,
        "rows": [{"cells": printer.cells(obj), "object": row_object(obj, include)} for obj in objs],
    }


def table_event(table: list[Any], obj: dict[str, Any]) -> bytes:
    """One watch event's object as a one-row Table; only the first carries the columns."""
    printer, include, columns = table
    table[2] = False
    meta = obj.get("metadata") or {}
    doc = table_doc(
        printer,
        include,
        [obj],
        {"resourceVersion": meta.get("resourceVersion", "")},
        columns=columns,
    )
    return orjson.dumps(doc)
