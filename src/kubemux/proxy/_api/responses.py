"""What the proxy itself answers: ``metav1.Status`` bodies and raw ASGI sends.

Errors the proxy decides itself (an unknown context, a context that cannot start, a body
too large) are answered as kube-apiserver answers errors, with a ``Status`` whose ``reason``
and ``code`` clients already understand (kubectl prints ``Error from server (NotFound):
...``). Messages are redacted (no password in a URL) and control characters escaped.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import orjson
from starlette.types import Send

from ..._errors import (
    ApiError,
    ClusterUnreachable,
    ContextNotFound,
    ContextRemoved,
    CredentialError,
    KubeconfigError,
    KubemuxError,
    ServerTimeout,
    StartTimeout,
)
from ..._redact import redact_text

__all__ = ["JSON", "StatusError", "send_bytes", "status_body", "status_for_error"]

JSON = "application/json"

REASONS = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    405: "MethodNotAllowed",
    406: "NotAcceptable",
    408: "Timeout",
    409: "Conflict",
    410: "Expired",
    413: "RequestEntityTooLarge",
    415: "UnsupportedMediaType",
    422: "Invalid",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
    504: "Timeout",
}


class StatusError(Exception):
    """An answer the proxy gives itself: HTTP ``code`` with a ``Status`` body."""

    def __init__(
        self,
        code: int,
        message: str,
        *,
        reason: str | None = None,
        headers: Mapping[str, str] | None = None,
        raw: bytes | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.reason = reason or REASONS.get(code, "")
        self.headers = dict(headers or {})
        self.raw = raw  # the API server's own Status body, passed on as it is

    def body(self) -> bytes:
        if self.raw is not None:
            return self.raw
        return status_body(self.code, self.reason, self.message)


def _clean(text: str) -> str:
    text = redact_text(text)
    return "".join(c if c.isprintable() or c == " " else f"\\x{ord(c):02x}" for c in text)[:4000]


def status_body(code: int, reason: str, message: str, details: Any = None) -> bytes:
    """A ``v1`` ``Status`` (``Failure``) as kube-apiserver writes it."""
    doc: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": _clean(message),
        "reason": reason,
        "code": code,
    }
    if details is not None:
        doc["details"] = details
    return orjson.dumps(doc)


def upstream_header(name: str, value: str, context: str) -> tuple[bytes, bytes]:
    """An upstream answer's header, as bytes to send on; a 502 :class:`StatusError` when it
    cannot be (aiohttp decodes header bytes as UTF-8: a value outside latin-1, or bytes that
    were not UTF-8, which no downstream client reads as the API server meant them)."""
    try:
        return name.lower().encode("latin-1"), value.encode("latin-1")
    except UnicodeEncodeError:
        raise StatusError(
            502,
            f"the API server of context {context!r} sent a header that is not latin-1 "
            f"({name[:100]!r}): not passed on",
        ) from None


def status_for_error(exc: KubemuxError, context: str) -> StatusError:
    """The answer for a failure to reach or start ``context``."""
    if isinstance(exc, ContextNotFound | ContextRemoved):
        return StatusError(404, f"kubemux proxy: {exc}")
    if isinstance(exc, StartTimeout):
        return StatusError(
            503, f"kubemux proxy: context {context!r}: {exc}", headers={"Retry-After": "5"}
        )
    if isinstance(exc, ServerTimeout):
        return StatusError(504, f"kubemux proxy: context {context!r}: {exc}")
    if isinstance(exc, ClusterUnreachable | CredentialError | KubeconfigError):
        return StatusError(
            503, f"kubemux proxy: context {context!r}: {exc}", headers={"Retry-After": "1"}
        )
    if isinstance(exc, ApiError):
        code = exc.status if 400 <= exc.status < 600 else 503
        return StatusError(code, exc.message or str(exc), reason=exc.reason or None)
    return StatusError(503, f"kubemux proxy: context {context!r}: {exc}")


async def send_bytes(
    send: Send,
    status: int,
    body: bytes,
    *,
    content_type: str = JSON,
    headers: Iterable[tuple[bytes, bytes]] = (),
) -> None:
    """One whole response."""
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", content_type.encode("latin-1")),
                (b"content-length", str(len(body)).encode()),
                *headers,
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


async def send_error(send: Send, error: StatusError) -> None:
    await send_bytes(
        send,
        error.code,
        error.body(),
        headers=[(k.lower().encode(), v.encode("latin-1")) for k, v in error.headers.items()],
    )
