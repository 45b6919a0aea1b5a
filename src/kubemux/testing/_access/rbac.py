"""Authentication and authorization of the fake API server: credentials, RBAC, the 403."""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Iterable
from typing import Any

from aiohttp import web

from ..._resources import Resource
from .._wire.responses import status_response

__all__ = [
    "REVIEW_VERSIONS",
    "Access",
    "bearer",
    "common_name",
    "forbidden",
    "peercert",
    "review_versions",
    "self_subject_review",
]

REVIEW_VERSIONS = ("v1", "v1beta1", "v1alpha1")
"""The versions of ``authentication.k8s.io`` that have ``selfsubjectreviews``."""


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


def common_name(cert: dict[str, Any] | None) -> str | None:
    """The subject's common name of a peer certificate (``getpeercert()``), or None."""
    for rdn in (cert or {}).get("subject", ()):
        for key, value in rdn:
            if key == "commonName":
                return str(value)
    return None


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


def review_versions(served: bool | Iterable[str]) -> frozenset[str]:
    """The ``selfsubjectreviews`` versions a FakeCluster serves (see its ``self_subject_review``).

    Raises:
        ValueError: a version ``authentication.k8s.io`` never had.
    """
    if served is True:
        return frozenset(("v1", "v1beta1"))  # what Kubernetes 1.28 and later serve by default
    if served is False:
        return frozenset()
    versions = frozenset(served)
    unknown = sorted(versions - set(REVIEW_VERSIONS))
    if unknown:
        raise ValueError(f"self_subject_review: unknown versions {unknown}; {REVIEW_VERSIONS}")
    return versions


def self_subject_review(
    access: Access | None,
    token: str | None,
    user: str | None = None,
    version: str = "v1",
) -> dict[str, Any]:
    """Who the request's credential is, as kube-apiserver answers it: its :meth:`restrict`
    user, else the user it authenticated as (a signed token's, a client certificate's common
    name), else ``token-<sha8>`` for a static token (``system:anonymous`` without any)."""
    if access is not None:
        name = access.user
    elif user is not None and user != "static":
        name = user
    elif token is not None:
        name = "token-" + hashlib.sha256(token.encode()).hexdigest()[:8]
    else:
        name = "system:anonymous"
    anonymous = name == "system:anonymous"
    groups = ["system:unauthenticated"] if anonymous else ["system:authenticated"]
    return {
        "kind": "SelfSubjectReview",
        "apiVersion": f"authentication.k8s.io/{version}",
        "metadata": {"creationTimestamp": None},
        "status": {"userInfo": {"username": name, "groups": groups}},
    }
