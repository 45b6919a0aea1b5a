"""Kubernetes clients other than kubectl through ``kubemux proxy``'s kubeconfig: the official
``kubernetes`` Python client and kubernetes-asyncio list and watch, and a client-go-style
reflector over raw HTTP (WatchList first, then LIST + WATCH with resumes) keeps a store equal
to the server's while objects change. Repeated reads cost the cluster nothing."""

from __future__ import annotations

import json
import urllib.parse
from pathlib import Path
from typing import Any

import anyio
import anyio.from_thread
import anyio.to_thread
import pytest
from kubernetes_asyncio import client as async_client
from kubernetes_asyncio import config as async_config
from kubernetes_asyncio import watch as async_watch

from kubemux.testing import FakeCluster, make_pod, write_kubeconfig
from proxy_support import ProxyClient, informer_watching, running_proxy

kubernetes = pytest.importorskip("kubernetes")

TOKEN = "upstream-token"


@pytest.fixture
async def cluster() -> Any:
    async with FakeCluster(tokens={TOKEN}, tls=True, name="up") as fake:
        fake.create("pods", make_pod("web-1", size=600))
        fake.create("pods", make_pod("web-2", size=600))
        fake.create("pods", make_pod("db-1", "data", size=600, labels={"app": "db"}))
        yield fake


def pod_names(items: list[Any]) -> list[str]:
    return sorted(f"{p.metadata.namespace}/{p.metadata.name}" for p in items)


def relabel(cluster: FakeCluster, namespace: str, name: str) -> None:
    pod = cluster.get("pods", namespace, name)
    assert pod is not None
    pod["metadata"]["labels"] = {"app": "relabelled", "at": cluster.resource_version}
    cluster.update("pods", pod)


async def test_the_official_python_client_lists_and_watches(
    cluster: FakeCluster, tmp_path: Path
) -> None:
    source = write_kubeconfig(tmp_path / "config", {"prod": cluster})
    out = tmp_path / "proxy.yaml"

    def use_client() -> tuple[list[str], list[str], list[tuple[str, str]]]:
        api_client = kubernetes.config.new_client_from_config(config_file=str(out))
        try:
            core = kubernetes.client.CoreV1Api(api_client)
            everything = pod_names(core.list_pod_for_all_namespaces().items)
            web = pod_names(core.list_namespaced_pod("default", label_selector="app=web").items)
            seen: list[tuple[str, str]] = []
            stream = kubernetes.watch.Watch().stream(
                core.list_namespaced_pod, "default", timeout_seconds=20
            )
            for event in stream:
                seen.append((event["type"], event["object"].metadata.name))
                if len(seen) == 2:  # the initial ADDED events: now change something
                    anyio.from_thread.run_sync(relabel, cluster, "default", "web-1")
                if len(seen) == 3:
                    break
            return everything, web, seen
        finally:
            api_client.close()

    async with running_proxy(source) as (server, _):
        server.write_kubeconfig(out)
        with anyio.fail_after(60):
            await anyio.to_thread.run_sync(use_client)  # the informer starts
            cluster.clear_requests()
            everything, web, seen = await anyio.to_thread.run_sync(use_client)
    assert everything == ["data/db-1", "default/web-1", "default/web-2"]
    assert web == ["default/web-2"]  # web-1 was relabelled by the first run
    assert sorted(seen[:2]) == [("ADDED", "web-1"), ("ADDED", "web-2")]
    assert seen[2] == ("MODIFIED", "web-1")
    assert cluster.request_count(("list", "get"), "pods") == 0


async def test_kubernetes_asyncio_lists_and_watches(cluster: FakeCluster, tmp_path: Path) -> None:
    source = write_kubeconfig(tmp_path / "config", {"prod": cluster})
    out = tmp_path / "proxy.yaml"
    async with running_proxy(source) as (server, _):
        server.write_kubeconfig(out)
        with anyio.fail_after(60):
            api_client = await async_config.new_client_from_config(config_file=str(out))
            async with api_client:
                core = async_client.CoreV1Api(api_client)
                listed = await core.list_pod_for_all_namespaces()
                cluster.clear_requests()
                again = await core.list_pod_for_all_namespaces(field_selector="metadata.name=db-1")
                one = await core.read_namespaced_pod("web-2", "default")
                seen: list[tuple[str, str]] = []
                w = async_watch.Watch()
                async with w.stream(
                    core.list_namespaced_pod,
                    "data",
                    resource_version=listed.metadata.resource_version,
                    timeout_seconds=20,
                ) as stream:
                    cluster.create("pods", make_pod("db-2", "data", size=600))
                    relabel(cluster, "data", "db-1")
                    async for event in stream:
                        seen.append((event["type"], event["object"].metadata.name))
                        if len(seen) == 2:
                            break
    assert pod_names(listed.items) == ["data/db-1", "default/web-1", "default/web-2"]
    assert listed.metadata.resource_version == "3"
    assert pod_names(again.items) == ["data/db-1"]
    assert one.metadata.name == "web-2" and one.spec.node_name == "node-1"
    assert seen == [("ADDED", "db-2"), ("MODIFIED", "db-1")]
    assert cluster.request_count(("list", "get"), "pods") == 0


