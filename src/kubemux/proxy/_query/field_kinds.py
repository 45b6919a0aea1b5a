"""Each kind's selectable fields, as kube-apiserver converts and reads them.

For every built-in kind the labels its ``ConvertFieldLabel`` accepts (with its renames,
``spec.host`` to ``spec.nodeName``), its refusal in its own words, and how its
``ToSelectableFields`` reads each value from an object (:func:`kind_rules`); a custom
resource accepts ``metadata.name``, ``metadata.namespace`` when namespaced, and its CRD's
``selectableFields``. :mod:`.fields` parses and evaluates selectors over these.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

from ..._resources import Resource
from .._api.statuses import go_quote

__all__ = ["BUILTIN_GROUPS", "META_FIELDS", "Getter", "Path", "kind_rules"]


# ----------------------------------------------------------------------------- field values
def _get(obj: Mapping[str, Any], *path: str) -> Any:
    current: Any = obj
    for step in path:
        if not isinstance(current, Mapping):
            return None
        current = current.get(step)
    return current


def _text(obj: Mapping[str, Any], *path: str) -> str:
    value = _get(obj, *path)
    return value if isinstance(value, str) else ""


def _bool(obj: Mapping[str, Any], *path: str) -> str:
    return "true" if _get(obj, *path) is True else "false"


def _int(obj: Mapping[str, Any], *path: str) -> str:
    value = _get(obj, *path)
    return str(value) if isinstance(value, int) and not isinstance(value, bool) else "0"


Path = tuple[str, ...]


class Getter:
    """How a kind reads one selectable field from a decoded object, and which paths of the
    object that takes (a field selector decodes only those: see :meth:`FieldSelector.project`)."""

    __slots__ = ("fn", "paths")

    def __init__(self, fn: Callable[[Mapping[str, Any]], str], *paths: Path):
        self.fn = fn
        self.paths = paths

    def __call__(self, obj: Mapping[str, Any]) -> str:
        return self.fn(obj)


def _path_getter(*path: str) -> Getter:
    return Getter(lambda obj: _text(obj, *path), path)


def _bool_getter(*path: str) -> Getter:
    return Getter(lambda obj: _bool(obj, *path), path)


def _int_getter(*path: str) -> Getter:
    return Getter(lambda obj: _int(obj, *path), path)


def _pod_ip(obj: Mapping[str, Any]) -> str:
    ip = _text(obj, "status", "podIP")
    if ip:
        return ip
    ips = _get(obj, "status", "podIPs")
    if isinstance(ips, list) and ips and isinstance(ips[0], Mapping):
        first = ips[0].get("ip")
        return first if isinstance(first, str) else ""
    return ""


def _service_account(obj: Mapping[str, Any]) -> str:
    return _text(obj, "spec", "serviceAccountName") or _text(obj, "spec", "serviceAccount")


def _event_source(obj: Mapping[str, Any]) -> str:
    return _text(obj, "source", "component") or _text(obj, "reportingComponent")


def _events_v1_source(obj: Mapping[str, Any]) -> str:
    return _text(obj, "deprecatedSource", "component") or _text(obj, "reportingController")


_NAME = _path_getter("metadata", "name")
_NAMESPACE = _path_getter("metadata", "namespace")
META_FIELDS = {"metadata.name": _NAME, "metadata.namespace": _NAMESPACE}
_INVOLVED = ("kind", "namespace", "name", "uid", "apiVersion", "resourceVersion", "fieldPath")


@dataclasses.dataclass(frozen=True, slots=True)
class _Kind:
    """What one kind's ``ConvertFieldLabel`` accepts (label -> the label it becomes) and how
    it words a refusal; how its ``ToSelectableFields`` reads each field."""

    accepted: Mapping[str, str]
    refuse: Callable[[str], str]
    values: Mapping[str, Getter]


def _not_supported(label: str) -> str:
    return f"field label not supported: {label}"


def _default_refusal(label: str) -> str:
    return f'{go_quote(label)} is not a known field selector: only "metadata.name", "metadata.namespace"'


def _same(*labels: str) -> dict[str, str]:
    return {label: label for label in labels}


_DEFAULT = _Kind(_same("metadata.name", "metadata.namespace"), _default_refusal, META_FIELDS)

_KINDS: dict[tuple[str, str], _Kind] = {
    ("", "pods"): _Kind(
        {
            **_same(
                "metadata.name",
                "metadata.namespace",
                "spec.nodeName",
                "spec.restartPolicy",
                "spec.schedulerName",
                "spec.serviceAccountName",
                "spec.hostNetwork",
                "status.phase",
                "status.podIP",
                "status.podIPs",
                "status.nominatedNodeName",
            ),
            "spec.host": "spec.nodeName",  # old v1 clients
        },
        _not_supported,
        {
            **META_FIELDS,
            "spec.nodeName": _path_getter("spec", "nodeName"),
            "spec.restartPolicy": _path_getter("spec", "restartPolicy"),
            "spec.schedulerName": _path_getter("spec", "schedulerName"),
            "spec.serviceAccountName": Getter(
                _service_account, ("spec", "serviceAccountName"), ("spec", "serviceAccount")
            ),
            "spec.hostNetwork": _bool_getter("spec", "hostNetwork"),
            "status.phase": _path_getter("status", "phase"),
            "status.podIP": Getter(_pod_ip, ("status", "podIP"), ("status", "podIPs")),
            "status.nominatedNodeName": _path_getter("status", "nominatedNodeName"),
            # status.podIPs: accepted by the conversion, not in ToSelectableFields: always ""
        },
    ),
    ("", "nodes"): _Kind(
        _same("metadata.name", "spec.unschedulable"),
        _not_supported,
        {
            "metadata.name": _NAME,
            "spec.unschedulable": _bool_getter("spec", "unschedulable"),
        },
    ),
    ("", "replicationcontrollers"): _Kind(
        _same("metadata.name", "metadata.namespace", "status.replicas"),
        _not_supported,
        {**META_FIELDS, "status.replicas": _int_getter("status", "replicas")},
    ),
    ("", "events"): _Kind(
        _same(
            *(f"involvedObject.{f}" for f in _INVOLVED),
            "reason",
            "reportingComponent",
            "source",
            "type",
            "metadata.namespace",
            "metadata.name",
        ),
        _not_supported,
        {
            **META_FIELDS,
            **{f"involvedObject.{f}": _path_getter("involvedObject", f) for f in _INVOLVED},
            "reason": _path_getter("reason"),
            "reportingComponent": _path_getter("reportingComponent"),
            "source": Getter(_event_source, ("source", "component"), ("reportingComponent",)),
            "type": _path_getter("type"),
        },
    ),
    ("events.k8s.io", "events"): _Kind(
        {
            "reason": "reason",
            **{f"regarding.{f}": f"involvedObject.{f}" for f in _INVOLVED},
            "reportingController": "reportingComponent",
            "source": "source",
            "type": "type",
            "metadata.namespace": "metadata.namespace",
            "metadata.name": "metadata.name",
        },
        _not_supported,
        {
            **META_FIELDS,
            **{f"involvedObject.{f}": _path_getter("regarding", f) for f in _INVOLVED},
            "reason": _path_getter("reason"),
            "reportingComponent": _path_getter("reportingController"),
            "source": Getter(
                _events_v1_source, ("deprecatedSource", "component"), ("reportingController",)
            ),
            "type": _path_getter("type"),
        },
    ),
    ("", "namespaces"): _Kind(
        _same("status.phase", "metadata.name"),
        _not_supported,
        {"metadata.name": _NAME, "status.phase": _path_getter("status", "phase")},
    ),
    ("", "secrets"): _Kind(
        _same("type", "metadata.namespace", "metadata.name"),
        _not_supported,
        {**META_FIELDS, "type": _path_getter("type")},
    ),
    ("", "services"): _Kind(
        _same("metadata.namespace", "metadata.name", "spec.clusterIP", "spec.type"),
        _not_supported,
        {
            **META_FIELDS,
            "spec.clusterIP": _path_getter("spec", "clusterIP"),
            "spec.type": _path_getter("spec", "type"),
        },
    ),
    ("batch", "jobs"): _Kind(
        _same("metadata.name", "metadata.namespace", "status.successful"),
        lambda label: f"field label {go_quote(label)} not supported for Job",
        {**META_FIELDS, "status.successful": _int_getter("status", "succeeded")},
    ),
    ("certificates.k8s.io", "certificatesigningrequests"): _Kind(
        _same("metadata.name", "spec.signerName"),
        _not_supported,
        {"metadata.name": _NAME, "spec.signerName": _path_getter("spec", "signerName")},
    ),
    ("certificates.k8s.io", "clustertrustbundles"): _Kind(
        _same("metadata.name", "spec.signerName"),
        _not_supported,
        {"metadata.name": _NAME, "spec.signerName": _path_getter("spec", "signerName")},
    ),
}

_RESOURCE_SLICE_FIELDS = {
    "metadata.name": _NAME,
    "spec.nodeName": _path_getter("spec", "nodeName"),
    "spec.driver": _path_getter("spec", "driver"),
}

BUILTIN_GROUPS: Final = frozenset(
    {
        "",
        "admissionregistration.k8s.io",
        "apiextensions.k8s.io",
        "apiregistration.k8s.io",
        "apps",
        "authentication.k8s.io",
        "authorization.k8s.io",
        "autoscaling",
        "batch",
        "certificates.k8s.io",
        "coordination.k8s.io",
        "discovery.k8s.io",
        "events.k8s.io",
        "extensions",
        "flowcontrol.apiserver.k8s.io",
        "internal.apiserver.k8s.io",
        "networking.k8s.io",
        "node.k8s.io",
        "policy",
        "rbac.authorization.k8s.io",
        "resource.k8s.io",
        "scheduling.k8s.io",
        "storage.k8s.io",
        "storagemigration.k8s.io",
    }
)
"""API groups kube-apiserver serves itself; any other group is a custom resource (served by
the apiextensions server) or an aggregated API."""


def kind_rules(resource: Resource, custom: bool | None, selectable: Sequence[str]) -> _Kind:
    known = _KINDS.get((resource.group, resource.plural))
    if known is not None:
        return known
    if resource.group == "resource.k8s.io" and resource.plural == "resourceslices":
        gvk = f"resource.k8s.io/{resource.version}, Kind=ResourceSlice"
        return _Kind(
            _same(*_RESOURCE_SLICE_FIELDS),
            lambda label: f"field label not supported for {gvk}: {label}",
            _RESOURCE_SLICE_FIELDS,
        )
    if custom is None:
        custom = resource.group not in BUILTIN_GROUPS
    if not custom:
        return _DEFAULT
    # apiextensions' crConverter: metadata.name, metadata.namespace when namespaced, and the
    # CRD version's selectableFields
    labels = ["metadata.name", *(["metadata.namespace"] if resource.namespaced else [])]
    values: dict[str, Getter] = {"metadata.name": _NAME}
    if resource.namespaced:
        values["metadata.namespace"] = _NAMESPACE
    for field in selectable:
        label = field.lstrip(".")
        labels.append(label)
        values[label] = _selectable_getter(label)
    return _Kind(_same(*labels), _not_supported, values)


def _selectable_getter(label: str) -> Getter:
    path = tuple(label.split("."))

    def value(obj: Mapping[str, Any]) -> str:
        found = _get(obj, *path)
        if isinstance(found, bool):
            return "true" if found else "false"
        if isinstance(found, int | str):
            return str(found)
        return ""

    return Getter(value, path)
