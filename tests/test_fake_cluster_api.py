"""FakeCluster's discovery (aggregated and legacy), CRDs, the Table format and RBAC, over HTTP."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import orjson
import pytest

from kubemux.testing import FakeCluster, make_pod
from support import add_widget_crd as add_widgets

TOKEN = "good-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
AGGREGATED = (
    "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,"
    "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,"
    "application/json"
)
TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"
Json = dict[str, Any]


@pytest.fixture
async def cluster() -> AsyncIterator[FakeCluster]:
    async with FakeCluster(tokens={TOKEN}, bookmark_period=0.05) as fake:
        yield fake


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(headers=AUTH) as session:
        yield session


async def fetch(
    http: aiohttp.ClientSession,
    url: str,
    *,
    status: int = 200,
    accept: str = "application/json",
    **params: str,
) -> tuple[str, Json]:
    """(Content-Type, body) of a GET."""
    async with asyncio.timeout(5), http.get(url, params=params, headers={"Accept": accept}) as resp:
        assert resp.status == status, await resp.text()
        return resp.headers["Content-Type"], orjson.loads(await resp.read())


# ------------------------------------------------------------------------------ discovery
@pytest.mark.parametrize("version", ["v2", "v2beta1"])
async def test_aggregated_discovery(
    cluster: FakeCluster, http: aiohttp.ClientSession, version: str
) -> None:
    add_widgets(cluster)
    accept = f"application/json;g=apidiscovery.k8s.io;v={version};as=APIGroupDiscoveryList"
    ctype, core = await fetch(http, cluster.server + "/api", accept=accept + ",application/json")
    assert ctype == accept
    assert (core["kind"], core["apiVersion"]) == (
        "APIGroupDiscoveryList",
        f"apidiscovery.k8s.io/{version}",
    )
    (item,) = core["items"]
    assert "name" not in item["metadata"]
    (v1,) = item["versions"]
    assert v1["version"] == "v1" and v1["freshness"] == "Current"
    pods = next(r for r in v1["resources"] if r["resource"] == "pods")
    assert pods == {
        "resource": "pods",
        "responseKind": {"group": "", "version": "", "kind": "Pod"},
        "scope": "Namespaced",
        "singularResource": "pod",
        "verbs": ["get", "list", "watch"],
        "shortNames": ["po"],
        "categories": ["all"],
    }
    nodes = next(r for r in v1["resources"] if r["resource"] == "nodes")
    assert nodes["scope"] == "Cluster" and "categories" not in nodes
    _, named = await fetch(http, cluster.server + "/apis", accept=accept)
    by_name = {i["metadata"]["name"]: i for i in named["items"]}
    assert "" not in by_name and "apps" in by_name
    widgets = by_name["example.com"]["versions"][0]["resources"][0]
    assert widgets["resource"] == "widgets" and widgets["shortNames"] == ["wd"]
    assert widgets["categories"] == ["all"] and widgets["singularResource"] == "widget"
    assert "list" in widgets["verbs"] and "watch" in widgets["verbs"]


async def test_plain_accept_gets_legacy_discovery(
    cluster: FakeCluster, http: aiohttp.ClientSession
) -> None:
    _, api = await fetch(http, cluster.server + "/api")
    assert api["kind"] == "APIVersions" and api["versions"] == ["v1"]
    _, apis = await fetch(http, cluster.server + "/apis")
    assert apis["kind"] == "APIGroupList"
    _, v1 = await fetch(http, cluster.server + "/api/v1")
    pods = next(r for r in v1["resources"] if r["name"] == "pods")
    assert pods["shortNames"] == ["po"] and pods["singularName"] == "pod"
    # only an aggregated type that the server does not serve: 406, as kube-apiserver answers
    await fetch(
        http,
        cluster.server + "/apis",
        status=406,
        accept="application/json;g=apidiscovery.k8s.io;v=v3;as=APIGroupDiscoveryList",
    )


async def test_older_server_serves_legacy_discovery_only(http: aiohttp.ClientSession) -> None:
    async with FakeCluster(tokens={TOKEN}, aggregated_discovery=False) as old:
        ctype, body = await fetch(http, old.server + "/apis", accept=AGGREGATED)
        assert ctype.startswith("application/json") and "apidiscovery" not in ctype
        assert body["kind"] == "APIGroupList"
        _, core = await fetch(http, old.server + "/api", accept=AGGREGATED)
        assert core["kind"] == "APIVersions"


# ------------------------------------------------------------------------------ CRDs
async def test_crd_serves_its_resource_until_deleted(
    cluster: FakeCluster, http: aiohttp.ClientSession
) -> None:
    url = cluster.server + "/apis/example.com/v1/namespaces/default/widgets"
    await fetch(http, url, status=404)
    add_widgets(cluster)
    cluster.create("widgets.example.com", {"metadata": {"name": "w1"}, "spec": {"size": 3}})
    _, listing = await fetch(http, url)
    assert listing["kind"] == "WidgetList"
    assert [w["metadata"]["name"] for w in listing["items"]] == ["w1"]
    _, group = await fetch(http, cluster.server + "/apis/example.com")
    assert group["preferredVersion"]["version"] == "v1"
    async with asyncio.timeout(5):
        watch = await http.get(
            url, params={"watch": "1", "resourceVersion": listing["metadata"]["resourceVersion"]}
        )
    try:
        await cluster.wait_for(lambda: cluster.open_watches == 1)
        assert cluster.delete_crd("widgets.example.com") is not None
        async with asyncio.timeout(5):
            rest = await watch.content.read()  # the stream ends cleanly
        assert rest == b""
    finally:
        watch.release()
    await fetch(http, url, status=404)
    _, apis = await fetch(http, cluster.server + "/apis")
    assert "example.com" not in {g["name"] for g in apis["groups"]}
    await fetch(http, cluster.server + "/apis/example.com/v1", status=404)
    # it comes back empty
    add_widgets(cluster)
    _, again = await fetch(http, url)
    assert again["items"] == []


async def test_crd_cluster_scoped_and_versions(
    cluster: FakeCluster, http: aiohttp.ClientSession
) -> None:
    cluster.add_crd(
        "example.com", "gadgets", "Gadget", namespaced=False, versions=["v1alpha1", "v1", "v1beta1"]
    )
    _, group = await fetch(http, cluster.server + "/apis/example.com")
    assert [v["version"] for v in group["versions"]] == ["v1", "v1beta1", "v1alpha1"]
    cluster.create("gadgets.example.com", {"metadata": {"name": "g1"}})
    for version in ("v1", "v1beta1", "v1alpha1"):
        _, listing = await fetch(http, f"{cluster.server}/apis/example.com/{version}/gadgets")
        assert [g["metadata"]["name"] for g in listing["items"]] == ["g1"]
    _, res = await fetch(http, cluster.server + "/apis/example.com/v1")
    assert res["resources"][0]["namespaced"] is False
    await fetch(http, cluster.server + "/apis/example.com/v2/gadgets", status=404)


async def test_crd_created_and_deleted_over_http(
    cluster: FakeCluster, http: aiohttp.ClientSession
) -> None:
    crds = cluster.server + "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
    body = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "things.example.org"},
        "spec": {
            "group": "example.org",
            "scope": "Namespaced",
            "names": {"plural": "things", "singular": "thing", "kind": "Thing"},
            "versions": [{"name": "v1", "served": True, "storage": True}],
        },
    }
    async with asyncio.timeout(5), http.post(crds, json=body) as resp:
        assert resp.status == 201
        assert (await resp.json())["metadata"]["name"] == "things.example.org"
    async with asyncio.timeout(5), http.post(crds, json=body) as resp:
        assert resp.status == 409
        assert (await resp.json())["reason"] == "AlreadyExists"
    await fetch(http, cluster.server + "/apis/example.org/v1/things")
    async with asyncio.timeout(5), http.delete(crds + "/things.example.org") as resp:
        assert resp.status == 200
    await fetch(http, cluster.server + "/apis/example.org/v1/things", status=404)


# ------------------------------------------------------------------------------ Table
async def test_table_list_pods(cluster: FakeCluster, http: aiohttp.ClientSession) -> None:
    cluster.create("pods", make_pod("web-1", size=600))
    cluster.create("pods", make_pod("web-2", size=600, phase="Pending"))
    url = cluster.server + "/api/v1/namespaces/default/pods"
    ctype, table = await fetch(http, url, accept=TABLE)
    assert ctype == "application/json;as=Table;v=v1;g=meta.k8s.io"
    assert (table["kind"], table["apiVersion"]) == ("Table", "meta.k8s.io/v1")
    assert table["metadata"]["resourceVersion"] == cluster.resource_version
    columns = [(c["name"], c["type"], c["priority"]) for c in table["columnDefinitions"]]
    assert columns == [
        ("Name", "string", 0),
        ("Ready", "string", 0),
        ("Status", "string", 0),
        ("Restarts", "string", 0),
        ("Age", "string", 0),
        ("IP", "string", 1),
        ("Node", "string", 1),
        ("Nominated Node", "string", 1),
        ("Readiness Gates", "string", 1),
    ]
    assert table["columnDefinitions"][0]["format"] == "name"
    cells = [row["cells"] for row in table["rows"]]
    assert [c[:4] for c in cells] == [
        ["web-1", "1/1", "Running", "0"],
        ["web-2", "0/1", "ContainerCreating", "0"],
    ]
    assert cells[0][6] == "node-1" and cells[0][7] == "<none>"
    obj = table["rows"][0]["object"]
    assert obj["kind"] == "PartialObjectMetadata" and obj["apiVersion"] == "meta.k8s.io/v1"
    assert obj["metadata"]["name"] == "web-1" and "spec" not in obj
    _, full = await fetch(http, url, accept=TABLE, includeObject="Object")
    assert full["rows"][0]["object"]["spec"]["nodeName"] == "node-1"
    _, bare = await fetch(http, url, accept=TABLE, includeObject="None")
    assert bare["rows"][0]["object"] is None
    await fetch(http, url, accept=TABLE, includeObject="Everything", status=400)
    _, page = await fetch(http, url, accept=TABLE, limit="1")
    assert len(page["rows"]) == 1 and page["metadata"]["continue"]
    assert page["metadata"]["remainingItemCount"] == 1


async def test_table_watch_rows(cluster: FakeCluster, http: aiohttp.ClientSession) -> None:
    add_widgets(cluster)
    url = cluster.server + "/apis/example.com/v1/widgets"
    async with asyncio.timeout(5):
        resp = await http.get(url, params={"watch": "1"}, headers={"Accept": TABLE})
    try:
        assert resp.headers["Content-Type"] == "application/json;as=Table;v=v1;g=meta.k8s.io"
        cluster.create("widgets.example.com", {"metadata": {"name": "w1"}, "spec": {"size": 3}})
        cluster.create(
            "widgets.example.com",
            {"metadata": {"name": "w2"}, "spec": {"size": 5, "color": "red"}},
        )
        cluster.delete("widgets.example.com", "default", "w1")
        got = []
        async with asyncio.timeout(5):
            for _ in range(3):
                got.append(orjson.loads(await resp.content.readline()))
    finally:
        resp.release()
    assert [e["type"] for e in got] == ["ADDED", "ADDED", "DELETED"]
    first = got[0]["object"]
    assert first["kind"] == "Table"
    names = [c["name"] for c in first["columnDefinitions"]]
    assert names == ["Name", "Size", "Color", "Age"]
    assert [c["type"] for c in first["columnDefinitions"]] == [
        "string",
        "integer",
        "string",
        "date",
    ]
    assert first["columnDefinitions"][2]["priority"] == 1
    assert got[1]["object"]["columnDefinitions"] is None  # only the first event has them
    assert first["rows"][0]["cells"][:3] == ["w1", 3, None]
    assert got[1]["object"]["rows"][0]["cells"][:3] == ["w2", 5, "red"]
    assert got[1]["object"]["rows"][0]["cells"][3].endswith("s")  # an age: "0s"
    deleted = got[2]["object"]["rows"][0]["object"]["metadata"]
    assert deleted["name"] == "w1"
    assert got[2]["object"]["metadata"]["resourceVersion"] == deleted["resourceVersion"]


async def test_table_bookmarks_carry_the_resource_version(
    cluster: FakeCluster, http: aiohttp.ClientSession
) -> None:
    url = cluster.server + "/api/v1/pods"
    params = {"watch": "1", "allowWatchBookmarks": "true", "resourceVersion": "0"}
    async with asyncio.timeout(5):
        resp = await http.get(url, params=params, headers={"Accept": TABLE})
    try:
        async with asyncio.timeout(5):
            event = orjson.loads(await resp.content.readline())
    finally:
        resp.release()
    assert event["type"] == "BOOKMARK"
    assert event["object"]["kind"] == "Table"
    assert event["object"]["metadata"]["resourceVersion"] == cluster.resource_version


@pytest.mark.parametrize(
    ("resource", "obj", "expected"),
    [
        (
            "deployments.apps",
            {
                "metadata": {"name": "web"},
                "spec": {
                    "replicas": 3,
                    "selector": {"matchLabels": {"app": "web"}},
                    "template": {"spec": {"containers": [{"name": "app", "image": "nginx"}]}},
                },
                "status": {"readyReplicas": 2, "updatedReplicas": 3, "availableReplicas": 2},
            },
            ["web", "2/3", 3, 2, "0s", "app", "nginx", "app=web"],
        ),
        (
            "services",
            {
                "metadata": {"name": "lb"},
                "spec": {
                    "type": "LoadBalancer",
                    "clusterIP": "10.0.0.7",
                    "ports": [{"port": 80, "nodePort": 30080, "protocol": "TCP"}],
                },
            },
            ["lb", "LoadBalancer", "10.0.0.7", "<pending>", "80:30080/TCP", "0s", "<none>"],
        ),
        ("configmaps", {"metadata": {"name": "c"}, "data": {"a": "1"}}, ["c", 1, "0s"]),
        ("namespaces", {"metadata": {"name": "ns1"}}, ["ns1", "Active", "0s"]),
        (
            "nodes",
            {
                "metadata": {"name": "n1", "labels": {"node-role.kubernetes.io/worker": ""}},
                "spec": {"unschedulable": True},
                "status": {
                    "conditions": [{"type": "Ready", "status": "False"}],
                    "nodeInfo": {"kubeletVersion": "v1.32.1", "osImage": "Debian"},
                    "addresses": [{"type": "InternalIP", "address": "10.1.0.1"}],
                },
            },
            [
                "n1",
                "NotReady,SchedulingDisabled",
                "worker",
                "0s",
                "v1.32.1",
                "10.1.0.1",
                "<none>",
                "Debian",
                "<unknown>",
                "<unknown>",
            ],
        ),
        (
            "events",
            {
                "metadata": {"name": "e1"},
                "involvedObject": {"kind": "Pod", "name": "web-1", "fieldPath": "spec"},
                "type": "Warning",
                "reason": "BackOff",
                "message": " Back-off restarting ",
                "source": {"component": "kubelet", "host": "n1"},
                "count": 4,
            },
            [
                "<unknown>",
                "Warning",
                "BackOff",
                "pod/web-1",
                "spec",
                "kubelet, n1",
                "Back-off restarting",
                "<unknown>",
                4,
                "e1",
            ],
        ),
        ("secrets", {"metadata": {"name": "s"}}, ["s", None]),
    ],
)
async def test_table_cells_of_builtin_kinds(
    cluster: FakeCluster,
    http: aiohttp.ClientSession,
    resource: str,
    obj: Json,
    expected: list[Any],
) -> None:
    created = cluster.create(resource, obj)
    res = cluster._store.state(resource).resource
    _, table = await fetch(http, cluster.server + res.path(), accept=TABLE)
    (row,) = table["rows"]
    if resource == "secrets":  # no printer: the default convertor's Name and Created At
        assert [c["name"] for c in table["columnDefinitions"]] == ["Name", "Created At"]
        expected[1] = created["metadata"]["creationTimestamp"]
    ages = [0 if isinstance(c, str) and re.fullmatch(r"\d+s", c) else c for c in row["cells"]]
    assert ages == [0 if c == "0s" else c for c in expected]  # an age: "0s" or "1s"
    assert len(table["columnDefinitions"]) == len(row["cells"])


# ------------------------------------------------------------------------------ RBAC
async def test_rbac_by_namespace(cluster: FakeCluster, http: aiohttp.ClientSession) -> None:
    cluster.restrict("jane-token", user="jane", namespaces=["team-a"], resources=["pods"])
    cluster.create("pods", make_pod("a1", "team-a", size=400))
    cluster.create("pods", make_pod("b1", "team-b", size=400))
    async with aiohttp.ClientSession(headers={"Authorization": "Bearer jane-token"}) as jane:
        _, body = await fetch(jane, cluster.server + "/api/v1/pods", status=403)
        assert body == {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": 'pods is forbidden: User "jane" cannot list resource "pods" in API '
            'group "" at the cluster scope',
            "reason": "Forbidden",
            "details": {"kind": "pods"},
            "code": 403,
        }
        _, ok = await fetch(jane, cluster.server + "/api/v1/namespaces/team-a/pods")
        assert [p["metadata"]["name"] for p in ok["items"]] == ["a1"]
        _, other = await fetch(
            jane, cluster.server + "/api/v1/namespaces/team-b/pods", status=403, watch="1"
        )
        assert other["message"] == (
            'pods is forbidden: User "jane" cannot watch resource "pods" in API group "" '
            'in the namespace "team-b"'
        )
        _, one = await fetch(jane, cluster.server + "/api/v1/namespaces/team-b/pods/b1", status=403)
        assert one["message"].startswith('pods "b1" is forbidden: User "jane" cannot get')
        assert one["details"] == {"name": "b1", "kind": "pods"}
        _, deploy = await fetch(
            jane, cluster.server + "/apis/apps/v1/namespaces/team-a/deployments", status=403
        )
        assert deploy["message"].startswith("deployments.apps is forbidden")
        assert 'in API group "apps"' in deploy["message"]
        assert deploy["details"] == {"group": "apps", "kind": "deployments"}
        _, disc = await fetch(jane, cluster.server + "/api/v1")  # discovery stays open
        assert disc["kind"] == "APIResourceList"
    cluster.unrestrict("jane-token")
    async with aiohttp.ClientSession(headers={"Authorization": "Bearer jane-token"}) as jane:
        await fetch(jane, cluster.server + "/api/v1/pods")
    _, all_pods = await fetch(http, cluster.server + "/api/v1/pods")  # other tokens: all
    assert len(all_pods["items"]) == 2