class Reflector:
    """client-go's reflector over raw HTTP: WatchList first (the initial events up to the
    ``k8s.io/initial-events-end`` bookmark), or LIST (paginated) then WATCH; resumes each
    watch from the last version it saw; a 410 means LIST again."""

    def __init__(self, client: ProxyClient, path: str) -> None:
        self.client = client
        self.path = path
        self.store: dict[tuple[str, str], dict[str, Any]] = {}
        self.rv = ""
        self.lists = 0

    def apply(self, event: dict[str, Any]) -> str:
        kind, obj = event["type"], event["object"]
        meta = obj["metadata"]
        if kind == "ERROR":
            assert obj["code"] == 410
            return "relist"
        self.rv = meta["resourceVersion"]
        if kind == "BOOKMARK":
            ended = meta.get("annotations", {}).get("k8s.io/initial-events-end") == "true"
            return "synced" if ended else ""
        key = (meta.get("namespace", ""), meta["name"])
        if kind == "DELETED":
            self.store.pop(key, None)
        else:
            self.store[key] = obj
        return ""

    async def watch_list(self) -> None:
        query = "watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan"
        query += "&allowWatchBookmarks=true&resourceVersion="
        async with self._stream(query) as resp:
            while True:
                if self.apply(json.loads(await resp.content.readline())) == "synced":
                    return

    async def list(self) -> None:
        self.lists += 1
        self.store.clear()
        token = ""
        while True:
            query = f"limit=2&continue={urllib.parse.quote(token)}" if token else "limit=2"
            status, doc = await self.client.get_json("prod", f"{self.path}?{query}")
            assert status == 200, doc
            for obj in doc["items"]:
                self.store[(obj["metadata"].get("namespace", ""), obj["metadata"]["name"])] = obj
            token = doc["metadata"].get("continue", "")
            if not token:
                self.rv = doc["metadata"]["resourceVersion"]
                return

    async def watch_once(self, seconds: int) -> None:
        """One watch from the last version, until the server ends it."""
        query = f"watch=1&allowWatchBookmarks=true&timeoutSeconds={seconds}"
        async with self._stream(f"{query}&resourceVersion={self.rv}") as resp:
            async for line in resp.content:
                if self.apply(json.loads(line)) == "relist":
                    await self.list()
                    return

    def _stream(self, query: str) -> Any:
        url = self.client.url("prod", f"{self.path}?{query}")
        return self.client.session.get(url, headers=self.client.auth, ssl=self.client.ssl)


async def test_a_client_go_style_reflector_converges(cluster: FakeCluster, tmp_path: Path) -> None:
    source = write_kubeconfig(tmp_path / "config", {"prod": cluster})
    async with running_proxy(source) as (_, client):
        with anyio.fail_after(60):
            await client.get_json("prod", "/api/v1/pods")  # the informer runs
            await informer_watching(cluster)
            cluster.clear_requests()
            first = Reflector(client, "/api/v1/pods")
            await first.watch_list()
            second = Reflector(client, "/api/v1/pods")
            await second.list()
            for round_ in range(3):  # change things, let each watch end, resume
                cluster.create("pods", make_pod(f"new-{round_}", "data", size=600))
                relabel(cluster, "default", "web-1")
                cluster.delete("pods", "default", f"web-{2 if round_ == 0 else 1}")
                if round_ == 1:
                    cluster.create("pods", make_pod("web-1", size=600))
                for reflector in (first, second):
                    await reflector.watch_once(seconds=1)
            truth = {
                (o["metadata"]["namespace"], o["metadata"]["name"]): o["metadata"][
                    "resourceVersion"
                ]
                for o in cluster.objects("pods")
            }
            for reflector in (first, second):
                mine = {k: o["metadata"]["resourceVersion"] for k, o in reflector.store.items()}
                assert mine == truth
                assert reflector.rv == cluster.resource_version
    assert first.lists == 0 and second.lists == 1  # no 410: every resume was in the history
    assert cluster.request_count(("list", "get"), "pods") == 0
    assert cluster.request_count("watch", "pods") == 0  # the informer's watch did it all
