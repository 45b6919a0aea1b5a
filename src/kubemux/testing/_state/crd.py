"""What a CustomResourceDefinition serves, and Kubernetes' version priority."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from typing import Any

from ..._resources import Resource, name_problem

__all__ = ["CrdInfo", "version_priority"]

_VERSION = re.compile(r"^v(\d+)(?:(alpha|beta)(\d+))?$")


def version_priority(version: str) -> tuple[int, int, int, str]:
    """Sort key of Kubernetes version priority: v2 > v1 > v1beta2 > v1beta1 > v1alpha1 > foo."""
    match = _VERSION.match(version)
    if match is None:
        return (3, 0, 0, version)
    stage = {None: 0, "beta": 1, "alpha": 2}[match.group(2)]
    return (stage, -int(match.group(1)), -int(match.group(3) or 0), version)


@dataclasses.dataclass(frozen=True, slots=True)
class CrdInfo:
    """What one CustomResourceDefinition serves."""

    resource: Resource  # at the preferred version, with names, short names and categories
    versions: tuple[str, ...]  # served, by version priority (preferred first)
    columns: Mapping[str, list[dict[str, Any]]]  # version -> additionalPrinterColumns
    status: bool = False  # some served version has the status subresource

    @classmethod
    def parse(cls, crd: Mapping[str, Any]) -> CrdInfo | None:
        """Read a CRD object; None when it names no group or plural, serves no version, or
        has a name kube-apiserver would refuse (no resource is served for it)."""
        spec = crd.get("spec") or {}
        names = spec.get("names") or {}
        group, plural = str(spec.get("group") or ""), str(names.get("plural") or "")
        served = [
            v
            for v in spec.get("versions") or []
            if isinstance(v, Mapping) and v.get("served", True)
        ]
        if not group or not plural or not served:
            return None
        versions = tuple(sorted((str(v.get("name")) for v in served), key=version_priority))
        kind = str(names.get("kind") or "")
        if name_problem("group", group) or name_problem("plural", plural):
            return None  # kube-apiserver refuses such a CRD (422); nothing is served
        if any(name_problem("version", v) for v in versions):
            return None
        resource = Resource(
            group=group,
            version=versions[0],
            plural=plural,
            kind=kind,
            namespaced=spec.get("scope", "Namespaced") != "Cluster",
            singular=str(names.get("singular") or kind.lower()),
            short_names=tuple(names.get("shortNames") or ()),
            categories=tuple(names.get("categories") or ()),
            verbs=(
                "delete",
                "deletecollection",
                "get",
                "list",
                "patch",
                "create",
                "update",
                "watch",
            ),
        )
        columns = {
            str(v.get("name")): list(v.get("additionalPrinterColumns") or []) for v in served
        }
        status = any(
            isinstance((v.get("subresources") or {}).get("status"), Mapping) for v in served
        )
        return cls(resource, versions, columns, status)
