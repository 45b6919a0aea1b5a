"""``kubectl port-forward`` and ``exec`` through ``kubemux proxy``, over kubectl 1.32's
WebSocket (SPDY tunnelled inside it) and over plain SPDY upgrades (skipped where kubectl is
not installed)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import struct
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import aiohttp
import anyio
import pytest

from kubectl_support import kubectl_binary, run_kubectl
from kubemux.proxy import ProxyServer
from kubemux.testing import FakeCluster, FakeContext, make_pod, write_kubeconfig
from kubemux.testing._wire.spdy import GOAWAY, PING, Frame, FrameReader, encode_ping
from portforward_support import (  # and the fixture cluster
    PF_TOKEN,
    SpdyClient,
    echo_server,
    pod_cluster,  # noqa: F401
    port_forward,
    round_trip,
    round_trips_at_once,
)
from proxy_support import ProxyClient, running_proxy
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


# ---------------------------------------------------------------------- a context stopping
class _Bridges:
    """One context's three kinds of bridge through the proxy, each proved alive by a round
    trip: exec ``cat`` over a WebSocket (v5), port-forward's SPDY inside a WebSocket (a
    PING), and a plain SPDY upgrade piped as bytes (a PING)."""

    def __init__(self, client: ProxyClient, context: str) -> None:
        self.client = client
        self.context = context
        self.stack = contextlib.AsyncExitStack()
        self.exec: aiohttp.ClientWebSocketResponse | None = None
        self.tunnel: SpdyClient | None = None
        self.raw: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None

    async def open(self) -> None:
        client, pod = self.client, "/api/v1/namespaces/default/pods/web-1"
        query = "?container=app&stdin=true&stdout=true&command=cat"
        self.exec = await self.stack.enter_async_context(
            client.session.ws_connect(
                client.url(self.context, f"{pod}/exec{query}"),
                protocols=("v5.channel.k8s.io",),
                headers=client.auth,
                ssl=client.ssl,
            )
        )
        ws = await self.stack.enter_async_context(
            client.session.ws_connect(
                client.url(self.context, f"{pod}/portforward"),
                protocols=("SPDY/3.1+portforward.k8s.io",),
                headers=client.auth,
                ssl=client.ssl,
            )
        )
        self.tunnel = SpdyClient(ws)
        server = client.server
        reader, writer = await asyncio.open_connection(
            "127.0.0.1", server.port, ssl=server.certificates.client_context()
        )
        self.stack.callback(writer.close)
        writer.write(
            f"POST {client.url(self.context, pod + '/portforward').partition(str(server.port))[2]}"
            f" HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\n"
            f"Authorization: Bearer {server.token}\r\nConnection: Upgrade\r\n"
            "Upgrade: SPDY/3.1\r\nX-Stream-Protocol-Version: portforward.k8s.io\r\n"
            "Content-Length: 0\r\n\r\n".encode()
        )
        with anyio.fail_after(TIMEOUT):
            head = await reader.readuntil(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 101 "), head
        self.raw = reader, writer

    async def alive(self, n: int) -> None:
        """Every bridge answers (bounded)."""
        assert self.exec is not None and self.tunnel is not None and self.raw is not None
        with anyio.fail_after(TIMEOUT):
            await self.exec.send_bytes(b"\x00ping %d" % n)
            msg = await self.exec.receive()
            assert (msg.type, msg.data) == (aiohttp.WSMsgType.BINARY, b"\x01ping %d" % n)
            await self.tunnel.send(encode_ping(n))
            frame = await self.tunnel.frame()
            assert frame is not None and (frame.kind, frame.value) == (PING, n)
            reader, writer = self.raw
            writer.write(encode_ping(n + 1))
            frames: list[Frame] = []
            spdy = FrameReader()
            while not frames:
                data = await reader.read(65536)
                assert data, "the raw SPDY bridge ended"
                frames = spdy.feed(data)
            assert [(f.kind, f.value) for f in frames] == [(PING, n + 1)]

    async def ended(self) -> None:
        """Every bridge's downstream side ended (bounded): the exec was told why, the
        tunnel closed with 1001 (going away), the raw connection reached EOF."""
        assert self.exec is not None and self.tunnel is not None and self.raw is not None
        with anyio.fail_after(TIMEOUT):
            msg = await self.exec.receive()  # exec: a Failure Status first (channel 3)
            assert msg.type is aiohttp.WSMsgType.BINARY and msg.data[0] == 3
            status = json.loads(msg.data[1:])
            assert status["status"] == "Failure" and status["code"] == 503
            assert f"context {self.context!r}" in status["message"]
            msg = await self.exec.receive()  # then closed as an exec ends
            assert msg.type is aiohttp.WSMsgType.CLOSE and self.exec.close_code == 1000
            assert await self.tunnel.frame() is None
            assert self.tunnel.ws.close_code == 1001
            assert await self.raw[0].read() == b""


@pytest.fixture
async def two() -> AsyncIterator[tuple[FakeCluster, FakeCluster]]:
    async with (
        FakeCluster(tokens={PF_TOKEN}, tls=True, name="prod") as prod,
        FakeCluster(tokens={PF_TOKEN}, tls=True, name="other") as other,
    ):
        for fake in (prod, other):
            fake.create("pods", make_pod("web-1", "default"))
        yield prod, other


@pytest.mark.parametrize("how", ["stop_watcher", "reload"])
async def test_a_context_stopping_ends_its_bridges_and_no_others(
    two: tuple[FakeCluster, FakeCluster], tmp_path: Path, how: str
) -> None:
    prod, other = two
    source = write_kubeconfig(tmp_path / "config", {"prod": prod, "other": other})
    async with running_proxy(source) as (server, client):
        bridges = {name: _Bridges(client, name) for name in ("prod", "other")}
        async with bridges["prod"].stack, bridges["other"].stack:
            for b in bridges.values():
                await b.open()
                await b.alive(1)
            assert prod.open_upgrades == other.open_upgrades == 3
            if how == "stop_watcher":
                with anyio.fail_after(TIMEOUT):
                    assert await server.registry.stop_watcher("prod") is True
            else:  # the context's entry changes: the registry restarts it
                changed = FakeContext(cluster=prod, namespace="kube-system")
                write_kubeconfig(source, {"prod": changed, "other": other})
            await bridges["prod"].ended()
            await prod.wait_for(lambda: prod.open_upgrades == 0, timeout=TIMEOUT)
            await bridges["other"].alive(2)  # untouched
            assert other.open_upgrades == 3
            # the context serves new bridges again (a new generation)
            again = _Bridges(client, "prod")
            async with again.stack:
                await again.open()
                await again.alive(3)
        await other.wait_for(lambda: other.open_upgrades == 0, timeout=TIMEOUT)
        await prod.wait_for(lambda: prod.open_upgrades == 0, timeout=TIMEOUT)


async def _cut_kubectl(
    kubeconfig: Path, args: list[str], cut: Callable[[], Awaitable[object]]
) -> tuple[int, bytes, bytes]:
    """Run kubectl ``args`` (exec or attach with stdin), check the bridge echoes a line,
    call ``cut``, and return how kubectl ended (bounded)."""
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
    )
    assert proc.stdin is not None and proc.stdout is not None
    try:
        with anyio.fail_after(TIMEOUT):
            proc.stdin.write(b"one\n")
            assert await proc.stdout.readline() == b"one\n"  # the bridge is open
            await cut()
            stdout, stderr = await proc.communicate()
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert proc.returncode is not None
    return proc.returncode, stdout, stderr


@pytest.mark.parametrize("how", ["stop_watcher", "server_stops"])
@pytest.mark.parametrize("sub", ["exec", "attach"])
async def test_kubectl_exec_cut_under_the_bridge_fails_with_the_reason(
    cluster: FakeCluster, tmp_path: Path, sub: str, how: str
) -> None:
    # kubectl must not exit 0 as if the command had ended: the proxy tells it why
    source = write_kubeconfig(tmp_path / "direct" / "config", {"prod": cluster})
    out = tmp_path / "proxied" / "config"
    args = ["exec", "-i", "web-1", "--", "cat"] if sub == "exec" else ["attach", "-i", "web-1"]
    async with running_proxy(source) as (server, _):
        server.write_kubeconfig(out)

        generations: list[int | None] = []

        async def cut() -> None:
            generations.append(server.registry.status().contexts["prod"].generation)
            if how == "stop_watcher":
                assert await server.registry.stop_watcher("prod") is True
            else:  # the API server's connection drops; the context keeps running
                await cluster.stop()

        code, stdout, stderr = await _cut_kubectl(out, args, cut)
        await cluster.wait_for(lambda: cluster.open_upgrades == 0, timeout=TIMEOUT)
        generations.append(server.registry.status().contexts["prod"].generation)
    assert generations[0] is not None
    assert generations[1] == (None if how == "stop_watcher" else generations[0])
    assert code == 1, stderr
    assert stdout == b""
    reason = f"the connection to the API server of context 'prod' ended before the {sub} did"
    stopped = " (the context stopped: removed from the kubeconfig, changed, or stopped)"
    assert f"error: {reason}{stopped if how == 'stop_watcher' else ''}\n" in stderr.decode()


@pytest.mark.parametrize("env", [{}, SPDY], ids=["websocket", "spdy"])
async def test_kubectl_port_forward_ends_when_its_context_stops(
    cluster: FakeCluster, tmp_path: Path, env: dict[str, str]
) -> None:
    assert KUBECTL is not None
    source = write_kubeconfig(tmp_path / "direct" / "config", {"prod": cluster})
    out = tmp_path / "proxied" / "config"
    async with echo_server() as port, running_proxy(source) as (server, _):
        server.write_kubeconfig(out)
        cluster.forward_port(80, ("127.0.0.1", port))
        async with port_forward(KUBECTL, out, "pod/web-1", "0:80", env=env) as forward:
            assert await round_trip(forward.port, b"before") == b"before"
            with anyio.fail_after(TIMEOUT):
                assert await server.registry.stop_watcher("prod") is True
            assert await forward.wait() == 1  # kubectl ends by itself, promptly
        await cluster.wait_for(lambda: cluster.open_upgrades == 0, timeout=TIMEOUT)
    assert forward.stderr.endswith("error: lost connection to pod\n")
