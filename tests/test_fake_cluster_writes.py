"""FakeCluster's writes, subresources, logs, exec and request counts over HTTP (aiohttp), and
its patch functions on their own."""

from __future__ import annotations

import asyncio
import io
import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import orjson
import pytest

from kubemux.testing import FakeCluster, make_pod
from kubemux.testing._wire.patch import json_patch, merge_patch, strategic_merge_patch
from kubemux.testing._wire.request_info import request_info

TOKEN = "w"
Json = dict[str, Any]
CM = "/api/v1/namespaces/default/configmaps"


@pytest.fixture
async def cluster() -> AsyncIterator[FakeCluster]:
    async with FakeCluster(tokens={TOKEN}) as fake:
        fake.create("pods", make_pod("web-1", size=600))
        fake.create(
            "configmaps", {"metadata": {"name": "cfg", "labels": {"t": "a"}}, "data": {"a": "1"}}
        )
        yield fake


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(headers={"Authorization": f"Bearer {TOKEN}"}) as session:
        yield session


async def call(
    http: aiohttp.ClientSession,
    method: str,
    url: str,
    body: Any = None,
    *,
    content_type: str = "application/json",
    status: int = 200,
    **params: str,
) -> Json:
    data: Any = body if isinstance(body, bytes) or body is None else orjson.dumps(body)
    if isinstance(data, bytes) and len(data) > 1024 * 1024:
        data = io.BytesIO(data)
    async with (
        asyncio.timeout(5),
        http.request(
            method, url, data=data, params=params, headers={"Content-Type": content_type}
        ) as resp,
    ):
        text = await resp.read()
        assert resp.status == status, text
        decoded: Json = orjson.loads(text)
        return decoded


# ------------------------------------------------------------------------------ pure parts
def test_json_patch_operations_and_failures() -> None:
    doc = {"a": {"b": [1, 2]}, "c": "x", "k/~": 1}
    out = json_patch(
        doc,
        [
            {"op": "add", "path": "/a/b/-", "value": 3},
            {"op": "add", "path": "/a/b/0", "value": 0},
            {"op": "replace", "path": "/c", "value": "y"},
            {"op": "move", "from": "/c", "path": "/d"},
            {"op": "copy", "from": "/d", "path": "/e"},
            {"op": "remove", "path": "/k~1~0"},
            {"op": "test", "path": "/a/b/3", "value": 3},
        ],
    )
    assert out == {"a": {"b": [0, 1, 2, 3]}, "d": "y", "e": "y"}
    assert doc == {"a": {"b": [1, 2]}, "c": "x", "k/~": 1}  # the input is not touched
    from kubemux.testing._wire.patch import PatchError, PatchRejected

    with pytest.raises(PatchRejected, match="test failed"):
        json_patch(doc, [{"op": "test", "path": "/c", "value": "no"}])
    with pytest.raises(PatchRejected, match="missing"):
        json_patch(doc, [{"op": "remove", "path": "/nope"}])
    with pytest.raises(PatchError):
        json_patch(doc, {"op": "add"})
    with pytest.raises(PatchError, match="maximum operations"):
        json_patch(doc, [{"op": "test", "path": "/c", "value": "x"}] * 10_001)


def test_merge_patch_is_rfc_7386() -> None:
    assert merge_patch({"a": {"b": 1, "c": 2}, "l": [1]}, {"a": {"b": None, "d": 3}, "l": [2]}) == {
        "a": {"c": 2, "d": 3},
        "l": [2],
    }


