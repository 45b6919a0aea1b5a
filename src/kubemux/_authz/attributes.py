"""What a request asks to do, in the terms an authorizer reads (kube-apiserver's
``authorizer.Attributes``, without the user).

Plain values: the proxy builds them from a request's method, path and query the way
kube-apiserver's ``RequestInfoFactory`` does; a SubjectAccessReview carries the same fields.
Empty strings mean "none", as in Kubernetes (the cluster scope is namespace ``""``).
"""

from __future__ import annotations

import dataclasses

__all__ = ["Attributes"]


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Attributes:
    """One request's authorization attributes.

    Attributes:
        verb: ``get``, ``list``, ``watch``, ``create``, ``update``, ``patch``, ``delete``,
            ``deletecollection``, or another verb (``impersonate``, ``escalate``); for a
            non-resource request the lower-cased HTTP method (``get``, ``post`` ...).
        resource: The resource's plural (``pods``), for a resource request.
        api_group: The API group (``""``: the core group).
        api_version: The API version (not read by RBAC; the 403's Status carries it).
        subresource: ``log``, ``status``, ``scale`` ... or ``""``.
        name: The object's name, or ``""`` (a LIST or WATCH limited by
            ``fieldSelector=metadata.name=X`` is a request for ``X``).
        namespace: The namespace, or ``""`` for the cluster scope. A request on a Namespace
            object is in that namespace (``GET /api/v1/namespaces/web`` is in ``web``).
        path: The URL path of a non-resource request (``/healthz``, ``/version``).
        resource_request: False for a non-resource request (``path`` is then what is asked).
        field_selector: The request's field selector, sent on with a SubjectAccessReview.
        label_selector: The request's label selector, sent on with a SubjectAccessReview.
    """

    verb: str
    resource: str = ""
    api_group: str = ""
    api_version: str = ""
    subresource: str = ""
    name: str = ""
    namespace: str = ""
    path: str = ""
    resource_request: bool = True
    field_selector: str = ""
    label_selector: str = ""

    @classmethod
    def non_resource(cls, verb: str, path: str) -> Attributes:
        """A non-resource request: ``verb`` (lower case) on ``path``."""
        return cls(verb=verb, path=path, resource_request=False)

    @property
    def qualified_resource(self) -> str:
        """``resource.group`` as Kubernetes writes a GroupResource (``deployments.apps``;
        ``pods`` for the core group)."""
        return f"{self.resource}.{self.api_group}" if self.api_group else self.resource
