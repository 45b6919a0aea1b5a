"""Helpers for the port-forward tests: an echo server, a running ``kubectl port-forward``,
a byte round trip through it, and a raw SPDY-over-WebSocket client for hostile input; the
fixture ``cluster`` (:func:`pod_cluster`) is a test module's once it imports it."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
from collections.abc import AsyncIterator, Mapping
from pathlib import Path

import aiohttp
import anyio
import anyio.abc
import pytest

from kubectl_support import kubectl_argv, run_kubectl  # noqa: F401 - imported from here before
from kubemux.testing import FakeCluster, make_pod
from kubemux.testing._wire.spdy import Frame, FrameReader, HeaderCompressor, encode_syn_stream
from support import TIMEOUT

__all__ = [
    "PF_TOKEN",
    "SpdyClient",
    "echo_server",
    "pod_cluster",
    "port_forward",
    "round_trip",
    "round_trips_at_once",
]

PF_TOKEN = "pf-token"


@pytest.fixture(name="cluster")
async def pod_cluster() -> AsyncIterator[FakeCluster]:
    """FakeCluster ``pf`` (TLS, token :data:`PF_TOKEN`) with the pod ``web-1`` in ``default``."""
    async with FakeCluster(tokens={PF_TOKEN}, tls=True, name="pf") as fake:
        fake.create("pods", make_pod("web-1", "default"))
        yield fake


async def _echo(stream: anyio.abc.SocketStream) -> None:
    async with stream:
        with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            async for chunk in stream:
                await stream.send(chunk)


@contextlib.asynccontextmanager
async def echo_server() -> AsyncIterator[int]:
    """A TCP echo server on 127.0.0.1 (a free port): it echoes until the client's EOF."""
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
    async with listener, anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, _echo)
        try:
            yield int(listener.extra(anyio.abc.SocketAttribute.local_port))
        finally:
            tg.cancel_scope.cancel()


class Forward:
    """A running ``kubectl port-forward``: its local port and, once ended, its output."""

    def __init__(self, proc: asyncio.subprocess.Process, port: int) -> None:
        self.proc = proc
        self.port = port
        self.stdout = ""
        self.stderr = ""

    async def wait(self) -> int:
        """Wait for kubectl to exit by itself (bounded); its exit code."""
        with anyio.fail_after(TIMEOUT):
            out, err = await self.proc.communicate()
        self.stdout += out.decode()
        self.stderr += err.decode()
        assert self.proc.returncode is not None
        return self.proc.returncode


@contextlib.asynccontextmanager
async def port_forward(
    kubectl: str,
    kubeconfig: Path,
    *args: str,
    env: Mapping[str, str] | None = None,
) -> AsyncIterator[Forward]:
    """``kubectl port-forward ARGS`` (e.g. ``pod/web-1 0:80``) until the block ends (then
    SIGTERM, as Ctrl-C); yields once kubectl printed the local port it listens on."""
    proc = await asyncio.create_subprocess_exec(
        *kubectl_argv(kubectl, kubeconfig, "port-forward", *args),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, **(env or {})},
    )
    assert proc.stdout is not None
    forward: Forward | None = None
    try:
        with anyio.fail_after(TIMEOUT):
            line = (await proc.stdout.readline()).decode()
        found = re.search(r"127\.0\.0\.1:(\d+) ->", line)
        if found is None:
            _, err = await proc.communicate()
            raise AssertionError(f"kubectl port-forward printed {line!r}; stderr {err!r}")
        forward = Forward(proc, int(found.group(1)))
        forward.stdout = line
        yield forward
    finally:
        if proc.returncode is None:
            proc.terminate()
            with anyio.move_on_after(TIMEOUT, shield=True):
                out, err = await proc.communicate()
                if forward is not None:
                    forward.stdout += out.decode()
                    forward.stderr += err.decode()
            if proc.returncode is None:
                proc.kill()
                await proc.wait()


async def round_trip(port: int, payload: bytes) -> bytes:
    """Send ``payload`` to 127.0.0.1:``port``, half-close, read everything back."""
    with anyio.fail_after(TIMEOUT):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            writer.write(payload)
            await writer.drain()
            writer.write_eof()
            return await reader.read()
        finally:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()


async def round_trips_at_once(port: int, count: int, size: int) -> None:
    """``count`` connections to 127.0.0.1:``port`` at once, each echoing its own bytes."""
    got: dict[int, bytes] = {}

    async def one(i: int) -> None:
        got[i] = await round_trip(port, b"%d," % i * size)

    async with anyio.create_task_group() as tg:
        for i in range(count):
            tg.start_soon(one, i)
    assert got == {i: b"%d," % i * size for i in range(count)}


class SpdyClient:
    """SPDY/3.1 frames over a WebSocket, as kubectl's tunnel sends them (for hostile tests)."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        self.ws = ws
        self.compressor = HeaderCompressor()
        self.reader = FrameReader()
        self._frames: list[Frame] = []

    async def send(self, data: bytes) -> None:
        await self.ws.send_bytes(data)

    async def open(self, stream_id: int, headers: dict[str, str]) -> None:
        await self.send(encode_syn_stream(self.compressor, stream_id, headers))

    async def frame(self) -> Frame | None:
        """The next frame from the server; None once it closed the WebSocket."""
        with anyio.fail_after(TIMEOUT):
            while not self._frames:
                msg = await self.ws.receive()
                if msg.type != aiohttp.WSMsgType.BINARY:
                    return None
                self._frames.extend(self.reader.feed(bytes(msg.data)))
        return self._frames.pop(0)
