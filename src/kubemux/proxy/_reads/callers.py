"""Who a request comes from, and a proxy status error as an answer (shared by the reads
and the app)."""

from __future__ import annotations

import hashlib

from starlette.types import Scope

from .._api.responses import StatusError
from .._api.statuses import ProxyStatusError

__all__ = ["as_status_error", "credential_key"]


def as_status_error(exc: ProxyStatusError) -> StatusError:
    """The answer of a :class:`ProxyStatusError`: its Status body exactly."""
    return StatusError(
        exc.code, exc.message, reason=exc.reason or None, headers=exc.headers, raw=exc.body
    )


def credential_key(scope: Scope) -> str:
    """Who a request comes from, for per-credential caps: a digest of its
    ``Authorization`` header (the proxy's bearer token), else its client address."""
    for name, value in scope.get("headers") or ():
        if name == b"authorization":
            return "auth:" + hashlib.sha256(value).hexdigest()[:32]
    client = scope.get("client")
    return f"client:{client[0]}" if client else "anonymous"
