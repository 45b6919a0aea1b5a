"""The real kubectl (1.32 where installed) through ``kubemux proxy``'s kubeconfig.

kubectl prints through the proxy exactly what it prints against the server (ages are the
same: the objects are five hours old), and repeated reads cost the cluster no LIST or GET.
Skipped where kubectl is not installed (CI installs none); ``test_proxy_app.py`` covers the
same paths with raw HTTP.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest
import yaml

from kubemux.testing import FakeCluster, FakeContext, make_pod, write_kubeconfig
from proxy_support import TinyUpstream, kubectl_binary, running_proxy

KUBECTL = kubectl_binary()
pytestmark = pytest.mark.skipif(KUBECTL is None, reason="kubectl not on PATH")

TOKEN = "kubectl-token"
FIVE_HOURS_AGO = (dt.datetime.now(dt.UTC) - dt.timedelta(hours=5)).strftime("%Y-%m-%dT%H:%M:%SZ")
WEIRD = [
    "arn:aws:eks:eu-west-1:123456789012:cluster/prod",
    "gke_my-project_europe-west1-b_prod",
    "alice@prod",
    "my context",
]


def old_pod(name: str, namespace: str = "default", **options: Any) -> dict[str, Any]:
    pod = make_pod(name, namespace, size=800, **options)
    pod["metadata"]["creationTimestamp"] = FIVE_HOURS_AGO
    return pod


@pytest.fixture
async def cluster() -> AsyncIterator[FakeCluster]:
    async with FakeCluster(tokens={TOKEN}, tls=True, name="kubectl") as fake:
        for pod in (
            old_pod("web-1"),
            old_pod("web-2", node="node-2", phase="Pending"),
            old_pod("db-1", "data"),
        ):
            fake.create("pods", pod)
        fake.add_crd(
            "example.com",
            "widgets",
            "Widget",
            short_names=["wd"],
            categories=["all"],
            printer_columns=[
                {"name": "Size", "type": "integer", "jsonPath": ".spec.size"},
                {"name": "Color", "type": "string", "jsonPath": ".spec.color", "priority": 1},
                {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
            ],
        )
        for name, spec in (("w1", {"size": 3}), ("w2", {"size": 5, "color": "red"})):
            meta = {"name": name, "creationTimestamp": FIVE_HOURS_AGO}
            fake.create("widgets.example.com", {"metadata": meta, "spec": spec})
        fake.create("events", event_about("web-1"))
        yield fake


def event_about(pod: str) -> dict[str, Any]:
    return {
        "metadata": {"name": f"{pod}.1", "namespace": "default"},
        "involvedObject": {"kind": "Pod", "namespace": "default", "name": pod},
        "reason": "Pulled",
        "message": "Container image pulled",
        "type": "Normal",
        "count": 1,
        "firstTimestamp": FIVE_HOURS_AGO,
        "lastTimestamp": FIVE_HOURS_AGO,
        "source": {"component": "kubelet"},
    }


async def kubectl(kubeconfig: Path, *args: str, cache: str = "cache") -> tuple[int, str, str]:
    assert KUBECTL is not None
    proc = await asyncio.create_subprocess_exec(
        KUBECTL,
        "--kubeconfig",
        str(kubeconfig),
        "--cache-dir",
        str(kubeconfig.parent / cache),
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        async with asyncio.timeout(30):
            out, err = await proc.communicate()
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


READS = [
    ("get", "pods", "-A"),
    ("get", "pods", "-n", "data"),
    ("get", "pods"),
    ("get", "pods", "-A", "-o", "wide"),
    ("get", "pod", "web-1", "-o", "yaml"),
    ("get", "pods", "-A", "-o", "json"),
    ("get", "pods", "-n", "default", "-o", "yaml"),
    ("get", "pods", "-A", "-o", "name"),
    ("get", "pods", "-A", "-l", "app=web"),
    ("get", "pods", "-A", "-l", "app notin (db)", "-o", "name"),
    ("get", "pods", "-A", "--field-selector", "spec.nodeName=node-2"),
    ("get", "pods", "-A", "--field-selector", "status.phase=Running,metadata.namespace!=data"),
    ("get", "pods", "-A", "--chunk-size=1"),
    ("get", "pods", "-A", "-o", "json", "--chunk-size=2"),
    ("get", "pods", "-A", "--sort-by=.spec.nodeName"),
    ("get", "pods", "-A", "-o", "wide", "--sort-by=.metadata.name", "--chunk-size=1"),
    ("get", "wd"),
    ("get", "widgets.example.com", "-o", "wide"),
    ("get", "wd", "-o", "yaml"),
    ("get", "all"),
    ("describe", "pod", "web-1"),
    ("describe", "wd", "w2"),
    ("api-resources",),
    ("get", "events"),
]


async def test_kubectl_reads_through_the_proxy_match_the_server(
    cluster: FakeCluster, tmp_path: Path
) -> None:
    source = write_kubeconfig(tmp_path / "direct" / "config", {"prod": cluster})
    out = tmp_path / "proxied" / "config"
    async with running_proxy(source) as (server, _):
        server.write_kubeconfig(out)
        with anyio.fail_after(120):
            for args in READS:
                direct = await kubectl(source, *args)
                proxied = await kubectl(out, *args)
                assert proxied[0] == 0, proxied[2]
                assert proxied[1] == direct[1], args
            # one object as a Table: FakeCluster answers a GET with the object (kubectl then
            # prints NAME and AGE); kube-apiserver, and the proxy, with a one-row Table
            code, one, err = await kubectl(out, "get", "pod", "web-1")
            assert code == 0, err
            _, listed, _ = await kubectl(
                source, "get", "pods", "--field-selector", "metadata.name=web-1"
            )
            assert one == listed
            cluster.clear_requests()
            for args in [*READS, ("get", "pod", "web-1")]:  # again: all from the caches,
                # discovery too (a fresh kubectl cache each time: it asks /api and /apis)
                code, _, err = await kubectl(out, *args, cache=f"fresh-{len(args)}-{args[-1]}")
                assert code == 0, err
    upstream = [r for r in cluster.requests if not r.is_watch]
    assert upstream == []


async def test_kubectl_with_context_names_clients_rewrite(
    cluster: FakeCluster, tmp_path: Path
) -> None:
    source = write_kubeconfig(tmp_path / "config", dict.fromkeys(WEIRD, cluster))
    out = tmp_path / "proxy.yaml"
    async with running_proxy(source) as (server, _):
        server.write_kubeconfig(out)
        with anyio.fail_after(60):
            for name in WEIRD:
                code, stdout, err = await kubectl(out, "--context", name, "get", "pods", "-A")
                assert code == 0, err
                assert "web-1" in stdout and "db-1" in stdout
                code, stdout, _ = await kubectl(
                    out, "--context", name, "config", "view", "--minify", "-o", "json"
                )
                assert json.loads(stdout)["contexts"][0]["name"] == name


async def test_kubectl_writes_go_upstream(cluster: FakeCluster, tmp_path: Path) -> None:
    source = write_kubeconfig(tmp_path / "config", {"prod": cluster})
    out = tmp_path / "proxy.yaml"
    manifest = tmp_path / "pod.yaml"
    manifest.write_text(yaml.safe_dump(old_pod("made-1")))
    async with running_proxy(source) as (server, _):
        server.write_kubeconfig(out)
        with anyio.fail_after(60):
            code, stdout, err = await kubectl(
                out, "create", "--validate=false", "-f", str(manifest)
            )
            assert code == 0, err
            assert stdout.strip() == "pod/made-1 created"
            assert cluster.get("pods", "default", "made-1") is not None
            code, stdout, err = await kubectl(out, "delete", "pod", "made-1", "--wait=false")
            assert code == 0, err
            assert stdout.strip() == 'pod "made-1" deleted'
            assert cluster.get("pods", "default", "made-1") is None
            code, _, err = await kubectl(out, "delete", "pod", "made-1", "--wait=false")
            assert code == 1 and 'Error from server (NotFound): pods "made-1" not found' in err


async def test_kubectl_exec_and_logs_through_the_proxy(tmp_path: Path) -> None:
    async with TinyUpstream() as tiny:
        source = write_kubeconfig(tmp_path / "config", {"tiny": FakeContext(cluster=tiny.url)})
        out = tmp_path / "proxy.yaml"
        async with running_proxy(source) as (server, _):
            server.write_kubeconfig(out)
            with anyio.fail_after(60):
                code, stdout, err = await kubectl(out, "exec", "shell", "--", "echo", "hi", "there")
                assert code == 0, err
                assert stdout == "hi there\n"
                tiny.release_log.set()
                code, stdout, err = await kubectl(out, "logs", "-f", "shell")
                assert code == 0, err
                assert stdout == "line 1\nline 2\n"
    exec_requests = [r for r in tiny.requests if "/exec" in r[1]]
    assert len(exec_requests) == 1  # WebSocket: no SPDY fallback was needed
    assert exec_requests[0][2]["Upgrade"].lower() == "websocket"


async def test_kubectl_exec_refused_shows_the_servers_reason(tmp_path: Path) -> None:
    async with TinyUpstream(refuse_exec=403) as tiny:
        source = write_kubeconfig(tmp_path / "config", {"tiny": FakeContext(cluster=tiny.url)})
        out = tmp_path / "proxy.yaml"
        async with running_proxy(source) as (server, _):
            server.write_kubeconfig(out)
            with anyio.fail_after(60):
                code, _, err = await kubectl(out, "exec", "shell", "--", "ls")
    assert code == 1
    assert 'Error from server (Forbidden): pods "shell" is forbidden: exec is not allowed' in err
