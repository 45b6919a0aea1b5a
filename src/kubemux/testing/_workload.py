"""A simulated workload for FakeClusters: pods come and go, change phase, emit events."""

from __future__ import annotations

import datetime as dt
import itertools
import random
from typing import Any

import anyio

from ._fake_cluster import FakeCluster
from ._objects import make_pod

__all__ = ["make_event", "simulate_workload"]

_PHASES = ("Pending", "Running", "Running", "Running", "Succeeded", "Failed")
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


async def simulate_workload(
    cluster: FakeCluster,
    *,
    namespaces: tuple[str, ...] = ("default", "web", "batch"),
    pods: int = 12,
    period: float = 1.0,
    seed: int | None = None,
    steps: int | None = None,
) -> None:
    """Keep ``cluster`` busy: create pods, change their phase, delete and recreate them.

    Runs until cancelled (or for ``steps`` steps). Every change also emits an Event.
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
        pod = cluster.create("pods", make_pod(name, ns, labels={"app": name[:6]}, size=1200))
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
                current["status"]["phase"] = rng.choice(_PHASES)
                emit(cluster.update("pods", current))
        elif action < 0.75 and live:
            ns, name = live.pop(rng.randrange(len(live)))
            cluster.delete("pods", ns, name)
        else:
            ns = rng.choice(namespaces)
            name = f"app-{next(counter):04d}"
            emit(cluster.create("pods", make_pod(name, ns, labels={"app": "web"}, size=1200)))
            live.append((ns, name))
