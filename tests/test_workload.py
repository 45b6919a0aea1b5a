"""The simulated workload (``kubemux demo``): what it reports must be what a cluster could."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from kubemux.dashboard.views import summarize
from kubemux.testing import FakeCluster, make_pod, set_pod_state, simulate_workload

STATES = ("Pending", "ImagePullBackOff", "Running", "CrashLoopBackOff", "Succeeded", "Failed")


def check_consistent(pod: dict[str, Any]) -> None:
    """Phase, conditions and container statuses tell one story, as a kubelet's do."""
    status = pod["status"]
    phase = status["phase"]
    conditions = {c["type"]: c["status"] for c in status["conditions"]}
    containers = status["containerStatuses"]
    assert containers
    ready = all(c["ready"] for c in containers)
    assert conditions["Ready"] == conditions["ContainersReady"] == ("True" if ready else "False")
    for c in containers:
        (kind, state), *more = c["state"].items()
        assert more == []
        assert c["ready"] == (kind == "running" and phase == "Running"), (phase, c)
        assert c["started"] == (kind == "running")
        if phase == "Pending":
            assert kind == "waiting"
            assert state["reason"] in ("ContainerCreating", "ImagePullBackOff")
            assert "containerID" not in c
        elif phase == "Running":
            assert kind == "running" or state["reason"] == "CrashLoopBackOff"
            assert c["containerID"]
        else:
            assert kind == "terminated" and phase in ("Succeeded", "Failed")
            assert state["exitCode"] == (0 if phase == "Succeeded" else 1)
            assert state["reason"] == ("Completed" if phase == "Succeeded" else "Error")
        if kind == "waiting" and state["reason"] == "CrashLoopBackOff":
            assert c["restartCount"] >= 1
            assert c["lastState"]["terminated"]["exitCode"] != 0
    row = summarize("pods", pod)
    wanted = sum(1 for c in containers if c["ready"])
    assert row["ready"] == f"{wanted}/{len(containers)}"
    if phase != "Running":
        assert row["ready"] == f"0/{len(containers)}"


@pytest.mark.parametrize("state", STATES)
def test_every_state_is_consistent(state: str) -> None:
    pod = make_pod("web-1")
    set_pod_state(pod, state)
    check_consistent(pod)
    row = summarize("pods", pod)
    shown = {"Pending": "ContainerCreating", "Succeeded": "Completed", "Failed": "Error"}
    assert row["status"] == shown.get(state, state)


def test_failed_pod_is_not_ready_and_says_why() -> None:
    pod = make_pod("job-1")
    set_pod_state(pod, "Failed")
    (container,) = pod["status"]["containerStatuses"]
    assert container["ready"] is False
    assert container["state"]["terminated"]["exitCode"] == 1
    assert summarize("pods", pod)["ready"] == "0/1"


def test_crash_loops_count_restarts_and_keep_them() -> None:
    pod = make_pod("web-1")
    for n in (1, 2, 3):
        set_pod_state(pod, "CrashLoopBackOff")
        assert pod["status"]["containerStatuses"][0]["restartCount"] == n
        assert summarize("pods", pod)["restarts"] == n
        check_consistent(pod)
    set_pod_state(pod, "Running")
    check_consistent(pod)
    assert summarize("pods", pod)["restarts"] == 3
    assert summarize("pods", pod)["ready"] == "1/1"


@pytest.mark.parametrize("phase", ["Pending", "Running", "Succeeded", "Failed"])
def test_make_pod_phases_are_consistent(phase: str) -> None:
    pod = make_pod("web-1", phase=phase)
    assert pod["status"]["phase"] == phase
    (container,) = pod["status"]["containerStatuses"]
    assert container["ready"] == (phase == "Running")
    kind = {"Pending": "waiting", "Running": "running"}.get(phase, "terminated")
    assert list(container["state"]) == [kind]
    assert make_pod("web-1", phase=phase) == pod  # deterministic


