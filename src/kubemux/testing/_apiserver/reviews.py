"""TokenReview, SubjectAccessReview and SelfSubjectAccessReview, as kube-apiserver answers them.

``POST /apis/authentication.k8s.io/v1/tokenreviews``: who a token is (``status.user`` with
its groups, uid and extra), or ``{"user": {}}`` (and an ``error`` for an expired token).
``POST /apis/authorization.k8s.io/v1/subjectaccessreviews``: whether ``spec.user`` (with
``spec.groups``, ``extra``, ``uid``) may do what ``spec.resourceAttributes`` or
``spec.nonResourceAttributes`` say, by the fake's authorizer chain (``status.allowed``,
``status.reason``). ``selfsubjectaccessreviews``: the same for the caller. The review comes
back with its spec (a TokenReview's token too, as the API server echoes it) and a 201.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson
from aiohttp import web

from .._access.authorizer import Caller, Decision, Request
from .._access.identities import EXPIRED
from .._wire.responses import json_response, read_body, status_response

__all__ = ["REVIEWS", "serve_review"]

REVIEWS = {
    ("authentication.k8s.io", "tokenreviews"): "TokenReview",
    ("authorization.k8s.io", "subjectaccessreviews"): "SubjectAccessReview",
    ("authorization.k8s.io", "selfsubjectaccessreviews"): "SelfSubjectAccessReview",
}
DEFAULT_AUDIENCES = ["https://kubernetes.default.svc.cluster.local"]

Authenticate = Callable[[str], Caller | None]
Authorize = Callable[[Caller, Request], Decision]


def _strings(value: Any) -> list[str]:
    return [v for v in value if isinstance(v, str)] if isinstance(value, list) else []


def _invalid(kind: str, group: str, field: str, detail: str) -> web.Response:
    return status_response(
        422,
        "Invalid",
        f'{kind}.{group} "" is invalid: {field}: Invalid value: "": {detail}',
        details={"group": group, "kind": kind},
    )


def _attributes(spec: dict[str, Any]) -> Request | str:
    resource, other = spec.get("resourceAttributes"), spec.get("nonResourceAttributes")
    if isinstance(resource, dict) == isinstance(other, dict):
        return "exactly one of nonResourceAttributes or resourceAttributes must be specified"
    if isinstance(other, dict):
        return Request(
            verb=str(other.get("verb", "")), path=str(other.get("path", "")), is_resource=False
        )
    assert isinstance(resource, dict)
    return Request(
        verb=str(resource.get("verb", "")),
        resource=str(resource.get("resource", "")),
        group=str(resource.get("group", "")),
        version=str(resource.get("version", "")),
        subresource=str(resource.get("subresource", "")),
        name=str(resource.get("name", "")),
        namespace=str(resource.get("namespace", "")),
    )


# -- protobuf: kubectl's typed clients POST reviews as application/vnd.kubernetes.protobuf ----

_PROTOBUF = "application/vnd.kubernetes.protobuf"
_MAGIC = b"k8s\x00"


def _fields(data: bytes) -> dict[int, list[bytes | int]]:
    """One protobuf message's fields (varints and length-delimited only, as these are)."""
    out: dict[int, list[bytes | int]] = {}
    i = 0

    def varint() -> int:
        nonlocal i
        value, shift = 0, 0
        while True:
            if i >= len(data) or shift > 63:
                raise ValueError("truncated protobuf")
            byte = data[i]
            i += 1
            value |= (byte & 0x7F) << shift
            shift += 7
            if not byte & 0x80:
                return value

    while i < len(data):
        key = varint()
        number, wire = key >> 3, key & 7
        if wire == 0:
            out.setdefault(number, []).append(varint())
        elif wire == 2:
            size = varint()
            if i + size > len(data):
                raise ValueError("truncated protobuf")
            out.setdefault(number, []).append(data[i : i + size])
            i += size
        else:
            raise ValueError(f"protobuf wire type {wire} not expected here")
    return out


def _text(fields: dict[int, list[bytes | int]], number: int) -> str:
    values = fields.get(number) or [b""]
    last = values[-1]
    return last.decode() if isinstance(last, bytes) else str(last)


def _texts(fields: dict[int, list[bytes | int]], number: int) -> list[str]:
    return [v.decode() for v in fields.get(number, []) if isinstance(v, bytes)]


