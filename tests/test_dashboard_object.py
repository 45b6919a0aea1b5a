"""The dashboard's object page, server side: YAML, links, a pod's containers, the stream."""

from __future__ import annotations

from pathlib import Path

import anyio
import orjson
import yaml

from kubemux import parse_resource
from kubemux.dashboard import views
from kubemux.testing import FakeCluster, make_pod, write_kubeconfig
from support import TIMEOUT
from test_dashboard import XSS, event_stream, served

PODS = parse_resource("pods")
SECRETS = parse_resource("secrets")


def test_yaml_is_block_style_in_the_servers_order_without_managed_fields() -> None:
    pod = make_pod("web-1", size=3000)
    pod["metadata"]["annotations"]["note"] = "line one\nline two\n"
    pod["metadata"]["annotations"]["long"] = "x" * 300
    assert pod["metadata"]["managedFields"]
    text = views.object_yaml(pod)
    assert "managedFields" not in text and "manager:" not in text
    assert "{" not in text  # block style, no flow mappings
    assert "&id" not in text and "*id" not in text  # no anchors
    assert "    note: |\n      line one\n      line two\n" in text
    assert "    long: " + "x" * 300 + "\n" in text  # long lines stay whole
    top = [line.split(":")[0] for line in text.splitlines() if line and line[0] != " "]
    assert top == list(pod)  # apiVersion, kind, metadata, spec, status: as the server sent them
    back = yaml.safe_load(text)
    del pod["metadata"]["managedFields"]
    assert back == pod
    assert list(back["metadata"]) == list(pod["metadata"])
    assert "managedFields" in make_pod("web-1", size=3000)["metadata"]  # input untouched
    shared = {"k": [1, 2]}  # one object twice: written out twice, no anchor and alias
    assert (
        views.object_yaml({"a": shared, "b": shared})
        == "a:\n  k:\n  - 1\n  - 2\nb:\n  k:\n  - 1\n  - 2\n"
    )


def test_a_secrets_yaml_is_redacted() -> None:
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": "db",
            "annotations": {views.LAST_APPLIED: '{"data":{"password":"aHVudGVyMg=="}}'},
        },
        "data": {"password": "aHVudGVyMg=="},
        "stringData": {"token": "hunter2"},
    }
    payload = views.object_payload(SECRETS, secret)
    raw = orjson.dumps(payload).decode()
    assert "aHVudGVyMg" not in raw and "hunter2" not in raw
    shown = yaml.safe_load(payload["yaml"])
    assert shown["data"] == {"password": "(redacted)"}
    assert shown["stringData"] == {"token": "(redacted)"}
    assert shown["metadata"]["annotations"][views.LAST_APPLIED] == "(redacted)"
    assert payload["object"] == views.redact(SECRETS, secret)
    assert payload["containers"] == [] and payload["links"] == []


def test_links_to_owners_and_the_node() -> None:
    pod = make_pod("web-1", node="node-7")
    pod["metadata"]["ownerReferences"] += [
        {"apiVersion": "batch/v1", "kind": "Job", "name": "nightly", "uid": "u2"},
        {"apiVersion": "example.com/v1", "kind": "Widget", "name": XSS, "uid": "u3"},
        {"apiVersion": "v1", "kind": "Node", "name": "node-7", "uid": "u4"},
        {"apiVersion": "apps/v1", "kind": "Deployment", "name": "", "uid": "u5"},  # no name
    ]
    links = views.object_links(PODS, pod)
    assert [(link["rel"], link["kind"], link["resource"], link["namespace"]) for link in links] == [
        ("owner", "ReplicaSet", "replicasets.apps", "default"),
        ("owner", "Job", "jobs.batch", "default"),
        ("owner", "Widget", None, "default"),  # unknown: shown as text
        ("owner", "Node", "nodes", ""),  # cluster-scoped: no namespace
        ("node", "Node", "nodes", ""),
    ]
    assert links[0]["controller"] is True and links[1]["controller"] is False
    assert links[2]["name"] == XSS and links[4]["name"] == "node-7"
    for kind, group, resource in (
        ("Deployment", "apps/v1", "deployments.apps"),
        ("StatefulSet", "apps/v1", "statefulsets.apps"),
        ("DaemonSet", "apps/v1", "daemonsets.apps"),
        ("CronJob", "batch/v1", "cronjobs.batch"),
        ("ReplicaSet", "extensions/v1beta1", None),  # the kind, in another group: unknown
        ("Deployment", "v1", None),
    ):
        rs = {"metadata": {"ownerReferences": [{"apiVersion": group, "kind": kind, "name": "o"}]}}
        assert [link["resource"] for link in views.object_links(None, rs)] == [resource]
    # only a pod links to its node
    assert views.object_links(parse_resource("deployments.apps"), {"spec": {"nodeName": "n"}}) == []


