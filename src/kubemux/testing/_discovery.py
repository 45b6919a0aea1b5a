"""Discovery documents: ``/version``, ``/api``, ``/apis``, ``/apis/{group}[/{version}]``.

Plain JSON only (no aggregated discovery): clients such as kubectl fall back to these.
"""

from __future__ import annotations

from typing import Any

from .._resources import Resource
from ._state import ObjectStore

__all__ = ["VERSION_INFO", "api_versions", "group_list", "groups", "resource_list"]

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
}
_SHORT_NAME_GROUPS = ("", "apps", "batch", "networking.k8s.io", "apiextensions.k8s.io")
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


def groups(store: ObjectStore) -> dict[str, dict[str, Any]]:
    """Group name -> its ``APIGroup`` document (``/apis/{group}``), named groups only."""
    found: dict[str, list[str]] = {}
    for res in store.resources():
        if res.group:
            versions = found.setdefault(res.group, [])
            if res.version not in versions:
                versions.append(res.version)
    out: dict[str, dict[str, Any]] = {}
    for group, versions in found.items():
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


def resource_list(store: ObjectStore, group: str, version: str) -> dict[str, Any] | None:
    """``/api/v1`` or ``/apis/{group}/{version}``: the resources served there (None: none)."""
    found = [r for r in store.resources() if r.group == group and r.version == version]
    if not found:
        return None
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": f"{group}/{version}" if group else version,
        "resources": [_api_resource(store, r) for r in found],
    }


def _api_resource(store: ObjectStore, res: Resource) -> dict[str, Any]:
    kind = store.state(res).kind
    entry: dict[str, Any] = {
        "name": res.plural,
        "singularName": kind.lower(),
        "namespaced": res.namespaced,
        "kind": kind,
        "verbs": _VERBS,
    }
    short = _SHORT_NAMES.get(res.plural)
    if short and res.group in _SHORT_NAME_GROUPS:
        entry["shortNames"] = short
    if res.plural in _ALL_CATEGORY and res.group in ("", "apps", "batch"):
        entry["categories"] = ["all"]
    return entry
