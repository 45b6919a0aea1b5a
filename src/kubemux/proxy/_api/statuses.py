"""``meta/v1`` Status bodies byte for byte as kube-apiserver writes them, and the errors that
carry them.

kube-apiserver encodes a Status with Go's ``encoding/json`` Encoder: struct field order
(``kind, apiVersion, metadata, status, message, reason, details, code``), empty optional
fields left out, ``metadata`` always present (``{}`` unless a list continue token rides on
a 410), ``<``, ``>``, ``&``, U+2028 and U+2029 escaped as ``\\u003c`` ..., and a newline at
the end. :func:`encode_json` reproduces that encoding for any JSON value, so bodies built
here compare equal, byte for byte, to the API server's.

The builders mirror ``k8s.io/apimachinery/pkg/api/errors`` (``NewBadRequest``,
``NewNotFound``, ``NewResourceExpired``, ``NewTimeoutError``, ``NewTooManyRequests``,
``NewServiceUnavailable``, ``NewInvalid``) and the storage layer's messages ("Too large
resource version", "The provided continue parameter is too old ..."). A status with
``details.retryAfterSeconds`` gets a ``Retry-After`` header, as the API server's
``ErrorNegotiated`` sets it.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from ..._authz.forbidden import go_quote  # one Go %q for every layer

__all__ = [
    "CONTINUE_EXPIRED",
    "INCONSISTENT_CONTINUE",
    "FieldError",
    "ProxyStatusError",
    "bad_request",
    "encode_json",
    "expired",
    "field_errors_message",
    "go_quote",
    "gone_continue_too_old",
    "internal_error",
    "invalid",
    "method_not_supported",
    "not_found",
    "not_found_path",
    "status_body",
    "too_large_resource_version",
    "too_many_requests",
    "unavailable",
]

CONTINUE_EXPIRED = (
    "The provided continue parameter is too old to display a consistent list result. You "
    "can start a new list without the continue parameter."
)
"""The 410 message when no token to continue inconsistently can be offered."""

INCONSISTENT_CONTINUE = (
    "The provided continue parameter is too old to display a consistent list result. You "
    "can start a new list without the continue parameter, or use the continue token in this "
    "response to retrieve the remainder of the results. Continuing with the provided token "
    "results in an inconsistent list - objects that were created, modified, or deleted "
    "between the time the first chunk was returned and now may show up in the list."
)
"""The 410 message of ``handleCompactedErrorForPaging`` (etcd3 store), which carries a token
that continues the list at the latest resourceVersion in ``metadata.continue``."""

# Go's json.Encoder (SetEscapeHTML(true), its default) escapes these inside strings; orjson
# writes them raw. They can only appear inside strings, so a byte replace is exact.
_GO_ESCAPES = (
    (b"<", b"\\u003c"),
    (b">", b"\\u003e"),
    (b"&", b"\\u0026"),
    ("\u2028".encode(), b"\\u2028"),
    ("\u2029".encode(), b"\\u2029"),
)


def _go_escape(out: bytes) -> bytes:
    for raw, escaped in _GO_ESCAPES:
        if raw in out:
            out = out.replace(raw, escaped)
    return out


_SURROGATE = re.compile("[\ud800-\udfff]")
_MARK = "\U0010fffe"  # a noncharacter standing for an invalid byte until it is escaped
_MARK_UTF8 = _MARK.encode()


def _valid_text(value: Any) -> Any:
    """``value`` with every lone surrogate (a byte that was not UTF-8, decoded with
    ``surrogateescape``) marked, so that it encodes as Go writes an invalid byte."""
    if isinstance(value, str):
        return _SURROGATE.sub(_MARK, value)
    if isinstance(value, Mapping):
        return {_valid_text(k): _valid_text(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_valid_text(v) for v in value]
    return value


def encode_json(value: Any) -> bytes:
    """``value`` as Go's ``encoding/json`` writes it (without the Encoder's newline): compact,
    keys in the mapping's order, HTML characters and U+2028/U+2029 escaped, each invalid
    UTF-8 byte as ``\\ufffd``."""
    try:
        out = orjson.dumps(value)
    except TypeError:  # a lone surrogate: not valid UTF-8
        out = orjson.dumps(_valid_text(value)).replace(_MARK_UTF8, b"\\ufffd")
    return _go_escape(out)


# ------------------------------------------------------------------------------ Status bodies
def status_body(
    code: int,
    reason: str,
    message: str,
    *,
    details: Mapping[str, Any] | None = None,
    metadata: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """A ``meta/v1`` Status as a dict in Go's field order (empty ``reason``/``message``
    omitted, like Go's ``omitempty``). ``details`` keys are put in ``StatusDetails`` order
    (name, group, kind, uid, causes, retryAfterSeconds) and empty ones dropped; pass
    ``details={}`` for an empty ``details`` object."""
    body: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": _list_meta(metadata or {}),
        "status": "Failure",
    }
    if message:
        body["message"] = message
    if reason:
        body["reason"] = reason
    if details is not None:
        body["details"] = _details(details)
    body["code"] = code
    return body


_LIST_META_ORDER = ("selfLink", "resourceVersion", "continue", "remainingItemCount")
_DETAILS_ORDER = ("name", "group", "kind", "uid", "causes", "retryAfterSeconds")
_CAUSE_ORDER = ("reason", "message", "field")


def _ordered(values: Mapping[str, Any], order: Sequence[str]) -> dict[str, Any]:
    return {key: values[key] for key in order if values.get(key) not in (None, "", 0, [])}


def _list_meta(meta: Mapping[str, Any]) -> dict[str, Any]:
    out = _ordered(meta, _LIST_META_ORDER)
    if meta.get("remainingItemCount") == 0:  # a pointer in Go: 0 is written when set
        out["remainingItemCount"] = 0
    return out


def _details(details: Mapping[str, Any]) -> dict[str, Any]:
    out = _ordered(details, _DETAILS_ORDER)
    if "causes" in out:
        out["causes"] = [_ordered(cause, _CAUSE_ORDER) for cause in out["causes"]]
    return out


class ProxyStatusError(Exception):
    """An error the proxy answers with a Status, as kube-apiserver would.

    Attributes:
        status: The full ``meta/v1`` Status (a dict in Go's field order).
        headers: Response headers that go with it (``Retry-After``).
    """

    status: dict[str, Any]
    headers: dict[str, str]

    def __init__(self, status: dict[str, Any], *, headers: Mapping[str, str] | None = None):
        super().__init__(status.get("message", ""))
        self.status = status
        self.headers = dict(headers or {})
        retry = (status.get("details") or {}).get("retryAfterSeconds")
        if retry and "Retry-After" not in self.headers:
            self.headers["Retry-After"] = str(retry)

    @property
    def code(self) -> int:
        """The HTTP status code (``status["code"]``)."""
        return int(self.status["code"])

    @property
    def reason(self) -> str:
        """The Status reason (``BadRequest``, ``Expired``, ...; ``""`` if none)."""
        return str(self.status.get("reason", ""))

    @property
    def message(self) -> str:
        """The Status message."""
        return str(self.status.get("message", ""))

    @property
    def body(self) -> bytes:
        """The response body exactly as kube-apiserver writes it (with the final newline)."""
        return encode_json(self.status) + b"\n"

    def watch_event(self) -> bytes:
        """The Status as a watch ``ERROR`` event line (how a watch reports it once the
        stream has started)."""
        return b'{"type":"ERROR","object":' + encode_json(self.status) + b"}\n"

    def __repr__(self) -> str:
        return f"<ProxyStatusError {self.code} {self.reason}: {self.message[:200]!r}>"


def _error(
    code: int,
    reason: str,
    message: str,
    *,
    details: Mapping[str, Any] | None = None,
    metadata: Mapping[str, Any] | None = None,
) -> ProxyStatusError:
    return ProxyStatusError(status_body(code, reason, message, details=details, metadata=metadata))


def bad_request(message: str) -> ProxyStatusError:
    """400 BadRequest (``NewBadRequest``): how parse errors of query parameters come back."""
    return _error(400, "BadRequest", message)


def not_found(plural: str, name: str, group: str = "") -> ProxyStatusError:
    """404 NotFound for one object (``NewNotFound``): ``pods "web" not found``."""
    qualified = f"{plural}.{group}" if group else plural
    return _error(
        404,
        "NotFound",
        f"{qualified} {go_quote(name)} not found",
        details={"name": name, "group": group, "kind": plural},
    )


def not_found_path() -> ProxyStatusError:
    """404 for a path the server does not serve (the API server's ``NotFound`` handler)."""
    return _error(404, "NotFound", "the server could not find the requested resource", details={})


def expired(message: str) -> ProxyStatusError:
    """410 Expired (``NewResourceExpired``), e.g. ``too old resource version: 5 (10)``."""
    return _error(410, "Expired", message)


def gone_continue_too_old(continue_token: str | None) -> ProxyStatusError:
    """410 Expired for a continue token past its snapshot's life. With ``continue_token``
    (a token that continues at the latest version), the message says it may be used and the
    token rides in ``metadata.continue``, as the etcd3 store answers."""
    if continue_token:
        return _error(410, "Expired", INCONSISTENT_CONTINUE, metadata={"continue": continue_token})
    return _error(410, "Expired", CONTINUE_EXPIRED)


def too_large_resource_version(
    requested: int, current: int, retry_after: int = 1
) -> ProxyStatusError:
    """504 Timeout of ``storage.NewTooLargeResourceVersionError``: the cache did not reach
    the requested resourceVersion in time. ``Retry-After: 1`` like the watch cache."""
    return _error(
        504,
        "Timeout",
        f"Timeout: Too large resource version: {requested}, current: {current}",
        details={
            "causes": [
                {"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}
            ],
            "retryAfterSeconds": retry_after,
        },
    )


def too_many_requests(message: str, retry_after: int = 1) -> ProxyStatusError:
    """429 TooManyRequests with ``Retry-After`` (``NewTooManyRequests``)."""
    return _error(429, "TooManyRequests", message, details={"retryAfterSeconds": retry_after})


def unavailable(message: str) -> ProxyStatusError:
    """503 ServiceUnavailable (``NewServiceUnavailable``)."""
    return _error(503, "ServiceUnavailable", message)


def internal_error(message: str) -> ProxyStatusError:
    """500 for an error that is not a Status in the API server (``ErrorToAPIStatus``'s
    fallback: reason unknown, so none is written)."""
    return _error(500, "", message)


def method_not_supported(plural: str, action: str, group: str = "") -> ProxyStatusError:
    """405 MethodNotAllowed (``NewMethodNotSupported``)."""
    qualified = f"{plural}.{group}" if group else plural
    return _error(
        405,
        "MethodNotAllowed",
        f"{action} is not supported on resources of kind {go_quote(qualified)}",
        details={"group": group, "kind": plural},
    )


# ------------------------------------------------------------------------ validation errors
@dataclasses.dataclass(frozen=True, slots=True)
class FieldError:
    """One ``field.Error`` of k8s.io/apimachinery's validation.

    ``type`` is the ErrorType (``FieldValueForbidden``, ``FieldValueNotSupported``,
    ``FieldValueInvalid``); ``value`` is the bad value (strings are quoted with ``%q``).
    """

    type: str
    field: str
    detail: str = ""
    value: str | int | None = None

    @classmethod
    def forbidden(cls, field: str, detail: str) -> FieldError:
        return cls("FieldValueForbidden", field, detail)

    @classmethod
    def not_supported(cls, field: str, value: str, supported: Sequence[str]) -> FieldError:
        detail = "supported values: " + ", ".join(go_quote(v) for v in supported)
        return cls("FieldValueNotSupported", field, detail if supported else "", value)

    @classmethod
    def invalid(cls, field: str, value: str | int, detail: str) -> FieldError:
        return cls("FieldValueInvalid", field, detail, value)

    def body(self) -> str:
        """``ErrorBody()``: the message without the field."""
        label = _ERROR_TYPES[self.type]
        if self.type in ("FieldValueRequired", "FieldValueForbidden", "FieldValueTooLong"):
            text = label
        elif isinstance(self.value, str):
            text = f"{label}: {go_quote(self.value)}"
        elif self.value is None:
            text = f"{label}: null"
        else:
            text = f"{label}: {self.value}"
        return f"{text}: {self.detail}" if self.detail else text

    def __str__(self) -> str:
        return f"{self.field}: {self.body()}"


_ERROR_TYPES = {
    "FieldValueNotFound": "Not found",
    "FieldValueRequired": "Required value",
    "FieldValueDuplicate": "Duplicate value",
    "FieldValueInvalid": "Invalid value",
    "FieldValueNotSupported": "Unsupported value",
    "FieldValueForbidden": "Forbidden",
    "FieldValueTooLong": "Too long",
}


def field_errors_message(errors: Sequence[FieldError | str]) -> str:
    """An ``ErrorList.ToAggregate().Error()``: one message as is, several (duplicates
    dropped) as ``[a, b]``."""
    seen: list[str] = []
    for error in errors:
        text = str(error)
        if text not in seen:
            seen.append(text)
    if len(seen) == 1:
        return seen[0]
    return "[" + ", ".join(seen) + "]"


def invalid(group: str, kind: str, name: str, errors: Sequence[FieldError]) -> ProxyStatusError:
    """422 Invalid (``NewInvalid``), e.g. for ListOptions that do not validate."""
    qualified = f"{kind}.{group}" if group else kind
    message = f"{qualified} {go_quote(name)} is invalid"
    if errors:
        message += ": " + field_errors_message(errors)
    return _error(
        422,
        "Invalid",
        message,
        details={
            "name": name,
            "group": group,
            "kind": kind,
            "causes": [{"reason": e.type, "message": e.body(), "field": e.field} for e in errors],
        },
    )
