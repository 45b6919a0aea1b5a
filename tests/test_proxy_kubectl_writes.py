"""The real kubectl through ``kubemux proxy``'s kubeconfig: ``get -w`` from the cache's
history, writes (create, replace, apply, patch, label, delete) passed through and read back
at once from the cache (read your writes), ``logs -f`` and ``exec``; each printing what kubectl
prints against the server itself."""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest

from kubemux.testing import FakeCluster, FakeContext, write_kubeconfig
from proxy_support import running_proxy
from test_proxy_kubectl import KUBECTL, cluster, kubectl, old_pod

__all__ = ["cluster"]  # the fixture, imported for pytest

pytestmark = pytest.mark.skipif(KUBECTL is None, reason="kubectl not on PATH")

CONFIGMAP = """\
apiVersion: v1
kind: ConfigMap
metadata:
  name: cfg
  labels: {tier: web}
data:
  a: "1"
"""


@contextlib.asynccontextmanager
async def kubectl_process(kubeconfig: Path, *args: str) -> AsyncIterator[asyncio.StreamReader]:
    assert KUBECTL is not None
    proc = await asyncio.create_subprocess_exec(
        KUBECTL,
        "--kubeconfig",
        str(kubeconfig),
        "--cache-dir",
        str(kubeconfig.parent / "cache"),
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
    )
    try:
        assert proc.stdout is not None
        yield proc.stdout
    finally:
        if proc.returncode is None:
            proc.kill()
        await proc.wait()


def no_age(line: bytes) -> str:
    """A ``kubectl get`` line without its AGE column (the last one) and its padding."""
    return re.sub(r"\s+\S+\s*$", "", line.decode()).strip()


def ages_aside(text: str) -> list[str]:
    """kubectl's output with every age (``0s``, ``5h``) blanked and spacing normalised."""
    return [" ".join(re.sub(r"\b\d+[smhd]\b", "-", x).split()) for x in text.splitlines()]


async def test_kubectl_get_watch_through_the_proxy_matches_the_server(
    cluster: FakeCluster, tmp_path: Path
) -> None:
    source = write_kubeconfig(tmp_path / "direct" / "config", {"prod": cluster})
    out = tmp_path / "proxied" / "config"
    async with running_proxy(source) as (server, _):
        server.write_kubeconfig(out)
        proxy = server.app.state.proxy
        with anyio.fail_after(60):
            async with (
                kubectl_process(source, "get", "pods", "-w") as direct,
                kubectl_process(out, "get", "pods", "-w") as proxied,
            ):
                for stream in (direct, proxied):
                    assert no_age(await stream.readline()).split() == [
                        "NAME",
                        "READY",
                        "STATUS",
                        "RESTARTS",
                    ]
                    await stream.readline()
                    await stream.readline()
                await cluster.wait_for(
                    lambda: (
                        cluster.open_watches == 2  # kubectl's, the proxy's table view
                        and sum(s.watches for s in proxy.status()) == 1
                    ),
                    timeout=20,
                )
                cluster.create("pods", old_pod("web-3", phase="Pending"))
                changed = cluster.get("pods", "default", "web-1")
                assert changed is not None
                changed["metadata"]["labels"] = {"app": "moved"}
                cluster.update("pods", changed)
                cluster.delete("pods", "default", "web-2")
                seen = [[no_age(await s.readline()) for _ in range(3)] for s in (direct, proxied)]
    assert seen[0] == seen[1]
    assert [line.split()[0] for line in seen[1]] == ["web-3", "web-1", "web-2"]


async def test_kubectl_writes_pass_through_and_read_back_from_the_cache(
    cluster: FakeCluster, tmp_path: Path
) -> None:
    source = write_kubeconfig(tmp_path / "direct" / "config", {"prod": cluster})
    out = tmp_path / "proxied" / "config"
    manifest = tmp_path / "cm.yaml"
    manifest.write_text(CONFIGMAP)
    changed = tmp_path / "cm2.yaml"
    changed.write_text(CONFIGMAP.replace('a: "1"', 'a: "2"'))
    applied = tmp_path / "cm3.yaml"
    applied.write_text(CONFIGMAP.replace('a: "1"', 'a: "3"\n  b: "4"'))
    steps = [
        (("create", "--validate=false", "-f", str(manifest)), "configmap/cfg created"),
        (("replace", "--validate=false", "-f", str(changed)), "configmap/cfg replaced"),
        (("apply", "--validate=false", "-f", str(applied)), "configmap/cfg configured"),
        (("patch", "cm", "cfg", "-p", '{"data":{"c":"5"}}'), "configmap/cfg patched"),
        (("label", "cm", "cfg", "more=yes"), "configmap/cfg labeled"),
        (("annotate", "cm", "cfg", "note=hi"), "configmap/cfg annotated"),
    ]
    cluster.tokens.add("proxy-token")  # to tell the proxy's requests from kubectl's
    upstream = write_kubeconfig(
        tmp_path / "upstream" / "config",
        {"prod": FakeContext(cluster=cluster, token="proxy-token")},
    )
    async with running_proxy(upstream) as (server, _):
        server.write_kubeconfig(out)
        with anyio.fail_after(120):
            code, _, err = await kubectl(out, "get", "cm")  # the informer runs
            assert code == 0, err
            cluster.clear_requests()
            for args, printed in steps:
                code, stdout, err = await kubectl(out, *args)
                assert code == 0, err
                assert stdout.strip() == printed
                # at once through the proxy: what the server itself now says
                for read in (("get", "cm", "cfg", "-o", "yaml"), ("get", "cm", "--show-labels")):
                    mine = await kubectl(out, *read)
                    theirs = await kubectl(source, *read)
                    assert ages_aside(mine[1]) == ages_aside(theirs[1]), (args, read)
            reads_before_delete = cluster.request_count(
                ("get", "list"), "configmaps", token="proxy-token"
            )
            code, stdout, err = await kubectl(out, "delete", "cm", "cfg")  # waits for it
            assert (code, stdout.strip()) == (0, 'configmap "cfg" deleted'), err
            code, _, err = await kubectl(out, "get", "cm", "cfg")
            assert code == 1 and 'configmaps "cfg" not found' in err
    # every read came from the cache; only reads of the deleted object (the API server's
    # 404, which a cache cannot give) went upstream
    assert reads_before_delete == 0


async def test_kubectl_logs_follow_and_exec_through_the_proxy(
    cluster: FakeCluster, tmp_path: Path
) -> None:
    source = write_kubeconfig(tmp_path / "direct" / "config", {"prod": cluster})
    out = tmp_path / "proxied" / "config"
    cluster.append_log("default", "web-1", "one\ntwo\n")
    async with running_proxy(source) as (server, _):
        server.write_kubeconfig(out)
        with anyio.fail_after(60):
            for args in (
                ("logs", "web-1"),
                ("logs", "web-1", "--tail=1"),
                ("exec", "web-1", "--", "echo", "hi", "there"),
                ("exec", "web-1", "--", "sh", "-c", "exit 3"),
            ):
                assert await kubectl(out, *args) == await kubectl(source, *args), args
            async with kubectl_process(out, "logs", "-f", "web-1") as stream:
                assert await stream.readline() == b"one\n"
                assert await stream.readline() == b"two\n"
                follows = cluster.request_count("get", "pods", subresource="log")
                cluster.append_log("default", "web-1", "three\n")
                assert await stream.readline() == b"three\n"
                cluster.delete("pods", "default", "web-1")  # the stream ends with the pod
                assert await stream.read() == b""
    assert follows == 5  # 4 above and the one that followed
