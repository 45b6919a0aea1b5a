"""``kubectl port-forward`` and ``exec`` through ``kubemux proxy``, over kubectl 1.32's
WebSocket (SPDY tunnelled inside it) and over plain SPDY upgrades (skipped where kubectl is
not installed)."""

from __future__ import annotations

import asyncio
import json
import struct
from pathlib import Path

import anyio
import pytest

from kubectl_support import kubectl_binary, run_kubectl
from kubemux.proxy import ProxyServer
from kubemux.testing import FakeCluster, write_kubeconfig
from kubemux.testing._spdy import GOAWAY, PING, FrameReader, encode_ping
from portforward_support import (  # and the fixture cluster
    PF_TOKEN,
    echo_server,
    pod_cluster,  # noqa: F401
    port_forward,
    round_trip,
    round_trips_at_once,
)
from proxy_support import running_proxy
from support import TIMEOUT

KUBECTL = kubectl_binary()
pytestmark = pytest.mark.skipif(KUBECTL is None, reason="kubectl not on PATH")
SPDY = {"KUBECTL_PORT_FORWARD_WEBSOCKETS": "false", "KUBECTL_REMOTE_COMMAND_WEBSOCKETS": "false"}


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
            await round_trips_at_once(forward.port, 4, 5000)
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
    assert all(r.token == PF_TOKEN for r in upgrade)  # the context's credential upstream


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
    return await run_kubectl(KUBECTL, kubeconfig, *args, stdin=b"from stdin\n", env=env)


async def test_port_forward_over_plain_spdy_through_the_proxy(
    cluster: FakeCluster, tmp_path: Path
) -> None:
    stderr = await _forward_through_proxy(cluster, tmp_path, env=SPDY)
    upgrade = [r for r in cluster.requests if r.subresource == "portforward"]
    assert [r.method for r in upgrade] == ["POST"]  # kubectl's SPDY upgrade, bridged as is
    assert all(r.token == PF_TOKEN for r in upgrade)
    assert "error" not in stderr.lower()


EXECS = [
    (("web-1", "--", "echo", "hi", "there"), (0, "hi there\n", "")),
    (("-i", "web-1", "--", "cat"), (0, "from stdin\n", "")),
    (("web-1", "--", "sh", "-c", "exit 3"), (3, "", "command terminated with exit code 3\n")),
]


@pytest.mark.parametrize("env", [SPDY, {}], ids=["spdy", "websocket"])
async def test_exec_through_the_proxy_prints_what_the_server_prints(
    cluster: FakeCluster, tmp_path: Path, env: dict[str, str]
) -> None:
    source = write_kubeconfig(tmp_path / "direct" / "config", {"prod": cluster})
    out = tmp_path / "proxied" / "config"
    async with running_proxy(source) as (server, _):
        server.write_kubeconfig(out)
        for args, expected in EXECS:
            assert await _kubectl(out, "exec", *args, env=env) == expected, args
            assert await _kubectl(source, "exec", *args, env=env) == expected, args
        await cluster.wait_for(lambda: cluster.open_upgrades == 0, timeout=TIMEOUT)
    method = "POST" if env else "GET"
    assert {r.method for r in cluster.requests if r.subresource == "exec"} == {method}


async def _upgrade_via_proxy(
    server: ProxyServer, path: str, protocol: str, *, token: str | None = None
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter, bytes]:
    assert server.url is not None
    reader, writer = await asyncio.open_connection(
        "127.0.0.1", server.port, ssl=server.certificates.client_context()
    )
    writer.write(
        f"POST /clusters/prod{path} HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\n"
        f"Authorization: Bearer {token or server.token}\r\nConnection: Upgrade\r\n"
        f"Upgrade: SPDY/3.1\r\nX-Stream-Protocol-Version: {protocol}\r\n"
        "Content-Length: 0\r\n\r\n".encode()
    )
    with anyio.fail_after(TIMEOUT):
        head = await reader.readuntil(b"\r\n\r\n")
    return reader, writer, head


async def _read_to_end(reader: asyncio.StreamReader) -> bytes:
    with anyio.fail_after(TIMEOUT):
        return await reader.read()


async def test_spdy_upgrades_refused_upstream_or_here_are_answered_and_closed(
    cluster: FakeCluster, tmp_path: Path
) -> None:
    source = write_kubeconfig(tmp_path / "config", {"prod": cluster})
    async with running_proxy(source) as (server, _):
        forward = "/api/v1/namespaces/default/pods/web-1/portforward"
        # upstream refusals come back as they are, then the connection ends
        missing = "/api/v1/namespaces/default/pods/nope/exec?command=true"
        reader, writer, head = await _upgrade_via_proxy(server, missing, "v4.channel.k8s.io")
        assert head.startswith(b"HTTP/1.1 404 Not Found\r\n")
        body = await _read_to_end(reader)
        assert json.loads(body)["message"] == 'pods "nope" not found'
        writer.close()
        reader, writer, head = await _upgrade_via_proxy(server, forward, "v9.channel.k8s.io")
        assert head.startswith(b"HTTP/1.1 403 Forbidden\r\n")
        assert b"X-Accepted-Stream-Protocol-Versions: portforward.k8s.io" in head
        assert b"unable to negotiate protocol" in await _read_to_end(reader)
        writer.close()
        # the proxy's own token is checked first; nothing goes upstream
        before = len(cluster.requests)
        reader, writer, head = await _upgrade_via_proxy(server, forward, "x", token="wrong")
        assert head.startswith(b"HTTP/1.1 401 ")
        await _read_to_end(reader)  # closed after the answer
        writer.close()
        assert len(cluster.requests) == before
        # a path that is no pod's exec, attach or portforward: refused, not piped
        reader, writer, head = await _upgrade_via_proxy(server, "/api/v1/pods", "x")
        assert head.startswith(b"HTTP/1.1 400 ")
        assert b"SPDY upgrades are not supported" in await _read_to_end(reader)
        writer.close()
        assert len(cluster.requests) == before


async def test_hostile_bytes_on_a_bridged_spdy_connection_end_it(
    cluster: FakeCluster, tmp_path: Path
) -> None:
    source = write_kubeconfig(tmp_path / "config", {"prod": cluster})
    async with running_proxy(source) as (server, _):
        forward = "/api/v1/namespaces/default/pods/web-1/portforward"
        reader, writer, head = await _upgrade_via_proxy(server, forward, "portforward.k8s.io")
        assert head.startswith(b"HTTP/1.1 101 Switching Protocols\r\n")
        assert b"X-Stream-Protocol-Version: portforward.k8s.io\r\n" in head
        writer.write(encode_ping(11) + struct.pack("!II", 5, 0xFFFFFF) + b"junk")
        frames = FrameReader().feed(await _read_to_end(reader))  # the fake's answer, then EOF
        assert [(f.kind, f.value) for f in frames] == [(PING, 11), (GOAWAY, 0)]
        writer.close()
        # the client leaving mid-stream closes the upstream side too
        reader, writer, head = await _upgrade_via_proxy(server, forward, "portforward.k8s.io")
        assert head.startswith(b"HTTP/1.1 101 ")
        await cluster.wait_for(lambda: cluster.open_upgrades == 1, timeout=TIMEOUT)
        writer.close()
        await cluster.wait_for(lambda: cluster.open_upgrades == 0, timeout=TIMEOUT)
