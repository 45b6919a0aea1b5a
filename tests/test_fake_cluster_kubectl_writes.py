"""The real kubectl 1.32 writing to FakeCluster: create, replace, apply (client- and server-side),
patch (every type), label, annotate, scale, delete, logs (-f) and exec, printing what it prints
against a real API server."""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path

import pytest

from kubemux.testing import FakeCluster, make_pod
from test_fake_cluster_kubectl import (
    KUBECTL,
    cluster,
    kubeconfig,
    kubectl,
    kubectl_process,
    kubectl_result,
)

__all__ = ["cluster", "kubeconfig"]  # fixtures, imported for pytest

pytestmark = pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl not on PATH")

CONFIGMAP = """\
apiVersion: v1
kind: ConfigMap
metadata:
  name: cfg
data:
  a: "1"
"""
DEPLOYMENT = """\
apiVersion: apps/v1
kind: Deployment
metadata:
  name: api
spec:
  replicas: 2
  selector: {matchLabels: {app: api}}
  template:
    metadata: {labels: {app: api}}
    spec:
      containers:
      - name: app
        image: nginx:1
        env: [{name: A, value: "1"}, {name: B, value: "2"}]
        ports: [{containerPort: 80}]
      - name: side
        image: busybox:1
"""


def write(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def rv(cluster: FakeCluster, resource: str, name: str) -> str:
    obj = cluster.get(resource, "default", name)
    assert obj is not None
    return str(obj["metadata"]["resourceVersion"])


async def test_create_replace_and_the_errors_kubectl_prints(
    cluster: FakeCluster, kubeconfig: Path, tmp_path: Path
) -> None:
    manifest = write(tmp_path, "cm.yaml", CONFIGMAP)
    assert await kubectl(kubeconfig, "create", "-f", manifest) == "configmap/cfg created\n"
    code, _, err = await kubectl_result(kubeconfig, "create", "-f", manifest)
    assert code == 1
    assert err == (
        f'Error from server (AlreadyExists): error when creating "{manifest}": '
        'configmaps "cfg" already exists\n'
    )
    changed = write(tmp_path, "cm2.yaml", CONFIGMAP.replace('"1"', '"2"'))
    assert await kubectl(kubeconfig, "replace", "-f", changed) == "configmap/cfg replaced\n"
    obj = cluster.get("configmaps", "default", "cfg")
    assert obj is not None and obj["data"] == {"a": "2"}
    stale = CONFIGMAP.replace("  name: cfg\n", '  name: cfg\n  resourceVersion: "1"\n')
    code, _, err = await kubectl_result(
        kubeconfig, "replace", "-f", write(tmp_path, "s.yaml", stale)
    )
    assert code == 1
    assert err.endswith(
        'Operation cannot be fulfilled on configmaps "cfg": the object has been modified; '
        "please apply your changes to the latest version and try again\n"
    )
    assert err.startswith("Error from server (Conflict): error when replacing ")
    # kubectl validated through the server: it found fieldValidation in /openapi/v3
    writes = [r for r in cluster.requests if r.verb in ("create", "update")]
    assert {r.query.get("fieldValidation") for r in writes} == {"Strict"}


async def test_apply_client_side_then_server_side(
    cluster: FakeCluster, kubeconfig: Path, tmp_path: Path
) -> None:
    manifest = write(tmp_path, "cm.yaml", CONFIGMAP)
    assert await kubectl(kubeconfig, "apply", "-f", manifest) == "configmap/cfg created\n"
    obj = cluster.get("configmaps", "default", "cfg")
    assert obj is not None
    last = json.loads(
        obj["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"]
    )
    assert last["data"] == {"a": "1"}
    before = rv(cluster, "configmaps", "cfg")
    assert await kubectl(kubeconfig, "apply", "-f", manifest) == "configmap/cfg unchanged\n"
    assert rv(cluster, "configmaps", "cfg") == before
    two = write(tmp_path, "cm2.yaml", CONFIGMAP.replace('a: "1"', 'b: "2"'))
    assert await kubectl(kubeconfig, "apply", "-f", two) == "configmap/cfg configured\n"
    obj = cluster.get("configmaps", "default", "cfg")
    assert obj is not None and obj["data"] == {"b": "2"}  # the three-way patch removed a
    assert int(rv(cluster, "configmaps", "cfg")) > int(before)
    patch = [r for r in cluster.requests if r.verb == "patch"][-1]
    assert patch.query["fieldManager"] == "kubectl-client-side-apply"
    three = write(tmp_path, "cm3.yaml", CONFIGMAP.replace('a: "1"', 'c: "3"'))
    out = await kubectl(kubeconfig, "apply", "--server-side", "-f", three)
    assert out == "configmap/cfg serverside-applied\n"
    obj = cluster.get("configmaps", "default", "cfg")
    assert obj is not None and obj["data"] == {"b": "2", "c": "3"}  # simplified: merged
    out = await kubectl(
        kubeconfig,
        "apply",
        "--server-side",
        "-f",
        write(tmp_path, "n.yaml", CONFIGMAP.replace("cfg", "new")),
    )
    assert out == "configmap/new serverside-applied\n"
    assert cluster.get("configmaps", "default", "new") is not None
    out = await kubectl(
        kubeconfig,
        "apply",
        "--dry-run=server",
        "-f",
        write(tmp_path, "d.yaml", CONFIGMAP.replace("cfg", "dry")),
    )
    assert out == "configmap/dry created (server dry run)\n"
    assert cluster.get("configmaps", "default", "dry") is None


async def test_apply_merges_containers_and_env_by_name(
    cluster: FakeCluster, kubeconfig: Path, tmp_path: Path
) -> None:
    assert await kubectl(kubeconfig, "apply", "-f", write(tmp_path, "d.yaml", DEPLOYMENT)) == (
        "deployment.apps/api created\n"
    )
    live = cluster.get("deployments.apps", "default", "api")
    assert live is not None
    live["spec"]["template"]["spec"]["containers"][0]["env"].append({"name": "C", "value": "x"})
    cluster.update("deployments.apps", live)  # a controller's change kubectl must keep
    changed = DEPLOYMENT.replace('value: "2"', 'value: "3"').replace("nginx:1", "nginx:2")
    changed = changed[: changed.index("      - name: side")]  # the second container goes
    out = await kubectl(kubeconfig, "apply", "-f", write(tmp_path, "d2.yaml", changed))
    assert out == "deployment.apps/api configured\n"
    obj = cluster.get("deployments.apps", "default", "api")
    assert obj is not None
    (app,) = obj["spec"]["template"]["spec"]["containers"]
    assert app["image"] == "nginx:2"
    assert app["env"] == [
        {"name": "A", "value": "1"},
        {"name": "B", "value": "3"},
        {"name": "C", "value": "x"},
    ]
    assert obj["metadata"]["generation"] == 3


async def test_patch_label_annotate_scale_delete(cluster: FakeCluster, kubeconfig: Path) -> None:
    cluster.create("configmaps", {"metadata": {"name": "cfg"}, "data": {"a": "1"}})
    for args, data in (
        (("-p", '{"data":{"b":"2"}}'), {"a": "1", "b": "2"}),
        (("--type=merge", "-p", '{"data":{"a":null}}'), {"b": "2"}),
        (
            ("--type=json", "-p", '[{"op":"add","path":"/data/c","value":"3"}]'),
            {"b": "2", "c": "3"},
        ),
    ):
        assert await kubectl(kubeconfig, "patch", "cm", "cfg", *args) == "configmap/cfg patched\n"
        obj = cluster.get("configmaps", "default", "cfg")
        assert obj is not None and obj["data"] == data
    before = rv(cluster, "configmaps", "cfg")
    out = await kubectl(kubeconfig, "patch", "cm", "cfg", "-p", '{"data":{"b":"2"}}')
    assert out == "configmap/cfg patched (no change)\n"
    assert rv(cluster, "configmaps", "cfg") == before  # a no-op write keeps the version
    code, _, err = await kubectl_result(
        kubeconfig,
        "patch",
        "cm",
        "cfg",
        "--type=json",
        "-p",
        '[{"op":"test","path":"/data/b","value":"9"}]',
    )
    assert code == 1 and err.startswith("The request is invalid: ")
    assert await kubectl(kubeconfig, "label", "cm", "cfg", "tier=web") == "configmap/cfg labeled\n"
    assert (
        await kubectl(kubeconfig, "annotate", "cm", "cfg", "note=hi") == "configmap/cfg annotated\n"
    )
    obj = cluster.get("configmaps", "default", "cfg")
    assert obj is not None
    assert obj["metadata"]["labels"] == {"tier": "web"}
    assert obj["metadata"]["annotations"] == {"note": "hi"}
    cluster.create(
        "deployments.apps",
        {
            "metadata": {"name": "web"},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "web"}}},
            "status": {"replicas": 1},
        },
    )
    assert await kubectl(kubeconfig, "scale", "deploy", "web", "--replicas=3") == (
        "deployment.apps/web scaled\n"
    )
    deployment = cluster.get("deployments.apps", "default", "web")
    assert deployment is not None and deployment["spec"]["replicas"] == 3
    assert deployment["status"] == {"replicas": 1}  # the controller's part, untouched
    scale = json.loads(
        await kubectl(
            kubeconfig, "get", "--raw", "/apis/apps/v1/namespaces/default/deployments/web/scale"
        )
    )
    assert scale["spec"] == {"replicas": 3} and scale["status"] == {
        "replicas": 1,
        "selector": "app=web",
    }
    assert await kubectl(kubeconfig, "delete", "cm", "cfg") == 'configmap "cfg" deleted\n'
    assert await kubectl(kubeconfig, "delete", "pod", "web-1") == 'pod "web-1" deleted\n'
    assert cluster.get("configmaps", "default", "cfg") is None
    assert cluster.get("pods", "default", "web-1") is None
    code, _, err = await kubectl_result(kubeconfig, "delete", "cm", "cfg")
    assert code == 1 and err == 'Error from server (NotFound): configmaps "cfg" not found\n'


