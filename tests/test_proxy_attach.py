"""``kubectl attach`` against FakeCluster and through ``kubemux proxy``, over kubectl 1.32's
WebSocket (``v5.channel.k8s.io``) and over plain SPDY (``KUBECTL_REMOTE_COMMAND_WEBSOCKETS=
false``), and the channel protocol kubectl and the fake agree on over SPDY (skipped where
kubectl is not installed)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import AsyncIterator, Iterator, Mapping
from pathlib import Path

import anyio
import pytest

from kubectl_support import kubectl_binary, run_kubectl
from kubemux.testing import FakeCluster, make_pod, write_kubeconfig
from proxy_support import running_proxy
from support import TIMEOUT

KUBECTL = kubectl_binary()
pytestmark = pytest.mark.skipif(KUBECTL is None, reason="kubectl not on PATH")
TOKEN = "attach-token"
SPDY = {"KUBECTL_REMOTE_COMMAND_WEBSOCKETS": "false"}
PROMPT = "If you don't see a command prompt, try pressing enter.\n"
SPDY_LOGGER = "kubemux.testing._kubelet.spdy_streams"


@pytest.fixture
async def cluster() -> AsyncIterator[FakeCluster]:
    async with FakeCluster(tokens={TOKEN}, tls=True, name="attach") as fake:
        fake.create("pods", make_pod("web-1", "default"))
        yield fake


async def attach_until_deleted(
    cluster: FakeCluster, kubeconfig: Path, env: Mapping[str, str], lines: str
) -> tuple[int, str, str]:
    """``kubectl attach web-1``; once attached, ``lines`` are logged, and once kubectl printed
    them the pod is deleted (which ends the attach). (exit code, stdout, stderr)."""
    assert KUBECTL is not None
    proc = await asyncio.create_subprocess_exec(
        KUBECTL,
        "--kubeconfig",
        str(kubeconfig),
        "--cache-dir",
        str(kubeconfig.parent / "cache"),
        "attach",
        "web-1",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, **env},
    )
    assert proc.stdout is not None
    try:
        with anyio.fail_after(TIMEOUT):
            # the upgrade counted: what the container logs from now on is shown
            await cluster.wait_for(lambda: cluster.open_upgrades == 1, timeout=TIMEOUT)
            cluster.append_log("default", "web-1", lines)
            shown = await proc.stdout.readexactly(len(lines.encode()))
            cluster.delete("pods", "default", "web-1")
            out, err = await proc.communicate()
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert proc.returncode is not None
    return proc.returncode, (shown + out).decode(), err.decode()


@pytest.mark.parametrize("env", [{}, SPDY], ids=["websocket", "spdy"])
async def test_kubectl_attach_through_the_proxy_prints_what_the_server_prints(
    cluster: FakeCluster, tmp_path: Path, env: dict[str, str]
) -> None:
    source = write_kubeconfig(tmp_path / "direct" / "config", {"prod": cluster})
    out = tmp_path / "proxied" / "config"
    expected = (0, "live 1\nlive 2\n", PROMPT)
    assert await attach_until_deleted(cluster, source, env, "live 1\nlive 2\n") == expected
    async with running_proxy(source) as (server, _):
        server.write_kubeconfig(out)
        cluster.create("pods", make_pod("web-1", "default"))  # a new uid, an empty log
        assert await attach_until_deleted(cluster, out, env, "live 1\nlive 2\n") == expected
        await cluster.wait_for(lambda: cluster.open_upgrades == 0, timeout=TIMEOUT)
    attaches = [r for r in cluster.requests if r.subresource == "attach"]
    assert [r.method for r in attaches] == ["POST" if env else "GET"] * 2  # no fallback
    assert all(r.token == TOKEN for r in attaches)  # the context's credential upstream
    assert attaches[0].query == {"container": "app", "stdout": "true", "stderr": "true"}
    assert attaches[1].query == attaches[0].query


@pytest.mark.parametrize("env", [{}, SPDY], ids=["websocket", "spdy"])
async def test_kubectl_attach_with_stdin_through_the_proxy(
    cluster: FakeCluster, tmp_path: Path, env: dict[str, str]
) -> None:
    # the fake's container echoes stdin and ends when stdin does (kubectl -i < file)
    assert KUBECTL is not None
    source = write_kubeconfig(tmp_path / "direct" / "config", {"prod": cluster})
    out = tmp_path / "proxied" / "config"
    args = ("attach", "-i", "web-1")
    direct = await run_kubectl(KUBECTL, source, *args, stdin=b"typed\n", env=env)
    assert direct == (0, "typed\n", PROMPT)
    async with running_proxy(source) as (server, _):
        server.write_kubeconfig(out)
        assert await run_kubectl(KUBECTL, out, *args, stdin=b"typed\n", env=env) == direct
        await cluster.wait_for(lambda: cluster.open_upgrades == 0, timeout=TIMEOUT)


async def test_kubectl_attach_to_a_missing_pod_through_the_proxy(
    cluster: FakeCluster, tmp_path: Path
) -> None:
    assert KUBECTL is not None
    source = write_kubeconfig(tmp_path / "direct" / "config", {"prod": cluster})
    out = tmp_path / "proxied" / "config"
    direct = await run_kubectl(KUBECTL, source, "attach", "nope")
    assert direct == (1, "", 'Error from server (NotFound): pods "nope" not found\n')
    async with running_proxy(source) as (server, _):
        server.write_kubeconfig(out)
        assert await run_kubectl(KUBECTL, out, "attach", "nope") == direct


@contextlib.contextmanager
def spdy_choices(caplog: pytest.LogCaptureFixture) -> Iterator[list[str]]:
    """The fake's SPDY protocol negotiations logged meanwhile."""
    found: list[str] = []
    with caplog.at_level(logging.DEBUG, logger=SPDY_LOGGER):
        yield found
        found.extend(r.getMessage() for r in caplog.records if r.name == SPDY_LOGGER)


