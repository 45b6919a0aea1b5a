"""ProxyServer: TLS, the token, the Host check, slow and huge requests, the kubeconfig it
writes (and keeps current), and the ``kubemux proxy`` command."""

from __future__ import annotations

import contextlib
import io
import json
import os
import socket
import ssl
import stat
from pathlib import Path
from typing import Any

import aiohttp
import anyio
import anyio.abc
import pytest
import yaml
from kubernetes_asyncio import client as k8s_client
from kubernetes_asyncio import config as k8s_config

from kubemux import WatcherRegistry
from kubemux.cli import run
from kubemux.proxy import ProxyServer, ProxySettings, encode_context, make_certificates
from kubemux.testing import FakeCluster, make_pod, rewrite_kubeconfig, write_kubeconfig
from proxy_support import running_proxy

TOKEN = "upstream-token"
WEIRD = [
    "arn:aws:eks:eu-west-1:123456789012:cluster/prod",
    "gke_my-project_europe-west1-b_prod",
    "alice@prod",
    "my context",
]


@pytest.fixture
async def cluster() -> Any:
    async with FakeCluster(tokens={TOKEN}, tls=True, name="up") as fake:
        fake.create("pods", make_pod("web-1", size=600))
        fake.create("pods", make_pod("db-1", "data", size=600))
        yield fake


@pytest.fixture
def kubeconfig(cluster: FakeCluster, tmp_path: Path) -> Path:
    return write_kubeconfig(tmp_path / "config", {"prod": cluster})


async def test_a_request_without_the_token_is_401(cluster: FakeCluster, kubeconfig: Path) -> None:
    async with running_proxy(kubeconfig) as (server, client):
        with anyio.fail_after(20):
            status, _, body = await client.request("GET", "prod", "/api/v1/pods", auth=False)
            assert status == 401 and json.loads(body)["reason"] == "Unauthorized"
            status, _, _ = await client.request(
                "GET", "prod", "/api/v1/pods", auth=False, headers={"Authorization": "Bearer x"}
            )
            assert status == 401
            status, _, _ = await client.request(
                "GET",
                "prod",
                "/api/v1/pods",
                auth=False,
                headers={"Authorization": f"Basic {server.token}"},
            )
            assert status == 401
            status, _, _ = await client.request("GET", "prod", "/api/v1/pods")
            assert status == 200
    assert server.token not in repr(server)
    assert not [r for r in cluster.requests if r.token != TOKEN]


async def test_a_websocket_without_the_token_is_refused(kubeconfig: Path) -> None:
    async with running_proxy(kubeconfig) as (_, client):
        url = client.url("prod", "/api/v1/namespaces/default/pods/web-1/exec?command=ls")
        with anyio.fail_after(20), pytest.raises(aiohttp.WSServerHandshakeError) as refused:
            await client.session.ws_connect(url, protocols=("v5.channel.k8s.io",), ssl=client.ssl)
    assert refused.value.status == 401


async def test_another_host_is_refused(kubeconfig: Path) -> None:
    async with running_proxy(kubeconfig) as (_, client):
        with anyio.fail_after(20):
            status, _, body = await client.request(
                "GET", "prod", "/api/v1/pods", headers={"Host": "attacker.example"}
            )
            assert status == 400 and b"Host" in body
            for host in ("localhost", "127.0.0.1"):
                status, _, _ = await client.request(
                    "GET", "prod", "/api/v1/pods", headers={"Host": f"{host}:1"}
                )
                assert status == 200


async def test_the_certificate_is_for_the_loopback_names(kubeconfig: Path) -> None:
    async with running_proxy(kubeconfig) as (server, client):
        port = server.port
        with anyio.fail_after(20):
            for host in ("127.0.0.1", "localhost"):
                url = f"https://{host}:{port}/clusters/prod/version"
                async with client.session.get(url, headers=client.auth, ssl=client.ssl) as r:
                    assert r.status == 200
            with pytest.raises(aiohttp.ClientConnectorCertificateError):
                async with client.session.get(
                    f"https://127.0.0.1:{port}/", ssl=ssl.create_default_context()
                ):
                    pass
    assert b"PRIVATE KEY" not in repr(server.certificates).encode()


