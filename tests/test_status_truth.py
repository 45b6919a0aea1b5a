"""status() tells the truth (DESIGN invariant 13, issue 21): a context that works is not shown
as failing, an error that no longer holds is not shown as current, a skipped object says why.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import anyio
import pytest

from kubemux import Backoff, MultiStore, MultiTableStore, WatcherRegistry, WatchSettings
from kubemux.testing import FakeCluster, FakeContext, make_pod, write_kubeconfig
from support import TIMEOUT, wait_until

NO_WINDOW = Backoff(initial_delay=0.0, max_delay=0.0, jitter=False)  # retry at once, if at all
FAST = WatchSettings(
    backoff=Backoff(initial_delay=0.02, max_delay=0.1),
    min_healthy_watch=0.0,
    response_timeout=0.5,
    read_timeout=0.5,
)


def _cluster_wide(cluster: FakeCluster) -> int:
    return sum(1 for r in cluster.requests if r.path == "/api/v1/pods")


@pytest.fixture
async def limited(tmp_path: Path) -> Any:
    """A cluster whose user ``jane`` may read pods only in ``team-a``; a kubeconfig for her."""
    async with FakeCluster(tokens={"admin"}, bookmark_period=0.1, name="rbac") as c:
        for ns in ("team-a", "team-b"):
            c.create("pods", make_pod(f"{ns}-pod", ns))
        c.restrict("jane", user="jane", namespaces=["team-a"])
        ctx = FakeContext(cluster=c, token="jane", namespace="team-a")
        yield c, write_kubeconfig(tmp_path / "config", {"limited": ctx})


# ------------------------------------------------------------------ 1. the namespace fallback
async def test_a_namespace_fallback_is_running_with_a_note_and_never_retried(limited: Any) -> None:
    cluster, path = limited
    async with WatcherRegistry.from_kubeconfig(str(path), start_backoff=NO_WINDOW) as reg:
        with anyio.fail_after(TIMEOUT):
            store = await reg.watch("limited", "pods")
        assert isinstance(store, MultiStore) and store.scope == ("team-a",)
        status = reg.status().contexts["limited"]
        assert status.state == "running", status
        assert status.last_error is None and status.retry_in is None
        assert "forbidden" in status.notes["pods"] and "watching team-a" in status.notes["pods"]
        assert [i.namespace for i in status.informers] == ["team-a"]
        assert _cluster_wide(cluster) == 1
        with anyio.fail_after(TIMEOUT):
            assert isinstance(await reg.table("limited", "pods"), MultiTableStore)
        assert _cluster_wide(cluster) == 2  # the table view is an informer of its own
        assert reg.status().contexts["limited"].state == "running"
        with anyio.fail_after(TIMEOUT):
            for _ in range(5):  # no backoff window at all: only the remembered fallback
                assert isinstance(await reg.watch("limited", "pods"), MultiStore)
                assert isinstance(await reg.table("limited", "pods"), MultiTableStore)
        assert _cluster_wide(cluster) == 2
        assert reg.store("limited", "pods") is not None  # the union, as store() names it


async def test_an_autowatched_resource_falls_back_once_and_shows_running(limited: Any) -> None:
    cluster, path = limited
    backoff = Backoff(initial_delay=0.02, max_delay=0.05, jitter=False)
    registry = WatcherRegistry.from_kubeconfig(
        str(path), autowatch=["pods"], autowatch_view="table", start_backoff=backoff
    )
    async with registry as reg:

        def running() -> bool:
            st = reg.status().contexts["limited"]
            return st.state == "running" and any(i.has_synced for i in st.informers)

        await wait_until(running, registry=reg)
        status = reg.status().contexts["limited"]
        assert status.last_error is None and status.retry_in is None, status
        assert "watching team-a" in status.notes["pods"]
        assert [(i.namespace, i.view) for i in status.informers] == [("team-a", "table")]
        # with a 20-50 ms backoff a retry loop would have made several requests by now;
        # give it a few bookmark periods (100 ms each) to show itself
        with anyio.move_on_after(0.5):
            await cluster.wait_for(lambda: _cluster_wide(cluster) > 1, timeout=TIMEOUT)
        assert _cluster_wide(cluster) == 1
        with anyio.fail_after(TIMEOUT):
            table = await reg.table("limited", "pods")
        assert isinstance(table, MultiTableStore) and [r.name for r in table.rows()] == [
            "team-a-pod"
        ]
        assert reg.store("limited", "pods", view="table") is table