def test_strategic_merge_by_key_and_directives() -> None:
    pod = {
        "metadata": {"finalizers": ["a"], "labels": {"x": "1"}},
        "spec": {
            "containers": [
                {"name": "app", "image": "v1", "env": [{"name": "A", "value": "1"}]},
                {"name": "side", "image": "s"},
            ],
            "tolerations": [{"key": "t"}],
        },
    }
    patch = {
        "metadata": {"finalizers": ["b"], "$deleteFromPrimitiveList/finalizers": ["a"]},
        "spec": {
            "$setElementOrder/containers": [{"name": "new"}, {"name": "app"}],
            "containers": [
                {"name": "app", "env": [{"name": "B", "value": "2"}]},
                {"name": "side", "$patch": "delete"},
                {"name": "new", "image": "n"},
            ],
            "tolerations": [{"key": "u"}],  # no strategy: replaced
        },
    }
    out = strategic_merge_patch(pod, patch)
    assert out["metadata"] == {"finalizers": ["b"], "labels": {"x": "1"}}
    assert out["spec"]["containers"] == [
        {"name": "new", "image": "n"},
        {
            "name": "app",
            "image": "v1",
            "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}],
        },
    ]
    assert out["spec"]["tolerations"] == [{"key": "u"}]
    replaced = strategic_merge_patch(pod, {"metadata": {"labels": {"$patch": "replace", "y": "2"}}})
    assert replaced["metadata"]["labels"] == {"y": "2"}
    retained = strategic_merge_patch(
        {"spec": {"strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1}}}},
        {"spec": {"strategy": {"$retainKeys": ["type"], "type": "Recreate"}}},
    )
    assert retained == {"spec": {"strategy": {"type": "Recreate"}}}
    service = strategic_merge_patch(
        {"spec": {"ports": [{"port": 80, "name": "a"}]}}, {"spec": {"ports": [{"port": 443}]}}
    )
    assert service["spec"]["ports"] == [{"port": 80, "name": "a"}, {"port": 443}]


def test_request_info_reads_verbs_and_resources() -> None:
    def info(method: str, path: str, watch: bool = False) -> tuple[Any, ...]:
        got = request_info(method, path, is_watch=watch)
        return (got.verb, got.resource, got.namespace, got.name, got.subresource)

    assert info("GET", "/api/v1/pods") == ("list", "pods", None, None, None)
    assert info("GET", "/api/v1/namespaces/d/pods", True) == ("watch", "pods", "d", None, None)
    assert info("GET", "/apis/apps/v1/namespaces/d/deployments/w/scale") == (
        "get",
        "deployments.apps",
        "d",
        "w",
        "scale",
    )
    assert info("PATCH", "/api/v1/namespaces/d/pods/p/status") == (
        "patch",
        "pods",
        "d",
        "p",
        "status",
    )
    assert info("DELETE", "/api/v1/namespaces/d/pods") == (
        "deletecollection",
        "pods",
        "d",
        None,
        None,
    )
    assert info("GET", "/api/v1/namespaces/d") == ("get", "namespaces", None, "d", None)
    assert info("PUT", "/api/v1/namespaces/d/status") == (
        "update",
        "namespaces",
        None,
        "d",
        "status",
    )
    assert info("GET", "/api/v1/namespaces/d/pods/p/exec") == ("create", "pods", "d", "p", "exec")
    assert info("GET", "/version") == ("get", None, None, None, None)
    assert info("GET", "/apis/apps/v1") == ("get", None, None, None, None)


# ------------------------------------------------------------------------------ over HTTP
async def test_writes_bump_the_version_and_reach_watches(
    cluster: FakeCluster, http: aiohttp.ClientSession
) -> None:
    url = f"{cluster.server}{CM}"
    start = cluster.resource_version
    async with http.get(url, params={"watch": "true", "resourceVersion": start}) as watch:
        created = await call(http, "POST", url, {"metadata": {"generateName": "gen-"}}, status=201)
        name = created["metadata"]["name"]
        assert name.startswith("gen-") and len(name) == 9
        conflict = await call(http, "POST", url, {"metadata": {"name": "cfg"}}, status=409)
        assert (conflict["reason"], conflict["message"]) == (
            "AlreadyExists",
            'configmaps "cfg" already exists',
        )
        cfg = cluster.get("configmaps", "default", "cfg")
        assert cfg is not None
        cfg["data"] = {"a": "2"}
        replaced = await call(http, "PUT", f"{url}/cfg", cfg)
        stale = await call(http, "PUT", f"{url}/cfg", cfg, status=409)
        assert stale["message"] == (
            'Operation cannot be fulfilled on configmaps "cfg": the object has been modified; '
            "please apply your changes to the latest version and try again"
        )
        assert stale["details"] == {"name": "cfg", "kind": "configmaps"}
        same = await call(http, "PUT", f"{url}/cfg", replaced)  # changes nothing
        assert same["metadata"]["resourceVersion"] == replaced["metadata"]["resourceVersion"]
        patched = await call(
            http,
            "PATCH",
            f"{url}/cfg",
            {"data": {"b": "3"}},
            content_type="application/merge-patch+json",
        )
        assert patched["data"] == {"a": "2", "b": "3"}
        gone = await call(http, "DELETE", f"{url}/{name}", {"propagationPolicy": "Background"})
        assert gone == {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Success",
            "details": {"name": name, "kind": "configmaps", "uid": created["metadata"]["uid"]},
        }
        lines: list[Json] = []
        async with asyncio.timeout(5):
            while len(lines) < 4:
                lines.append(json.loads(await watch.content.readline()))
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in lines] == [
        ("ADDED", name),
        ("MODIFIED", "cfg"),
        ("MODIFIED", "cfg"),
        ("DELETED", name),
    ]
    versions = [int(e["object"]["metadata"]["resourceVersion"]) for e in lines]
    assert versions == sorted(versions) and versions[0] > int(start)


async def test_put_errors(cluster: FakeCluster, http: aiohttp.ClientSession) -> None:
    url = f"{cluster.server}{CM}"
    wrong = await call(http, "PUT", f"{url}/cfg", {"metadata": {"name": "x"}}, status=400)
    assert wrong["message"] == "the name of the object (x) does not match the name on the URL (cfg)"
    missing = await call(http, "PUT", f"{url}/nope", {"metadata": {"name": "nope"}}, status=404)
    assert missing["message"] == 'configmaps "nope" not found'
    cluster.add_crd("example.com", "widgets", "Widget")
    cluster.create("widgets.example.com", {"metadata": {"name": "w"}})
    crs = f"{cluster.server}/apis/example.com/v1/namespaces/default/widgets"
    blind = await call(http, "PUT", f"{crs}/w", {"metadata": {"name": "w"}}, status=422)
    assert blind["message"].endswith(
        "metadata.resourceVersion: Invalid value: 0x0: must be specified for an update"
    )
    smp = await call(
        http,
        "PATCH",
        f"{crs}/w",
        {},
        content_type="application/strategic-merge-patch+json",
        status=415,
    )
    assert smp["message"] == (
        "the body of the request was in an unknown format - accepted media types include: "
        "application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml"
    )
    big = b'{"metadata":{"name":"cfg"},"data":{"a":"' + b"x" * (3 * 1024 * 1024) + b'"}}'
    too_large = await call(http, "PUT", f"{url}/cfg", big, status=413)
    assert too_large["reason"] == "RequestEntityTooLarge"
    deep = b'{"a":' * 600 + b"1" + b"}" * 600
    assert (
        await call(
            http,
            "PATCH",
            f"{url}/cfg",
            deep,
            content_type="application/strategic-merge-patch+json",
            status=400,
        )
    )["reason"] == "BadRequest"
    failed = await call(
        http,
        "PATCH",
        f"{url}/cfg",
        [{"op": "test", "path": "/data/a", "value": "9"}],
        content_type="application/json-patch+json",
        status=422,
    )
    assert failed["details"]["causes"][0]["message"] == "testing value /data/a failed: test failed"


async def test_server_side_apply_creates_then_merges(
    cluster: FakeCluster, http: aiohttp.ClientSession
) -> None:
    url = f"{cluster.server}{CM}/app"
    body = b"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: app\ndata:\n  a: '1'\n"
    need = await call(
        http, "PATCH", url, body, content_type="application/apply-patch+yaml", status=422
    )
    assert "fieldManager: Required value" in need["message"]
    made = await call(
        http,
        "PATCH",
        url,
        body,
        content_type="application/apply-patch+yaml",
        status=201,
        fieldManager="me",
    )
    assert made["data"] == {"a": "1"}
    again = await call(
        http,
        "PATCH",
        url,
        body.replace(b"a: '1'", b"b: '2'"),
        content_type="application/apply-patch+yaml",
        fieldManager="me",
    )
    assert again["data"] == {"a": "1", "b": "2"}


async def test_subresources_status_scale_and_eviction(
    cluster: FakeCluster, http: aiohttp.ClientSession
) -> None:
    pods = f"{cluster.server}/api/v1/namespaces/default/pods"
    pod = await call(http, "GET", f"{pods}/web-1")
    pod["status"]["phase"] = "Failed"
    pod["metadata"]["labels"] = {"changed": "yes"}
    main = await call(http, "PUT", f"{pods}/web-1", pod)
    assert main["status"]["phase"] == "Running" and main["metadata"]["labels"] == {"changed": "yes"}
    status = await call(
        http,
        "PATCH",
        f"{pods}/web-1/status",
        {"status": {"phase": "Succeeded"}, "metadata": {"labels": {"x": "y"}}},
        content_type="application/merge-patch+json",
    )
    assert status["status"]["phase"] == "Succeeded" and status["metadata"]["labels"] == {
        "changed": "yes"
    }
    cluster.create(
        "deployments.apps",
        {
            "metadata": {"name": "web"},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "web"}}},
        },
    )
    scale_url = f"{cluster.server}/apis/apps/v1/namespaces/default/deployments/web/scale"
    scale = await call(http, "GET", scale_url)
    assert scale["kind"] == "Scale" and scale["spec"] == {"replicas": 1}
    scale["spec"]["replicas"] = 4
    assert (await call(http, "PUT", scale_url, scale))["spec"] == {"replicas": 4}
    deployment = cluster.get("deployments.apps", "default", "web")
    assert deployment is not None and deployment["spec"]["replicas"] == 4
    await call(http, "GET", f"{cluster.server}{CM}/cfg/scale", status=404)
    evicted = await call(
        http,
        "POST",
        f"{pods}/web-1/eviction",
        {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "web-1"}},
        status=201,
    )
    assert evicted["status"] == "Success" and cluster.get("pods", "default", "web-1") is None


