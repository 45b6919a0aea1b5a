"""The real kubectl against FakeCluster: discovery, list, raw GET and watch.

kubectl only sends credentials to https:// servers (clientcmd skips the user entry for plain
HTTP), so these tests use a TLS cluster with a token; one test pins that quirk down.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import json
import re
import shutil
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from kubectl_support import kubectl_binary, run_kubectl
from kubectl_support import kubectl_process as running_kubectl
from kubemux import Resource
from kubemux.testing import FakeCluster, FakeContext, make_pod, write_kubeconfig
from support import add_widget_crd

pytestmark = pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl not on PATH")


KUBECTL = kubectl_binary() or "kubectl"
FIVE_HOURS_AGO = (dt.datetime.now(dt.UTC) - dt.timedelta(hours=5)).strftime("%Y-%m-%dT%H:%M:%SZ")

TOKEN = "kubectl-token"
Json = dict[str, Any]


@pytest.fixture
async def cluster() -> AsyncIterator[FakeCluster]:
    async with FakeCluster(tokens={TOKEN}, tls=True, name="kubectl") as fake:
        fake.create("pods", make_pod("web-1", size=600))
        fake.create("pods", make_pod("db-1", "data", size=600))
        yield fake


@pytest.fixture
def kubeconfig(cluster: FakeCluster, tmp_path: Path) -> Path:
    return write_kubeconfig(tmp_path / "kubeconfig", {"fake": cluster})


async def kubectl(kubeconfig: Path, *args: str) -> str:
    code, out, err = await kubectl_result(kubeconfig, *args)
    assert code == 0, err
    return out


async def kubectl_result(kubeconfig: Path, *args: str) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of one kubectl run, with a discovery cache of its own."""
    return await run_kubectl(KUBECTL, kubeconfig, *args, cache="kubectl-cache", run_timeout=20)


def json_documents(text: str) -> Iterator[Json]:
    """Split kubectl's stream of pretty-printed JSON documents; the last may be incomplete."""
    decoder = json.JSONDecoder()
    rest = text.lstrip()
    while rest:
        try:
            doc, end = decoder.raw_decode(rest)
        except json.JSONDecodeError:
            return
        yield doc
        rest = rest[end:].lstrip()


def kubectl_process(
    kubeconfig: Path, *args: str
) -> contextlib.AbstractAsyncContextManager[asyncio.subprocess.Process]:
    return running_kubectl(KUBECTL, kubeconfig, *args, cache="kubectl-cache")


async def test_get_pods_all_namespaces_as_json(cluster: FakeCluster, kubeconfig: Path) -> None:
    out = json.loads(await kubectl(kubeconfig, "get", "pods", "-A", "-o", "json"))
    assert out["kind"] == "List"
    got = [(p["metadata"]["namespace"], p["metadata"]["name"]) for p in out["items"]]
    assert got == [("data", "db-1"), ("default", "web-1")]
    expected = cluster.objects("pods")
    for pod in expected:
        del pod["metadata"]["managedFields"]  # kubectl hides them unless --show-managed-fields
    assert out["items"] == expected
    paged = [r for r in cluster.requests if r.path == "/api/v1/pods"]
    assert paged and paged[-1].query.get("limit") == "500"  # kubectl pages its lists
    assert {r.token for r in cluster.requests} == {TOKEN}


async def test_get_raw(cluster: FakeCluster, kubeconfig: Path) -> None:
    out = json.loads(await kubectl(kubeconfig, "get", "--raw", "/api/v1/namespaces/default/pods"))
    assert out["kind"] == "PodList"
    assert out["metadata"]["resourceVersion"] == cluster.resource_version
    assert out["items"] == cluster.objects("pods", "default")


def columns(text: str) -> list[list[str]]:
    """kubectl's table output split on runs of two or more spaces (cells may hold one)."""
    return [[c for c in line.split("  ") if c.strip()] for line in text.splitlines()]


def cells(text: str) -> list[list[str]]:
    return [[c.strip() for c in row] for row in columns(text)]