@pytest.mark.parametrize("seed", [0, 1, 2])
async def test_simulated_workload_stays_consistent(seed: int) -> None:
    async with FakeCluster() as cluster:
        await simulate_workload(cluster, seed=seed, period=0, steps=300, pods=12)
        now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        pods = cluster.objects("pods")
        assert pods
        phases = set()
        for pod in pods:
            check_consistent(pod)
            phases.add(pod["status"]["phase"])
            # every pod has an owner that exists, and a node that exists
            (ref,) = pod["metadata"]["ownerReferences"]
            resource = {"ReplicaSet": "replicasets.apps", "Job": "jobs.batch"}[ref["kind"]]
            owner = cluster.get(resource, pod["metadata"]["namespace"], ref["name"])
            assert owner is not None and owner["metadata"]["uid"] == ref["uid"]
            # nothing is older than what made it
            created = pod["metadata"]["creationTimestamp"]
            assert owner["metadata"]["creationTimestamp"] <= created <= now
            assert created <= pod["status"]["startTime"] <= now
            assert cluster.get("nodes", None, pod["spec"]["nodeName"]) is not None
            assert cluster.get("namespaces", None, pod["metadata"]["namespace"]) is not None
            # a Job's pods end; a Deployment's pods restart but never end
            if ref["kind"] == "Job":
                assert pod["spec"]["restartPolicy"] == "Never"
            else:
                assert pod["status"]["phase"] in ("Pending", "Running")
        # the owners count what their pods say
        for rs in cluster.objects("replicasets.apps"):
            mine = [
                p
                for p in pods
                if p["metadata"]["ownerReferences"][0]["uid"] == rs["metadata"]["uid"]
            ]
            ready = sum(
                1 for p in mine if all(c["ready"] for c in p["status"]["containerStatuses"])
            )
            assert rs["spec"]["replicas"] == rs["status"]["replicas"] == len(mine)
            assert rs["status"]["readyReplicas"] == ready
            (owner,) = rs["metadata"]["ownerReferences"]
            deployment = cluster.get("deployments.apps", rs["metadata"]["namespace"], owner["name"])
            assert deployment is not None and deployment["status"] == rs["status"]
        for job in cluster.objects("jobs.batch"):
            mine = [
                p
                for p in pods
                if p["metadata"]["ownerReferences"][0]["name"] == job["metadata"]["name"]
            ]
            assert len(mine) == 1  # a Job goes with its pod
            (cron,) = job["metadata"]["ownerReferences"]
            assert cron["kind"] == "CronJob"
            assert cluster.get("cronjobs.batch", "batch", cron["name"]) is not None
            done = {"Succeeded": "succeeded", "Failed": "failed"}.get(mine[0]["status"]["phase"])
            assert set(job["status"]) - {"conditions"} == {done or "active"}
        events = cluster.objects("events.events.k8s.io")
        assert {e["reason"] for e in events} >= {"Scheduled", "Started"}
        assert len(events) > len(pods)
        # a repeated Event counts up its series instead of piling up
        series = [e["series"]["count"] for e in events if "series" in e]
        assert series and min(series) >= 2
        about = [(e["regarding"]["uid"], e["reason"]) for e in events]
        assert len(about) == len(set(about))


async def test_over_many_seeds_every_state_shows_up() -> None:
    """The demo shows the whole life of pods, Failed and crash-looping ones included."""
    seen: set[str] = set()
    for seed in range(3):
        for steps in range(0, 201, 25):  # the same seed replays the same run: snapshots of it
            async with FakeCluster() as cluster:
                await simulate_workload(cluster, seed=seed, period=0, steps=steps)
                seen.update(summarize("pods", pod)["status"] for pod in cluster.objects("pods"))
    wanted = {"Running", "ContainerCreating", "ImagePullBackOff", "CrashLoopBackOff"}
    assert wanted | {"Completed", "Error"} <= seen