OFFERED = (
    "v5.channel.k8s.io, v4.channel.k8s.io, v3.channel.k8s.io, v2.channel.k8s.io, channel.k8s.io"
)


async def test_kubectl_offers_v5_first_over_spdy_and_the_fake_picks_it(
    cluster: FakeCluster, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # client-go's SPDY executor offers v5..v1; v5 over SPDY is v4 (its close signal is
    # WebSocket's channel 255), so the bridge, a byte pipe, needs nothing more
    assert KUBECTL is not None
    source = write_kubeconfig(tmp_path / "direct" / "config", {"prod": cluster})
    out = tmp_path / "proxied" / "config"
    args = ("exec", "-i", "web-1", "--", "cat")
    with spdy_choices(caplog) as choices:
        direct = await run_kubectl(KUBECTL, source, *args, stdin=b"abc\n", env=SPDY)
        async with running_proxy(source) as (server, _):
            server.write_kubeconfig(out)
            proxied = await run_kubectl(KUBECTL, out, *args, stdin=b"abc\n", env=SPDY)
    assert direct == proxied == (0, "abc\n", "")
    assert choices == [f"SPDY exec: offered {OFFERED}, chose v5.channel.k8s.io"] * 2


async def _spdy_handshake(fake: FakeCluster, path: str, offered: str) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", fake.port)
    try:
        writer.write(
            f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: Upgrade\r\n"
            f"Upgrade: SPDY/3.1\r\nX-Stream-Protocol-Version: {offered}\r\n"
            "Content-Length: 0\r\n\r\n".encode()
        )
        with anyio.fail_after(TIMEOUT):
            return await reader.readuntil(b"\r\n\r\n")
    finally:
        writer.close()


@pytest.mark.parametrize("sub", ["exec?command=true&stdout=true", "attach?stdout=true"])
async def test_the_fake_negotiates_the_clients_first_channel_protocol_over_spdy(sub: str) -> None:
    path = f"/api/v1/namespaces/default/pods/web-1/{sub}"
    async with FakeCluster(name="plain") as fake:
        fake.create("pods", make_pod("web-1", "default"))
        for offered, chosen in [
            ("v5.channel.k8s.io, v4.channel.k8s.io", b"v5.channel.k8s.io"),
            ("v4.channel.k8s.io, v5.channel.k8s.io", b"v4.channel.k8s.io"),
            ("v3.channel.k8s.io, v4.channel.k8s.io", b"v4.channel.k8s.io"),
        ]:
            head = await _spdy_handshake(fake, path, offered)
            assert head.startswith(b"HTTP/1.1 101 Switching Protocols\r\n")
            assert b"X-Stream-Protocol-Version: " + chosen + b"\r\n" in head
        head = await _spdy_handshake(fake, path, "v3.channel.k8s.io")
        assert head.startswith(b"HTTP/1.1 403 Forbidden\r\n")
        assert b"X-Accepted-Stream-Protocol-Versions: v5.channel.k8s.io, v4.channel.k8s.io" in head
        await fake.wait_for(lambda: fake.open_upgrades == 0, timeout=TIMEOUT)