async def test_delete_answers_and_deletecollection(
    cluster: FakeCluster, http: aiohttp.ClientSession
) -> None:
    pods = f"{cluster.server}/api/v1/namespaces/default/pods"
    pod = cluster.get("pods", "default", "web-1")
    assert pod is not None
    wrong = {"preconditions": {"uid": "other"}}
    assert (await call(http, "DELETE", f"{pods}/web-1", wrong, status=409))["reason"] == "Conflict"
    dry = await call(http, "DELETE", f"{pods}/web-1", dryRun="All")
    assert dry["kind"] == "Pod" and cluster.get("pods", "default", "web-1") is not None
    deleted = await call(http, "DELETE", f"{pods}/web-1")
    assert deleted["kind"] == "Pod"  # pods answer the deleted object (ReturnDeletedObject)
    assert int(deleted["metadata"]["resourceVersion"]) > int(pod["metadata"]["resourceVersion"])
    for i in range(3):
        cluster.create("configmaps", {"metadata": {"name": f"c{i}", "labels": {"t": "b"}}})
    url = f"{cluster.server}{CM}"
    listed = await call(http, "DELETE", url, labelSelector="t=b")
    assert listed["kind"] == "ConfigMapList"
    assert [i["metadata"]["name"] for i in listed["items"]] == ["c0", "c1", "c2"]
    assert [c["metadata"]["name"] for c in cluster.objects("configmaps")] == ["cfg"]
    bad = await call(http, "DELETE", f"{url}/cfg", {"propagationPolicy": "Sideways"}, status=400)
    assert "propagationPolicy: Unsupported value" in bad["message"]


