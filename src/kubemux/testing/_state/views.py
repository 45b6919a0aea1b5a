"""Subresources as views of their object, and which kinds have them.

``status`` is the object whose writes change only ``.status``; ``scale`` is an
``autoscaling/v1`` Scale whose writes change ``spec.replicas``. Writes of the main resource of
a kind with a status subresource keep the stored ``.status``, as the API server's update
strategies do.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .._printers.base import label_selector
from .._wire.protocol import BadRequest
from .resource import ResourceState
from .state import ObjectStore

__all__ = ["SCALE_KINDS", "STATUS_KINDS", "has_status", "scale_view", "unview", "view"]

STATUS_KINDS = frozenset(
    {
        ("", "pods"),
        ("", "services"),
        ("", "nodes"),
        ("", "namespaces"),
        ("", "persistentvolumes"),
        ("", "persistentvolumeclaims"),
        ("", "replicationcontrollers"),
        ("", "resourcequotas"),
        ("apps", "deployments"),
        ("apps", "replicasets"),
        ("apps", "statefulsets"),
        ("apps", "daemonsets"),
        ("batch", "jobs"),
        ("batch", "cronjobs"),
        ("autoscaling", "horizontalpodautoscalers"),
        ("policy", "poddisruptionbudgets"),
        ("networking.k8s.io", "ingresses"),
        ("apiextensions.k8s.io", "customresourcedefinitions"),
    }
)
"""Built-in kinds with a ``status`` subresource (their main resource ignores ``.status``)."""
SCALE_KINDS = frozenset(
    {
        ("apps", "deployments"),
        ("apps", "replicasets"),
        ("apps", "statefulsets"),
        ("", "replicationcontrollers"),
    }
)


def has_status(store: ObjectStore, state: ResourceState) -> bool:
    """Whether the kind has a ``status`` subresource."""
    res = state.resource
    crd = store.crds.get((res.group, res.plural))
    return crd.status if crd is not None else (res.group, res.plural) in STATUS_KINDS


def scale_view(state: ResourceState, obj: Mapping[str, Any]) -> dict[str, Any]:
    """The ``autoscaling/v1`` Scale of a Deployment, ReplicaSet or StatefulSet."""
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    selector = spec.get("selector")
    if state.resource.group == "":  # a ReplicationController's selector is a plain map
        selector = {"matchLabels": selector} if isinstance(selector, Mapping) else None
    return {
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": {
            k: meta[k]
            for k in ("name", "namespace", "uid", "resourceVersion", "creationTimestamp")
            if k in meta
        },
        "spec": {"replicas": int(spec.get("replicas", 1) or 0)},
        "status": {
            "replicas": int(status.get("replicas") or 0),
            "selector": label_selector(selector) if selector is not None else "",
        },
    }


def view(state: ResourceState, sub: str | None, obj: dict[str, Any]) -> dict[str, Any]:
    return scale_view(state, obj) if sub == "scale" else obj


def unview(
    store: ObjectStore, state: ResourceState, sub: str | None, old: Mapping[str, Any], new: Any
) -> dict[str, Any]:
    """The object to store after a write of view ``new``."""
    if not isinstance(new, Mapping):
        raise BadRequest("the object is not a JSON object")
    if sub == "scale":
        replicas = (new.get("spec") or {}).get("replicas")
        if not isinstance(replicas, int) or isinstance(replicas, bool) or replicas < 0:
            raise BadRequest(f"spec.replicas: Invalid value: {replicas!r}")
        return {**old, "spec": {**(old.get("spec") or {}), "replicas": replicas}}
    if sub == "status":
        out = dict(old)
        if "status" in new:
            out["status"] = new["status"]
        else:
            out.pop("status", None)
        return out
    out = dict(new)
    if has_status(store, state):
        if "status" in old:
            out["status"] = old["status"]
        else:
            out.pop("status", None)
    return out
