"""A simulated workload for FakeClusters: nodes, Deployments and Jobs whose pods come and go,
change state and emit Events, the way a kubelet and the controllers would report them.

Public as :func:`kubemux.testing.simulate_workload`, :func:`kubemux.testing.set_pod_state`
and :func:`kubemux.testing.make_event`: ``kubemux demo`` runs it, and it gives a dashboard
under test something to show.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import itertools
import random
from typing import Any

import anyio

from .._kubelet.pod_state import ago, is_ready, make_event, set_pod_state, state_of
from .._state.objects import make_pod
from .fake_cluster import FakeCluster

__all__ = ["make_event", "set_pod_state", "simulate_workload"]

# What a pod in one state may become next. A Deployment's pods restart (restartPolicy
# Always): they crash-loop but never end; a Job's pods (restartPolicy Never) end.
_NEXT_SERVICE = {
    "Pending": ("Running", "Running", "Running", "ImagePullBackOff"),
    "ImagePullBackOff": ("Running", "ImagePullBackOff"),
    "Running": ("Running", "Running", "CrashLoopBackOff"),
    "CrashLoopBackOff": ("Running", "CrashLoopBackOff"),
}
_NEXT_JOB = {
    "Pending": ("Running",),
    "Running": ("Running", "Succeeded", "Succeeded", "Failed"),
    "Succeeded": ("Succeeded",),
    "Failed": ("Failed",),
}
_SERVICES = ("web", "api", "checkout", "search", "cache", "auth", "cart", "mailer")
_JOBS = ("report", "backup", "etl", "migrate")
_NODES = ("node-1", "node-2", "node-3")
_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"  # what Kubernetes draws generated names from


def _suffix(rng: random.Random, n: int = 5) -> str:
    return "".join(rng.choice(_ALPHABET) for _ in range(n))


def _template_hash(name: str) -> str:
    digest = hashlib.sha256(name.encode()).digest()
    return "".join(_ALPHABET[b % len(_ALPHABET)] for b in digest[:10])


def _owner(kind: str, api_version: str, obj: dict[str, Any]) -> dict[str, Any]:
    meta = obj["metadata"]
    return {
        "apiVersion": api_version,
        "kind": kind,
        "name": meta["name"],
        "uid": meta["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def _node(name: str) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "labels": {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux"},
        },
        "spec": {"podCIDR": f"10.244.{_NODES.index(name) + 1}.0/24"},
        "status": {
            "capacity": {"cpu": "8", "memory": "32Gi", "pods": "110"},
            "allocatable": {"cpu": "7910m", "memory": "31Gi", "pods": "110"},
            "conditions": [
                {
                    "type": "MemoryPressure",
                    "status": "False",
                    "reason": "KubeletHasSufficientMemory",
                },
                {"type": "DiskPressure", "status": "False", "reason": "KubeletHasNoDiskPressure"},
                {"type": "Ready", "status": "True", "reason": "KubeletReady"},
            ],
            "nodeInfo": {
                "kubeletVersion": "v1.32.0",
                "containerRuntimeVersion": "containerd://1.7",
            },
        },
    }


@dataclasses.dataclass
class _Workload:
    """A Deployment's ReplicaSet or a Job: what owns a set of pods."""

    namespace: str
    name: str  # the Deployment or the Job
    kind: str  # "ReplicaSet" or "Job"
    owner: dict[str, Any]  # the ownerReference its pods carry
    owner_created: str  # the owner's creationTimestamp
    pods: set[str] = dataclasses.field(default_factory=set)


