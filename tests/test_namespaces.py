"""Users who may see only some namespaces: several namespaces in one store, and the
fallback when a cluster-wide LIST is forbidden."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from kubemux import Forbidden, MultiStore, MultiTableStore, WatcherRegistry
from kubemux.testing import FakeCluster, FakeContext, make_pod, write_kubeconfig
from support import TIMEOUT


@pytest.fixture
async def cluster() -> FakeCluster:  # type: ignore[misc]
    async with FakeCluster(tokens={"admin", "jane"}, name="rbac") as c:
        for ns in ("a", "b", "c"):
            for i in range(2):
                c.create("pods", make_pod(f"{ns}-{i}", ns))
        c.restrict("jane", user="jane", namespaces=["a", "b"])
        yield c


def names(store: MultiStore) -> list[str]:
    return [o["metadata"]["name"] for o in store.list()]


async def test_several_namespaces_in_one_store(tmp_path: Path, cluster: FakeCluster) -> None:
    path = write_kubeconfig(tmp_path / "config", {"x": FakeContext(cluster=cluster, token="admin")})
    async with WatcherRegistry.from_kubeconfig(str(path)) as registry:
        with anyio.fail_after(TIMEOUT):
            store = await registry.watch("x", "pods", namespaces=["b", "a"])
        assert isinstance(store, MultiStore) and store.scope == ("a", "b")
        assert names(store) == ["a-0", "a-1", "b-0", "b-1"]
        assert store.get("c", "c-0") is None and store.get("a", "a-1") is not None
        assert len(store) == 4 and ("b", "b-0") in store
        async with registry.subscribe("pods", ["x"], namespaces=["a"], snapshot=False) as sub:
            cluster.create("pods", make_pod("c-new", "c"))
            cluster.create("pods", make_pod("a-new", "a"))
            with anyio.fail_after(TIMEOUT):
                assert (await sub.__anext__()).name == "a-new"
        assert store.get("a", "a-new") is not None
        with pytest.raises(ValueError, match="not both"):
            await registry.watch("x", "pods", "a", namespaces=["b"])


async def test_a_forbidden_cluster_wide_list_falls_back_to_accessible_namespaces(
    tmp_path: Path, cluster: FakeCluster
) -> None:
    path = write_kubeconfig(tmp_path / "config", {"j": FakeContext(cluster=cluster, token="jane")})
    async with WatcherRegistry.from_kubeconfig(str(path), namespaces={"j": ["a", "b"]}) as reg:
        with anyio.fail_after(TIMEOUT):
            store = await reg.watch("j", "pods")
            table = await reg.table("j", "pods")
        assert isinstance(store, MultiStore) and store.scope == ("a", "b")
        assert "forbidden" in store.reason and "configured" in store.reason
        assert names(store) == ["a-0", "a-1", "b-0", "b-1"]
        assert isinstance(table, MultiTableStore) and table.columns[0].name == "Name"
        assert sorted(r.name for r in table.rows()) == ["a-0", "a-1", "b-0", "b-1"]
        note = reg.status().contexts["j"].notes["pods"]
        assert "watching a, b" in note
        cluster_wide = [r for r in cluster.requests if r.path == "/api/v1/pods"]
        with anyio.fail_after(TIMEOUT):
            for _ in range(5):  # inside the 403's backoff: no new cluster-wide request
                await reg.watch("j", "pods")
        assert len([r for r in cluster.requests if r.path == "/api/v1/pods"]) == len(cluster_wide)


async def test_without_configured_namespaces_the_context_namespace_is_used(
    tmp_path: Path, cluster: FakeCluster
) -> None:
    contexts = {"j": FakeContext(cluster=cluster, token="jane", namespace="b")}
    path = write_kubeconfig(tmp_path / "config", contexts)
    async with WatcherRegistry.from_kubeconfig(str(path)) as registry:
        with anyio.fail_after(TIMEOUT):
            store = await registry.watch("j", "pods")
        assert isinstance(store, MultiStore) and store.scope == ("b",)
        assert "the context's namespace" in store.reason
        with anyio.fail_after(TIMEOUT), pytest.raises(Forbidden):
            await registry.watch("j", "pods", "c")  # an explicit namespace is not widened
