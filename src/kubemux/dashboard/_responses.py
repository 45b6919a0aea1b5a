"""The dashboard's JSON answers: :func:`json_response`, and :class:`Problem` for errors."""

from __future__ import annotations

import math
from collections.abc import Mapping

import orjson
from starlette.responses import Response

from .._redact import redact_text

__all__ = ["Problem", "json_response"]


class Problem(Exception):
    """An API error: answered as JSON ``{"error": message, "status": status}``."""

    def __init__(self, status: int, message: str, *, retry_after: float | None = None) -> None:
        message = redact_text(message)  # a server URL in an error keeps no password
        super().__init__(message)
        self.status = status
        self.message = message
        self.retry_after = retry_after

    def response(self) -> Response:
        headers = {}
        if self.retry_after is not None:
            headers["Retry-After"] = str(max(1, math.ceil(self.retry_after)))
        body = {"error": self.message, "status": self.status}
        return json_response(body, status=self.status, headers=headers)


def json_response(
    body: object, *, status: int = 200, headers: Mapping[str, str] | None = None
) -> Response:
    """``body`` as ``application/json`` (orjson)."""
    return Response(
        orjson.dumps(body), status_code=status, headers=headers, media_type="application/json"
    )
