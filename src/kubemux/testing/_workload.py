"""A simulated workload for FakeClusters: pods come and go, change state, emit events.

Public as :func:`kubemux.testing.simulate_workload` and :func:`kubemux.testing.make_event`:
``kubemux demo`` runs it, and it gives a dashboard under test something to show.
"""

from __future__ import annotations

import datetime as dt
import itertools
import random
from typing import Any

import anyio

from ._fake_cluster import FakeCluster
from ._objects import make_pod

__all__ = ["make_event", "set_pod_state", "simulate_workload"]

# what a pod in one state may become next, as a kubelet would report it
_NEXT = {
    "Pending": ("Running", "Running", "Running", "ImagePullBackOff"),
    "ImagePullBackOff": ("Running", "ImagePullBackOff"),
    "Running": ("Running", "CrashLoopBackOff", "Succeeded", "Failed"),
    "CrashLoopBackOff": ("Running", "CrashLoopBackOff", "Failed"),
    "Succeeded": ("Succeeded",),
    "Failed": ("Failed",),
}
_REASONS = (
    ("Normal", "Scheduled", "Successfully assigned {ns}/{name} to node-1"),
    ("Normal", "Pulled", "Container image already present on machine"),
    ("Normal", "Started", "Started container app"),
    ("Warning", "BackOff", "Back-off restarting failed container app in pod {name}"),
    ("Warning", "Unhealthy", "Readiness probe failed: HTTP probe failed with statuscode: 503"),
)


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
        "reportingInstance": "node-1",
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
    reason (``ImagePullBackOff``, ``CrashLoopBackOff``: phase Pending or Running). Phase,
    the Ready conditions and every container's ``ready``, ``state`` and ``restartCount``
    agree: only a Running pod whose containers run is Ready; a Failed one has a container
    terminated with an error.
    """
    status = pod.setdefault("status", {})
    ready = state == "Running"
    phase = {"ImagePullBackOff": "Pending", "CrashLoopBackOff": "Running"}.get(state, state)
    status["phase"] = phase
    for cond in status.get("conditions") or []:
        if cond.get("type") in ("Ready", "ContainersReady"):
            cond["status"] = "True" if ready else "False"
    for container in status.get("containerStatuses") or []:
        container["ready"] = ready
        container["started"] = phase == "Running"
        if state == "Running":
            container["state"] = {"running": {"startedAt": _now()}}
        elif state == "Pending":
            container["state"] = {"waiting": {"reason": "ContainerCreating"}}
        elif state in ("ImagePullBackOff", "CrashLoopBackOff"):
            message = "back-off pulling image" if state == "ImagePullBackOff" else "back-off"
            container["state"] = {"waiting": {"reason": state, "message": message}}
            if state == "CrashLoopBackOff":
                container["restartCount"] = int(container.get("restartCount") or 0) + 1
        else:
            code, reason = (0, "Completed") if state == "Succeeded" else (1, "Error")
            container["state"] = {
                "terminated": {"exitCode": code, "reason": reason, "finishedAt": _now()}
            }


def _now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


async def simulate_workload(
    cluster: FakeCluster,
    *,
    namespaces: tuple[str, ...] = ("default", "web", "batch"),
    pods: int = 12,
    period: float = 1.0,
    seed: int | None = None,
    steps: int | None = None,
) -> None:
    """Keep ``cluster`` busy: create pods, move them through their lifecycle, delete them.

    Pods start Pending and then run, crash-loop, complete or fail (see
    :func:`set_pod_state`); every change also emits an Event. Runs until cancelled (or for
    ``steps`` steps of about ``period`` seconds each).

    Cancellation: stops at once; the cluster keeps the pods it has.
    """
    rng = random.Random(seed)
    counter = itertools.count()
    live: list[tuple[str, str]] = []

    def emit(pod: dict[str, Any]) -> None:
        type_, reason, note = rng.choice(_REASONS)
        meta = pod["metadata"]
        cluster.create(
            "events.events.k8s.io",
            make_event(
                pod,
                reason=reason,
                type_=type_,
                seq=next(counter),
                note=note.format(ns=meta["namespace"], name=meta["name"]),
            ),
        )

    for _ in range(pods):
        ns = rng.choice(namespaces)
        name = f"app-{next(counter):04d}"
        pod = make_pod(name, ns, labels={"app": name[:6]}, size=1200)
        set_pod_state(pod, rng.choice(("Running", "Running", "Running", "Pending")))
        pod = cluster.create("pods", pod)
        live.append((ns, name))
        emit(pod)
    for step in itertools.count():
        if steps is not None and step >= steps:
            return
        await anyio.sleep(period * rng.uniform(0.5, 1.5))
        action = rng.random()
        if action < 0.5 and live:
            ns, name = rng.choice(live)
            current = cluster.get("pods", ns, name)
            if current is not None:
                set_pod_state(current, rng.choice(_NEXT[_state_of(current)]))
                emit(cluster.update("pods", current))
        elif action < 0.75 and live:
            ns, name = live.pop(rng.randrange(len(live)))
            cluster.delete("pods", ns, name)
        else:
            ns = rng.choice(namespaces)
            name = f"app-{next(counter):04d}"
            pod = make_pod(name, ns, labels={"app": "web"}, size=1200)
            set_pod_state(pod, "Pending")
            emit(cluster.create("pods", pod))
            live.append((ns, name))


def _state_of(pod: dict[str, Any]) -> str:
    status = pod.get("status") or {}
    for container in status.get("containerStatuses") or []:
        reason = ((container.get("state") or {}).get("waiting") or {}).get("reason")
        if reason in _NEXT:
            return str(reason)
    phase = str(status.get("phase") or "Pending")
    return phase if phase in _NEXT else "Pending"
