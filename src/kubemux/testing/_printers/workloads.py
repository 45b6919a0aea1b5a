"""kube-apiserver's printers for pods and deployments (``pkg/printers/internalversion``)."""

from __future__ import annotations

import time
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
    human_duration,
    label_selector,
    meta_of,
    name_col,
    parse_time,
    sub,
)

__all__ = ["DEPLOYMENT", "POD"]


def _pod_cells(pod: Mapping[str, Any]) -> Cells:
    status = pod.get("status") if isinstance(pod.get("status"), Mapping) else {}
    assert isinstance(status, Mapping)
    containers = as_list(sub(pod, "spec", "containers"))
    reason = str(status.get("phase") or "")
    if status.get("reason"):
        reason = str(status["reason"])
    restarts = 0
    last_restart: float | None = None
    ready = 0
    running = False
    for cs in reversed(as_list(status.get("containerStatuses"))):
        if not isinstance(cs, Mapping):
            continue
        restarts += int(cs.get("restartCount") or 0)
        finished = parse_time(sub(cs, "lastState", "terminated", "finishedAt"))
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
        conditions = as_list(status.get("conditions"))
        is_ready = any(
            isinstance(c, Mapping) and c.get("type") == "Ready" and c.get("status") == "True"
            for c in conditions
        )
        reason = "Running" if is_ready else "NotReady"
    meta = meta_of(pod)
    if meta.get("deletionTimestamp"):
        reason = "Unknown" if status.get("reason") == "NodeLost" else "Terminating"
    restart_text = str(restarts)
    if restarts and last_restart is not None:
        restart_text = f"{restarts} ({human_duration(time.time() - last_restart)} ago)"
    gates = as_list(sub(pod, "spec", "readinessGates"))
    gate_text = NONE
    if gates:
        true = {
            c.get("type")
            for c in as_list(status.get("conditions"))
            if isinstance(c, Mapping) and c.get("status") == "True"
        }
        passed = sum(1 for g in gates if isinstance(g, Mapping) and g.get("conditionType") in true)
        gate_text = f"{passed}/{len(gates)}"
    return [
        meta.get("name", ""),
        f"{ready}/{len(containers)}",
        reason,
        restart_text,
        age(pod),
        status.get("podIP") or NONE,
        sub(pod, "spec", "nodeName") or NONE,
        status.get("nominatedNodeName") or NONE,
        gate_text,
    ]


POD = Printer(
    [
        name_col(),
        col("Ready", doc="The aggregate readiness state of this pod for accepting traffic."),
        col("Status", doc="The aggregate status of the containers in this pod."),
        col(
            "Restarts",
            doc="The number of times the containers in this pod have been restarted and when "
            "the last container in this pod has restarted.",
        ),
        age_col(),
        col("IP", priority=1, doc="podIP address allocated to the pod."),
        col("Node", priority=1, doc="NodeName indicates in which node this pod is scheduled."),
        col(
            "Nominated Node",
            priority=1,
            doc="nominatedNodeName is set only when this pod preempts other pods on the node.",
        ),
        col(
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
        for c in as_list(sub(obj, "spec", "template", "spec", "containers"))
        if isinstance(c, Mapping)
    ]
    selector = sub(obj, "spec", "selector")
    return [
        meta_of(obj).get("name", ""),
        f"{int(sub(obj, 'status', 'readyReplicas') or 0)}/{int(sub(obj, 'spec', 'replicas') or 0)}",
        int(sub(obj, "status", "updatedReplicas") or 0),
        int(sub(obj, "status", "availableReplicas") or 0),
        age(obj),
        ",".join(str(c.get("name", "")) for c in containers),
        ",".join(str(c.get("image", "")) for c in containers),
        label_selector(selector),
    ]


DEPLOYMENT = Printer(
    [
        name_col(),
        col("Ready", doc="Number of the pod with ready state"),
        col(
            "Up-to-date",
            "integer",
            doc="Total number of non-terminated pods targeted by this deployment that have the desired template spec.",
        ),
        col(
            "Available",
            "integer",
            doc="Total number of available pods (ready for at least minReadySeconds) targeted by this deployment.",
        ),
        age_col(),
        col("Containers", priority=1, doc="Names of each container in the template."),
        col("Images", priority=1, doc="Images referenced by each container in the template."),
        col(
            "Selector",
            priority=1,
            doc="Label selector for pods. Existing ReplicaSets whose pods are selected by this will be the ones affected by this deployment.",
        ),
    ],
    _deployment_cells,
)