def test_pod_containers_from_spec_and_status() -> None:
    pod = make_pod("web-1")
    spec, status = pod["spec"], pod["status"]
    spec["initContainers"] = [{"name": "migrate", "image": "registry.example.com/migrate:2"}]
    status["initContainerStatuses"] = [
        {
            "name": "migrate",
            "ready": False,
            "restartCount": 0,
            "state": {"terminated": {"exitCode": 0, "reason": "Completed"}},
        }
    ]
    spec["containers"].append({"name": "sidecar", "image": XSS})
    status["containerStatuses"].append(
        {
            "name": "sidecar",
            "ready": False,
            "restartCount": 4,
            "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 40s"}},
        }
    )
    spec["containers"].append({"name": "late", "image": "busybox"})  # no status yet
    rows = views.pod_containers(pod)
    assert [(r["name"], r["init"], r["ready"], r["restarts"], r["state"]) for r in rows] == [
        ("migrate", True, False, 0, "Terminated: Completed (exit code 0)"),
        ("app", False, True, 0, "Running"),
        ("sidecar", False, False, 4, "Waiting: CrashLoopBackOff"),
        ("late", False, False, 0, "Waiting"),
    ]
    assert rows[2]["image"] == XSS and rows[2]["message"] == "back-off 40s"
    assert [r["reason"] for r in rows] == ["Completed", "Running", "CrashLoopBackOff", "Pending"]
    assert views.object_payload(PODS, pod)["containers"] == rows
    assert views.object_payload(parse_resource("configmaps"), {"kind": "ConfigMap"}) == {
        "object": {"kind": "ConfigMap"},
        "status": "",
        "yaml": "kind: ConfigMap\n",
        "links": [],
        "containers": [],
    }


async def test_object_stream_sends_yaml_links_and_containers(tmp_path: Path) -> None:
    async with FakeCluster() as c:
        c.create("pods", make_pod("web-1", labels={"app": XSS}))
        secret = {"metadata": {"name": "db"}, "data": {"password": "aHVudGVyMg=="}}
        c.create("secrets", secret)
        path = write_kubeconfig(tmp_path / "config", {"prod": c})
        query = "?context=prod&resource=pods&namespace=default&name=web-1"
        async with served(path) as url:
            async with event_stream(url, query) as stream:
                data = await stream.until_event("object")
                assert yaml.safe_load(data["yaml"])["metadata"]["labels"] == {"app": XSS}
                assert "managedFields" not in data["yaml"]
                assert [link["resource"] for link in data["links"]] == ["replicasets.apps", "nodes"]
                assert [r["state"] for r in data["containers"]] == ["Running"]
                pod = c.get("pods", "default", "web-1")
                assert pod is not None
                pod["status"]["containerStatuses"][0]["state"] = {"waiting": {"reason": "X"}}
                rv = c.update("pods", pod)["metadata"]["resourceVersion"]
                with anyio.fail_after(TIMEOUT):
                    while data["object"]["metadata"]["resourceVersion"] != rv:
                        data = await stream.until_event("object")
                assert [r["state"] for r in data["containers"]] == ["Waiting: X"]
                assert data["status"] == "X" and data["object"]["status"]["phase"] == "Running"
                c.delete("pods", "default", "web-1")
                assert await stream.until_event("object") == {"object": None}
            query = "?context=prod&resource=secrets&namespace=default&name=db"
            async with event_stream(url, query) as stream:
                data = await stream.until_event("object")
                assert "aHVudGVyMg" not in orjson.dumps(data).decode()
                assert "password: (redacted)" in data["yaml"]


def test_a_huge_or_deep_object_gets_a_note_not_an_exception() -> None:
    """Hostile objects: the page's payload is always encodable and bounded in work."""
    deep: dict[str, object] = {}
    cur = deep
    for _ in range(600):  # orjson reads 1,024 levels but writes 254; PyYAML stops near 330
        cur["a"] = {}
        cur = cur["a"]  # type: ignore[assignment]
    widget = {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}}
    payload = views.object_payload(None, {**widget, "spec": deep})
    assert "nested too deeply" in payload["yaml"]
    assert payload["object"]["metadata"] == {"name": "w"} and "spec" not in payload["object"]
    orjson.dumps(payload)  # the stream can send it
    big = views.object_payload(None, {**widget, "data": {"blob": "x" * 400_000}})
    assert big["yaml"].startswith("# not shown as YAML: the object is 390 KiB")
    assert big["object"]["data"]["blob"] == "x" * 400_000  # the object itself is still shown
