"""Inside a pod: no kubeconfig, a service-account mount, one rotating `in-cluster` context."""

from __future__ import annotations

import shutil
from pathlib import Path

import anyio
import pytest

from kubemux import WatcherRegistry
from kubemux.testing import FakeCluster, make_pod
from support import TIMEOUT


async def test_in_cluster_context_follows_a_rotated_token_without_a_restart(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with FakeCluster(tokens={"sa-1"}, tls=True, name="pod") as cluster:
        cluster.create("pods", make_pod("p-0", "team"))
        root = tmp_path / "serviceaccount"
        root.mkdir()
        (root / "token").write_text("sa-1")
        (root / "namespace").write_text("team\n")
        assert cluster.ca_file is not None
        shutil.copy(cluster.ca_file, root / "ca.crt")
        monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "127.0.0.1")
        monkeypatch.setenv("KUBERNETES_SERVICE_PORT", str(cluster.port))
        registry = WatcherRegistry.from_kubeconfig(in_cluster_root=str(root))
        async with registry:
            assert list(registry.contexts) == ["in-cluster"]
            assert registry.current_context == "in-cluster"
            assert registry.contexts["in-cluster"].namespace == "team"
            with anyio.fail_after(TIMEOUT):
                store = await registry.watch("in-cluster", "pods", "team")
            generation = registry.status().contexts["in-cluster"].generation
            async with registry.subscribe("pods", snapshot=False) as changes:
                # the kubelet rotates the token in place; the server accepts only the new one
                (root / "token").write_text("sa-2")
                cluster.tokens.clear()
                cluster.tokens.add("sa-2")
                cluster.drop_watches()
                cluster.create("pods", make_pod("p-1", "team"))
                with anyio.fail_after(TIMEOUT):
                    change = await changes.__anext__()
            assert (change.type, change.name) == ("ADDED", "p-1")  # no RESET, no relist
            assert store.get("team", "p-1") is not None
            status = registry.status().contexts["in-cluster"]
            assert status.generation == generation
            assert status.informers[0].relists == 0
            assert status.credential is not None and status.credential.kind == "token-file"
            assert "sa-2" not in repr(status)


def test_outside_a_pod_there_is_no_in_cluster_context(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from kubemux import KubeconfigError

    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    registry = WatcherRegistry.from_kubeconfig(in_cluster_root=str(tmp_path / "none"))

    async def enter() -> None:
        async with registry:
            pass  # pragma: no cover

    with pytest.raises(KubeconfigError, match="no kubeconfig"):
        anyio.run(enter)