async def test_server_side_table_output(cluster: FakeCluster, kubeconfig: Path) -> None:
    # kubectl asks for a Table and prints the server's columns (a NAMESPACE column first)
    out = cells(await kubectl(kubeconfig, "get", "pods", "-A"))
    assert out[0] == ["NAMESPACE", "NAME", "READY", "STATUS", "RESTARTS", "AGE"]
    assert [row[:5] for row in out[1:]] == [
        ["data", "db-1", "1/1", "Running", "0"],
        ["default", "web-1", "1/1", "Running", "0"],
    ]
    wide = cells(await kubectl(kubeconfig, "get", "po", "-o", "wide"))
    assert wide[0] == [
        "NAME",
        "READY",
        "STATUS",
        "RESTARTS",
        "AGE",
        "IP",
        "NODE",
        "NOMINATED NODE",
        "READINESS GATES",
    ]
    assert wide[1][6:] == ["node-1", "<none>", "<none>"]
    table = [r for r in cluster.requests if r.path == "/api/v1/namespaces/default/pods"]
    assert table and "includeObject" not in table[-1].query  # the server's default: Metadata


async def test_builtin_kinds_print_kubectls_columns(cluster: FakeCluster, kubeconfig: Path) -> None:
    cluster.create(
        "deployments.apps",
        {
            "metadata": {"name": "web"},
            "spec": {
                "replicas": 3,
                "selector": {"matchLabels": {"app": "web"}},
                "template": {"spec": {"containers": [{"name": "app", "image": "nginx:1"}]}},
            },
            "status": {"readyReplicas": 2, "updatedReplicas": 3, "availableReplicas": 2},
        },
    )
    cluster.create(
        "services",
        {
            "metadata": {"name": "web"},
            "spec": {
                "clusterIP": "10.96.0.10",
                "ports": [{"port": 80, "protocol": "TCP"}, {"port": 53, "protocol": "UDP"}],
                "selector": {"app": "web"},
            },
        },
    )
    cluster.create("configmaps", {"metadata": {"name": "cfg"}, "data": {"a": "1", "b": "2"}})
    cluster.create("namespaces", {"metadata": {"name": "default"}, "status": {"phase": "Active"}})
    cluster.create(
        "nodes",
        {
            "metadata": {"name": "node-1", "labels": {"node-role.kubernetes.io/control-plane": ""}},
            "status": {
                "conditions": [{"type": "Ready", "status": "True"}],
                "nodeInfo": {"kubeletVersion": "v1.32.0"},
            },
        },
    )
    cluster.create(
        "events",
        {
            "metadata": {"name": "web-1.1"},
            "involvedObject": {"kind": "Pod", "name": "web-1", "namespace": "default"},
            "type": "Normal",
            "reason": "Started",
            "message": "Started container app",
            "source": {"component": "kubelet", "host": "node-1"},
            "firstTimestamp": FIVE_HOURS_AGO,
            "lastTimestamp": FIVE_HOURS_AGO,
        },
    )
    expected = {
        "deploy": (["NAME", "READY", "UP-TO-DATE", "AVAILABLE", "AGE"], ["web", "2/3", "3", "2"]),
        "svc": (
            ["NAME", "TYPE", "CLUSTER-IP", "EXTERNAL-IP", "PORT(S)", "AGE"],
            ["web", "ClusterIP", "10.96.0.10", "<none>", "80/TCP,53/UDP"],
        ),
        "cm": (["NAME", "DATA", "AGE"], ["cfg", "2"]),
        "ns": (["NAME", "STATUS", "AGE"], ["default", "Active"]),
        "no": (["NAME", "STATUS", "ROLES", "AGE", "VERSION"], ["node-1", "Ready", "control-plane"]),
        "ev": (
            ["LAST SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"],
            ["Normal", "Started", "pod/web-1", "Started container app"],
        ),
    }
    for name, (header, row) in expected.items():
        out = cells(await kubectl(kubeconfig, "get", name))
        assert out[0] == header, name
        if name == "ev":
            assert re.fullmatch(r"5h(\d+m)?", out[1][0]) and out[1][1:] == row
        else:
            assert out[1][: len(row)] == row, name
    wide = cells(await kubectl(kubeconfig, "get", "deploy", "-o", "wide"))
    assert wide[0][5:] == ["CONTAINERS", "IMAGES", "SELECTOR"]
    assert wide[1][5:] == ["app", "nginx:1", "app=web"]
    # a kind without a printer: the default convertor, as kubectl shows for clusterroles
    cluster.create(
        "secrets", {"metadata": {"name": "s", "creationTimestamp": "2025-01-02T03:04:05Z"}}
    )
    assert cells(await kubectl(kubeconfig, "get", "secrets")) == [
        ["NAME", "CREATED AT"],
        ["s", "2025-01-02T03:04:05Z"],
    ]


