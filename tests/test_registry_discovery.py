"""Names resolved per context through discovery, server-side tables, in the registry."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

from kubemux import TableStore, UnknownResource, WatcherRegistry
from kubemux.testing import FakeCluster, make_pod, write_kubeconfig
from support import TIMEOUT


def widget(name: str, ns: str = "default", size: str = "big") -> dict[str, Any]:
    return {
        "apiVersion": "example.com/v1",
        "kind": "Widget",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"size": size},
    }


@pytest.mark.parametrize("name", ["widgets", "wd", "Widget", "widget", "widgets.example.com"])
async def test_every_kubectl_name_of_a_crd_resolves_to_one_informer(
    tmp_path: Path, fake_cluster: FakeCluster, name: str
) -> None:
    fake_cluster.add_crd("example.com", "widgets", "Widget", short_names=["wd"])
    fake_cluster.create("widgets.example.com", widget("w-1"))
    path = write_kubeconfig(tmp_path / "config", {"c": fake_cluster})
    async with WatcherRegistry.from_kubeconfig(str(path)) as registry:
        with anyio.fail_after(TIMEOUT):
            store = await registry.watch("c", name)
            again = await registry.watch("c", "widgets.example.com")
        assert store is again
        assert [o["metadata"]["name"] for o in store.list()] == ["w-1"]
        assert registry.store("c", name) is store


async def test_a_crd_installed_a_moment_ago_resolves_after_one_refresh(
    tmp_path: Path, fake_cluster: FakeCluster
) -> None:
    path = write_kubeconfig(tmp_path / "config", {"c": fake_cluster})
    async with WatcherRegistry.from_kubeconfig(str(path)) as registry:
        with anyio.fail_after(TIMEOUT):
            names = {r.name for r in await registry.resources("c")}
        assert "pods" in names and "gadgets.example.com" not in names
        fake_cluster.add_crd("example.com", "gadgets", "Gadget", short_names=["gd"])
        with anyio.fail_after(TIMEOUT):
            store = await registry.watch("c", "gd")
        assert store.resource.name == "gadgets.example.com"


async def test_an_unknown_name_says_what_it_might_be_and_leaves_nothing_running(
    tmp_path: Path, fake_cluster: FakeCluster
) -> None:
    fake_cluster.add_crd("example.com", "widgets", "Widget")
    path = write_kubeconfig(tmp_path / "config", {"c": fake_cluster})
    async with WatcherRegistry.from_kubeconfig(str(path)) as registry:
        with anyio.fail_after(TIMEOUT), pytest.raises(UnknownResource) as info:
            await registry.watch("c", "widgts")
        assert "did you mean" in str(info.value) and "widgets.example.com" in str(info.value)
        assert info.value.context == "c"
        assert registry.live_contexts == []  # no idle session left open


async def test_subscribing_by_short_name(tmp_path: Path, fake_cluster: FakeCluster) -> None:
    fake_cluster.add_crd("example.com", "widgets", "Widget", short_names=["wd"])
    path = write_kubeconfig(tmp_path / "config", {"c": fake_cluster})
    async with WatcherRegistry.from_kubeconfig(str(path)) as registry:
        with anyio.fail_after(TIMEOUT):
            await registry.watch("c", "widgets")
        async with registry.subscribe("wd", snapshot=False) as changes:
            fake_cluster.create("widgets.example.com", widget("w-2"))
            with anyio.fail_after(TIMEOUT):
                change = await changes.__anext__()
        assert (change.resource, change.name) == ("widgets.example.com", "w-2")


async def test_table_view_has_server_columns_and_live_rows(
    tmp_path: Path, fake_cluster: FakeCluster
) -> None:
    fake_cluster.add_crd(
        "example.com",
        "widgets",
        "Widget",
        printer_columns=[{"name": "Size", "type": "string", "jsonPath": ".spec.size"}],
    )
    fake_cluster.create("widgets.example.com", widget("w-1"))
    path = write_kubeconfig(tmp_path / "config", {"c": fake_cluster})
    async with WatcherRegistry.from_kubeconfig(str(path)) as registry:
        with anyio.fail_after(TIMEOUT):
            pods = await registry.table("c", "po", namespace="default")
            widgets = await registry.table("c", "widgets")
        assert isinstance(pods, TableStore)
        assert [c.name for c in pods.columns][:5] == ["Name", "Ready", "Status", "Restarts", "Age"]
        assert sorted(r.name for r in pods.rows()) == [f"p-{i}" for i in (1, 3, 5, 7, 9)]
        assert [c.name for c in widgets.columns] == ["Name", "Size"]  # as kube-apiserver
        assert widgets.row("default", "w-1").cells[1] == "big"  # type: ignore[union-attr]
        objects = await registry.watch("c", "pods", namespace="default")
        assert objects is not pods  # the object view is a different informer
        # store() finds either view without starting one
        assert registry.store("c", "pods", "default") is objects
        assert registry.store("c", "pods", "default", view="table") is pods
        assert registry.store("c", "pods", view="table") is None  # not running cluster-wide
        with pytest.raises(ValueError, match="view must be"):
            registry.store("c", "pods", view="rows")
        async with (
            registry.subscribe("widgets", ["c"], view="table", snapshot=False) as rows,
            registry.subscribe("widgets", ["c"], snapshot=False) as plain,
        ):
            fake_cluster.create("widgets.example.com", widget("w-2", size="small"))
            with anyio.fail_after(TIMEOUT):
                change = await rows.__anext__()
            assert change.view == "table" and change.name == "w-2"
            assert change.object is not None and change.object["cells"][1] == "small"
            assert plain.pending == 0  # no widget object informer runs: nothing for it
        async with registry.subscribe("pods", ["c"], view="table", snapshot=False) as rows:
            fake_cluster.create("pods", make_pod("p-new", "default"))
            with anyio.fail_after(TIMEOUT):
                assert (await rows.__anext__()).name == "p-new"
        row = pods.row("default", "p-new")
        assert row is not None and row.cells[0] == "p-new"
