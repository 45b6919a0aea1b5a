"""SOCKS5 proxies (``proxy-url: socks5://``), through a real SOCKS5 server process (pproxy).

kubectl (client-go) accepts http, https and socks5 proxy URLs and sends the server's host
name to a SOCKS5 proxy unresolved; TLS with the API server runs through the tunnel. These
tests check kubemux does the same, for every request it makes, keeps passwords out of
everything it shows, and recovers when the tunnel dies; one runs the real kubectl 1.32 on the
same kubeconfig.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import shutil
import ssl
import sys
from pathlib import Path
from typing import Any

import aiohttp
import anyio
import pytest
import yaml

from kubemux import (
    Backoff,
    ClusterUnreachable,
    WatcherRegistry,
    WatchSettings,
    load_kubeconfig,
)
from kubemux._http.api_client import replacement_session
from kubemux._http.client import open_client
from kubemux._http.socks import SocksConnector
from kubemux._resources import parse_resource
from kubemux.testing import FakeCluster, make_pod
from socks_support import pproxy

PASSWORD = "s3cr%et"  # pproxy checks it as written; the URL carries it percent-encoded
URL_PASSWORD = "s3cr%25et"
PLUGIN = str(Path(__file__).parent / "plugins" / "exec_plugin.py")
FAST = WatchSettings(backoff=Backoff(initial_delay=0.05, max_delay=0.3), connect_timeout=5)


def _find_kubectl() -> str | None:
    found = shutil.which("kubectl")
    if found is None:
        return None
    pinned = Path(os.path.realpath(found)).parent / "kubectl.1.32"
    return str(pinned) if pinned.exists() else found


KUBECTL = _find_kubectl()


def _write(
    path: Path,
    cluster: FakeCluster,
    proxy_url: str,
    *,
    server: str | None = None,
    tls_server_name: str | None = None,
    user: dict[str, Any] | None = None,
) -> Path:
    entry: dict[str, Any] = {"server": server or cluster.server, "proxy-url": proxy_url}
    if cluster.ca_file:
        entry["certificate-authority"] = cluster.ca_file
    if tls_server_name:
        entry["tls-server-name"] = tls_server_name
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": entry}],
        "users": [{"name": "u", "user": user if user is not None else {"token": "t"}}],
        "contexts": [{"name": "a", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "a",
    }
    path.write_text(yaml.safe_dump(doc))
    return path


def _pods(cluster: FakeCluster, n: int = 3) -> None:
    for i in range(n):
        cluster.create("pods", make_pod(f"p-{i}"))


def _names(store: Any) -> set[str]:
    return {o["metadata"]["name"] for o in store.list()}


# ---------------------------------------------------------------------- the kubeconfig
@pytest.mark.parametrize("scheme", ["socks5", "SOCKS5", "socks5h"])
def test_socks5_proxy_urls_are_accepted(tmp_path: Path, scheme: str) -> None:
    path = tmp_path / "config"
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [
                    {
                        "name": "c",
                        "cluster": {
                            "server": "https://10.0.0.1",
                            "proxy-url": f"{scheme}://u:pw@127.0.0.1:1080",
                        },
                    }
                ],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "a", "context": {"cluster": "c", "user": "u"}}],
            }
        )
    )
    snapshot = load_kubeconfig([str(path)])
    assert list(snapshot.contexts) == ["a"] and not snapshot.invalid


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("socks4://127.0.0.1:1080", "socks4 proxies are not supported .*use socks5://"),
        ("socks4a://u:pw@127.0.0.1:1080", "socks4a proxies are not supported"),
        ("ftp://u:pw@127.0.0.1:21", "unsupported scheme 'ftp', must be http, https, socks5"),
    ],
)
def test_other_proxy_schemes_are_refused_clearly(tmp_path: Path, url: str, message: str) -> None:
    import re

    async_free = tmp_path / "config"
    async_free.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": "https://h", "proxy-url": url}}],
                "users": [{"name": "u", "user": {}}],
                "contexts": [{"name": "a", "context": {"cluster": "c", "user": "u"}}],
            }
        )
    )
    snapshot = load_kubeconfig([str(async_free)])
    assert "a" not in snapshot.contexts
    assert re.search(message, snapshot.invalid["a"]), snapshot.invalid["a"]
    assert "pw" not in snapshot.invalid["a"]


# ---------------------------------------------------------------------- through the tunnel
async def test_a_watch_goes_through_the_proxy_which_resolves_the_host_name(
    tmp_path: Path,
) -> None:
    async with FakeCluster(tokens={"t"}) as cluster, pproxy() as proxy:
        _pods(cluster)
        server = f"http://localhost:{cluster.port}"  # the name goes to the proxy, as Go does
        path = _write(tmp_path / "config", cluster, proxy.url(), server=server)
        async with WatcherRegistry.from_kubeconfig([str(path)], follow=False) as registry:
            with anyio.fail_after(20):
                store = await registry.watch("a", "pods")
            assert _names(store) == {"p-0", "p-1", "p-2"}
            await proxy.wait_tunnels(1)
            assert set(proxy.tunnels) == {f"localhost:{cluster.port}"}
            async with registry.subscribe(resource="pods") as changes:
                cluster.create("pods", make_pod("later"))
                with anyio.fail_after(20):
                    async for change in changes:
                        if change.name == "later":
                            break


async def test_tls_through_the_tunnel_with_a_password_ca_client_cert_and_server_name(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    async with FakeCluster(tls=True, tokens=set()) as cluster, pproxy(f"u:{PASSWORD}") as proxy:
        _pods(cluster)
        cert, key = cluster.issue_client_cert("carol")
        (tmp_path / "cert").write_bytes(cert)
        (tmp_path / "key").write_bytes(key)
        user = {"client-certificate": str(tmp_path / "cert"), "client-key": str(tmp_path / "key")}
        path = _write(
            tmp_path / "config",
            cluster,
            proxy.url(f"u:{URL_PASSWORD}"),
            server=f"https://127.0.0.1:{cluster.port}",
            tls_server_name="localhost",  # the certificate names localhost and 127.0.0.1
            user=user,
        )
        async with WatcherRegistry.from_kubeconfig([str(path)], follow=False) as registry:
            with anyio.fail_after(20):
                store = await registry.watch("a", "pods")
            assert _names(store) == {"p-0", "p-1", "p-2"}
            await proxy.wait_tunnels(1)
            shown = repr(registry) + repr(registry.status()) + repr(registry.contexts)
        assert PASSWORD not in shown and URL_PASSWORD not in shown
        assert PASSWORD not in caplog.text and URL_PASSWORD not in caplog.text


async def test_the_tls_server_name_is_checked_through_the_tunnel(tmp_path: Path) -> None:
    async with FakeCluster(tls=True, tokens={"t"}) as cluster, pproxy() as proxy:
        path = _write(
            tmp_path / "config", cluster, proxy.url(), tls_server_name="not-the-server.example"
        )
        cfg = load_kubeconfig([str(path)]).contexts["a"]
        async with open_client(cfg) as client:
            with pytest.raises(ClusterUnreachable, match="certificate") as info:
                await client.list(parse_resource("pods"), None, {}, FAST)
        assert "not-the-server.example" in str(info.value)
        await proxy.wait_tunnels(1)  # it did go through the tunnel, and TLS refused it


async def test_every_request_goes_through_the_proxy(tmp_path: Path) -> None:
    """LIST, WATCH, discovery (GET) and SelfSubjectReview (POST) work through the proxy and
    fail, naming it, without it: none of them goes around it."""
    async with FakeCluster(tls=True, tokens={"t"}) as cluster:
        _pods(cluster)
        pods = parse_resource("pods")
        async with pproxy() as proxy:
            path = _write(tmp_path / "config", cluster, proxy.url(f"u:{URL_PASSWORD}"))
            cfg = load_kubeconfig([str(path)]).contexts["a"]
            async with open_client(cfg) as client:
                assert b"p-0" in await client.list(pods, None, {}, FAST)
                assert b"APIResourceList" in (await client.get_raw("/api/v1"))[1]
                review = await client.post_json(
                    "/apis/authentication.k8s.io/v1/selfsubjectreviews",
                    {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"},
                )
                assert b"SelfSubjectReview" in review
                async with client.watch(pods, None, {"watch": "true"}, FAST) as blocks:
                    async for _block in blocks:
                        break  # the first event (ADDED p-0) came through the tunnel
                await proxy.wait_tunnels(1)
        # the proxy is gone: nothing reaches the cluster any more, and each error names it
        dead = f"socks5://***@127.0.0.1:{proxy.port}"
        async with open_client(cfg) as client:
            calls = [
                client.list(pods, None, {}, FAST),
                client.get_raw("/api/v1"),
                client.post_json("/apis/authentication.k8s.io/v1/selfsubjectreviews", {}),
            ]
            for call in calls:
                with pytest.raises(ClusterUnreachable) as info:
                    await call
                assert dead in str(info.value) and "cannot connect" in str(info.value)
                assert "s3cr" not in str(info.value)
            with pytest.raises(ClusterUnreachable, match="SOCKS5 proxy"):
                async with client.watch(pods, None, {"watch": "true"}, FAST):
                    pass


async def test_a_refused_password_is_a_clear_redacted_error(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    async with FakeCluster(tokens={"t"}) as cluster, pproxy(f"u:{PASSWORD}") as proxy:
        path = _write(tmp_path / "config", cluster, proxy.url("u:wrong-pass-123"))
        async with WatcherRegistry.from_kubeconfig([str(path)], follow=False) as registry:
            with anyio.fail_after(20), pytest.raises(ClusterUnreachable) as info:
                await registry.watch("a", "pods")
            message = str(info.value)
            status = repr(registry.status())
        assert f"socks5://***@127.0.0.1:{proxy.port}" in message
        assert "refused the user and password" in message
        for text in (message, status, caplog.text):
            assert "wrong-pass-123" not in text


@pytest.mark.parametrize("after", ["greeting", "password"])
async def test_a_proxy_hanging_up_mid_handshake_is_one_clear_error(
    tmp_path: Path, after: str
) -> None:
    """pproxy refuses a password by closing: the close may be seen while writing (an OSError)
    or while reading the reply (python-socks' ProxyError). A server that hangs up at each
    step of the handshake pins both to the one message (the second once failed CI)."""
    seen = anyio.Event()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readexactly(3)  # 05 01 02: version, one method, user/password
        if after == "password":
            writer.write(b"\x05\x02")
            await writer.drain()
            await reader.readexactly(2)  # 01 len(user)
            await reader.read(100)
        seen.set()
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    async with server, FakeCluster(tokens={"t"}) as cluster:
        path = _write(tmp_path / "config", cluster, f"socks5://u:wrong-pass-123@127.0.0.1:{port}")
        async with WatcherRegistry.from_kubeconfig([str(path)], follow=False) as registry:
            with anyio.fail_after(20), pytest.raises(ClusterUnreachable) as info:
                await registry.watch("a", "pods")
    assert seen.is_set()
    message = str(info.value)
    assert f"socks5://***@127.0.0.1:{port}" in message
    assert "closed the connection during the SOCKS5 handshake" in message, message
    assert "wrong-pass-123" not in message


async def test_a_tunnel_that_dies_mid_watch_shows_the_proxy_then_reconnects(
    tmp_path: Path,
) -> None:
    async with FakeCluster(tokens={"t"}, bookmark_period=0.2) as cluster:
        _pods(cluster)
        async with pproxy(f"u:{PASSWORD}") as first:
            port = first.port
            path = _write(tmp_path / "config", cluster, first.url(f"u:{URL_PASSWORD}"))
            registry = WatcherRegistry.from_kubeconfig([str(path)], follow=False, settings=FAST)
            async with registry:
                with anyio.fail_after(20):
                    store = await registry.watch("a", "pods")
                await cluster.wait_for(lambda: cluster.open_watches == 1, timeout=20)
                first.kill()  # the tunnel dies, and the proxy with it
                shown = f"SOCKS5 proxy socks5://***@127.0.0.1:{port}"
                with anyio.fail_after(20):
                    while True:
                        version = registry.status_version
                        informer = registry.status().contexts["a"].informers[0]
                        error = informer.last_error or ""
                        if shown in error and "cannot connect" in error:  # (not mid-death)
                            break
                        await registry.wait_status_change(version)
                assert PASSWORD not in repr(registry.status())
                assert _names(store) == {"p-0", "p-1", "p-2"}  # nothing cached is lost
                cluster.create("pods", make_pod("while-down"))
                async with (
                    registry.subscribe(resource="pods") as changes,
                    pproxy(f"u:{PASSWORD}", port=port) as second,
                ):
                    with anyio.fail_after(20):
                        async for change in changes:
                            if change.name == "while-down":
                                break
                    assert second.tunnels  # back through the (new) proxy
                informer = registry.status().contexts["a"].informers[0]
                assert informer.relists == 0  # resumed from its resourceVersion
                assert _names(store) == {"p-0", "p-1", "p-2", "while-down"}


async def test_exec_plugins_get_the_proxy_url_and_new_certificates_keep_the_tunnel(
    tmp_path: Path,
) -> None:
    log = tmp_path / "runs"
    async with FakeCluster(tls=True, tokens=set()) as cluster, pproxy() as proxy:
        _pods(cluster)
        cert, key = cluster.issue_client_cert("plugin-user")
        (tmp_path / "cert").write_bytes(cert)
        (tmp_path / "key").write_bytes(key)
        env = {"LOG": str(log), "CERT": str(tmp_path / "cert"), "CERTKEY": str(tmp_path / "key")}
        user = {
            "exec": {
                "apiVersion": "client.authentication.k8s.io/v1",
                "command": sys.executable,
                "args": [PLUGIN],
                "env": [{"name": f"KMX_PLUGIN_{k}", "value": v} for k, v in env.items()],
                "interactiveMode": "Never",
                "provideClusterInfo": True,
            }
        }
        proxy_url = proxy.url("u:pw")
        path = _write(tmp_path / "config", cluster, proxy_url, user=user)
        async with WatcherRegistry.from_kubeconfig([str(path)], follow=False) as registry:
            with anyio.fail_after(20):
                store = await registry.watch("a", "pods")
            runs = [json.loads(line) for line in log.read_text().splitlines()]
            assert runs[0]["info"]["spec"]["cluster"]["proxy-url"] == proxy_url  # as client-go
            tunnels = len(proxy.tunnels)
            cluster.revoke("plugin-user")  # a new certificate: new connections, same tunnel
            cert, key = cluster.issue_client_cert("plugin-user")
            (tmp_path / "cert").write_bytes(cert)
            (tmp_path / "key").write_bytes(key)
            async with registry.subscribe(resource="pods") as changes:
                cluster.drop_watches()
                cluster.create("pods", make_pod("after"))
                with anyio.fail_after(20):
                    async for change in changes:
                        if change.name == "after":
                            break
            assert len(log.read_text().splitlines()) == 2
            assert len(proxy.tunnels) > tunnels
            assert "after" in _names(store)


async def test_a_replacement_session_keeps_the_proxy() -> None:
    context = ssl.create_default_context()
    url = "socks5://u:pw@127.0.0.1:1080"
    old = aiohttp.ClientSession(connector=SocksConnector(url, limit=7, ssl=context))
    new = replacement_session(old, context)
    try:
        assert isinstance(new.connector, SocksConnector)
        assert new.connector.proxy_url == url and new.connector.limit == 7
        assert "pw" not in repr(new.connector)
    finally:
        await old.close()
        await new.close()


# ---------------------------------------------------------------------- kubectl agrees
@pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed")
async def test_kubectl_reads_the_same_kubeconfig_through_the_same_proxy(tmp_path: Path) -> None:
    async with FakeCluster(tls=True, tokens={"t"}) as cluster, pproxy(f"u:{PASSWORD}") as proxy:
        _pods(cluster)
        path = _write(
            tmp_path / "config",
            cluster,
            proxy.url(f"u:{URL_PASSWORD}"),
            server=f"https://127.0.0.1:{cluster.port}",
            tls_server_name="localhost",
        )
        assert KUBECTL is not None
        with anyio.fail_after(30):
            result = await anyio.run_process(
                [KUBECTL, "--kubeconfig", str(path), "get", "pods", "-o", "name"],
                check=False,
                env={**os.environ, "HOME": str(tmp_path)},
            )
        assert result.returncode == 0, result.stderr
        kubectl = sorted(result.stdout.decode().split())
        kubectl_tunnels = len(proxy.tunnels)
        assert kubectl_tunnels >= 1
        async with WatcherRegistry.from_kubeconfig([str(path)], follow=False) as registry:
            with anyio.fail_after(20):
                store = await registry.watch("a", "pods")
            assert sorted(f"pod/{n}" for n in _names(store)) == kubectl
            assert len(proxy.tunnels) > kubectl_tunnels
        # kubectl refuses socks5h and socks4 (and kubemux only socks4)
        for scheme in ("socks5h", "socks4"):
            text = path.read_text().replace("socks5://", f"{scheme}://")
            (tmp_path / scheme).write_text(text)
            with anyio.fail_after(30):
                refused = await anyio.run_process(
                    [KUBECTL, "--kubeconfig", str(tmp_path / scheme), "get", "pods"],
                    check=False,
                    env={**os.environ, "HOME": str(tmp_path)},
                )
            assert refused.returncode != 0
            assert f'unsupported scheme "{scheme}"' in refused.stderr.decode()


# ---------------------------------------------------------------------- the environment
@pytest.mark.parametrize(
    ("env", "server", "expected"),
    [
        ({"HTTPS_PROXY": "http://p:3128"}, "https://k8s.example.com:6443", "http://p:3128"),
        ({"https_proxy": "p:3128"}, "https://k8s.example.com", "http://p:3128"),  # Go: http
        ({"HTTP_PROXY": "http://p:3128"}, "https://k8s.example.com", None),  # https uses HTTPS_
        ({"HTTP_PROXY": "http://p:3128"}, "http://k8s.example.com", "http://p:3128"),
        ({"HTTPS_PROXY": "socks5://u:pw@p:1080"}, "https://10.1.2.3", "socks5://u:pw@p:1080"),
        ({"HTTPS_PROXY": "http://p", "NO_PROXY": ".example.com"}, "https://k8s.example.com", None),
        ({"HTTPS_PROXY": "http://p"}, "https://127.0.0.1:6443", None),  # never for loopback
        ({"HTTPS_PROXY": "http://p"}, "https://localhost:6443", None),
        ({"HTTPS_PROXY": "http://p"}, "https://[::1]:6443", None),
        ({}, "https://k8s.example.com", None),
    ],
)
def test_environment_proxies_follow_gos_rules(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str], server: str, expected: str | None
) -> None:
    from kubemux._http.api_client import environment_proxy

    for name in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "NO_PROXY", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert environment_proxy(server) == expected


async def test_netrc_is_never_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """kubectl sends no ~/.netrc credentials; aiohttp's trust_env would, and then refuse
    every request that also carries a bearer token."""
    home = tmp_path / "home"
    home.mkdir()
    (home / ".netrc").write_text("machine 127.0.0.1 login someone password netrc-secret\n")
    (home / ".netrc").chmod(0o600)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("HTTPS_PROXY", "http://127.0.0.1:1")  # loopback: never proxied
    async with FakeCluster(tls=True, tokens={"t"}) as cluster:
        _pods(cluster)
        doc = yaml.safe_load(_write(tmp_path / "config", cluster, "http://unused:1").read_text())
        del doc["clusters"][0]["cluster"]["proxy-url"]
        (tmp_path / "config").write_text(yaml.safe_dump(doc))
        cfg = load_kubeconfig([str(tmp_path / "config")]).contexts["a"]
        async with open_client(cfg) as client:
            assert b"p-0" in await client.list(parse_resource("pods"), None, {}, FAST)
        assert [r.token for r in cluster.requests] == ["t"]