class _Simulation:
    def __init__(self, cluster: FakeCluster, rng: random.Random, namespaces: tuple[str, ...]):
        self.cluster = cluster
        self.rng = rng
        self.namespaces = namespaces
        self.seq = itertools.count()
        self.workloads: dict[tuple[str, str], _Workload] = {}  # (namespace, pod) -> owner
        self.ended: list[tuple[str, str]] = []  # pods that succeeded or failed, oldest first
        self.starting: set[tuple[str, str]] = set()  # pods in ContainerCreating
        self.cronjobs: dict[tuple[str, str], dict[str, Any]] = {}  # (namespace, name) -> it
        self.events: dict[tuple[str, str, str], str] = {}  # (namespace, uid, reason) -> name
        self.services: list[_Workload] = []

    # ------------------------------------------------------------ setup
    def start(self, pods: int) -> None:
        # the namespaces exist as objects, as in a cluster (the dashboard's picker lists them)
        for ns in dict.fromkeys(("default", "kube-system", *self.namespaces)):
            if self.cluster.get("namespaces", None, ns) is None:
                self.cluster.create(
                    "namespaces",
                    {
                        "apiVersion": "v1",
                        "kind": "Namespace",
                        "metadata": {
                            "name": ns,
                            "creationTimestamp": ago(86400 * 90),
                            "labels": {"kubernetes.io/metadata.name": ns},
                        },
                        "spec": {"finalizers": ["kubernetes"]},
                        "status": {"phase": "Active"},
                    },
                )
        for name in _NODES:
            if self.cluster.get("nodes", None, name) is None:
                node = _node(name)
                node["metadata"]["creationTimestamp"] = ago(86400 * self.rng.uniform(20, 90))
                self.cluster.create("nodes", node)
        names = list(_SERVICES)
        self.rng.shuffle(names)
        for ns in self.namespaces:
            if ns != "batch":
                for _ in range(2):
                    self.services.append(self._deployment(ns, names.pop() if names else "app"))
        for _ in range(pods):
            self.add_pod(initial=True)

    def _deployment(self, ns: str, name: str) -> _Workload:
        labels = {"app": name}
        template_hash = _template_hash(f"{ns}/{name}")
        deployment = self.cluster.create(
            "deployments.apps",
            {
                "metadata": {
                    "name": name,
                    "namespace": ns,
                    "labels": labels,
                    "creationTimestamp": ago(86400 * self.rng.uniform(2, 15)),
                },
                "spec": {
                    "replicas": 0,
                    "selector": {"matchLabels": labels},
                    "template": {"metadata": {"labels": labels}},
                },
                "status": {"replicas": 0, "readyReplicas": 0},
            },
        )
        rs = self.cluster.create(
            "replicasets.apps",
            {
                "metadata": {
                    "creationTimestamp": deployment["metadata"]["creationTimestamp"],
                    "name": f"{name}-{template_hash}",
                    "namespace": ns,
                    "labels": {**labels, "pod-template-hash": template_hash},
                    "ownerReferences": [_owner("Deployment", "apps/v1", deployment)],
                },
                "spec": {"replicas": 0, "selector": {"matchLabels": labels}},
                "status": {"replicas": 0, "readyReplicas": 0},
            },
        )
        owner = _owner("ReplicaSet", "apps/v1", rs)
        return _Workload(ns, name, "ReplicaSet", owner, rs["metadata"]["creationTimestamp"])

    def _job(self, ns: str, created: str | None) -> _Workload:
        """A Job started by one of the namespace's CronJobs (created on first use)."""
        cron_name = self.rng.choice(_JOBS)
        cron = self.cronjobs.get((ns, cron_name))
        if cron is None:
            cron = self.cluster.create(
                "cronjobs.batch",
                {
                    "metadata": {
                        "name": cron_name,
                        "namespace": ns,
                        "creationTimestamp": ago(86400 * self.rng.uniform(5, 60)),
                    },
                    "spec": {
                        "schedule": f"{self.rng.randrange(60)} * * * *",
                        "concurrencyPolicy": "Forbid",
                        "jobTemplate": {"spec": {"backoffLimit": 0}},
                    },
                },
            )
            self.cronjobs[(ns, cron_name)] = cron
        name = f"{cron_name}-{29400000 + next(self.seq)}"  # as a CronJob names them
        meta: dict[str, Any] = {
            "name": name,
            "namespace": ns,
            "labels": {"job-name": name},
            "ownerReferences": [_owner("CronJob", "batch/v1", cron)],
        }
        if created is not None:
            meta["creationTimestamp"] = created
        job = self.cluster.create(
            "jobs.batch",
            {
                "metadata": meta,
                "spec": {"backoffLimit": 0, "completions": 1, "parallelism": 1},
                "status": {"active": 1},
            },
        )
        owner = _owner("Job", "batch/v1", job)
        return _Workload(ns, name, "Job", owner, job["metadata"]["creationTimestamp"])

    # ------------------------------------------------------------ pods
    def add_pod(self, workload: _Workload | None = None, *, initial: bool = False) -> None:
        """A new pod: for ``workload`` (a replacement), else in a random namespace."""
        if workload is None:
            ns = self.rng.choice(self.namespaces)
            if ns == "batch" or not self.services:
                workload = self._job(ns, ago(self.rng.uniform(60, 3600)) if initial else None)
            else:
                workload = self.rng.choice([w for w in self.services if w.namespace == ns])
        ns = workload.namespace
        name = f"{workload.owner['name']}-{_suffix(self.rng)}"
        is_job = workload.kind == "Job"
        labels = {"job-name": workload.name} if is_job else {"app": workload.name}
        pod = make_pod(name, ns, labels=labels, node=self.rng.choice(_NODES), size=1800)
        meta, spec = pod["metadata"], pod["spec"]
        meta["generateName"] = f"{workload.owner['name']}-"
        meta["ownerReferences"] = [workload.owner]
        image = f"registry.example.com/{workload.name.rsplit('-', 1)[0]}:1.{self.rng.randrange(9)}"
        spec["containers"][0]["image"] = pod["status"]["containerStatuses"][0]["image"] = image
        if is_job:
            spec["restartPolicy"] = "Never"
        state = "Pending"
        if initial:
            state = self.rng.choice(("Running", "Running", "Running", "Pending"))
        set_pod_state(pod, state)
        if initial:  # it was there before the simulation started
            age = self.rng.uniform(300, 86400 * 2)
            started = workload.owner_created if is_job else ago(age)
            meta["creationTimestamp"] = pod["status"]["startTime"] = started
            for container in pod["status"]["containerStatuses"]:
                if "running" in container["state"]:
                    container["state"]["running"]["startedAt"] = started
        else:
            pod["status"]["startTime"] = ago(0)
        pod = self.cluster.create("pods", pod)
        if state == "Pending":
            self.starting.add((ns, name))
        workload.pods.add(name)
        self.workloads[(ns, name)] = workload
        node = pod["spec"]["nodeName"]
        self.emit(pod, "Normal", "Scheduled", f"Successfully assigned {ns}/{name} to {node}")
        self.sync(workload)

    def change_pod(self) -> None:
        """A pod moves on in its life: one that has not ended, a starting one most likely
        (pods spend seconds in ContainerCreating, hours running)."""
        live = [key for key in self.workloads if key not in self.ended] or list(self.workloads)
        weights = [4 if key in self.starting else 1 for key in live]
        ns, name = self.rng.choices(live, weights)[0]
        workload = self.workloads[(ns, name)]
        pod = self.cluster.get("pods", ns, name)
        if pod is None:
            return
        table = _NEXT_JOB if workload.kind == "Job" else _NEXT_SERVICE
        before = state_of(pod)
        after = self.rng.choice(table.get(before, ("Running",)))
        set_pod_state(pod, after)
        pod = self.cluster.update("pods", pod)
        if after in ("Succeeded", "Failed"):
            self.ended.append((ns, name))
        if after == "Pending":
            self.starting.add((ns, name))
        else:
            self.starting.discard((ns, name))
        image = pod["spec"]["containers"][0]["image"]
        if after == "Running" and before != "Running":
            self.emit(pod, "Normal", "Started", "Started container app")
        elif after == "Running":
            note = "Readiness probe failed: HTTP probe failed with statuscode: 503"
            self.emit(pod, "Warning", "Unhealthy", note)
        elif after == "CrashLoopBackOff":
            note = f"Back-off restarting failed container app in pod {name}_{ns}"
            self.emit(pod, "Warning", "BackOff", note)
        elif after == "ImagePullBackOff":
            self.emit(pod, "Warning", "Failed", f'Failed to pull image "{image}": not found')
        elif after != before and after == "Failed":
            self.emit(pod, "Warning", "BackoffLimitExceeded", "Job has reached the backoff limit")
        elif after != before:
            self.emit(pod, "Normal", "Completed", "Job completed")
        self.sync(workload)

    def step(self, target: int) -> None:
        """One thing happens, keeping about ``target`` pods."""
        action = self.rng.random()
        services = [key for key in self.workloads if self.workloads[key].kind != "Job"]
        if action < 0.55 and self.workloads:
            self.change_pod()
        elif action < 0.7 and services:  # a rollout or an eviction: the ReplicaSet replaces it
            key = self.rng.choice(services)
            workload = self.workloads[key]
            self.delete_pod(key)
            self.add_pod(workload)
        elif action < 0.85 and self.ended:  # a finished Job's time to live is over
            self.delete_pod(self.ended[0])
        elif len(self.workloads) < target or not services:  # scale up, or a new Job
            self.add_pod()
        else:  # scale down
            self.delete_pod(self.rng.choice(services))

    def delete_pod(self, key: tuple[str, str]) -> None:
        """Delete a pod (a Job goes with its pod)."""
        ns, name = key
        workload = self.workloads.pop(key)
        if key in self.ended:
            self.ended.remove(key)
        self.starting.discard(key)
        pod = self.cluster.delete("pods", ns, name)
        workload.pods.discard(name)
        if pod is not None:
            self.emit(pod, "Normal", "Killing", "Stopping container app")
            uid = pod["metadata"]["uid"]
            for gone in [k for k in self.events if k[1] == uid]:
                del self.events[gone]  # its Events stay in the cluster, as they would
        if workload.kind == "Job":
            self.cluster.delete("jobs.batch", ns, workload.name)
        else:
            self.sync(workload)

    def emit(self, obj: dict[str, Any], type_: str, reason: str, note: str) -> None:
        """The Event about ``obj``; a repeated one counts up its series, as a kubelet's do."""
        meta = obj["metadata"]
        key = (meta["namespace"], meta["uid"], reason)
        seen = self.events.get(key)
        event = None if seen is None else self.cluster.get("events.events.k8s.io", key[0], seen)
        if event is None:
            event = make_event(obj, reason=reason, note=note, type_=type_, seq=next(self.seq))
            self.events[key] = event["metadata"]["name"]
            self.cluster.create("events.events.k8s.io", event)
            return
        count = int((event.get("series") or {}).get("count") or 1) + 1
        now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        event["series"] = {"count": count, "lastObservedTime": now}
        event["note"] = note
        self.cluster.update("events.events.k8s.io", event)

    def sync(self, workload: _Workload) -> None:
        """The controllers' part: the owner's status counts what its pods say."""
        pods = [self.cluster.get("pods", workload.namespace, p) for p in workload.pods]
        states = [state_of(p) for p in pods if p is not None]
        ready = sum(1 for p in pods if p is not None and is_ready(p))
        if workload.kind == "Job":
            job = self.cluster.get("jobs.batch", workload.namespace, workload.name)
            if job is None:
                return
            counts = {
                "active": sum(1 for s in states if s not in ("Succeeded", "Failed")),
                "succeeded": states.count("Succeeded"),
                "failed": states.count("Failed"),
            }
            status: dict[str, Any] = {k: v for k, v in counts.items() if v}
            if "succeeded" in status:
                status["conditions"] = [{"type": "Complete", "status": "True"}]
            elif "failed" in status:
                status["conditions"] = [
                    {"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded"}
                ]
            if job.get("status") != status:
                job["status"] = status
                self.cluster.update("jobs.batch", job)
            return
        replicas = {"replicas": len(states), "readyReplicas": ready, "availableReplicas": ready}
        rs = self.cluster.get("replicasets.apps", workload.namespace, workload.owner["name"])
        deployment = self.cluster.get("deployments.apps", workload.namespace, workload.name)
        for resource, obj in (("replicasets.apps", rs), ("deployments.apps", deployment)):
            if obj is not None and (
                obj.get("status") != replicas or obj["spec"]["replicas"] != len(states)
            ):
                obj["status"] = dict(replicas)
                obj["spec"]["replicas"] = len(states)
                self.cluster.update(resource, obj)


