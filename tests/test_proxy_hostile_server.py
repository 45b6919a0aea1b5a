"""The proxy's server under hostile connections and at its end (issue 28, points 7 and 11).

- 7: a connection that never finishes its TLS handshake is closed after
  ``handshake_timeout`` (asyncio's default is 60 s), connections are capped below the
  open-file limit, and at the cap the oldest connection still in its handshake makes room:
  a thousand idle sockets never keep the token holder out;
- 11: SIGTERM with open watches ends every stream cleanly (its last chunk: the client
  re-watches, it does not see a broken stream) and the process exits within 10 s.

``kubemux proxy`` runs as a real process here (its own open-file limit, its own signals).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import os
import resource
import signal
import ssl
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import anyio
import yaml

from kubemux.proxy import ProxySettings
from kubemux.testing import FakeCluster
from proxy_support import (  # the fixtures cluster and kubeconfig
    TABLE,
    running_proxy,
    upstream_cluster,  # noqa: F401
    upstream_kubeconfig,  # noqa: F401
)
from support import TIMEOUT, wait_until


class ProxyProcess:
    """``kubemux proxy`` in a process of its own, and a client for it (from OUT)."""

    def __init__(self, process: asyncio.subprocess.Process, out: Path) -> None:
        self.process = process
        doc = yaml.safe_load(out.read_text())
        self.server: str = doc["clusters"][0]["cluster"]["server"]
        ca = base64.b64decode(doc["clusters"][0]["cluster"]["certificate-authority-data"])
        self.ssl = ssl.create_default_context(cadata=ca.decode())
        self.auth = {"Authorization": f"Bearer {doc['users'][0]['user']['token']}"}
        self.port = int(self.server.split(":")[2].split("/")[0])


def _limit(files: int | None) -> Any:
    def preexec() -> None:  # in the child, between fork and exec
        if files is not None:
            resource.setrlimit(resource.RLIMIT_NOFILE, (files, files))

    return preexec


@contextlib.asynccontextmanager
async def proxy_process(
    kubeconfig: Path, tmp_path: Path, *, files: int | None = None
) -> AsyncIterator[ProxyProcess]:
    out = tmp_path / "proxy.yaml"
    command = [sys.executable, "-m", "kubemux.cli", "proxy", "--kubeconfig", str(kubeconfig)]
    command += ["--port", "0", "--write-kubeconfig", str(out)]
    process = await asyncio.create_subprocess_exec(
        *command,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        preexec_fn=_limit(files),
    )
    try:
        assert process.stdout is not None
        with anyio.fail_after(TIMEOUT * 2):
            while b"Ctrl-C to stop." not in await process.stdout.readline():
                assert process.returncode is None
        yield ProxyProcess(process, out)
    finally:
        if process.returncode is None:
            process.kill()
        await process.communicate()


# ------------------------------------------------------------------ 7: idle connections
async def _idle(port: int, n: int) -> list[tuple[asyncio.StreamReader, asyncio.StreamWriter]]:
    """``n`` TCP connections that never start their TLS handshake."""
    return [await asyncio.open_connection("127.0.0.1", port) for _ in range(n)]


async def _idle_served(
    port: int, n: int
) -> list[tuple[asyncio.StreamReader, asyncio.StreamWriter]]:
    """:func:`_idle`, each accepted by the server before the next is opened (the server
    runs in this process: a turn of the loop lets it accept)."""
    out = []
    for _ in range(n):
        out.append(await asyncio.open_connection("127.0.0.1", port))
        for _ in range(5):
            await asyncio.sleep(0)
    return out


async def _closed(reader: asyncio.StreamReader) -> bool:
    """Whether the server closed the connection (nothing was sent on it)."""
    with contextlib.suppress(ConnectionError):
        return await reader.read(1) == b""
    return True


async def test_idle_sockets_beyond_the_descriptor_limit_never_keep_the_token_holder_out(
    cluster: FakeCluster, kubeconfig: Path, tmp_path: Path
) -> None:
    files = 256
    async with proxy_process(kubeconfig, tmp_path, files=files) as proxy:
        with anyio.fail_after(TIMEOUT):
            idle = await _idle(proxy.port, files + 50)
        try:
            async with aiohttp.ClientSession() as session:
                with anyio.fail_after(TIMEOUT):
                    async with session.get(
                        f"{proxy.server}/api/v1/pods", headers=proxy.auth, ssl=proxy.ssl
                    ) as resp:
                        assert resp.status == 200
                        assert len((await resp.json())["items"]) == 3
        finally:
            for _, writer in idle:
                writer.close()
        assert proxy.process.returncode is None  # and it is still there


async def test_at_the_connection_cap_the_oldest_handshake_makes_room(
    cluster: FakeCluster, kubeconfig: Path
) -> None:
    settings = ProxySettings(max_connections=20, handshake_timeout=60.0)
    async with running_proxy(kubeconfig, settings=settings) as (_, client):
        with anyio.fail_after(TIMEOUT):
            idle = await _idle_served(client.server.port, 30)
        try:
            with anyio.fail_after(TIMEOUT):
                # the ten oldest were closed to let the newer ones in, long before 60 s
                assert all([await _closed(reader) for reader, _ in idle[:10]])
                status, doc = await client.get_json("prod", "/api/v1/pods")  # served
                assert status == 200 and len(doc["items"]) == 3
        finally:
            for _, writer in idle:
                writer.close()


async def test_a_handshake_that_never_comes_is_cut(kubeconfig: Path) -> None:
    settings = ProxySettings(handshake_timeout=0.5)
    async with running_proxy(kubeconfig, settings=settings) as (server, client):
        idle = await _idle(server.port, 5)
        try:
            with anyio.fail_after(TIMEOUT):
                assert all([await _closed(reader) for reader, _ in idle])
                status, _ = await client.get_json("prod", "/api/v1/pods")
                assert status == 200
        finally:
            for _, writer in idle:
                writer.close()


# ------------------------------------------------------------------ 11: SIGTERM
async def test_sigterm_ends_every_watch_cleanly_and_exits(
    cluster: FakeCluster, kubeconfig: Path, tmp_path: Path
) -> None:
    async with proxy_process(kubeconfig, tmp_path) as proxy:
        streams = [
            ("/api/v1/pods?watch=1&resourceVersion=0", {}),  # from the cache
            ("/api/v1/pods?watch=1&resourceVersion=0", {"Accept": TABLE}),  # a Table view
            ("/api/v1/pods?watch=1&pretty=true", {}),  # passed through
        ]
        async with aiohttp.ClientSession() as session, contextlib.AsyncExitStack() as stack:
            opened = []
            with anyio.fail_after(TIMEOUT):
                for path, headers in streams:
                    resp = await stack.enter_async_context(
                        session.get(
                            f"{proxy.server}{path}",
                            headers={**proxy.auth, **headers},
                            ssl=proxy.ssl,
                        )
                    )
                    assert resp.status == 200
                    opened.append(resp)
                for resp in opened[:2]:
                    assert (await resp.content.readline()).startswith(b'{"type":"ADDED"')
                await wait_until(lambda: cluster.open_watches >= 2)  # the informer's and ours
            proxy.process.send_signal(signal.SIGTERM)
            with anyio.fail_after(10):  # within 10 s, every stream complete
                for resp in opened:
                    await resp.read()  # raises ClientPayloadError for a cut stream
                assert await proxy.process.wait() == 0
