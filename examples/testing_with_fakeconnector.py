"""Testing your own code without HTTP: kubemux.testing.FakeConnector (the testing guide).

A pytest module as it would sit in your project's tests/ (pytest-asyncio, asyncio_mode =
"auto"). `tests/test_docs.py` runs its tests.
"""

from __future__ import annotations

import anyio
import pytest

import kubemux
from kubemux.testing import FakeConnector, make_pod


async def pods_by_node(registry: kubemux.WatcherRegistry, context: str) -> dict[str, list[str]]:
    """The code under test: the names of a context's pods, per node."""
    store = await registry.watch(context, "pods")
    nodes: dict[str, list[str]] = {}
    for pod in store.list():
        nodes.setdefault(pod["spec"]["nodeName"], []).append(pod["metadata"]["name"])
    return nodes


async def test_pods_by_node() -> None:
    fake = FakeConnector()  # objects in memory: no server, no socket
    fake.create("test", "pods", make_pod("web-1", node="node-a"))
    fake.create("test", "pods", make_pod("web-2", node="node-b"))
    async with kubemux.WatcherRegistry(fake.contexts("test"), connector=fake) as registry:
        with anyio.fail_after(10):  # every wait in a test has a bound
            assert await pods_by_node(registry, "test") == {
                "node-a": ["web-1"],
                "node-b": ["web-2"],
            }
        fake.create("test", "pods", make_pod("web-3", node="node-a"))  # in the store at once
        assert (await pods_by_node(registry, "test"))["node-a"] == ["web-1", "web-3"]


async def test_a_context_that_cannot_connect() -> None:
    fake = FakeConnector()
    fake.fail_connect("test", kubemux.ClusterUnreachable("https://test", "connection refused"))
    async with kubemux.WatcherRegistry(fake.contexts("test"), connector=fake) as registry:
        with anyio.fail_after(10), pytest.raises(kubemux.ClusterUnreachable):
            await pods_by_node(registry, "test")
        assert registry.status().contexts["test"].state == "backing off"
