"""Resource types: parsing kubectl-style names and building API paths.

``"pods"``, ``"po"``, ``"deployments.apps"``, ``"deployments.v1.apps"`` and
``"events.events.k8s.io"`` all resolve to a :class:`Resource`. Names not in the built-in
table need the ``plural.version.group`` form (or a :class:`Resource` value) unless they
have been registered with :func:`register_resource`.

A :class:`Resource` can only hold names kube-apiserver could serve (checked when it is
built): the group is ``""`` (core) or a DNS-1123 subdomain, the version a DNS-1035 label,
the plural a lower-case DNS-1123 label that may also hold ``_``. So no URL built from one
can leave its API group (``..``, ``/``, ``?`` or ``#`` in a name), whatever a discovery
document said; :attr:`Resource.is_secret` is decided by the same group and plural that
build the URL.
"""

from __future__ import annotations

import dataclasses
import re
from urllib.parse import quote

__all__ = [
    "BUILTIN_RESOURCES",
    "Resource",
    "name_problem",
    "parse_resource",
    "path_segment",
    "register_resource",
]

_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_SUBDOMAIN = re.compile(rf"{_LABEL}(\.{_LABEL})*")  # apimachinery's IsDNS1123Subdomain
_DNS1035 = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")  # IsDNS1035Label
# a DNS-1123 label plus "_", which metrics adapters use in resource names
_PLURAL = re.compile(r"[a-z0-9]([-a-z0-9_]*[a-z0-9])?")
_WHY = {
    "group": "must be empty (the core group) or a DNS-1123 subdomain: lower case "
    "alphanumeric characters, '-' or '.', at most 253 characters",
    "version": "must be a DNS-1035 label: lower case alphanumeric characters or '-', "
    "starting with a letter, at most 63 characters",
    "plural": "must be lower case alphanumeric characters, '-' or '_', starting and ending "
    "with an alphanumeric character, at most 253 characters",
}


def shown(value: object, limit: int = 80) -> str:
    """``repr(value)`` cut to about ``limit`` characters, for messages: a hostile name may
    be megabytes long or hold control characters (``repr`` escapes them)."""
    if isinstance(value, str) and len(value) > limit:
        return repr(value[:limit]) + f"... ({len(value)} characters)"
    text = repr(value)
    return text if len(text) <= limit + 2 else text[:limit] + "..."


def name_problem(field: str, value: object) -> str | None:
    """Why ``value`` cannot be the ``field`` (``"group"``, ``"version"`` or ``"plural"``) of
    an API resource, or None when it can. Group and version follow what kube-apiserver
    requires of an APIService (DNS-1123 subdomain, DNS-1035 label)."""
    if not isinstance(value, str):
        return f"{field} {shown(value)} is not a string"
    if field == "group":
        ok = value == "" or (len(value) <= 253 and _SUBDOMAIN.fullmatch(value) is not None)
    elif field == "version":
        ok = len(value) <= 63 and _DNS1035.fullmatch(value) is not None
    elif field == "plural":
        ok = len(value) <= 253 and _PLURAL.fullmatch(value) is not None
    else:
        raise ValueError(f"unknown field {field!r}")
    return None if ok else f"{field} {shown(value)} {_WHY[field]}"


def path_segment(value: str, what: str = "name") -> str:
    """``value`` percent-quoted as one URL path segment (``/`` becomes ``%2F``).

    Raises:
        ValueError: ``value`` is ``.`` or ``..``, which no quoting keeps in place (URL
            normalisation resolves them, ``%2E%2E`` too), as client-go refuses them.
    """
    if value in (".", ".."):
        raise ValueError(f"invalid {what} {value!r}: may not be '{value}'")
    return quote(value, safe="")


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

    def __post_init__(self) -> None:
        for field in ("group", "version", "plural"):
            problem = name_problem(field, getattr(self, field))
            if problem is not None:
                raise ValueError(f"invalid resource: {problem}")

    @property
    def is_secret(self) -> bool:
        """True for the core ``secrets`` resource, whatever its kind is called: what is
        read (``/api/{version}/secrets``) decides, never the kind a discovery document
        declares. The one predicate for redaction and for keeping values out of shared
        stores."""
        return self.group == "" and self.plural == "secrets"

    @property
    def api_version(self) -> str:
        """``v1`` or ``apps/v1``: the ``apiVersion`` of the objects."""
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def name(self) -> str:
        """The kubectl-style full name: ``pods``, ``deployments.apps``."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    def path(self, namespace: str | None = None) -> str:
        """The collection URL path, cluster-wide or in one namespace; each segment quoted.

        Raises:
            ValueError: ``namespace`` is ``.`` or ``..``.
        """
        version = quote(self.version, safe="")
        group = quote(self.group, safe="")
        base = f"/apis/{group}/{version}" if group else f"/api/{version}"
        plural = quote(self.plural, safe="")
        if namespace and self.namespaced:
            return f"{base}/namespaces/{path_segment(namespace, 'namespace')}/{plural}"
        return f"{base}/{plural}"

    def object_path(self, namespace: str | None, name: str) -> str:
        """The URL path of one object (``.../namespaces/{ns}/pods/{name}``); each segment
        quoted.

        Raises:
            ValueError: ``namespace`` or ``name`` is ``.``, ``..`` or (the name) empty.
        """
        if not name:
            raise ValueError("invalid name '': an object needs a name")
        return f"{self.path(namespace)}/{path_segment(name)}"

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
