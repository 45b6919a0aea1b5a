"""Testing your own code against kubemux.testing.FakeCluster (the docs' testing guide).

A pytest module as it would sit in your project's tests/ (pytest-asyncio, asyncio_mode =
"auto"). `tests/test_docs.py` runs its tests.
"""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

import kubemux
from kubemux.testing import FakeCluster, make_pod, write_kubeconfig


async def pods_by_node(registry: kubemux.WatcherRegistry, context: str) -> dict[str, list[str]]:
    """The code under test: the names of a context's pods, per node."""
    store = await registry.watch(context, "pods")
    nodes: dict[str, list[str]] = {}
    for pod in store.list():
        nodes.setdefault(pod["spec"]["nodeName"], []).append(pod["metadata"]["name"])
    return nodes


async def test_pods_by_node(tmp_path: Path) -> None:
    async with FakeCluster() as cluster:  # a real HTTP server on 127.0.0.1
        cluster.create("pods", make_pod("web-1", node="node-a"))
        cluster.create("pods", make_pod("web-2", node="node-b"))
        kubeconfig = write_kubeconfig(tmp_path / "config", {"test": cluster})
        async with kubemux.WatcherRegistry.from_kubeconfig(str(kubeconfig)) as registry:
            with anyio.fail_after(10):  # every wait in a test has a bound
                assert await pods_by_node(registry, "test") == {
                    "node-a": ["web-1"],
                    "node-b": ["web-2"],
                }

                # a fault: the watch stream is cut; the informer reconnects and catches up
                async with registry.subscribe("pods", snapshot=False) as changes:
                    cluster.drop_watches()
                    cluster.create("pods", make_pod("web-3", node="node-a"))
                    async for change in changes:  # wait on the change, never on a sleep
                        if change.name == "web-3":
                            break
                assert await pods_by_node(registry, "test") == {
                    "node-a": ["web-1", "web-3"],
                    "node-b": ["web-2"],
                }


async def test_forbidden(tmp_path: Path) -> None:
    async with FakeCluster() as cluster:
        kubeconfig = write_kubeconfig(tmp_path / "config", {"test": cluster})
        async with kubemux.WatcherRegistry.from_kubeconfig(str(kubeconfig)) as registry:
            cluster.fail_next(1, 403, reason="Forbidden")  # the next request is refused
            with anyio.fail_after(10), pytest.raises(kubemux.Forbidden):
                await pods_by_node(registry, "test")
