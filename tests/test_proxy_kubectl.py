"""The real kubectl (1.32 where installed) through ``kubemux proxy``'s kubeconfig.

kubectl prints through the proxy exactly what it prints against the server (ages are the
same: the objects are five hours old), and repeated reads cost the cluster no LIST or GET.
Skipped where kubectl is not installed (CI installs none); ``test_proxy_app.py`` covers the
same paths with raw HTTP.
"""

from __future__ import annotations

import datetime as dt
import json
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest
import yaml

from kubectl_support import kubectl_binary, run_kubectl
from kubemux.testing import FakeCluster, FakeContext, make_pod, write_kubeconfig
from proxy_support import TinyUpstream, running_proxy
from support import add_widget_crd

KUBECTL = kubectl_binary()
pytestmark = pytest.mark.skipif(KUBECTL is None, reason="kubectl not on PATH")

TOKEN = "kubectl-token"
WEIRD = [
    "arn:aws:eks:eu-west-1:123456789012:cluster/prod",
    "gke_my-project_europe-west1-b_prod",
    "alice@prod",
    "my context",
]


def five_hours_ago(seconds: float = 1.0) -> str:
    """A creationTimestamp five hours and ``seconds`` ago: kubectl shows its AGE as 5h until
    a minute has passed (then 5h1m), so a test that reads for less than ``60 - seconds``
    seconds sees one AGE throughout."""
    then = dt.datetime.now(dt.UTC) - dt.timedelta(hours=5, seconds=seconds)
    return then.strftime("%Y-%m-%dT%H:%M:%SZ")


def old_pod(
    name: str, namespace: str = "default", created: str | None = None, **options: Any
) -> dict[str, Any]:
    pod = make_pod(name, namespace, size=800, **options)
    pod["metadata"]["creationTimestamp"] = created or five_hours_ago()
    return pod


@pytest.fixture
async def cluster() -> AsyncIterator[FakeCluster]:
    created = five_hours_ago()  # when the test starts (its module is imported long before)
    async with FakeCluster(tokens={TOKEN}, tls=True, name="kubectl") as fake:
        for pod in (
            old_pod("web-1", created=created),
            old_pod("web-2", created=created, node="node-2", phase="Pending"),
            old_pod("db-1", "data", created=created),
        ):
            fake.create("pods", pod)
        add_widget_crd(fake)
        for name, spec in (("w1", {"size": 3}), ("w2", {"size": 5, "color": "red"})):
            meta = {"name": name, "creationTimestamp": created}
            fake.create("widgets.example.com", {"metadata": meta, "spec": spec})
        fake.create("events", event_about("web-1", created))
        yield fake


def event_about(pod: str, created: str) -> dict[str, Any]:
    return {
        "metadata": {"name": f"{pod}.1", "namespace": "default"},
        "involvedObject": {"kind": "Pod", "namespace": "default", "name": pod},
        "reason": "Pulled",
        "message": "Container image pulled",
        "type": "Normal",
        "count": 1,
        "firstTimestamp": created,
        "lastTimestamp": created,
        "source": {"component": "kubelet"},
    }


async def kubectl(kubeconfig: Path, *args: str, cache: str = "cache") -> tuple[int, str, str]:
    assert KUBECTL is not None
    return await run_kubectl(KUBECTL, kubeconfig, *args, cache=cache, run_timeout=30)


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
            # a few reads at once (each kubectl mostly waits): the same answers either way
            limit = anyio.CapacityLimiter(4)

            async def both(args: tuple[str, ...]) -> None:
                async with limit:
                    direct = await kubectl(source, *args)
                    proxied = await kubectl(out, *args)
                    assert proxied[0] == 0, proxied[2]
                    if proxied[1] != direct[1]:  # an AGE may have passed a minute in between:
                        direct = await kubectl(source, *args)  # then it is the same again
                assert proxied[1] == direct[1], args

            async with anyio.create_task_group() as tg:
                for args in READS:
                    tg.start_soon(both, args)
            # one object as a Table: FakeCluster answers a GET with the object (kubectl then
            # prints NAME and AGE); kube-apiserver, and the proxy, with a one-row Table
            code, one, err = await kubectl(out, "get", "pod", "web-1")
            assert code == 0, err
            _, listed, _ = await kubectl(
                source, "get", "pods", "--field-selector", "metadata.name=web-1"
            )
            if one != listed:  # the same minute, as above
                code, one, err = await kubectl(out, "get", "pod", "web-1")
            assert one == listed
            cluster.clear_requests()

            async def again(args: tuple[str, ...]) -> None:
                async with limit:
                    code, _, err = await kubectl(out, *args, cache=f"fresh-{len(args)}-{args[-1]}")
                assert code == 0, err

            async with anyio.create_task_group() as tg:
                for args in [*READS, ("get", "pod", "web-1")]:  # again: all from the caches,
                    # discovery too (a fresh kubectl cache each time: it asks /api and /apis)
                    tg.start_soon(again, args)
    upstream = [r for r in cluster.requests if not r.is_watch]
    assert upstream == []


async def test_kubectl_ages_through_the_proxy_move_with_the_clock(tmp_path: Path) -> None:
    async with FakeCluster(tokens={TOKEN}, tls=True, name="kubectl") as cluster:
        cluster.create("pods", old_pod("web-1", created=five_hours_ago(seconds=57)))
        source = write_kubeconfig(tmp_path / "direct" / "config", {"prod": cluster})
        out = tmp_path / "proxied" / "config"
        async with running_proxy(source) as (server, _):
            server.write_kubeconfig(out)
            with anyio.fail_after(60):
                code, before, err = await kubectl(out, "get", "pods")  # cached from here on
                assert code == 0, err
                started = time.time()
                for _ in range(100):  # the wall clock passing a minute of the pod's AGE
                    code, direct, err = await kubectl(source, "get", "pods")
                    assert code == 0, err
                    if direct != before:
                        break
                    await anyio.sleep(0.1)
                assert "5h1m" in direct, (direct, time.time() - started)
                for args in (("get", "pods"), ("get", "pod", "web-1")):
                    code, proxied, err = await kubectl(out, *args)
                    assert code == 0, err
                    assert proxied == direct, args


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
