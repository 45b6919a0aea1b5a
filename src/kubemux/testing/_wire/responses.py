"""Response and request helpers of the fake API server: Status bodies, errors, parameters."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson
from aiohttp import web

from .protocol import BadRequest, status_body

__all__ = [
    "JSON",
    "MAX_BODY_BYTES",
    "abort",
    "int_param",
    "invalid",
    "is_json",
    "json_response",
    "media_types",
    "method_not_allowed",
    "not_found",
    "read_body",
    "status_response",
    "too_large",
]

JSON = "application/json"
MAX_BODY_BYTES = 3 * 1024 * 1024  # kube-apiserver's MaxRequestBodyBytes


def media_types(accept: str) -> list[tuple[str, dict[str, str]]]:
    """Parse an Accept header into (media type, parameters), in the order given."""
    out: list[tuple[str, dict[str, str]]] = []
    for part in accept.split(","):
        fields = [f.strip() for f in part.split(";")]
        params: dict[str, str] = {}
        for field in fields[1:]:
            key, _, value = field.partition("=")
            params[key.strip().lower()] = value.strip()
        if fields[0]:
            out.append((fields[0].lower(), params))
    return out


def is_json(media_type: str) -> bool:
    return media_type in ("application/json", "application/*", "*/*")


def json_response(body: Any, status: int = 200) -> web.Response:
    return web.Response(status=status, body=orjson.dumps(body), content_type=JSON)


def status_response(
    code: int,
    reason: str,
    message: str,
    *,
    details: Mapping[str, Any] | None = None,
    metadata: Mapping[str, Any] | None = None,
    headers: Mapping[str, str] | None = None,
) -> web.Response:
    body = status_body(code, reason, message, details=details, metadata=metadata)
    return web.Response(status=code, body=orjson.dumps(body), content_type=JSON, headers=headers)


def method_not_allowed() -> web.Response:
    return status_response(
        405, "MethodNotAllowed", "the server does not allow this method on the requested resource"
    )


def not_found() -> web.Response:
    return status_response(
        404, "NotFound", "the server could not find the requested resource", details={}
    )


def invalid(causes: list[tuple[str, str, str]]) -> web.Response:
    """A 422 for invalid ListOptions, worded like the real validation errors."""
    texts = [f"{field}: {kind}: {detail}" for field, kind, detail in causes]
    joined = texts[0] if len(texts) == 1 else "[" + ", ".join(texts) + "]"
    reasons = {"Forbidden": "FieldValueForbidden", "Unsupported value": "FieldValueNotSupported"}
    return status_response(
        422,
        "Invalid",
        f'ListOptions.meta.k8s.io "" is invalid: {joined}',
        details={
            "group": "meta.k8s.io",
            "kind": "ListOptions",
            "causes": [
                {"reason": reasons[kind], "message": f"{kind}: {detail}", "field": field}
                for field, kind, detail in causes
            ],
        },
    )


def abort(request: web.BaseRequest) -> web.StreamResponse:
    """Close the connection abruptly; aiohttp then drops the returned response quietly."""
    transport = request.transport
    if transport is not None:
        transport.abort()
    return web.Response(status=503)


def int_param(query: Mapping[str, str], name: str) -> int:
    text = query.get(name, "")
    if not text:
        return 0
    try:
        return int(text)
    except ValueError:
        raise BadRequest(f"invalid {name}: {text!r}") from None


async def read_body(request: web.BaseRequest, limit: int = MAX_BODY_BYTES) -> bytes:
    """The request body, refused past ``limit`` bytes (413, as kube-apiserver)."""
    chunks: list[bytes] = []
    size = 0
    while True:
        chunk = await request.content.readany()
        if not chunk:
            return b"".join(chunks)
        size += len(chunk)
        if size > limit:
            raise _TooLarge(limit)
        chunks.append(chunk)


class _TooLarge(BadRequest):
    def __init__(self, limit: int) -> None:
        super().__init__(f"Request entity too large: limit is {limit}")


def too_large(exc: BadRequest) -> web.Response | None:
    """The 413 of an oversized body, or None for any other bad request."""
    if isinstance(exc, _TooLarge):
        return status_response(413, "RequestEntityTooLarge", str(exc))
    return None