async def simulate_workload(
    cluster: FakeCluster,
    *,
    namespaces: tuple[str, ...] = ("default", "web", "batch"),
    pods: int = 12,
    period: float = 1.0,
    seed: int | None = None,
    steps: int | None = None,
) -> None:
    """Keep ``cluster`` busy the way a real one is.

    Creates three nodes, two Deployments (each with its ReplicaSet) per namespace and, in
    ``batch``, CronJobs and their Jobs; then about ``pods`` pods, owned by them. Each step (about ``period``
    seconds) one thing happens: a pod's state changes (see :func:`set_pod_state`: a
    Deployment's pods run or crash-loop, a Job's pods complete or fail), a pod is replaced
    (a rollout, an eviction), a finished Job is deleted with its pod, a Job starts or a
    Deployment scales. Owners' status counts follow their pods, and every change emits the
    Event a kubelet would (a repeated one counts up its ``series``). Runs until cancelled
    (or for ``steps`` steps).

    Cancellation: stops at once; the cluster keeps what it has.
    """
    rng = random.Random(seed)
    sim = _Simulation(cluster, rng, namespaces)
    sim.start(pods)
    for step in itertools.count():
        if steps is not None and step >= steps:
            return
        await anyio.sleep(period * rng.uniform(0.5, 1.5))
        sim.step(pods)