async def test_connections_are_tcp_nodelay(kubeconfig: Path) -> None:
    # asyncio sets TCP_NODELAY on an accepted connection only when the listening socket says
    # it is TCP (proto IPPROTO_TCP, which accepted sockets inherit); with proto 0 each new
    # connection's answer waited ~40 ms for a delayed ACK (Nagle)
    async with running_proxy(kubeconfig) as (server, _):
        assert server._server is not None
        listening = [sock for s in server._server.servers for sock in s.sockets]
        assert listening and all(sock.proto == socket.IPPROTO_TCP for sock in listening)


def test_the_server_issues_no_session_tickets() -> None:
    certificates = make_certificates()
    server_in, server_out, client_in, client_out = (ssl.MemoryBIO() for _ in range(4))
    server = certificates.server_context().wrap_bio(server_in, server_out, server_side=True)
    client = certificates.client_context().wrap_bio(
        client_in, client_out, server_hostname="127.0.0.1"
    )
    for _ in range(10):  # the handshake, then what the server sends after it
        for end, out, into in ((client, client_out, server_in), (server, server_out, client_in)):
            with contextlib.suppress(ssl.SSLWantReadError):
                if end is server:
                    end.do_handshake()
                else:  # its handshake, then the tickets a server sends after it
                    end.read(1)
            if data := out.read():
                into.write(data)
    assert client.version() == "TLSv1.3"
    assert client.session is not None and not client.session.has_ticket


def test_listening_beyond_the_loopback_needs_a_flag(tmp_path: Path) -> None:
    registry = WatcherRegistry({})
    with pytest.raises(ValueError, match="allow_remote"):
        ProxyServer(registry, address="0.0.0.0")
    ProxyServer(registry, address="0.0.0.0", allow_remote=True)  # allowed when asked
    ProxyServer(registry, address="::1")


async def read_until_closed(stream: anyio.abc.ByteStream) -> bytes:
    data = b""
    try:
        while True:
            data += await stream.receive()
    except (anyio.EndOfStream, anyio.BrokenResourceError):
        return data


async def test_slow_and_huge_headers_close_the_connection(kubeconfig: Path) -> None:
    async with running_proxy(kubeconfig, header_timeout=0.5, max_header_bytes=4096) as (
        server,
        client,
    ):
        context = client.ssl
        context.check_hostname = False
        with anyio.fail_after(10):
            stream = await anyio.connect_tcp(
                "127.0.0.1", server.port, ssl_context=context, tls_standard_compatible=False
            )
            async with stream:
                await stream.send(b"GET /clusters/prod/api HTTP/1.1\r\nHost: 127.0.0.1\r\n")
                # never finishes its headers: closed after header_timeout, unanswered
                assert await read_until_closed(stream) == b""
            stream = await anyio.connect_tcp(
                "127.0.0.1", server.port, ssl_context=context, tls_standard_compatible=False
            )
            async with stream:
                await stream.send(b"GET /clusters/prod/api HTTP/1.1\r\nHost: 127.0.0.1\r\n")
                await stream.send(b"X-Big: " + b"a" * 8000 + b"\r\n\r\n")
                assert (await read_until_closed(stream)).startswith(b"HTTP/1.1 431")
            # the server still serves everyone else
            status, _, _ = await client.request("GET", "prod", "/version")
            assert status == 200


async def test_a_slow_body_is_408(cluster: FakeCluster, kubeconfig: Path) -> None:
    settings = ProxySettings(body_timeout=0.5)
    async with running_proxy(kubeconfig, settings=settings) as (server, client):
        context = client.ssl
        with anyio.fail_after(10):
            stream = await anyio.connect_tcp(
                "127.0.0.1",
                server.port,
                ssl_context=context,
                tls_hostname="127.0.0.1",
                tls_standard_compatible=False,
            )
            async with stream:
                await stream.send(
                    b"POST /clusters/prod/api/v1/namespaces/default/pods HTTP/1.1\r\n"
                    b"Host: 127.0.0.1\r\nContent-Type: application/json\r\n"
                    b"Authorization: Bearer " + server.token.encode() + b"\r\n"
                    b"Content-Length: 100\r\n\r\n{"
                )
                answer = await stream.receive()
                while not answer.endswith(b"}"):
                    answer += await stream.receive()
    assert answer.startswith(b"HTTP/1.1 408") and b'"reason":"Timeout"' in answer
    assert not [r for r in cluster.requests if r.method == "POST"]


