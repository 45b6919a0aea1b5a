"""GET, LIST and POST of the fake API server (WATCH is in ``_watch_stream``, the other writes
in ``_writes``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson
from aiohttp import hdrs, web

from .._printers.tables import Printer
from .._state.resource import ResourceState
from .._state.state import ObjectStore
from .._wire.protocol import BadRequest, Selector, decode_continue, encode_continue
from .._wire.responses import JSON, int_param, invalid, read_body, status_response
from .tables import TABLE_TYPE, table_doc

__all__ = ["create_object", "get_object", "list_objects"]

_CONTINUE_EXPIRED = (
    "The provided continue parameter is too old to display a consistent list result. You can "
    "start a new list without the continue parameter, or use the continue token in this "
    "response to retrieve the remainder of the results. Continuing with the provided token "
    "results in an inconsistent list - objects that were created, modified, or deleted between "
    "the time the first chunk was returned and now may show up in the list."
)


def get_object(state: ResourceState, namespace: str | None, name: str) -> web.Response:
    """GET one object."""
    stored = state.objects.get((namespace or "", name))
    if stored is None:
        details = {"name": name, "kind": state.resource.plural}
        if state.resource.group:
            details["group"] = state.resource.group
        return status_response(
            404, "NotFound", f'{state.resource.name} "{name}" not found', details=details
        )
    return web.Response(body=stored.raw, content_type=JSON)


def list_objects(
    store: ObjectStore,
    state: ResourceState,
    selector: Selector,
    query: Mapping[str, str],
    table: tuple[Printer, str] | None = None,
) -> web.Response:
    """LIST, paginated (``limit``/``continue``), at a resourceVersion, as objects or a Table."""
    limit = max(0, int_param(query, "limit"))
    rv_text = query.get("resourceVersion", "")
    match = query.get("resourceVersionMatch", "")
    token = query.get("continue", "")
    after = None
    if match not in ("", "Exact", "NotOlderThan"):
        return invalid(
            [
                (
                    "resourceVersionMatch",
                    "Unsupported value",
                    f'"{match}": supported values: "Exact", "NotOlderThan"',
                )
            ]
        )
    if token:
        if rv_text:
            raise BadRequest("specifying resource version is not allowed when using continue")
        snapshot, after = decode_continue(token)
        if snapshot < 0:  # the "inconsistent" token of a 410: continue from the latest
            snapshot = store.rv
        elif snapshot < store.oldest_rv(state):
            return status_response(
                410,
                "Expired",
                _CONTINUE_EXPIRED,
                metadata={"continue": encode_continue(-1, after)},
            )
    else:
        rv = int_param(query, "resourceVersion")
        exact = match == "Exact" or (not match and rv > 0 and limit > 0)
        if rv > store.rv:
            return status_response(
                504,
                "Timeout",
                f"Too large resource version: {rv}, current: {store.rv}",
                details={
                    "causes": [
                        {
                            "reason": "ResourceVersionTooLarge",
                            "message": "Too large resource version",
                        }
                    ],
                    "retryAfterSeconds": 1,
                },
            )
        if exact and rv < store.oldest_rv(state):
            return status_response(
                410, "Expired", "The resourceVersion for the provided list is too old."
            )
        snapshot = rv if exact else store.rv
    page, last, remaining = store.list_at(state, snapshot, selector, after, limit)
    meta: dict[str, Any] = {"resourceVersion": str(snapshot)}
    if last is not None:
        meta["continue"] = encode_continue(snapshot, last)
        if not selector.filters_content:
            meta["remainingItemCount"] = remaining
    if table is not None:
        printer, include = table
        doc = table_doc(printer, include, [stored.obj for stored in page], meta, columns=True)
        return web.Response(body=orjson.dumps(doc), headers={hdrs.CONTENT_TYPE: TABLE_TYPE})
    body = b"".join(
        (
            b'{"kind":',
            orjson.dumps(state.list_kind),
            b',"apiVersion":',
            orjson.dumps(state.resource.api_version),
            b',"metadata":',
            orjson.dumps(meta),
            b',"items":[',
            b",".join([stored.raw for stored in page]),
            b"]}",
        )
    )
    return web.Response(body=body, content_type=JSON)


async def create_object(
    request: web.BaseRequest,
    store: ObjectStore,
    state: ResourceState,
    namespace: str | None,
    query: Mapping[str, str] | None = None,
) -> web.Response:
    """POST: create one object from the request body (``dryRun=All``: store nothing)."""
    try:
        obj = orjson.loads(await read_body(request))
    except orjson.JSONDecodeError as exc:
        raise BadRequest(f"the request body is not JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise BadRequest("the request body is not a JSON object")
    meta = dict(obj.get("metadata") or {})
    if namespace is not None:
        if meta.get("namespace") not in (None, "", namespace):
            raise BadRequest(
                "the namespace of the provided object does not match the namespace sent on "
                "the request"
            )
        meta["namespace"] = namespace
    dry_run = (query or {}).get("dryRun") == "All"
    try:
        if dry_run:
            _, stored = store.prepare(state, {**obj, "metadata": meta})
        else:
            stored = store.insert(state, {**obj, "metadata": meta})
    except ValueError as exc:
        name = meta.get("name", "")
        details: dict[str, Any] = {"name": name, "kind": state.resource.plural}
        if state.resource.group:
            details["group"] = state.resource.group
        if "already exists" in str(exc):
            return status_response(
                409,
                "AlreadyExists",
                f'{state.resource.name} "{name}" already exists',
                details=details,
            )
        raise BadRequest(str(exc)) from None
    return web.Response(status=201, body=stored.raw, content_type=JSON)
