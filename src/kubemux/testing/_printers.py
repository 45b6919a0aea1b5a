"""Server-side printing: the ``meta.k8s.io/v1`` Table a kube-apiserver answers for
``Accept: application/json;as=Table;v=v1;g=meta.k8s.io``.

The columns and cells follow kube-apiserver's printers (``pkg/printers/internalversion``)
for the kinds the fake serves most: pods, deployments, services, configmaps, nodes,
namespaces and core events. A custom resource gets its CRD's ``additionalPrinterColumns``
(simple JSON paths); every other kind gets the default convertor's ``Name`` and
``Created At``. The server always fills every column, wide ones (``priority`` 1) included;
kubectl shows those only with ``-o wide``.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

__all__ = [
    "Column",
    "Printer",
    "crd_printer",
    "human_duration",
    "printer_for",
    "row_object",
]

Column = dict[str, Any]
Cells = list[Any]
_NAME_DOC = (
    "Name must be unique within a namespace. Is required when creating resources, although "
    "some resources may allow a client to request the generation of an appropriate name "
    "automatically. Name is primarily intended for creation idempotence and configuration "
    "definition. Cannot be updated. More info: "
    "https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names"
)
_CREATED_DOC = (
    "CreationTimestamp is a timestamp representing the server time when this object was "
    "created. It is not guaranteed to be set in happens-before order across separate "
    "operations. Clients may not set this value. It is represented in RFC3339 form and is in "
    "UTC.\n\nPopulated by the system. Read-only. Null for lists. More info: "
    "https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata"
)
_NONE = "<none>"


def _col(
    name: str, kind: str = "string", *, priority: int = 0, doc: str = "", fmt: str = ""
) -> Column:
    return {"name": name, "type": kind, "format": fmt, "description": doc, "priority": priority}


def _name_col() -> Column:
    return _col("Name", fmt="name", doc=_NAME_DOC)


def _age_col() -> Column:
    return _col("Age", doc=_CREATED_DOC)


# ------------------------------------------------------------------------------ time
def human_duration(seconds: float) -> str:
    """apimachinery's ``duration.HumanDuration``: ``"45s"``, ``"5m3s"``, ``"3h"``, ``"2d4h"``."""
    secs = int(seconds)
    if secs < -1:
        return "<invalid>"
    if secs < 0:
        return "0s"
    if secs < 120:
        return f"{secs}s"
    minutes = secs // 60
    if minutes < 10:
        rest = secs % 60
        return f"{minutes}m{rest}s" if rest else f"{minutes}m"
    if minutes < 180:
        return f"{minutes}m"
    hours = secs // 3600
    if hours < 8:
        rest = minutes % 60
        return f"{hours}h{rest}m" if rest else f"{hours}h"
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        rest = hours % 24
        return f"{hours // 24}d{rest}h" if rest else f"{hours // 24}d"
    if hours < 24 * 365 * 2:
        return f"{hours // 24}d"
    if hours < 24 * 365 * 8:
        days = (hours // 24) % 365
        years = hours // 24 // 365
        return f"{years}y{days}d" if days else f"{years}y"
    return f"{hours // 24 // 365}y"


def _parse_time(value: Any) -> float | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        return dt.datetime.fromisoformat(value).timestamp()
    except ValueError:
        return None


def _since(value: Any) -> str:
    """``translateTimestampSince``: the age of a timestamp, ``<unknown>`` when unset."""
    stamp = _parse_time(value)
    if stamp is None:
        return "<unknown>"
    return human_duration(time.time() - stamp)


def _age(obj: Mapping[str, Any]) -> str:
    return _since(_meta(obj).get("creationTimestamp"))


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


def _sub(obj: Any, *path: str) -> Any:
    for step in path:
        if not isinstance(obj, Mapping):
            return None
        obj = obj.get(step)
    return obj


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _labels(value: Any) -> str:
    """``labels.FormatLabels``: sorted ``k=v`` pairs, ``<none>`` when empty."""
    if not isinstance(value, Mapping) or not value:
        return _NONE
    return ",".join(f"{k}={value[k]}" for k in sorted(value))


# ------------------------------------------------------------------------------ printers
class Printer:
    """The columns of one kind and the function that fills a row's cells."""

    __slots__ = ("cells", "columns")

    def __init__(self, columns: Sequence[Column], cells: Callable[[Mapping[str, Any]], Cells]):
        self.columns = list(columns)
        self.cells = cells


def _pod_cells(pod: Mapping[str, Any]) -> Cells:
    status = pod.get("status") if isinstance(pod.get("status"), Mapping) else {}
    assert isinstance(status, Mapping)
    containers = _list(_sub(pod, "spec", "containers"))
    reason = str(status.get("phase") or "")
    if status.get("reason"):
        reason = str(status["reason"])
    restarts = 0
    last_restart: float | None = None
    ready = 0
    running = False
    for cs in reversed(_list(status.get("containerStatuses"))):
        if not isinstance(cs, Mapping):
            continue
        restarts += int(cs.get("restartCount") or 0)
        finished = _parse_time(_sub(cs, "lastState", "terminated", "finishedAt"))
        if finished is not None and (last_restart is None or finished > last_restart):
            last_restart = finished
        state = cs.get("state") if isinstance(cs.get("state"), Mapping) else {}
        assert isinstance(state, Mapping)
        waiting, terminated = state.get("waiting"), state.get("terminated")
        if isinstance(waiting, Mapping) and waiting.get("reason"):
            reason = str(waiting["reason"])
        elif isinstance(terminated, Mapping) and terminated.get("reason"):
            reason = str(terminated["reason"])
        elif isinstance(terminated, Mapping):
            signal = terminated.get("signal")
            reason = f"Signal:{signal}" if signal else f"ExitCode:{terminated.get('exitCode') or 0}"
        elif isinstance(state.get("running"), Mapping) and cs.get("ready"):
            running = True
            ready += 1
    if reason == "Completed" and running:
        conditions = _list(status.get("conditions"))
        is_ready = any(
            isinstance(c, Mapping) and c.get("type") == "Ready" and c.get("status") == "True"
            for c in conditions
        )
        reason = "Running" if is_ready else "NotReady"
    meta = _meta(pod)
    if meta.get("deletionTimestamp"):
        reason = "Unknown" if status.get("reason") == "NodeLost" else "Terminating"
    restart_text = str(restarts)
    if restarts and last_restart is not None:
        restart_text = f"{restarts} ({human_duration(time.time() - last_restart)} ago)"
    gates = _list(_sub(pod, "spec", "readinessGates"))
    gate_text = _NONE
    if gates:
        true = {
            c.get("type")
            for c in _list(status.get("conditions"))
            if isinstance(c, Mapping) and c.get("status") == "True"
        }
        passed = sum(1 for g in gates if isinstance(g, Mapping) and g.get("conditionType") in true)
        gate_text = f"{passed}/{len(gates)}"
    return [
        meta.get("name", ""),
        f"{ready}/{len(containers)}",
        reason,
        restart_text,
        _age(pod),
        status.get("podIP") or _NONE,
        _sub(pod, "spec", "nodeName") or _NONE,
        status.get("nominatedNodeName") or _NONE,
        gate_text,
    ]


_POD = Printer(
    [
        _name_col(),
        _col("Ready", doc="The aggregate readiness state of this pod for accepting traffic."),
        _col("Status", doc="The aggregate status of the containers in this pod."),
        _col(
            "Restarts",
            doc="The number of times the containers in this pod have been restarted and when "
            "the last container in this pod has restarted.",
        ),
        _age_col(),
        _col("IP", priority=1, doc="podIP address allocated to the pod."),
        _col("Node", priority=1, doc="NodeName indicates in which node this pod is scheduled."),
        _col(
            "Nominated Node",
            priority=1,
            doc="nominatedNodeName is set only when this pod preempts other pods on the node.",
        ),
        _col(
            "Readiness Gates",
            priority=1,
            doc="If specified, all readiness gates will be evaluated for pod readiness.",
        ),
    ],
    _pod_cells,
)


def _deployment_cells(obj: Mapping[str, Any]) -> Cells:
    containers = [
        c
        for c in _list(_sub(obj, "spec", "template", "spec", "containers"))
        if isinstance(c, Mapping)
    ]
    selector = _sub(obj, "spec", "selector")
    return [
        _meta(obj).get("name", ""),
        f"{int(_sub(obj, 'status', 'readyReplicas') or 0)}/{int(_sub(obj, 'spec', 'replicas') or 0)}",
        int(_sub(obj, "status", "updatedReplicas") or 0),
        int(_sub(obj, "status", "availableReplicas") or 0),
        _age(obj),
        ",".join(str(c.get("name", "")) for c in containers),
        ",".join(str(c.get("image", "")) for c in containers),
        _label_selector(selector),
    ]


def _label_selector(selector: Any) -> str:
    """``metav1.LabelSelectorAsSelector(...).String()`` for matchLabels and matchExpressions."""
    if not isinstance(selector, Mapping):
        return _NONE
    parts: list[str] = []
    labels = selector.get("matchLabels")
    if isinstance(labels, Mapping):
        parts.extend(f"{k}={v}" for k, v in labels.items())
    for expr in _list(selector.get("matchExpressions")):
        if not isinstance(expr, Mapping):
            continue
        key, op, values = expr.get("key", ""), expr.get("operator", ""), _list(expr.get("values"))
        if op == "In":
            parts.append(f"{key} in ({','.join(sorted(map(str, values)))})")
        elif op == "NotIn":
            parts.append(f"{key} notin ({','.join(sorted(map(str, values)))})")
        elif op == "Exists":
            parts.append(str(key))
        elif op == "DoesNotExist":
            parts.append(f"!{key}")
    if not parts:
        return "" if labels is not None or selector.get("matchExpressions") is not None else _NONE
    return ",".join(sorted(parts))


_DEPLOYMENT = Printer(
    [
        _name_col(),
        _col("Ready", doc="Number of the pod with ready state"),
        _col(
            "Up-to-date",
            "integer",
            doc="Total number of non-terminated pods targeted by this deployment that have the desired template spec.",
        ),
        _col(
            "Available",
            "integer",
            doc="Total number of available pods (ready for at least minReadySeconds) targeted by this deployment.",
        ),
        _age_col(),
        _col("Containers", priority=1, doc="Names of each container in the template."),
        _col("Images", priority=1, doc="Images referenced by each container in the template."),
        _col(
            "Selector",
            priority=1,
            doc="Label selector for pods. Existing ReplicaSets whose pods are selected by this will be the ones affected by this deployment.",
        ),
    ],
    _deployment_cells,
)


def _service_cells(svc: Mapping[str, Any]) -> Cells:
    spec = svc.get("spec") if isinstance(svc.get("spec"), Mapping) else {}
    assert isinstance(spec, Mapping)
    kind = str(spec.get("type") or "ClusterIP")
    external = [str(ip) for ip in _list(spec.get("externalIPs"))]
    if kind in ("ClusterIP", "NodePort"):
        external_text = ",".join(external) if external else _NONE
    elif kind == "LoadBalancer":
        ingress = [
            str(i.get("ip") or i.get("hostname") or "")
            for i in _list(_sub(svc, "status", "loadBalancer", "ingress"))
            if isinstance(i, Mapping)
        ]
        found = [*ingress, *external]
        external_text = ",".join(found) if found else "<pending>"
    elif kind == "ExternalName":
        external_text = str(spec.get("externalName") or "")
    else:
        external_text = "<unknown>"
    ports = []
    for port in _list(spec.get("ports")):
        if not isinstance(port, Mapping):
            continue
        protocol = port.get("protocol") or "TCP"
        if port.get("nodePort"):
            ports.append(f"{port.get('port')}:{port['nodePort']}/{protocol}")
        else:
            ports.append(f"{port.get('port')}/{protocol}")
    return [
        _meta(svc).get("name", ""),
        kind,
        spec.get("clusterIP") or _NONE,
        external_text,
        ",".join(ports) if ports else _NONE,
        _age(svc),
        _labels(spec.get("selector")),
    ]


_SERVICE = Printer(
    [
        _name_col(),
        _col("Type", doc="type determines how the Service is exposed."),
        _col("Cluster-IP", doc="clusterIP is the IP address of the service."),
        _col(
            "External-IP",
            doc="externalIPs is a list of IP addresses for which nodes in the cluster will also accept traffic for this service.",
        ),
        _col("Port(s)", doc="The list of ports that are exposed by this service."),
        _age_col(),
        _col(
            "Selector",
            priority=1,
            doc="Route service traffic to pods with label keys and values matching this selector.",
        ),
    ],
    _service_cells,
)

_CONFIGMAP = Printer(
    [_name_col(), _col("Data", "integer", doc="Data contains the configuration data."), _age_col()],
    lambda cm: [
        _meta(cm).get("name", ""),
        len(cm.get("data") or {}) + len(cm.get("binaryData") or {}),
        _age(cm),
    ],
)

_NAMESPACE = Printer(
    [_name_col(), _col("Status", doc="The status of the namespace"), _age_col()],
    lambda ns: [_meta(ns).get("name", ""), _sub(ns, "status", "phase") or "Active", _age(ns)],
)


def _node_cells(node: Mapping[str, Any]) -> Cells:
    status = "Unknown"
    for cond in _list(_sub(node, "status", "conditions")):
        if isinstance(cond, Mapping) and cond.get("type") == "Ready":
            status = "Ready" if cond.get("status") == "True" else "NotReady"
    if _sub(node, "spec", "unschedulable"):
        status += ",SchedulingDisabled"
    labels = _meta(node).get("labels") or {}
    roles: set[str] = set()
    for key, value in labels.items():
        if key.startswith("node-role.kubernetes.io/") and key != "node-role.kubernetes.io/":
            roles.add(key.removeprefix("node-role.kubernetes.io/"))
        elif key == "kubernetes.io/role" and value:
            roles.add(str(value))
    addresses = {
        str(a.get("type")): str(a.get("address"))
        for a in reversed(_list(_sub(node, "status", "addresses")))
        if isinstance(a, Mapping)
    }
    info = _sub(node, "status", "nodeInfo") or {}
    return [
        _meta(node).get("name", ""),
        status,
        ",".join(sorted(roles)) if roles else _NONE,
        _age(node),
        info.get("kubeletVersion", ""),
        addresses.get("InternalIP", _NONE),
        addresses.get("ExternalIP", _NONE),
        info.get("osImage") or "<unknown>",
        info.get("kernelVersion") or "<unknown>",
        info.get("containerRuntimeVersion") or "<unknown>",
    ]


_NODE = Printer(
    [
        _name_col(),
        _col("Status", doc="The status of the node"),
        _col("Roles", doc="The roles of the node"),
        _age_col(),
        _col("Version", doc="Kubelet Version reported by the node."),
        _col(
            "Internal-IP",
            priority=1,
            doc="List of addresses reachable to the node. Queried from cloud provider, if available.",
        ),
        _col(
            "External-IP",
            priority=1,
            doc="List of addresses reachable to the node. Queried from cloud provider, if available.",
        ),
        _col(
            "OS-Image",
            priority=1,
            doc="OS Image reported by the node from /etc/os-release (e.g. Debian GNU/Linux 7 (wheezy)).",
        ),
        _col(
            "Kernel-Version",
            priority=1,
            doc="Kernel Version reported by the node from 'uname -r' (e.g. 3.16.0-0.bpo.4-amd64).",
        ),
        _col(
            "Container-Runtime",
            priority=1,
            doc="ContainerRuntime Version reported by the node through runtime remote API (e.g. containerd://1.4.2).",
        ),
    ],
    _node_cells,
)


def _event_cells(ev: Mapping[str, Any]) -> Cells:
    first = _since(ev.get("firstTimestamp"))
    if not ev.get("firstTimestamp"):
        first = _since(ev.get("eventTime"))
    last = _since(ev.get("lastTimestamp")) if ev.get("lastTimestamp") else first
    count = int(ev.get("count") or 0)
    series = ev.get("series")
    if isinstance(series, Mapping):
        last = _since(series.get("lastObservedTime"))
        count = int(series.get("count") or 0)
    elif count == 0:
        count = 1
    involved = ev.get("involvedObject") or {}
    kind = str(involved.get("kind") or "").lower()
    target = f"{kind}/{involved['name']}" if involved.get("name") else kind
    source = ev.get("source") or {}
    component, host = source.get("component") or "", source.get("host") or ""
    if not component:
        component, host = ev.get("reportingComponent") or "", ev.get("reportingInstance") or ""
    source_text = f"{component}, {host}" if host else component
    return [
        last,
        ev.get("type", ""),
        ev.get("reason", ""),
        target,
        involved.get("fieldPath", ""),
        source_text,
        str(ev.get("message") or "").strip(),
        first,
        count,
        _meta(ev).get("name", ""),
    ]


_EVENT = Printer(
    [
        _col(
            "Last Seen",
            doc="The time at which the most recent occurrence of this event was recorded.",
        ),
        _col(
            "Type",
            doc="Type of this event (Normal, Warning), new types could be added in the future.",
        ),
        _col(
            "Reason",
            doc="This should be a short, machine understandable string that gives the reason for the transition into the object's current status.",
        ),
        _col("Object", doc="The object that this event is about."),
        _col("Subobject", priority=1, doc="The subobject that this event is about."),
        _col(
            "Source",
            priority=1,
            doc="The component reporting this event. Should be a short machine understandable string.",
        ),
        _col("Message", doc="A human-readable description of the status of this operation."),
        _col("First Seen", priority=1, doc="The time at which the event was first recorded."),
        _col("Count", "integer", priority=1, doc="The number of times this event has occurred."),
        _name_col() | {"priority": 1},
    ],
    _event_cells,
)

_DEFAULT = Printer(
    [_name_col(), _col("Created At", "date", doc=_CREATED_DOC)],
    lambda obj: [_meta(obj).get("name", ""), _meta(obj).get("creationTimestamp") or None],
)

_BUILTIN: dict[tuple[str, str], Printer] = {
    ("", "pods"): _POD,
    ("apps", "deployments"): _DEPLOYMENT,
    ("", "services"): _SERVICE,
    ("", "configmaps"): _CONFIGMAP,
    ("", "namespaces"): _NAMESPACE,
    ("", "nodes"): _NODE,
    ("", "events"): _EVENT,
}


def printer_for(group: str, plural: str) -> Printer:
    """The built-in printer of a kind, or the default convertor's (``Name``, ``Created At``)."""
    return _BUILTIN.get((group, plural), _DEFAULT)


# ------------------------------------------------------------------------------ CRDs
def _json_path(obj: Any, path: str) -> tuple[bool, Any]:
    """Follow a simple JSONPath (``.spec.size``, ``.status.conditions[0].type``)."""
    text = path.strip()
    if text.startswith("{") and text.endswith("}"):
        text = text[1:-1]
    current = obj
    for part in text.lstrip(".").replace("[", ".[").split("."):
        if not part:
            continue
        if part.startswith("[") and part.endswith("]"):
            try:
                index = int(part[1:-1])
            except ValueError:
                return False, None
            if not isinstance(current, list) or not -len(current) <= index < len(current):
                return False, None
            current = current[index]
        elif isinstance(current, Mapping) and part in current:
            current = current[part]
        else:
            return False, None
    return True, current


def _crd_cell(kind: str, value: Any) -> Any:
    """``cellForJSONValue`` of the CRD table convertor."""
    if kind == "integer":
        return value if isinstance(value, int) and not isinstance(value, bool) else None
    if kind == "number":
        return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None
    if kind == "boolean":
        return value if isinstance(value, bool) else None
    if kind == "date":
        stamp = _parse_time(value)
        return "<unknown>" if stamp is None else human_duration(time.time() - stamp)
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return None
    import orjson

    return orjson.dumps(value).decode() if isinstance(value, (dict, list)) else str(value)


DEFAULT_CRD_COLUMNS: list[dict[str, Any]] = [
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}
]


