"""Discovery documents: ``/version``, ``/api``, ``/apis``, ``/apis/{group}[/{version}]``.

Legacy discovery (``APIVersions``, ``APIGroupList``, ``APIGroup``, ``APIResourceList``) and
aggregated discovery (``APIGroupDiscoveryList``, ``apidiscovery.k8s.io`` v2 and v2beta1), which
``/api`` and ``/apis`` answer when the Accept header asks for it, as kube-apiserver 1.30+ does.
"""

from __future__ import annotations

from typing import Any

from ..._resources import Resource
from .._state.crd import version_priority
from .._state.state import ObjectStore

__all__ = [
    "DISCOVERY_VERSIONS",
    "VERSION_INFO",
    "aggregated",
    "api_versions",
    "group_list",
    "groups",
    "resource_list",
]

DISCOVERY_VERSIONS = ("v2", "v2beta1")

_VERBS = ["get", "list", "watch"]
_SHORT_NAMES = {
    "pods": ["po"],
    "services": ["svc"],
    "configmaps": ["cm"],
    "events": ["ev"],
    "endpoints": ["ep"],
    "serviceaccounts": ["sa"],
    "persistentvolumeclaims": ["pvc"],
    "replicationcontrollers": ["rc"],
    "namespaces": ["ns"],
    "nodes": ["no"],
    "persistentvolumes": ["pv"],
    "deployments": ["deploy"],
    "replicasets": ["rs"],
    "statefulsets": ["sts"],
    "daemonsets": ["ds"],
    "cronjobs": ["cj"],
    "ingresses": ["ing"],
    "customresourcedefinitions": ["crd", "crds"],
    "horizontalpodautoscalers": ["hpa"],
}
_SHORT_NAME_GROUPS = (
    "",
    "apps",
    "autoscaling",
    "batch",
    "networking.k8s.io",
    "apiextensions.k8s.io",
)
_ALL_CATEGORY = {
    "pods",
    "services",
    "replicationcontrollers",
    "deployments",
    "replicasets",
    "statefulsets",
    "daemonsets",
    "jobs",
    "cronjobs",
    "horizontalpodautoscalers",
}
VERSION_INFO = {
    "major": "1",
    "minor": "32",
    "gitVersion": "v1.32.0+kubemux-fake",
    "gitCommit": "0000000000000000000000000000000000000000",
    "gitTreeState": "clean",
    "buildDate": "2025-01-01T00:00:00Z",
    "goVersion": "go1.23.4",
    "compiler": "gc",
    "platform": "linux/amd64",
}


def api_versions(host: str) -> dict[str, Any]:
    """``/api``: the core group's versions."""
    return {
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": host}],
    }


def _group_versions(store: ObjectStore) -> dict[str, list[str]]:
    """Named group -> its served versions, preferred first."""
    found: dict[str, list[str]] = {}
    for res in store.resources():
        if res.group:
            versions = found.setdefault(res.group, [])
            for version in store.served_versions(res):
                if version not in versions:
                    versions.append(version)
    return {g: sorted(v, key=version_priority) for g, v in found.items()}


def groups(store: ObjectStore) -> dict[str, dict[str, Any]]:
    """Group name -> its ``APIGroup`` document (``/apis/{group}``), named groups only."""
    out: dict[str, dict[str, Any]] = {}
    for group, versions in _group_versions(store).items():
        entries = [{"groupVersion": f"{group}/{v}", "version": v} for v in versions]
        out[group] = {
            "kind": "APIGroup",
            "apiVersion": "v1",
            "name": group,
            "versions": entries,
            "preferredVersion": entries[0],
        }
    return out


def group_list(store: ObjectStore) -> dict[str, Any]:
    """``/apis``: every named group."""
    entries = [
        {k: v for k, v in g.items() if k not in ("kind", "apiVersion")}
        for g in groups(store).values()
    ]
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": entries}


def _served(store: ObjectStore, group: str, version: str) -> list[Resource]:
    return [
        r for r in store.resources() if r.group == group and version in store.served_versions(r)
    ]


def resource_list(store: ObjectStore, group: str, version: str) -> dict[str, Any] | None:
    """``/api/v1`` or ``/apis/{group}/{version}``: the resources served there (None: none)."""
    found = _served(store, group, version)
    if not found:
        return None
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": f"{group}/{version}" if group else version,
        "resources": [_api_resource(store, r) for r in found],
    }


def describe(store: ObjectStore, res: Resource) -> tuple[str, str, list[str], list[str], list[str]]:
    """``(kind, singular, short names, categories, verbs)`` of a served resource."""
    kind = store.state(res).kind
    if res.verbs:  # a CRD's resource: its names come from the CRD
        return kind, res.singular, list(res.short_names), list(res.categories), list(res.verbs)
    short = _SHORT_NAMES.get(res.plural) if res.group in _SHORT_NAME_GROUPS else None
    all_category = res.plural in _ALL_CATEGORY and res.group in ("", "apps", "autoscaling", "batch")
    return kind, kind.lower(), list(short or ()), ["all"] if all_category else [], _VERBS


def _api_resource(store: ObjectStore, res: Resource) -> dict[str, Any]:
    kind, singular, short, categories, verbs = describe(store, res)
    entry: dict[str, Any] = {
        "name": res.plural,
        "singularName": singular,
        "namespaced": res.namespaced,
        "kind": kind,
        "verbs": verbs,
    }
    if short:
        entry["shortNames"] = short
    if categories:
        entry["categories"] = categories
    return entry


def aggregated(store: ObjectStore, *, core: bool, version: str) -> dict[str, Any]:
    """``/api`` (core) or ``/apis`` as an ``APIGroupDiscoveryList`` of ``version``."""
    if core:
        plan: dict[str, list[str]] = {"": ["v1"]}
    else:
        plan = _group_versions(store)
    items: list[dict[str, Any]] = []
    for group, versions in plan.items():
        metadata: dict[str, Any] = {"creationTimestamp": None}
        if group:
            metadata = {"name": group, "creationTimestamp": None}
        entries = []
        for gv in versions:
            resources = []
            for res in _served(store, group, gv):
                kind, singular, short, categories, verbs = describe(store, res)
                entry: dict[str, Any] = {
                    "resource": res.plural,
                    "responseKind": {"group": "", "version": "", "kind": kind},
                    "scope": "Namespaced" if res.namespaced else "Cluster",
                    "singularResource": singular,
                    "verbs": verbs,
                }
                if short:
                    entry["shortNames"] = short
                if categories:
                    entry["categories"] = categories
                resources.append(entry)
            entries.append({"version": gv, "resources": resources, "freshness": "Current"})
        items.append({"metadata": metadata, "versions": entries})
    return {
        "kind": "APIGroupDiscoveryList",
        "apiVersion": f"apidiscovery.k8s.io/{version}",
        "metadata": {},
        "items": items,
    }
