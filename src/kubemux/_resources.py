"""Resource types: parsing kubectl-style names and building API paths.

``"pods"``, ``"po"``, ``"deployments.apps"``, ``"deployments.v1.apps"`` and
``"events.events.k8s.io"`` all resolve to a :class:`Resource`. Names not in the built-in
table need the ``plural.version.group`` form (or a :class:`Resource` value) unless they
have been registered with :func:`register_resource`.
"""

from __future__ import annotations

import dataclasses
from urllib.parse import quote

__all__ = ["BUILTIN_RESOURCES", "Resource", "parse_resource", "register_resource"]


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Resource:
    """One API resource type, e.g. ``Resource(group="apps", version="v1", plural="deployments")``.

    ``group`` is ``""`` for the core API. ``singular``, ``short_names``, ``categories`` and
    ``verbs`` are what discovery reports (empty when unknown); they take no part in equality
    or hashing.
    """

    group: str
    version: str
    plural: str
    namespaced: bool = True
    kind: str = ""
    # what discovery says besides the identity; not part of equality or hashing, so a
    # resource resolved through discovery is the same key as the one written by hand
    singular: str = dataclasses.field(default="", compare=False, repr=False)
    short_names: tuple[str, ...] = dataclasses.field(default=(), compare=False, repr=False)
    categories: tuple[str, ...] = dataclasses.field(default=(), compare=False, repr=False)
    verbs: tuple[str, ...] = dataclasses.field(default=(), compare=False, repr=False)

    @property
    def api_version(self) -> str:
        """``v1`` or ``apps/v1``: the ``apiVersion`` of the objects."""
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def name(self) -> str:
        """The kubectl-style full name: ``pods``, ``deployments.apps``."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    def path(self, namespace: str | None = None) -> str:
        """The collection URL path, cluster-wide or in one namespace."""
        base = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if namespace and self.namespaced:
            return f"{base}/namespaces/{quote(namespace, safe='')}/{self.plural}"
        return f"{base}/{self.plural}"

    def __str__(self) -> str:
        return self.name


def _r(group: str, version: str, plural: str, kind: str, namespaced: bool = True) -> Resource:
    return Resource(group=group, version=version, plural=plural, kind=kind, namespaced=namespaced)


BUILTIN_RESOURCES: tuple[Resource, ...] = (
    _r("", "v1", "pods", "Pod"),
    _r("", "v1", "services", "Service"),
    _r("", "v1", "configmaps", "ConfigMap"),
    _r("", "v1", "secrets", "Secret"),
    _r("", "v1", "events", "Event"),
    _r("", "v1", "endpoints", "Endpoints"),
    _r("", "v1", "serviceaccounts", "ServiceAccount"),
    _r("", "v1", "persistentvolumeclaims", "PersistentVolumeClaim"),
    _r("", "v1", "replicationcontrollers", "ReplicationController"),
    _r("", "v1", "namespaces", "Namespace", namespaced=False),
    _r("", "v1", "nodes", "Node", namespaced=False),
    _r("", "v1", "persistentvolumes", "PersistentVolume", namespaced=False),
    _r("apps", "v1", "deployments", "Deployment"),
    _r("apps", "v1", "replicasets", "ReplicaSet"),
    _r("apps", "v1", "statefulsets", "StatefulSet"),
    _r("apps", "v1", "daemonsets", "DaemonSet"),
    _r("batch", "v1", "jobs", "Job"),
    _r("batch", "v1", "cronjobs", "CronJob"),
    _r("events.k8s.io", "v1", "events", "Event"),
    _r("networking.k8s.io", "v1", "ingresses", "Ingress"),
    _r("coordination.k8s.io", "v1", "leases", "Lease"),
    _r("discovery.k8s.io", "v1", "endpointslices", "EndpointSlice"),
    _r(
        "apiextensions.k8s.io",
        "v1",
        "customresourcedefinitions",
        "CustomResourceDefinition",
        namespaced=False,
    ),
)

_SHORT = {
    "po": "pods",
    "pod": "pods",
    "svc": "services",
    "service": "services",
    "cm": "configmaps",
    "configmap": "configmaps",
    "secret": "secrets",
    "ev": "events",
    "event": "events",
    "ep": "endpoints",
    "sa": "serviceaccounts",
    "pvc": "persistentvolumeclaims",
    "rc": "replicationcontrollers",
    "ns": "namespaces",
    "namespace": "namespaces",
    "no": "nodes",
    "node": "nodes",
    "pv": "persistentvolumes",
    "deploy": "deployments",
    "deployment": "deployments",
    "rs": "replicasets",
    "replicaset": "replicasets",
    "sts": "statefulsets",
    "statefulset": "statefulsets",
    "ds": "daemonsets",
    "daemonset": "daemonsets",
    "job": "jobs",
    "cj": "cronjobs",
    "cronjob": "cronjobs",
    "ing": "ingresses",
    "ingress": "ingresses",
    "lease": "leases",
    "crd": "customresourcedefinitions",
    "crds": "customresourcedefinitions",
}

_registry: dict[tuple[str, str], Resource] = {}  # (plural, group) -> Resource
_bare: dict[str, Resource] = {}  # plural -> preferred Resource (core first)


def register_resource(resource: Resource) -> Resource:
    """Make ``resource`` known by its short kubectl-style names (``widgets.example.com``).

    Registration is process-wide and idempotent; returns ``resource``.
    """
    _registry[(resource.plural, resource.group)] = resource
    _bare.setdefault(resource.plural, resource)
    return resource


for _res in BUILTIN_RESOURCES:
    register_resource(_res)
_builtin_registry = dict(_registry)
_builtin_bare = dict(_bare)


def parse_resource(spec: str | Resource) -> Resource:
    """Resolve a kubectl-style resource name.

    Accepted forms: ``plural`` (or a short name such as ``po``), ``plural.group`` and
    ``plural.version.group``. A name with a group that is not known is taken as a custom
    resource when it has the ``plural.version.group`` form.

    Raises:
        ValueError: the name is empty or cannot be resolved.
    """
    if isinstance(spec, Resource):
        return spec
    text = spec.strip().lower()
    if not text:
        raise ValueError("empty resource name")
    plural, _, rest = text.partition(".")
    plural = _SHORT.get(plural, plural)
    if not rest:
        found = _bare.get(plural)
        if found is None:
            raise ValueError(
                f"unknown resource {spec!r}: use plural.version.group for custom resources"
            )
        return found
    found = _registry.get((plural, rest))
    if found is not None:
        return found
    version, _, group = rest.partition(".")
    if group and _looks_like_version(version):
        known = _registry.get((plural, group))
        if known is not None:
            return dataclasses.replace(known, version=version)
        return Resource(group=group, version=version, plural=plural, kind="")
    if version == "v1" and not group:  # "pods.v1": core group with explicit version
        known = _bare.get(plural)
        if known is not None and not known.group:
            return known
    raise ValueError(f"unknown resource {spec!r}: use plural.version.group for custom resources")


def known_resource(spec: str) -> Resource | None:
    """A built-in resource named ``spec`` (``po``, ``pods``, ``deployments.apps``), or
    None. Built-ins mean the same on every cluster, so they resolve without discovery;
    everything else (custom resources, also those given to :func:`register_resource`)
    resolves through the cluster's discovery."""
    plural, _, rest = spec.strip().lower().partition(".")
    plural = _SHORT.get(plural, plural)
    if not rest:
        return _builtin_bare.get(plural)
    version, dot, group = rest.partition(".")
    if dot and _looks_like_version(version):  # plural.version.group
        res = _builtin_registry.get((plural, group))
        return res if res is not None and res.version == version else None
    return _builtin_registry.get((plural, rest))


def _looks_like_version(text: str) -> bool:
    return len(text) >= 2 and text[0] == "v" and text[1].isdigit()
