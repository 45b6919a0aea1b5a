"""What a request is about, as kube-apiserver's ``RequestInfoFactory`` reads it from the URL.

Sync and free of I/O: the router and the request records both use it, so a test can count
"0 LIST of pods" without parsing paths itself.
"""

from __future__ import annotations

import dataclasses

__all__ = ["RequestInfo", "request_info"]

_VERBS = {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}
_NAMESPACE_SUBRESOURCES = ("status", "finalize")


@dataclasses.dataclass(frozen=True, slots=True)
class RequestInfo:
    """The parts of a resource request; ``resource`` is None for other paths.

    Attributes:
        verb: The Kubernetes verb: ``get``, ``list``, ``watch``, ``create``, ``update``,
            ``patch``, ``delete``, ``deletecollection`` (``get`` for non-resource paths).
        group: The API group (``""`` for the core group).
        version: The API version.
        namespace: The namespace in the path, or None.
        plural: The resource's plural, or None for a non-resource path.
        name: The object's name, or None for a collection.
        subresource: ``status``, ``scale``, ``log``, ``exec`` ..., or None.
        extra: Path segments after the subresource (nothing serves those: a 404).
    """

    verb: str
    group: str = ""
    version: str = ""
    namespace: str | None = None
    plural: str | None = None
    name: str | None = None
    subresource: str | None = None
    extra: tuple[str, ...] = ()

    @property
    def resource(self) -> str | None:
        """The resource's full name as kubectl writes it: ``pods``, ``deployments.apps``."""
        if self.plural is None:
            return None
        return f"{self.plural}.{self.group}" if self.group else self.plural


def request_info(method: str, path: str, *, is_watch: bool) -> RequestInfo:
    """Read the verb and the resource of a request from its method and path."""
    parts = [p for p in path.split("/") if p]
    read = "watch" if is_watch else "get"
    if not parts or parts[0] not in ("api", "apis"):
        return RequestInfo(_VERBS.get(method, read))
    if parts[0] == "api":
        if len(parts) < 2:
            return RequestInfo(_VERBS.get(method, read))
        group, version, rest = "", parts[1], parts[2:]
    else:
        if len(parts) < 3:
            return RequestInfo(_VERBS.get(method, read))
        group, version, rest = parts[1], parts[2], parts[3:]
    if not rest:
        return RequestInfo(_VERBS.get(method, read), group, version)
    namespace: str | None = None
    if (
        rest[0] == "namespaces"
        and len(rest) >= 3
        and not (group == "" and len(rest) == 3 and rest[2] in _NAMESPACE_SUBRESOURCES)
    ):
        namespace, rest = rest[1], rest[2:]
    plural = rest[0]
    name = rest[1] if len(rest) >= 2 else None
    subresource = rest[2] if len(rest) >= 3 else None
    extra = tuple(rest[3:])
    if name is None:
        verb = {"POST": "create", "DELETE": "deletecollection"}.get(
            method, "watch" if is_watch else "list"
        )
    else:
        verb = _VERBS.get(method, read)
        if subresource in ("exec", "attach", "portforward") and method == "GET":
            verb = "create"  # a WebSocket upgrade is authorised as create, as in RBAC
    return RequestInfo(verb, group, version, namespace, plural, name, subresource, extra)
