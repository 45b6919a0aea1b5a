"""Authentication and authorization of the fake API server: credentials, RBAC, the 403."""

from __future__ import annotations

import dataclasses
import hashlib
from typing import Any

from aiohttp import web

from .._resources import Resource
from ._responses import status_response

__all__ = ["Access", "bearer", "forbidden", "peercert", "self_subject_review"]


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Access:
    """What one bearer token may read: RBAC reduced to namespaces and resources.

    Attributes:
        user: The user name the 403 messages name.
        namespaces: Namespaces it may use (None: all, cluster scope included). When set,
            cluster-wide requests and cluster-scoped resources are forbidden.
        resources: Resources it may use, by full name (``pods``, ``deployments.apps``);
            None: all.
    """

    user: str
    namespaces: frozenset[str] | None = None
    resources: frozenset[str] | None = None

    def allows(self, resource: Resource, namespace: str | None) -> bool:
        """Whether a request for ``resource`` in ``namespace`` (None: all) is allowed."""
        if self.resources is not None and resource.name not in self.resources:
            return False
        if self.namespaces is None:
            return True
        return resource.namespaced and namespace is not None and namespace in self.namespaces


def bearer(header: str | None) -> str | None:
    if not header:
        return None
    scheme, _, value = header.partition(" ")
    return value.strip() or None if scheme.lower() == "bearer" else None


def peercert(request: web.BaseRequest) -> dict[str, Any] | None:
    transport = request.transport
    ssl_object = transport.get_extra_info("ssl_object") if transport is not None else None
    if ssl_object is None:
        return None
    cert: dict[str, Any] | None = ssl_object.getpeercert()
    return cert


def forbidden(
    user: str, verb: str, resource: Resource, namespace: str | None, name: str | None
) -> web.Response:
    """The 403 kube-apiserver's RBAC authorizer writes."""
    subject = f'{resource.name} "{name}"' if name else resource.name
    where = (
        f'in the namespace "{namespace}"'
        if namespace is not None and resource.namespaced
        else "at the cluster scope"
    )
    details: dict[str, Any] = {}
    if name:
        details["name"] = name
    if resource.group:
        details["group"] = resource.group
    details["kind"] = resource.plural
    return status_response(
        403,
        "Forbidden",
        f'{subject} is forbidden: User "{user}" cannot {verb} resource "{resource.plural}" '
        f'in API group "{resource.group}" {where}',
        details=details,
    )


def self_subject_review(access: Access | None, token: str | None) -> dict[str, Any]:
    """Who the token is: its :meth:`FakeCluster.restrict` user, else ``token-<sha8>``
    (``system:anonymous`` without a token)."""
    if access is not None:
        user = access.user
    elif token is not None:
        user = "token-" + hashlib.sha256(token.encode()).hexdigest()[:8]
    else:
        user = "system:anonymous"
    groups = ["system:unauthenticated"] if token is None else ["system:authenticated"]
    return {
        "kind": "SelfSubjectReview",
        "apiVersion": "authentication.k8s.io/v1",
        "metadata": {"creationTimestamp": None},
        "status": {"userInfo": {"username": user, "groups": groups}},
    }
