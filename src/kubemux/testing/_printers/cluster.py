"""kube-apiserver's printers for services, configmaps, namespaces, nodes and core events."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .base import (
    NONE,
    Cells,
    Printer,
    age,
    age_col,
    as_list,
    col,
    format_labels,
    meta_of,
    name_col,
    since,
    sub,
)

__all__ = ["CONFIGMAP", "EVENT", "NAMESPACE", "NODE", "SERVICE"]


def _service_cells(svc: Mapping[str, Any]) -> Cells:
    spec = svc.get("spec") if isinstance(svc.get("spec"), Mapping) else {}
    assert isinstance(spec, Mapping)
    kind = str(spec.get("type") or "ClusterIP")
    external = [str(ip) for ip in as_list(spec.get("externalIPs"))]
    if kind in ("ClusterIP", "NodePort"):
        external_text = ",".join(external) if external else NONE
    elif kind == "LoadBalancer":
        ingress = [
            str(i.get("ip") or i.get("hostname") or "")
            for i in as_list(sub(svc, "status", "loadBalancer", "ingress"))
            if isinstance(i, Mapping)
        ]
        found = [*ingress, *external]
        external_text = ",".join(found) if found else "<pending>"
    elif kind == "ExternalName":
        external_text = str(spec.get("externalName") or "")
    else:
        external_text = "<unknown>"
    ports = []
    for port in as_list(spec.get("ports")):
        if not isinstance(port, Mapping):
            continue
        protocol = port.get("protocol") or "TCP"
        if port.get("nodePort"):
            ports.append(f"{port.get('port')}:{port['nodePort']}/{protocol}")
        else:
            ports.append(f"{port.get('port')}/{protocol}")
    return [
        meta_of(svc).get("name", ""),
        kind,
        spec.get("clusterIP") or NONE,
        external_text,
        ",".join(ports) if ports else NONE,
        age(svc),
        format_labels(spec.get("selector")),
    ]


SERVICE = Printer(
    [
        name_col(),
        col("Type", doc="type determines how the Service is exposed."),
        col("Cluster-IP", doc="clusterIP is the IP address of the service."),
        col(
            "External-IP",
            doc="externalIPs is a list of IP addresses for which nodes in the cluster will also accept traffic for this service.",
        ),
        col("Port(s)", doc="The list of ports that are exposed by this service."),
        age_col(),
        col(
            "Selector",
            priority=1,
            doc="Route service traffic to pods with label keys and values matching this selector.",
        ),
    ],
    _service_cells,
)

CONFIGMAP = Printer(
    [name_col(), col("Data", "integer", doc="Data contains the configuration data."), age_col()],
    lambda cm: [
        meta_of(cm).get("name", ""),
        len(cm.get("data") or {}) + len(cm.get("binaryData") or {}),
        age(cm),
    ],
)

NAMESPACE = Printer(
    [name_col(), col("Status", doc="The status of the namespace"), age_col()],
    lambda ns: [meta_of(ns).get("name", ""), sub(ns, "status", "phase") or "Active", age(ns)],
)


def _node_cells(node: Mapping[str, Any]) -> Cells:
    status = "Unknown"
    for cond in as_list(sub(node, "status", "conditions")):
        if isinstance(cond, Mapping) and cond.get("type") == "Ready":
            status = "Ready" if cond.get("status") == "True" else "NotReady"
    if sub(node, "spec", "unschedulable"):
        status += ",SchedulingDisabled"
    labels = meta_of(node).get("labels") or {}
    roles: set[str] = set()
    for key, value in labels.items():
        if key.startswith("node-role.kubernetes.io/") and key != "node-role.kubernetes.io/":
            roles.add(key.removeprefix("node-role.kubernetes.io/"))
        elif key == "kubernetes.io/role" and value:
            roles.add(str(value))
    addresses = {
        str(a.get("type")): str(a.get("address"))
        for a in reversed(as_list(sub(node, "status", "addresses")))
        if isinstance(a, Mapping)
    }
    info = sub(node, "status", "nodeInfo") or {}
    return [
        meta_of(node).get("name", ""),
        status,
        ",".join(sorted(roles)) if roles else NONE,
        age(node),
        info.get("kubeletVersion", ""),
        addresses.get("InternalIP", NONE),
        addresses.get("ExternalIP", NONE),
        info.get("osImage") or "<unknown>",
        info.get("kernelVersion") or "<unknown>",
        info.get("containerRuntimeVersion") or "<unknown>",
    ]


NODE = Printer(
    [
        name_col(),
        col("Status", doc="The status of the node"),
        col("Roles", doc="The roles of the node"),
        age_col(),
        col("Version", doc="Kubelet Version reported by the node."),
        col(
            "Internal-IP",
            priority=1,
            doc="List of addresses reachable to the node. Queried from cloud provider, if available.",
        ),
        col(
            "External-IP",
            priority=1,
            doc="List of addresses reachable to the node. Queried from cloud provider, if available.",
        ),
        col(
            "OS-Image",
            priority=1,
            doc="OS Image reported by the node from /etc/os-release (e.g. Debian GNU/Linux 7 (wheezy)).",
        ),
        col(
            "Kernel-Version",
            priority=1,
            doc="Kernel Version reported by the node from 'uname -r' (e.g. 3.16.0-0.bpo.4-amd64).",
        ),
        col(
            "Container-Runtime",
            priority=1,
            doc="ContainerRuntime Version reported by the node through runtime remote API (e.g. containerd://1.4.2).",
        ),
    ],
    _node_cells,
)


def _event_cells(ev: Mapping[str, Any]) -> Cells:
    first = since(ev.get("firstTimestamp"))
    if not ev.get("firstTimestamp"):
        first = since(ev.get("eventTime"))
    last = since(ev.get("lastTimestamp")) if ev.get("lastTimestamp") else first
    count = int(ev.get("count") or 0)
    series = ev.get("series")
    if isinstance(series, Mapping):
        last = since(series.get("lastObservedTime"))
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
        meta_of(ev).get("name", ""),
    ]


EVENT = Printer(
    [
        col(
            "Last Seen",
            doc="The time at which the most recent occurrence of this event was recorded.",
        ),
        col(
            "Type",
            doc="Type of this event (Normal, Warning), new types could be added in the future.",
        ),
        col(
            "Reason",
            doc="This should be a short, machine understandable string that gives the reason for the transition into the object's current status.",
        ),
        col("Object", doc="The object that this event is about."),
        col("Subobject", priority=1, doc="The subobject that this event is about."),
        col(
            "Source",
            priority=1,
            doc="The component reporting this event. Should be a short machine understandable string.",
        ),
        col("Message", doc="A human-readable description of the status of this operation."),
        col("First Seen", priority=1, doc="The time at which the event was first recorded."),
        col("Count", "integer", priority=1, doc="The number of times this event has occurred."),
        name_col() | {"priority": 1},
    ],
    _event_cells,
)
