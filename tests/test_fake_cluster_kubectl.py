"""The real kubectl against FakeCluster: discovery, list, raw GET and watch.

kubectl only sends credentials to https:// servers (clientcmd skips the user entry for plain
HTTP), so these tests use a TLS cluster with a token; one test pins that quirk down.
"""

from __future__ import annotations

import asyncio
import json
import shutil
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from kubemux import Resource
from kubemux.testing import FakeCluster, make_pod, write_kubeconfig

pytestmark = pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl not on PATH")

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
    proc = await asyncio.create_subprocess_exec(
        "kubectl",
        "--kubeconfig",
        str(kubeconfig),
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        async with asyncio.timeout(20):
            out, err = await proc.communicate()
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert proc.returncode == 0, err.decode()
    return out.decode()


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


@asynccontextmanager
async def kubectl_process(
    kubeconfig: Path, *args: str
) -> AsyncIterator[asyncio.subprocess.Process]:
    proc = await asyncio.create_subprocess_exec(
        "kubectl",
        "--kubeconfig",
        str(kubeconfig),
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
    )
    try:
        yield proc
    finally:
        if proc.returncode is None:
            proc.kill()
        await proc.wait()


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


async def test_default_table_output(kubeconfig: Path) -> None:
    # no server-side Table support: kubectl falls back to NAME and AGE columns
    lines = (await kubectl(kubeconfig, "get", "pods", "-A")).splitlines()
    assert lines[0].split() == ["NAMESPACE", "NAME", "AGE"]
    assert [line.split()[:2] for line in lines[1:]] == [["data", "db-1"], ["default", "web-1"]]


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
