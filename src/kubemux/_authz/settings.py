"""An authorizer's settings and its answers (values; see :mod:`.authorizer`)."""

from __future__ import annotations

import dataclasses

from .._resources import Resource
from .rbac import Kind, RoleKey

__all__ = ["RBAC_RESOURCES", "AccessDecision", "AuthorizerSettings"]

_RBAC = "rbac.authorization.k8s.io"
RBAC_RESOURCES: dict[Kind, Resource] = {
    "roles": Resource(group=_RBAC, version="v1", plural="roles", kind="Role"),
    "clusterroles": Resource(
        group=_RBAC, version="v1", plural="clusterroles", kind="ClusterRole", namespaced=False
    ),
    "rolebindings": Resource(group=_RBAC, version="v1", plural="rolebindings", kind="RoleBinding"),
    "clusterrolebindings": Resource(
        group=_RBAC,
        version="v1",
        plural="clusterrolebindings",
        kind="ClusterRoleBinding",
        namespaced=False,
    ),
}


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class AuthorizerSettings:
    """How an authorizer caches and when it asks the API server.

    Attributes:
        token_ttl: Seconds a TokenReview's answer is reused at most (kube-apiserver's
            webhook token authenticator keeps its answers 2 min); never past the token's
            ``exp`` when it is a JWT.
        token_failure_ttl: Seconds an invalid token's answer is reused.
        allow_ttl: Seconds a SubjectAccessReview's allow is reused (the API server's
            webhook authorizer: 5 min).
        deny_ttl: Seconds a SubjectAccessReview's denial is reused (30 s).
        review_denials: Ask a SubjectAccessReview before any denial (False: local RBAC
            only, for clusters with no other authorizer; no review is ever sent).
        local_allows: Take local RBAC's allows as final (True). False for a cluster whose
            authorizer chain can *deny* before RBAC (a structured authorization
            configuration with a webhook first): then every decision is reviewed (cached).
        audiences: The audiences a TokenReview asks for (empty: the API server's).
        max_tokens: TokenReview answers kept at most.
        max_reviews: SubjectAccessReview answers kept at most.
        max_users: Permission sets kept at most.
        sync_timeout: Seconds a call waits for the RBAC informers to sync before
            :class:`NotSynced`.
    """

    token_ttl: float = 120.0
    token_failure_ttl: float = 10.0
    allow_ttl: float = 300.0
    deny_ttl: float = 30.0
    review_denials: bool = True
    local_allows: bool = True
    audiences: tuple[str, ...] = ()
    max_tokens: int = 10_000
    max_reviews: int = 10_000
    max_users: int = 10_000
    sync_timeout: float = 30.0


@dataclasses.dataclass(frozen=True, slots=True)
class AccessDecision:
    """An authorizer's answer for one request.

    Attributes:
        allowed: Whether the API server would allow it.
        reason: What the API server's 403 appends on a denial (``RBAC: ...`` resolution
            errors, a webhook's reason), or ``""``.
        by: ``"system:masters"``, ``"rbac"`` (local RBAC allowed), ``"review"`` (a
            SubjectAccessReview answered, maybe from the cache), ``"rbac-only"`` (local
            RBAC denied and no review was asked, or it could not be).
        role: The role that allowed it, when local RBAC did.
    """

    allowed: bool
    reason: str = ""
    by: str = "rbac"
    role: RoleKey | None = None