async def test_dry_run_writes_change_nothing(
    cluster: FakeCluster, http: aiohttp.ClientSession
) -> None:
    url = f"{cluster.server}{CM}"
    before = cluster.resource_version
    await call(http, "POST", url, {"metadata": {"name": "dry"}}, status=201, dryRun="All")
    patched = await call(
        http,
        "PATCH",
        f"{url}/cfg",
        {"data": {"z": "1"}},
        content_type="application/merge-patch+json",
        dryRun="All",
    )
    assert patched["data"]["z"] == "1"
    assert (
        cluster.resource_version == before and cluster.get("configmaps", "default", "dry") is None
    )


async def test_request_count_by_verb_and_resource(
    cluster: FakeCluster, http: aiohttp.ClientSession
) -> None:
    cluster.clear_requests()
    for _ in range(3):
        await call(http, "GET", f"{cluster.server}/api/v1/pods")
    await call(http, "GET", f"{cluster.server}/api/v1/namespaces/default/pods/web-1")
    await call(http, "GET", f"{cluster.server}/version")
    assert cluster.request_count("list", "pods") == 3
    assert cluster.request_count("list", "po") == 3  # kubectl's names work
    assert cluster.request_count(("list", "get"), "pods") == 4
    assert cluster.request_count("get", "pods", name="web-1", namespace="default") == 1
    assert cluster.request_count("list", "configmaps") == 0
    assert cluster.request_count(token=TOKEN) == 5 and cluster.request_count("watch") == 0