async def test_the_kubeconfig_points_kubernetes_clients_at_the_proxy(
    cluster: FakeCluster, tmp_path: Path
) -> None:
    source = write_kubeconfig(
        tmp_path / "config",
        dict.fromkeys(WEIRD, cluster),
        current_context=WEIRD[1],
    )
    out = tmp_path / "out" / "proxy.yaml"
    async with running_proxy(source) as (server, _):
        server.write_kubeconfig(out)
        doc = yaml.safe_load(out.read_text())
        assert stat.S_IMODE(os.stat(out).st_mode) == 0o600
        assert [c["name"] for c in doc["contexts"]] == WEIRD
        assert doc["current-context"] == WEIRD[1]
        assert doc["users"] == [{"name": "kubemux-proxy", "user": {"token": server.token}}]
        assert TOKEN not in out.read_text()  # no upstream credential
        for name in WEIRD:
            api = await k8s_config.new_client_from_config(str(out), context=name)
            async with api:
                with anyio.fail_after(20):
                    pods = await k8s_client.CoreV1Api(api).list_pod_for_all_namespaces()
            assert sorted(p.metadata.name for p in pods.items) == ["db-1", "web-1"]
        servers = {c["cluster"]["server"] for c in doc["clusters"]}
        assert f"{server.url}/clusters/{encode_context(WEIRD[0])}" in servers


async def test_the_kubeconfig_follows_the_source(cluster: FakeCluster, tmp_path: Path) -> None:
    source = write_kubeconfig(tmp_path / "config", {"a": cluster, "b": cluster})
    out = tmp_path / "proxy.yaml"
    async with (
        WatcherRegistry.from_kubeconfig(str(source), debounce_delay=0.05) as registry,
        running_proxy(registry) as (server, client),
        anyio.create_task_group() as tg,
    ):
        tg.start_soon(server.follow_kubeconfig, out)

        async def contexts_in_out(expected: list[str]) -> None:
            writes = 0
            with anyio.fail_after(10):
                while True:
                    writes = await server.wait_kubeconfig_written(writes)
                    doc = yaml.safe_load(out.read_text())
                    if [c["name"] for c in doc["contexts"]] == expected:
                        return

        await contexts_in_out(["a", "b"])
        await rewrite_kubeconfig(registry, source, {"a": cluster, "c": cluster}, absent=["b"])
        await contexts_in_out(["a", "c"])
        with anyio.fail_after(20):
            status, _, _ = await client.request("GET", "c", "/api/v1/pods")
            assert status == 200
            status, _, _ = await client.request("GET", "b", "/api/v1/pods")
            assert status == 404
        tg.cancel_scope.cancel()


class _Lines(io.StringIO):
    """stdout for the command: an event once it has written its banner."""

    def __init__(self) -> None:
        super().__init__()
        self.ready = anyio.Event()

    def write(self, text: str) -> int:
        n = super().write(text)
        if "Ctrl-C" in self.getvalue():
            self.ready.set()
        return n


async def test_the_proxy_command(cluster: FakeCluster, kubeconfig: Path, tmp_path: Path) -> None:
    out = tmp_path / "proxy.yaml"
    stdout = _Lines()
    args = ["proxy", "--kubeconfig", str(kubeconfig), "--port", "0", "--write-kubeconfig", str(out)]
    async with anyio.create_task_group() as tg:
        tg.start_soon(lambda: run(args, stdout=stdout, stderr=io.StringIO()))
        with anyio.fail_after(20):
            await stdout.ready.wait()
            doc = yaml.safe_load(out.read_text())
            server = doc["clusters"][0]["cluster"]["server"]
            ca = doc["clusters"][0]["cluster"]["certificate-authority-data"]
            token = doc["users"][0]["user"]["token"]
            import base64

            context = ssl.create_default_context(cadata=base64.b64decode(ca).decode())
            async with aiohttp.ClientSession() as session:
                headers = {"Authorization": f"Bearer {token}"}
                async with session.get(f"{server}/api/v1/pods", headers=headers, ssl=context) as r:
                    assert r.status == 200
                    assert len((await r.json())["items"]) == 2
        tg.cancel_scope.cancel()
    assert token not in stdout.getvalue()
    assert "kubectl --kubeconfig" in stdout.getvalue()


