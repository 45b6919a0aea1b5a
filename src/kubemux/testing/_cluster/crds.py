"""FakeCluster's custom resource methods: CRDs and resources served without one."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ..._resources import Resource
from .._state.state import ObjectStore

__all__ = ["CrdControls"]


class CrdControls:
    """The CRD methods of :class:`FakeCluster`."""

    _store: ObjectStore

    def add_crd(
        self,
        group: str,
        plural: str,
        kind: str,
        *,
        versions: Iterable[str] = ("v1",),
        namespaced: bool = True,
        singular: str | None = None,
        short_names: Iterable[str] = (),
        categories: Iterable[str] = (),
        printer_columns: Iterable[Mapping[str, Any]] | None = None,
    ) -> dict[str, Any]:
        """Create a ``CustomResourceDefinition`` (apiextensions.k8s.io/v1) named ``plural.group``.

        Its resource is served at once at every version in ``versions`` (discovery prefers
        the highest by Kubernetes version priority) and listed in discovery; objects can be
        created with ``create("<plural>.<group>", ...)``. :meth:`delete_crd` withdraws it.

        Args:
            printer_columns: ``additionalPrinterColumns`` (``name``, ``type``, ``jsonPath``,
                optional ``priority``, ``description``, ``format``) for every version; None
                gives the default ``Age`` column, as the API server does.

        Returns:
            A copy of the stored CRD.
        """
        names: dict[str, Any] = {
            "plural": plural,
            "singular": singular or kind.lower(),
            "kind": kind,
            "listKind": f"{kind}List",
        }
        if short := list(short_names):
            names["shortNames"] = short
        if cats := list(categories):
            names["categories"] = cats
        columns = list(printer_columns) if printer_columns is not None else None
        version_list = list(versions)
        entries: list[dict[str, Any]] = []
        for index, version in enumerate(version_list):
            entry: dict[str, Any] = {
                "name": version,
                "served": True,
                "storage": index == 0,
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "x-kubernetes-preserve-unknown-fields": True,
                    }
                },
            }
            if columns is not None:
                entry["additionalPrinterColumns"] = columns
            entries.append(entry)
        crd = {
            "metadata": {"name": f"{plural}.{group}"},
            "spec": {
                "group": group,
                "names": names,
                "scope": "Namespaced" if namespaced else "Cluster",
                "versions": entries,
            },
        }
        return self._store.create("customresourcedefinitions", crd)

    def delete_crd(self, name: str) -> dict[str, Any] | None:
        """Delete the CRD ``name`` (``plural.group``): its resource 404s, its watches end.

        Returns:
            The deleted CRD, or None if there was none.
        """
        return self._store.delete("customresourcedefinitions", None, name)

    def register_resource(self, resource: Resource) -> None:
        """Serve a custom resource type and list it in discovery.

        Also registers it process-wide for :func:`kubemux.parse_resource`. Resources used
        in object operations are registered automatically.
        """
        self._store.register(resource)