async def test_logs_over_http(cluster: FakeCluster, http: aiohttp.ClientSession) -> None:
    url = f"{cluster.server}/api/v1/namespaces/default/pods/web-1/log"
    cluster.append_log("default", "web-1", "a\nb\nc")
    assert cluster.log_lines("default", "web-1") == ["a", "b", "c"]
    async with http.get(url, params={"tailLines": "2", "limitBytes": "3"}) as resp:
        assert resp.status == 200 and await resp.read() == b"b\nc"
    with pytest.raises(KeyError):
        cluster.append_log("default", "nope", "x")
    with pytest.raises(ValueError, match="not valid"):
        cluster.append_log("default", "web-1", "x", container="nope")
    two = make_pod("two", size=600)
    two["spec"]["containers"].append({"name": "b"})
    cluster.create("pods", two)
    which = await call(
        http, "GET", f"{cluster.server}/api/v1/namespaces/default/pods/two/log", status=400
    )
    assert (
        which["message"] == "a container name must be specified for pod two, choose one of: [app b]"
    )
    async with http.get(url, params={"follow": "true", "sinceSeconds": "3600"}) as resp:
        async with asyncio.timeout(5):
            assert await resp.content.readline() == b"a\n"
            await resp.content.readline(), await resp.content.readline()
            cluster.append_log("default", "web-1", "d\n")
            assert await resp.content.readline() == b"d\n"
            cluster.delete("pods", "default", "web-1")
            cluster.create("pods", make_pod("web-1", size=600))  # a new pod: a new log
            assert await resp.content.read() == b""
    assert cluster.log_lines("default", "web-1") == []


async def test_a_restarted_container_keeps_its_previous_log(
    cluster: FakeCluster, http: aiohttp.ClientSession
) -> None:
    """``previous=true`` reads the last instance's log (400 before any restart, as the
    kubelet answers); a follower of the old instance sees its stream end."""
    url = f"{cluster.server}/api/v1/namespaces/default/pods/web-1/log"
    cluster.append_log("default", "web-1", "old 1\nold 2\n")
    missing = await call(http, "GET", url, status=400, previous="true")
    assert missing["message"] == 'previous terminated container "app" in pod "web-1" not found'
    async with http.get(url, params={"follow": "true"}) as resp:
        async with asyncio.timeout(5):
            assert await resp.content.readline() == b"old 1\n"
            await resp.content.readline()
            cluster.restart_container("default", "web-1")
            assert await resp.content.read() == b""  # the old instance ended
    cluster.append_log("default", "web-1", "new\n")
    assert cluster.log_lines("default", "web-1") == ["new"]
    for follow in ("false", "true"):  # a previous log is not followed: its container ended
        params = {"previous": "1", "follow": follow, "tailLines": "1"}
        async with http.get(url, params=params) as resp:
            assert resp.status == 200 and await resp.read() == b"old 2\n"
    cluster.restart_container("default", "web-1")
    async with http.get(url, params={"previous": "true"}) as resp:
        assert await resp.read() == b"new\n"
    with pytest.raises(ValueError, match="not valid"):
        cluster.restart_container("default", "web-1", container="nope")