async def test_the_command_refuses_a_remote_address_without_the_flag(kubeconfig: Path) -> None:
    err = io.StringIO()
    code = await run(
        ["proxy", "--kubeconfig", str(kubeconfig), "--address", "0.0.0.0", "--port", "0"],
        stdout=io.StringIO(),
        stderr=err,
    )
    assert code == 1 and "--allow-remote" in err.getvalue()


def test_raise_fd_limit() -> None:
    import resource

    from kubemux._runtime import raise_fd_limit

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        if hard != resource.RLIM_INFINITY and soft > 64:
            resource.setrlimit(resource.RLIMIT_NOFILE, (64, hard))
        result = raise_fd_limit()
        assert result is not None
        now = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        assert now == (hard if hard != resource.RLIM_INFINITY else now)
        assert result[1] == now
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_public_names() -> None:
    import kubemux.proxy

    public = {n for n in vars(kubemux.proxy) if not n.startswith("_")} - {"annotations"}
    assert sorted(kubemux.proxy.__all__) == kubemux.proxy.__all__
    assert set(kubemux.proxy.__all__) == {
        n for n in public if not isinstance(getattr(kubemux.proxy, n), type(kubemux))
    }


async def test_no_token_reaches_the_logs(
    cluster: FakeCluster, kubeconfig: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level("DEBUG")
    async with running_proxy(kubeconfig) as (server, client):
        with anyio.fail_after(20):
            await client.request("GET", "prod", "/api/v1/pods")
            await client.request("GET", "prod", "/api/v1/pods", auth=False)
            await client.request("GET", "prod", "/api/v1/pods?watch=1&timeoutSeconds=1")
            await client.request("POST", "prod", "/api/v1/namespaces/default/pods", data=b"{")
            await client.request("GET", "nope", "/api")
    assert caplog.records  # something was logged
    assert server.token not in caplog.text and TOKEN not in caplog.text


async def test_a_rotated_token_is_refreshed_for_passed_through_requests(
    cluster: FakeCluster, tmp_path: Path
) -> None:
    from kubemux.testing import FakeContext

    token_file = tmp_path / "token"
    source = write_kubeconfig(
        tmp_path / "config",
        {"prod": FakeContext(cluster=cluster, token=TOKEN, token_file=str(token_file))},
    )
    async with running_proxy(source) as (_, client):
        with anyio.fail_after(20):
            status, _, _ = await client.request("GET", "prod", "/api/v1/pods?pretty=true")
            assert status == 200
            cluster.tokens.add("rotated")
            token_file.write_text("rotated")
            cluster.tokens.discard(TOKEN)
            status, _, body = await client.request("GET", "prod", "/api/v1/pods?pretty=true")
            assert status == 200, body
    tokens = [r.token for r in cluster.requests if r.query.get("pretty") == "true"]
    assert tokens[0] == TOKEN and tokens[-1] == "rotated"


async def test_the_tls_read_buffer_can_be_made_smaller(
    cluster: FakeCluster, kubeconfig: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import asyncio.sslproto

    monkeypatch.setattr(asyncio.sslproto.SSLProtocol, "max_size", 256 * 1024)  # restored after
    with pytest.raises(ValueError, match="at least 4096"):
        ProxyServer(WatcherRegistry({}), port=0, tls_read_buffer=100)
    async with running_proxy(kubeconfig, tls_read_buffer=16 * 1024) as (_, client):
        with anyio.fail_after(20):
            status, doc = await client.get_json("prod", "/api/v1/pods")
    assert status == 200 and len(doc["items"]) == 2
    assert asyncio.sslproto.SSLProtocol.max_size == 16 * 1024