def crd_printer(columns: Sequence[Mapping[str, Any]] | None) -> Printer:
    """A CRD version's printer: ``Name`` then its ``additionalPrinterColumns`` (default Age)."""
    specs = list(columns) if columns else DEFAULT_CRD_COLUMNS
    defs = [_name_col()] + [
        _col(
            str(c.get("name", "")),
            str(c.get("type", "string")),
            priority=int(c.get("priority") or 0),
            doc=str(c.get("description") or ""),
            fmt=str(c.get("format") or ""),
        )
        for c in specs
    ]
    if not columns:
        defs[1]["description"] = _CREATED_DOC

    def cells(obj: Mapping[str, Any]) -> Cells:
        out: Cells = [_meta(obj).get("name", "")]
        for spec in specs:
            found, value = _json_path(obj, str(spec.get("jsonPath", "")))
            out.append(_crd_cell(str(spec.get("type", "string")), value) if found else None)
        return out

    return Printer(defs, cells)


# ------------------------------------------------------------------------------ objects
def row_object(obj: Mapping[str, Any], include: str) -> dict[str, Any] | None:
    """A row's ``object`` for ``includeObject``: PartialObjectMetadata, the object, or None."""
    if include == "None":
        return None
    if include == "Object":
        return dict(obj)
    return {
        "kind": "PartialObjectMetadata",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": dict(_meta(obj)),
    }
