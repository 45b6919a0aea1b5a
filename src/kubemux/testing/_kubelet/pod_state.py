"""What a kubelet reports about pods: consistent pod states and the Events about them.

Public as :func:`kubemux.testing.set_pod_state` and :func:`kubemux.testing.make_event`;
:func:`kubemux.testing.simulate_workload` drives them.
"""

from __future__ import annotations

import datetime as dt
import hashlib
from typing import Any

__all__ = ["ago", "is_ready", "make_event", "set_pod_state", "state_of"]

_EXIT_ERROR = 1


def make_event(
    regarding: dict[str, Any], *, reason: str, note: str, type_: str = "Normal", seq: int = 0
) -> dict[str, Any]:
    """An events.k8s.io/v1 Event about ``regarding`` (an object dict)."""
    meta = regarding.get("metadata") or {}
    now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    name = f"{meta.get('name', 'x')}.{seq:08x}"
    return {
        "apiVersion": "events.k8s.io/v1",
        "kind": "Event",
        "metadata": {"name": name, "namespace": meta.get("namespace") or "default"},
        "eventTime": now,
        "reportingController": "kubelet",
        "reportingInstance": (regarding.get("spec") or {}).get("nodeName") or "node-1",
        "action": reason,
        "reason": reason,
        "type": type_,
        "note": note,
        "regarding": {
            "apiVersion": regarding.get("apiVersion", "v1"),
            "kind": regarding.get("kind", "Pod"),
            "namespace": meta.get("namespace") or "",
            "name": meta.get("name", ""),
            "uid": meta.get("uid", ""),
        },
    }


def set_pod_state(pod: dict[str, Any], state: str) -> None:
    """Make ``pod``'s status say ``state`` as the kubelet would, consistently.

    ``state`` is a phase (``Pending``, ``Running``, ``Succeeded``, ``Failed``) or a waiting
    reason (``ImagePullBackOff``: phase Pending; ``CrashLoopBackOff``: phase Running). Phase,
    the Ready conditions and every container's ``ready``, ``started``, ``state``,
    ``lastState`` and ``restartCount`` agree:

    - only a Running pod whose containers run is Ready;
    - Pending: containers waiting in ``ContainerCreating`` (no container ID yet);
    - CrashLoopBackOff: waiting, one more restart, the last run terminated with an error;
    - Succeeded: terminated ``Completed`` with exit code 0; Failed: terminated ``Error``
      with exit code 1 (never ready).
    """
    status = pod.setdefault("status", {})
    ready = state == "Running"
    phase = {"ImagePullBackOff": "Pending", "CrashLoopBackOff": "Running"}.get(state, state)
    status["phase"] = phase
    for cond in status.get("conditions") or []:
        if cond.get("type") in ("Ready", "ContainersReady"):
            cond["status"] = "True" if ready else "False"
            if ready:
                cond.pop("reason", None)
            else:
                done = {"Succeeded": "PodCompleted", "Failed": "PodFailed"}
                cond["reason"] = done.get(phase, "ContainersNotReady")
    name = (pod.get("metadata") or {}).get("name", "")
    for container in status.get("containerStatuses") or []:
        restarts = int(container.get("restartCount") or 0)
        container["ready"] = ready
        container["started"] = ready
        if state == "Pending":
            container["state"] = {"waiting": {"reason": "ContainerCreating"}}
            container.pop("containerID", None)
            continue
        if state == "ImagePullBackOff":
            image = container.get("image", "")
            message = f'Back-off pulling image "{image}"'
            container["state"] = {"waiting": {"reason": state, "message": message}}
            container.pop("containerID", None)
            continue
        if state == "CrashLoopBackOff":
            restarts += 1
            container["restartCount"] = restarts
            container["lastState"] = {
                "terminated": {"exitCode": _EXIT_ERROR, "reason": "Error", "finishedAt": _now()}
            }
            message = f"back-off {min(300, 10 * 2 ** (restarts - 1))}s restarting failed container"
            container["state"] = {"waiting": {"reason": state, "message": message}}
        elif state == "Running":
            container["state"] = {"running": {"startedAt": _now()}}
        else:  # Succeeded, Failed
            code, reason = (0, "Completed") if state == "Succeeded" else (_EXIT_ERROR, "Error")
            container["state"] = {
                "terminated": {"exitCode": code, "reason": reason, "finishedAt": _now()}
            }
        digest = hashlib.sha256(f"{name}/{container.get('name')}/{restarts}".encode())
        container["containerID"] = f"containerd://{digest.hexdigest()[:32]}"


def _now() -> str:
    return ago(0)


def ago(seconds: float) -> str:
    when = dt.datetime.now(dt.UTC) - dt.timedelta(seconds=seconds)
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")


def is_ready(pod: dict[str, Any]) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def state_of(pod: dict[str, Any]) -> str:
    status = pod.get("status") or {}
    for container in status.get("containerStatuses") or []:
        reason = ((container.get("state") or {}).get("waiting") or {}).get("reason")
        if reason in ("ImagePullBackOff", "CrashLoopBackOff"):
            return str(reason)
    phase = str(status.get("phase") or "Pending")
    return phase if phase in ("Pending", "Running", "Succeeded", "Failed") else "Pending"