def add_widgets(cluster: FakeCluster) -> None:
    add_widget_crd(cluster)
    cluster.create("widgets.example.com", {"metadata": {"name": "w1"}, "spec": {"size": 3}})
    cluster.create(
        "widgets.example.com", {"metadata": {"name": "w2"}, "spec": {"size": 5, "color": "red"}}
    )


async def test_custom_resources_by_short_name_with_printer_columns(
    cluster: FakeCluster, kubeconfig: Path
) -> None:
    add_widgets(cluster)
    for name in ("widgets", "wd", "widget", "widgets.example.com", "Widget"):
        out = cells(await kubectl(kubeconfig, "get", name))
        assert out[0] == ["NAME", "SIZE", "AGE"], name
        assert [row[:2] for row in out[1:]] == [["w1", "3"], ["w2", "5"]]
    wide = cells(await kubectl(kubeconfig, "get", "wd", "-o", "wide"))
    assert wide[0] == ["NAME", "SIZE", "COLOR", "AGE"]
    assert wide[2][:3] == ["w2", "5", "red"]
    everything = await kubectl(kubeconfig, "get", "all")  # the "all" category
    assert "widget.example.com/w1" in everything and "pod/web-1" in everything
    assert cluster.delete_crd("widgets.example.com") is not None
    code, _, err = await kubectl_result(kubeconfig, "get", "widgets")  # cached discovery
    assert code != 0 and "Error from server (NotFound): Unable to list" in err
    shutil.rmtree(kubeconfig.parent / "kubectl-cache")
    code, _, err = await kubectl_result(kubeconfig, "get", "widgets")  # fresh discovery
    assert code != 0 and 'the server doesn\'t have a resource type "widgets"' in err


@pytest.mark.parametrize("aggregated", [True, False])
async def test_api_resources_aggregated_or_legacy(tmp_path: Path, aggregated: bool) -> None:
    async with FakeCluster(tokens={TOKEN}, tls=True, aggregated_discovery=aggregated) as fake:
        add_widgets(fake)
        config = write_kubeconfig(tmp_path / "kubeconfig", {"fake": fake})
        rows = [line.split() for line in (await kubectl(config, "api-resources")).splitlines()]
        assert rows[0] == ["NAME", "SHORTNAMES", "APIVERSION", "NAMESPACED", "KIND"]
        by_name = {(r[0], r[-3]): r for r in rows[1:]}
        assert by_name["widgets", "example.com/v1"] == [
            "widgets",
            "wd",
            "example.com/v1",
            "true",
            "Widget",
        ]
        assert by_name["pods", "v1"] == ["pods", "po", "v1", "true", "Pod"]
        crd = by_name["customresourcedefinitions", "apiextensions.k8s.io/v1"]
        assert crd[1] == "crd,crds" and crd[3] == "false"
        cats = await kubectl(config, "api-resources", "--categories", "all", "-o", "name")
        assert "widgets.example.com" in cats.split() and "pods" in cats.split()
        legacy = {r.path for r in fake.requests if r.path in ("/api/v1", "/apis/example.com/v1")}
        assert legacy == (set() if aggregated else {"/api/v1", "/apis/example.com/v1"})