async def test_logs_tail_timestamps_and_follow(cluster: FakeCluster, kubeconfig: Path) -> None:
    assert cluster.append_log("default", "web-1", "one\ntwo\n") == 2
    assert await kubectl(kubeconfig, "logs", "web-1") == "one\ntwo\n"
    assert await kubectl(kubeconfig, "logs", "web-1", "--tail=1") == "two\n"
    stamped = (await kubectl(kubeconfig, "logs", "web-1", "--timestamps")).splitlines()
    assert [line.split(" ", 1)[1] for line in stamped] == ["one", "two"]
    assert stamped[0][:4].isdigit() and stamped[0].split(" ")[0].endswith("Z")
    async with kubectl_process(kubeconfig, "logs", "-f", "web-1") as proc:
        stdout = proc.stdout
        assert stdout is not None
        async with asyncio.timeout(10):
            assert await stdout.readline() == b"one\n"
            assert await stdout.readline() == b"two\n"
            await cluster.wait_for(
                lambda: cluster.request_count("get", "pods", subresource="log") == 4
            )
            cluster.append_log("default", "web-1", "three\n")
            assert await stdout.readline() == b"three\n"
            cluster.delete("pods", "default", "web-1")  # the stream ends with the pod
            assert await stdout.read() == b""
            assert await proc.wait() == 0
    cluster.create(
        "pods", make_pod("two", size=600) | {"spec": {"containers": [{"name": "a"}, {"name": "b"}]}}
    )
    cluster.append_log("default", "two", "from b\n", container="b")
    assert await kubectl(kubeconfig, "logs", "two", "-c", "b") == "from b\n"
    code, _, err = await kubectl_result(kubeconfig, "logs", "two", "-c", "c")
    assert code == 1 and err == "error: container c is not valid for pod two\n"
    code, _, err = await kubectl_result(kubeconfig, "logs", "two", "-c", "b", "--previous")
    assert code == 1 and err == (
        'Error from server (BadRequest): previous terminated container "b" in pod "two" not found\n'
    )
    cluster.restart_container("default", "two", container="b")
    cluster.append_log("default", "two", "b again\n", container="b")
    assert await kubectl(kubeconfig, "logs", "two", "-c", "b", "-p") == "from b\n"
    assert await kubectl(kubeconfig, "logs", "two", "-c", "b") == "b again\n"