async def exec_ws(
    http: aiohttp.ClientSession, url: str, protocol: str, stdin: bytes | None = None
) -> tuple[bytes, dict[str, Any]]:
    """(stdout, status) of an exec over WebSocket."""
    out = b""
    async with asyncio.timeout(5), http.ws_connect(url, protocols=(protocol,)) as ws:
        assert ws.protocol == protocol
        if stdin is not None:
            await ws.send_bytes(b"\x00" + stdin)
            await ws.send_bytes(b"\xff\x00")  # v5: close stdin
        async for msg in ws:
            assert msg.type == aiohttp.WSMsgType.BINARY
            if msg.data[0] == 1:
                out += msg.data[1:]
            elif msg.data[0] == 3:
                return out, json.loads(msg.data[1:])
    raise AssertionError("no status message")


async def test_exec_over_websocket_v5_and_v4(
    cluster: FakeCluster, http: aiohttp.ClientSession
) -> None:
    base = f"{cluster.server}/api/v1/namespaces/default/pods/web-1/exec?container=app&stdout=true"
    out, status = await exec_ws(http, f"{base}&command=echo&command=hi", "v4.channel.k8s.io")
    assert (out, status) == (b"hi\n", {"metadata": {}, "status": "Success"})
    out, status = await exec_ws(http, f"{base}&stdin=true&command=cat", "v5.channel.k8s.io", b"xyz")
    assert (out, status["status"]) == (b"xyz", "Success")
    out, status = await exec_ws(
        http, f"{base}&tty=true&command=echo&command=a", "v5.channel.k8s.io"
    )
    assert out == b"a\r\n"
    _, status = await exec_ws(http, f"{base}&command=false", "v5.channel.k8s.io")
    assert status["reason"] == "NonZeroExitCode"
    assert status["details"]["causes"] == [{"reason": "ExitCode", "message": "1"}]
    plain = await call(http, "POST", f"{base}&command=true", status=400)
    assert plain["message"] == "Upgrade request required"
    forward = f"{cluster.server}/api/v1/namespaces/default/pods/web-1/portforward"
    await call(http, "GET", forward, status=400)


async def test_attach_streams_appended_lines(
    cluster: FakeCluster, http: aiohttp.ClientSession
) -> None:
    url = f"{cluster.server}/api/v1/namespaces/default/pods/web-1/attach?container=app&stdout=true"
    async with asyncio.timeout(5), http.ws_connect(url, protocols=("v5.channel.k8s.io",)) as ws:
        await cluster.wait_for(lambda: cluster.request_count(subresource="attach") == 1)
        cluster.append_log("default", "web-1", "live\n")
        msg = await ws.receive()
        assert msg.data == b"\x01live\n"
        cluster.delete("pods", "default", "web-1")
        msg = await ws.receive()
        assert msg.data[0] == 3 and json.loads(msg.data[1:])["status"] == "Success"


async def test_openapi_v3_lists_patch_parameters(
    cluster: FakeCluster, http: aiohttp.ClientSession
) -> None:
    index = await call(http, "GET", f"{cluster.server}/openapi/v3")
    assert "api/v1" in index["paths"] and "apis/apps/v1" in index["paths"]
    doc = await call(http, "GET", cluster.server + index["paths"]["api/v1"]["serverRelativeURL"])
    patch = doc["paths"]["/api/v1/namespaces/{namespace}/configmaps/{name}"]["patch"]
    assert patch["x-kubernetes-group-version-kind"] == {
        "group": "",
        "version": "v1",
        "kind": "ConfigMap",
    }
    assert "fieldValidation" in [p["name"] for p in patch["parameters"]]
    await call(http, "GET", f"{cluster.server}/openapi/v2", status=404)