async def test_watch_prints_table_rows(cluster: FakeCluster, kubeconfig: Path) -> None:
    async with kubectl_process(kubeconfig, "get", "pods", "-w") as proc:
        stdout = proc.stdout
        assert stdout is not None

        async def line() -> list[str]:
            async with asyncio.timeout(10):
                return [c.strip() for c in (await stdout.readline()).decode().split("  ") if c]

        assert await line() == ["NAME", "READY", "STATUS", "RESTARTS", "AGE"]
        assert (await line())[:4] == ["web-1", "1/1", "Running", "0"]
        await cluster.wait_for(lambda: cluster.open_watches == 1, timeout=10)
        cluster.create("pods", make_pod("web-2", size=600, phase="Pending"))
        assert (await line())[:4] == ["web-2", "0/1", "ContainerCreating", "0"]
        cluster.delete("pods", "default", "web-1")
        assert (await line())[:4] == ["web-1", "1/1", "Running", "0"]
    watch = [r for r in cluster.requests if r.is_watch][-1]
    assert watch.path == "/api/v1/namespaces/default/pods"


async def test_forbidden_cluster_wide_list(cluster: FakeCluster, tmp_path: Path) -> None:
    cluster.restrict("jane-token", user="jane", namespaces=["default"])
    config = write_kubeconfig(
        tmp_path / "jane", {"jane": FakeContext(cluster=cluster, token="jane-token")}
    )
    code, _, err = await kubectl_result(config, "get", "pods", "-A")
    assert code != 0
    assert err.strip() == (
        'Error from server (Forbidden): pods is forbidden: User "jane" cannot list resource '
        '"pods" in API group "" at the cluster scope'
    )
    out = cells(await kubectl(config, "get", "pods", "-n", "default"))
    assert [row[0] for row in out[1:]] == ["web-1"]


async def test_watch_prints_events(cluster: FakeCluster, kubeconfig: Path) -> None:
    args = ("get", "pods", "--watch", "-o", "json", "--output-watch-events")
    async with kubectl_process(kubeconfig, *args) as proc:
        stdout = proc.stdout
        assert stdout is not None
        text = ""

        async def read_events(count: int) -> list[tuple[str, str, str]]:
            nonlocal text
            async with asyncio.timeout(10):
                while True:
                    docs = list(json_documents(text))
                    if len(docs) >= count:
                        return [
                            (
                                d["type"],
                                d["object"]["metadata"]["name"],
                                d["object"]["metadata"]["resourceVersion"],
                            )
                            for d in docs
                        ]
                    chunk = await stdout.read(65536)
                    assert chunk, "kubectl exited"
                    text += chunk.decode()

        assert await read_events(1) == [("ADDED", "web-1", "1")]
        await cluster.wait_for(lambda: cluster.open_watches == 1, timeout=10)
        watch = [r for r in cluster.requests if r.is_watch][-1]
        assert watch.query["resourceVersion"] == "2"  # watches from its list's resourceVersion
        cluster.create("pods", make_pod("web-2", size=600))
        cluster.delete("pods", "default", "web-1")
        assert (await read_events(3))[1:] == [("ADDED", "web-2", "3"), ("DELETED", "web-1", "4")]
    await cluster.wait_for(lambda: cluster.open_watches == 0)


async def test_api_resources_lists_builtins_and_custom_resources(
    cluster: FakeCluster, kubeconfig: Path
) -> None:
    cluster.register_resource(
        Resource(group="example.com", version="v1", plural="widgets", kind="Widget")
    )
    rows = {
        line.split()[0]: line.split()
        for line in (await kubectl(kubeconfig, "api-resources")).splitlines()[1:]
    }
    assert rows["pods"] == ["pods", "po", "v1", "true", "Pod"]
    assert rows["deployments"] == ["deployments", "deploy", "apps/v1", "true", "Deployment"]
    assert rows["namespaces"] == ["namespaces", "ns", "v1", "false", "Namespace"]
    assert rows["widgets"] == ["widgets", "example.com/v1", "true", "Widget"]
    assert "events" in rows


async def test_kubectl_sends_no_token_over_plain_http(tmp_path: Path) -> None:
    async with FakeCluster(tokens={TOKEN}) as fake:
        config = write_kubeconfig(tmp_path / "plain", {"plain": fake})
        proc = await asyncio.create_subprocess_exec(
            "kubectl",
            "--kubeconfig",
            str(config),
            "get",
            "--raw",
            "/version",
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.PIPE,
        )
        async with asyncio.timeout(20):
            _, err = await proc.communicate()
        assert proc.returncode != 0 and b"Unauthorized" in err
        assert fake.requests and {r.token for r in fake.requests} == {None}