def _message(
    fields: dict[int, list[bytes | int]], number: int
) -> dict[int, list[bytes | int]] | None:
    values = [v for v in fields.get(number, []) if isinstance(v, bytes)]
    return _fields(values[-1]) if values else None


_RESOURCE_FIELDS = ("namespace", "verb", "group", "version", "resource", "subresource", "name")


def _spec_from_protobuf(plural: str, raw: bytes) -> dict[str, Any]:
    """The ``spec`` of a review sent as Kubernetes protobuf (``runtime.Unknown`` around it)."""
    if not raw.startswith(_MAGIC):
        raise ValueError("not a Kubernetes protobuf body")
    envelope = _fields(raw[len(_MAGIC) :])
    review = _message(envelope, 2) or {}  # Unknown.raw
    spec_fields = _message(review, 2) or {}  # .spec
    if plural == "tokenreviews":
        return {"token": _text(spec_fields, 1), "audiences": _texts(spec_fields, 2)}
    spec: dict[str, Any] = {}
    resource = _message(spec_fields, 1)
    if resource is not None:
        spec["resourceAttributes"] = {
            key: _text(resource, n) for n, key in enumerate(_RESOURCE_FIELDS, 1) if resource.get(n)
        }
    other = _message(spec_fields, 2)
    if other is not None:
        spec["nonResourceAttributes"] = {"path": _text(other, 1), "verb": _text(other, 2)}
    if plural == "subjectaccessreviews":
        spec["user"] = _text(spec_fields, 3)
        spec["groups"] = _texts(spec_fields, 4)
        extra: dict[str, list[str]] = {}
        for entry in spec_fields.get(5, []):
            if isinstance(entry, bytes):
                item = _fields(entry)
                values = _message(item, 2) or {}
                extra[_text(item, 1)] = _texts(values, 1)
        spec["extra"] = extra
        spec["uid"] = _text(spec_fields, 6)
    return spec


async def serve_review(
    request: web.BaseRequest,
    group: str,
    version: str,
    plural: str,
    caller: Caller,
    authenticate: Authenticate,
    authorize: Authorize,
) -> web.Response:
    """Answer one review POST (already authorized for ``caller``)."""
    kind = REVIEWS[(group, plural)]
    raw = await read_body(request)
    try:
        if request.content_type == _PROTOBUF:
            body: Any = {"spec": _spec_from_protobuf(plural, raw)}
        else:
            body = orjson.loads(raw)
    except (orjson.JSONDecodeError, ValueError, UnicodeDecodeError) as exc:
        return status_response(400, "BadRequest", f"the body cannot be decoded: {exc}")
    if not isinstance(body, dict):
        return status_response(400, "BadRequest", f"the body is not a {kind}")
    given = body.get("spec")
    spec: dict[str, Any] = given if isinstance(given, dict) else {}
    out: dict[str, Any] = {
        "kind": kind,
        "apiVersion": f"{group}/{version}",
        "metadata": {"creationTimestamp": None},
        "spec": spec,
    }
    if plural == "tokenreviews":
        token = spec.get("token")
        found = authenticate(token) if isinstance(token, str) and token else None
        if found is None:
            out["status"] = {"user": {}}
        elif found is EXPIRED:
            out["status"] = {"user": {}, "error": "[invalid bearer token, token has expired]"}
        else:
            audiences = _strings(spec.get("audiences")) or DEFAULT_AUDIENCES
            out["status"] = {
                "authenticated": True,
                "user": found.user_info(),
                "audiences": audiences,
            }
        return json_response(out, status=201)
    attrs = _attributes(spec)
    if isinstance(attrs, str):
        return _invalid(kind, group, "spec.resourceAttributes", attrs)
    if plural == "subjectaccessreviews":
        user, groups = spec.get("user"), _strings(spec.get("groups"))
        if not user and not groups:
            return _invalid(
                kind, group, "spec.user", "at least one of user or group must be specified"
            )
        given_extra = spec.get("extra")
        extra: dict[str, Any] = given_extra if isinstance(given_extra, dict) else {}
        subject = Caller(
            str(user or ""),
            str(spec.get("uid", "")),
            tuple(groups),
            {str(k): tuple(_strings(v)) for k, v in extra.items()},
        )
    else:
        subject = caller
    decision = authorize(subject, attrs)
    status: dict[str, Any] = {"allowed": decision.allowed}
    if decision.reason:
        status["reason"] = decision.reason
    out["status"] = status
    return json_response(out, status=201)