async def test_exec_echo_cat_and_exit_codes(cluster: FakeCluster, kubeconfig: Path) -> None:
    assert await kubectl(kubeconfig, "exec", "web-1", "--", "echo", "hi", "there") == "hi there\n"
    proc = await asyncio.create_subprocess_exec(
        KUBECTL,
        "--kubeconfig",
        str(kubeconfig),
        "exec",
        "-i",
        "web-1",
        "--",
        "cat",
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    async with asyncio.timeout(20):
        out, err = await proc.communicate(b"data\n")
    assert (proc.returncode, out, err) == (0, b"data\n", b"")
    code, _, err = await kubectl_result(kubeconfig, "exec", "web-1", "--", "sh", "-c", "exit 3")
    assert (code, err) == (3, "command terminated with exit code 3\n")
    code, _, err = await kubectl_result(kubeconfig, "exec", "web-1", "--", "nosuch")
    assert code == 1 and err.startswith("error: Internal error occurred: error executing command")
    assert '"nosuch": executable file not found in $PATH' in err
    code, _, err = await kubectl_result(kubeconfig, "exec", "web-1", "-c", "nope", "--", "true")
    assert (code, err) == (
        1,
        "Error from server (BadRequest): container nope is not valid for pod web-1\n",
    )
    # WebSocket upgrades (GET); after the 400, kubectl tried its SPDY fallback (POST) once
    methods = [r.method for r in cluster.requests if r.subresource == "exec"]
    assert methods == ["GET"] * 5 + ["POST"]
