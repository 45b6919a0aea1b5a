"""``kubectl port-forward`` and ``exec`` through ``kubemux proxy``, over kubectl 1.32's
WebSocket (SPDY tunnelled inside it) and over plain SPDY upgrades (skipped where kubectl is
not installed)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest

from kubemux.testing import FakeCluster, make_pod, write_kubeconfig
from portforward_support import echo_server, port_forward, round_trip
from proxy_support import kubectl_binary, running_proxy
from support import TIMEOUT

KUBECTL = kubectl_binary()
pytestmark = pytest.mark.skipif(KUBECTL is None, reason="kubectl not on PATH")
TOKEN = "pf-token"
SPDY = {"KUBECTL_PORT_FORWARD_WEBSOCKETS": "false", "KUBECTL_REMOTE_COMMAND_WEBSOCKETS": "false"}


@pytest.fixture
async def cluster() -> AsyncIterator[FakeCluster]:
    async with FakeCluster(tokens={TOKEN}, tls=True, name="pf") as fake:
        fake.create("pods", make_pod("web-1", "default"))
        yield fake


def _tunnels(cluster: FakeCluster) -> int:
    return sum(1 for r in cluster.requests if r.subresource == "portforward")


async def _forward_through_proxy(
    cluster: FakeCluster, tmp_path: Path, env: dict[str, str] | None = None
) -> str:
    assert KUBECTL is not None
    source = write_kubeconfig(tmp_path / "direct" / "config", {"prod": cluster})
    out = tmp_path / "proxied" / "config"
    async with echo_server() as port, running_proxy(source) as (server, _):
        server.write_kubeconfig(out)
        cluster.forward_port(80, ("127.0.0.1", port))
        async with port_forward(KUBECTL, out, "pod/web-1", "0:80", env=env) as forward:
            for size in (1, 100_000):
                payload = b"%d" % size * size
                assert await round_trip(forward.port, payload) == payload
            async with anyio.create_task_group() as tg:
                got: list[bytes] = []

                async def one(i: int) -> None:
                    got.append(await round_trip(forward.port, b"c%d" % i * 5000))

                for i in range(4):
                    tg.start_soon(one, i)
            assert sorted(got) == sorted(b"c%d" % i * 5000 for i in range(4))
            assert _tunnels(cluster) == 1  # one upgraded connection for every local one
            assert cluster.open_upgrades == 1
        # kubectl gone: the proxy closed its upstream side too
        await cluster.wait_for(lambda: cluster.open_upgrades == 0, timeout=TIMEOUT)
    return forward.stderr


async def test_port_forward_over_websocket_through_the_proxy(
    cluster: FakeCluster, tmp_path: Path
) -> None:
    await _forward_through_proxy(cluster, tmp_path)
    upgrade = [r for r in cluster.requests if r.subresource == "portforward"]
    assert [r.method for r in upgrade] == ["GET"]  # the WebSocket, no SPDY fallback
    assert all(r.token == TOKEN for r in upgrade)  # the context's credential upstream


async def test_port_forward_through_the_proxy_reports_a_refused_port(
    cluster: FakeCluster, tmp_path: Path
) -> None:
    assert KUBECTL is not None
    source = write_kubeconfig(tmp_path / "direct" / "config", {"prod": cluster})
    out = tmp_path / "proxied" / "config"
    async with running_proxy(source) as (server, _):
        server.write_kubeconfig(out)
        async with port_forward(KUBECTL, out, "pod/web-1", "0:8080") as forward:
            assert await round_trip(forward.port, b"hello") == b""
            code = await forward.wait()
        assert code != 0
        assert "error forwarding port 8080 to pod web-1" in forward.stderr
        await cluster.wait_for(lambda: cluster.open_upgrades == 0, timeout=TIMEOUT)


async def _kubectl(kubeconfig: Path, *args: str, env: dict[str, str]) -> tuple[int, str, str]:
    assert KUBECTL is not None
    proc = await asyncio.create_subprocess_exec(
        KUBECTL,
        "--kubeconfig",
        str(kubeconfig),
        "--cache-dir",
        str(kubeconfig.parent / "cache"),
        *args,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={**__import__("os").environ, **env},
    )
    try:
        with anyio.fail_after(TIMEOUT):
            out, err = await proc.communicate(b"from stdin\n")
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()
