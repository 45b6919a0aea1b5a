"""TokenReview and SubjectAccessReview: the bodies kubemux sends and how it reads the answers.

A TokenReview (``authentication.k8s.io/v1``) asks the API server who a bearer token is; a
SubjectAccessReview (``authorization.k8s.io/v1``) asks whether a user may do something,
by every authorizer the cluster runs (webhooks, the Node authorizer, RBAC). Both are sent
with the context's own (kubeconfig) credentials, which need ``create`` on
``tokenreviews`` and ``subjectaccessreviews`` (``system:auth-delegator`` grants both).
A SubjectAccessReview carries the user's name, uid, groups and extra as TokenReview gave
them, and the request's selectors.
"""

from __future__ import annotations

from typing import Any, Protocol

import orjson

from .._errors import ApiError, ProtocolError, api_error_from_status
from .attributes import Attributes
from .user import User

__all__ = [
    "ACCESS_REVIEW_PATH",
    "TOKEN_REVIEW_PATH",
    "ReviewClient",
    "access_review_body",
    "read_access_review",
    "read_token_review",
    "token_review_body",
]

TOKEN_REVIEW_PATH = "/apis/authentication.k8s.io/v1/tokenreviews"
ACCESS_REVIEW_PATH = "/apis/authorization.k8s.io/v1/subjectaccessreviews"
MAX_ANSWER = 1024 * 1024
"""Bytes of a review's answer read at most (real ones are a few hundred)."""


class ReviewClient(Protocol):
    """Sends a review with the context's credentials: ``post(path, body) -> (status, bytes)``."""

    async def post(self, path: str, body: bytes) -> tuple[int, bytes]: ...


def token_review_body(token: str, audiences: tuple[str, ...] = ()) -> bytes:
    spec: dict[str, Any] = {"token": token}
    if audiences:
        spec["audiences"] = list(audiences)
    return orjson.dumps(
        {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": spec}
    )


def _answer(status: int, body: bytes, what: str) -> dict[str, Any]:
    if status >= 300:
        raise api_error_from_status(status, body)
    try:
        parsed = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise ProtocolError("API server", f"the {what} answer is not JSON") from exc
    answer = parsed.get("status") if isinstance(parsed, dict) else None
    if not isinstance(answer, dict):
        raise ProtocolError("API server", f"the {what} answer has no status")
    return answer


def read_token_review(status: int, body: bytes) -> User | None:
    """The user a TokenReview answer authenticates, or None (the token is not valid).

    Raises:
        ApiError: the review itself failed (403: the kubeconfig's credentials may not
            create TokenReviews; 5xx ...).
        ProtocolError: the answer is not a TokenReview, or its user is not a UserInfo.
    """
    answer = _answer(status, body, "TokenReview")
    if answer.get("authenticated") is not True:
        return None
    try:
        return User.from_user_info(answer.get("user"))
    except ValueError as exc:
        raise ProtocolError("API server", f"the TokenReview answer's user: {exc}") from exc


def access_review_body(user: User, attrs: Attributes) -> bytes:
    spec: dict[str, Any] = {}
    if attrs.resource_request:
        resource: dict[str, Any] = {}
        for key, value in (
            ("namespace", attrs.namespace),
            ("verb", attrs.verb),
            ("group", attrs.api_group),
            ("version", attrs.api_version),
            ("resource", attrs.resource),
            ("subresource", attrs.subresource),
            ("name", attrs.name),
        ):
            if value:
                resource[key] = value
        if attrs.field_selector:
            resource["fieldSelector"] = {"rawSelector": attrs.field_selector}
        if attrs.label_selector:
            resource["labelSelector"] = {"rawSelector": attrs.label_selector}
        spec["resourceAttributes"] = resource
    else:
        spec["nonResourceAttributes"] = {"path": attrs.path, "verb": attrs.verb}
    spec["user"] = user.name
    if user.groups:
        spec["groups"] = list(user.groups)
    if user.extra:
        spec["extra"] = {k: list(v) for k, v in user.extra.items()}
    if user.uid:
        spec["uid"] = user.uid
    return orjson.dumps(
        {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": spec}
    )


def read_access_review(status: int, body: bytes) -> tuple[bool, str]:
    """``(allowed, reason)`` of a SubjectAccessReview answer (``reason``: what the API
    server's 403 would append).

    Raises:
        ApiError: the review itself failed.
        ProtocolError: the answer is not a SubjectAccessReview.
    """
    answer = _answer(status, body, "SubjectAccessReview")
    reason = answer.get("reason")
    return answer.get("allowed") is True and answer.get("denied") is not True, (
        reason if isinstance(reason, str) else ""
    )


def is_review_failure(exc: BaseException) -> bool:
    """Whether ``exc`` means the review could not be made (not an answer about the user)."""
    return isinstance(exc, ApiError | ProtocolError)
