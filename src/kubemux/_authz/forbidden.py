"""The 403 kube-apiserver writes, word for word.

``ForbiddenStatusError`` and ``forbiddenMessage`` of
``k8s.io/apiserver/pkg/endpoints/handlers/responsewriters/errors.go`` (1.32 and later: the
reason follows ``": "`` unquoted), ``apierrors.NewForbidden`` for the Status, and the RBAC
authorizer's reason: ``"RBAC: "`` and its role-resolution errors as
``utilerrors.NewAggregate`` prints them (one message bare, several in brackets, duplicates
once). Pure and sync.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from .attributes import Attributes

__all__ = [
    "aggregate_message",
    "forbidden_message",
    "forbidden_status",
    "go_quote",
    "rbac_reason",
    "role_not_found",
]

# The HTML-looking characters forbiddenMessage escapes (``sanitizer``); quotes stay.
_SANITIZE = str.maketrans({"&": "&amp;", "<": "&lt;", ">": "&gt;"})

_SHORT_ESCAPES = {
    "\a": "\\a",
    "\b": "\\b",
    "\f": "\\f",
    "\n": "\\n",
    "\r": "\\r",
    "\t": "\\t",
    "\v": "\\v",
}


def go_quote(text: str) -> str:
    """Go's ``strconv.Quote`` (``%q``): double quotes, ``\\"``/``\\\\`` and the short
    escapes, ``\\xNN``/``\\uNNNN``/``\\UNNNNNNNN`` for what is not printable.

    The one copy: ``kubemux.proxy._api.statuses`` (a layer above) re-exports it.
    """
    if text.isascii() and text.isprintable() and '"' not in text and "\\" not in text:
        return f'"{text}"'
    out = ['"']
    for char in text:
        code = ord(char)
        if char == '"':
            out.append('\\"')
        elif char == "\\":
            out.append("\\\\")
        elif 0x20 <= code < 0x7F:
            out.append(char)
        elif char in _SHORT_ESCAPES:
            out.append(_SHORT_ESCAPES[char])
        elif code < 0x80:
            out.append(f"\\x{code:02x}")
        elif 0xD800 <= code <= 0xDFFF:  # a byte that was not UTF-8 (surrogateescape)
            out.append(f"\\x{code & 0xFF:02x}" if 0xDC80 <= code <= 0xDCFF else "\\ufffd")
        elif char.isprintable():
            out.append(char)
        elif code < 0x10000:
            out.append(f"\\u{code:04x}")
        else:
            out.append(f"\\U{code:08x}")
    out.append('"')
    return "".join(out)


def role_not_found(kind: str, name: str) -> str:
    """The error a binding to a missing role resolves to (client-go's lister ``NotFound``):
    ``clusterrole.rbac.authorization.k8s.io "NAME" not found``; an unknown ``roleRef.kind``
    gives ``unsupported role reference kind: "KIND"``."""
    if kind == "Role":
        return f"role.rbac.authorization.k8s.io {go_quote(name)} not found"
    if kind == "ClusterRole":
        return f"clusterrole.rbac.authorization.k8s.io {go_quote(name)} not found"
    return f"unsupported role reference kind: {go_quote(kind)}"


def aggregate_message(messages: Sequence[str]) -> str:
    """``utilerrors.NewAggregate(errs).Error()``: one message bare; several deduplicated in
    order, in brackets unless only one distinct message remains."""
    if len(messages) == 1:
        return messages[0]
    distinct = list(dict.fromkeys(messages))
    if len(distinct) == 1:
        return distinct[0]
    return "[" + ", ".join(distinct) + "]"


def rbac_reason(errors: Iterable[str]) -> str:
    """The RBAC authorizer's reason for a denial: ``""`` or ``"RBAC: " + errors``."""
    messages = list(errors)
    return "RBAC: " + aggregate_message(messages) if messages else ""


def _forbidden_text(user: str, attrs: Attributes) -> str:
    if not attrs.resource_request:
        return f"User {go_quote(user)} cannot {attrs.verb} path {go_quote(attrs.path)}"
    resource = attrs.resource
    if attrs.subresource:
        resource = f"{resource}/{attrs.subresource}"
    head = (
        f"User {go_quote(user)} cannot {attrs.verb} resource {go_quote(resource)} "
        f"in API group {go_quote(attrs.api_group)}"
    )
    if attrs.namespace:
        return f"{head} in the namespace {go_quote(attrs.namespace)}"
    return f"{head} at the cluster scope"


def forbidden_message(user: str, attrs: Attributes, reason: str = "") -> str:
    """The Status ``message`` of the 403 for ``user`` (its name) making request ``attrs``,
    with the authorizers' ``reason`` appended (``rbac_reason``, or a review's
    ``status.reason``)::

        pods is forbidden: User "alice" cannot list resource "pods" in API group "" in the
        namespace "ns-1"
    """
    text = _forbidden_text(user, attrs).translate(_SANITIZE)
    if reason:
        text = f"{text}: {reason}"
    qualified = attrs.qualified_resource
    if not attrs.resource and not attrs.api_group:
        return f"forbidden: {text}"
    if not attrs.name:
        return f"{qualified} is forbidden: {text}"
    return f"{qualified} {go_quote(attrs.name)} is forbidden: {text}"


def forbidden_status(user: str, attrs: Attributes, reason: str = "") -> dict[str, Any]:
    """The whole 403 Status body (``apierrors.NewForbidden``), in Go's field order."""
    details: dict[str, Any] = {}
    if attrs.name:
        details["name"] = attrs.name
    if attrs.api_group:
        details["group"] = attrs.api_group
    if attrs.resource:
        details["kind"] = attrs.resource
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": forbidden_message(user, attrs, reason),
        "reason": "Forbidden",
        "details": details,
        "code": 403,
    }
