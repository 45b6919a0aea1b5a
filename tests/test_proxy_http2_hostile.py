"""Hostile HTTP/2 clients of ``kubemux proxy``: each attack ends its own connection (GOAWAY),
never the proxy, and a well-behaved connection beside it is served throughout.

SETTINGS, PING and tiny-WINDOW_UPDATE floods and rapid reset (CVE-2023-44487) spend the
connection's budget (ENHANCE_YOUR_CALM); a header block over ``max_header_bytes`` or a
CONTINUATION flood is a connection error; a window pushed past 2^31-1 is a flow-control
error; streams past the cap are refused; a connection that sends no request is closed
after ``header_timeout``; a stream's window opened a byte at a time never makes the proxy
send DATA frames of a byte.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel
import h2.errors
import h2.settings
from hyperframe.frame import (
    ContinuationFrame,
    HeadersFrame,
    PingFrame,
    SettingsFrame,
    WindowUpdateFrame,
)

from h2_support import H2Client, h2_client
from kubemux.proxy import ProxyServer, ProxySettings
from kubemux.testing import FakeCluster, make_pod
from proxy_support import (
    running_proxy,
    upstream_cluster,  # noqa: F401
    upstream_kubeconfig,  # noqa: F401
)

CALM = h2.errors.ErrorCodes.ENHANCE_YOUR_CALM
PODS = "/clusters/prod/api/v1/namespaces/default/pods"


@asynccontextmanager
async def proxy(kubeconfig: Path, **options: Any) -> AsyncIterator[ProxyServer]:
    async with running_proxy(kubeconfig, **options) as (server, _):
        yield server


async def still_served(server: ProxyServer) -> None:
    """A fresh connection is answered (the proxy lives on)."""
    async with h2_client(server) as client:
        reply = await client.reply(client.request("GET", f"{PODS}/web-1"))
        assert reply.status == 200


def request_headers(client: H2Client, *, extra: int = 0) -> list[tuple[bytes, bytes]]:
    assert client.server.url is not None
    headers = [
        (b":method", b"GET"),
        (b":scheme", b"https"),
        (b":authority", client.server.url.removeprefix("https://").encode()),
        (b":path", f"{PODS}/web-1".encode()),
        (b"authorization", f"Bearer {client.server.token}".encode()),
    ]
    if extra:
        headers.append((b"x-filler", b"a" * extra))
    return headers


def headers_block(client: H2Client, sid: int, *, extra: int = 0) -> bytes:
    """A request's header block, hpack-encoded by the client's encoder."""
    return bytes(client.conn.encoder.encode(request_headers(client, extra=extra)))


async def test_a_settings_flood_is_calmed(kubeconfig: Path) -> None:
    async with proxy(kubeconfig) as server:
        with anyio.fail_after(20):
            async with h2_client(server) as client:
                client.raw(*(SettingsFrame(0, settings={4: 65535}) for _ in range(1500)))
                await client.until_closed()
                assert client.goaway == CALM
            assert server.http2 is not None and server.http2.counts["calmed"] == 1
            await still_served(server)


async def test_a_ping_flood_is_calmed(kubeconfig: Path) -> None:
    async with proxy(kubeconfig) as server:
        with anyio.fail_after(20):
            async with h2_client(server) as client:
                client.raw(*(PingFrame(0, opaque_data=b"12345678") for _ in range(1500)))
                await client.until_closed()
                assert client.goaway == CALM
            await still_served(server)


async def test_rapid_reset_is_calmed(kubeconfig: Path) -> None:
    """HEADERS then RST_STREAM at once, over and over (CVE-2023-44487): the resets spend
    the budget; a stream reset in the same read starts no work at all."""
    settings = ProxySettings(max_streams_per_connection=8)
    async with proxy(kubeconfig, settings=settings) as server:
        with anyio.fail_after(20):
            async with h2_client(server) as client:
                await client.until(lambda: bool(client.remote_settings))
                for _ in range(1500):  # written at once (flushed after)
                    sid = client.conn.get_next_available_stream_id()
                    client.conn.send_headers(sid, request_headers(client))
                    client.conn.reset_stream(sid, h2.errors.ErrorCodes.CANCEL)
                client.flush()
                await client.until_closed()
                assert client.goaway == CALM
            assert server.http2 is not None and server.http2.counts["streams"] < 1000
            await still_served(server)


async def test_streams_past_the_advertised_cap_end_the_connection(kubeconfig: Path) -> None:
    settings = ProxySettings(max_streams_per_connection=4)
    async with proxy(kubeconfig, settings=settings) as server:
        with anyio.fail_after(20):
            async with h2_client(server) as client:
                await client.until(lambda: bool(client.remote_settings))
                assert client.remote_settings[h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS] == 4
                watches = [client.request("GET", f"{PODS}?watch=1") for _ in range(4)]
                await client.until(lambda: all(client.replies[s].status == 200 for s in watches))
                # a fifth one, past the client library's own check
                client.raw(HeadersFrame(9, data=headers_block(client, 9), flags=["END_HEADERS"]))
                await client.until_closed()
                assert client.goaway == h2.errors.ErrorCodes.PROTOCOL_ERROR
            await still_served(server)


async def test_a_huge_header_block_is_a_connection_error(kubeconfig: Path) -> None:
    async with proxy(kubeconfig, max_header_bytes=16 * 1024) as server:
        with anyio.fail_after(20):
            async with h2_client(server) as client:
                await client.until(lambda: bool(client.remote_settings))
                block = headers_block(client, 1, extra=64 * 1024)
                chunks = [block[i : i + 16000] for i in range(0, len(block), 16000)]
                frames: list[Any] = [HeadersFrame(1, data=chunks[0])]
                frames += [ContinuationFrame(1, data=c) for c in chunks[1:-1]]
                frames.append(ContinuationFrame(1, data=chunks[-1], flags=["END_HEADERS"]))
                client.raw(*frames)
                await client.until_closed()
                assert client.goaway is not None and client.goaway != 0
            await still_served(server)


async def test_a_continuation_flood_is_a_connection_error(kubeconfig: Path) -> None:
    """CONTINUATION frames that never end the header block (the 2024 CONTINUATION flood):
    at most 64 are kept, then the connection ends."""
    async with proxy(kubeconfig) as server:
        with anyio.fail_after(20):
            async with h2_client(server) as client:
                await client.until(lambda: bool(client.remote_settings))
                frames: list[Any] = [HeadersFrame(1, data=headers_block(client, 1))]
                frames += [ContinuationFrame(1, data=b"\x00" * 1000) for _ in range(200)]
                client.raw(*frames)
                await client.until_closed()
                assert client.goaway is not None and client.goaway != 0
            await still_served(server)


async def test_a_window_past_its_limit_is_a_flow_control_error(kubeconfig: Path) -> None:
    async with proxy(kubeconfig) as server:
        with anyio.fail_after(20):
            async with h2_client(server) as client:
                client.raw(WindowUpdateFrame(0, window_increment=2**31 - 1))
                await client.until_closed()
                assert client.goaway == h2.errors.ErrorCodes.FLOW_CONTROL_ERROR
            await still_served(server)


async def test_a_window_opened_a_byte_at_a_time(cluster: FakeCluster, kubeconfig: Path) -> None:
    """A watch whose window starts at 0 and is opened by 1-byte WINDOW_UPDATEs: the proxy
    sends no DATA frame of less than 1 KiB for a 4 KiB event, and the flood of updates
    ends the connection."""
    zero = {h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 0}
    async with proxy(kubeconfig) as server:
        with anyio.fail_after(20):
            async with h2_client(server, settings=zero) as client:
                sid = client.request("GET", f"{PODS}?watch=1&resourceVersion=0")
                await client.until(lambda: client.replies[sid].status == 200)
                cluster.create("pods", make_pod("big", size=4000))
                for _ in range(12):
                    client.raw(*(WindowUpdateFrame(sid, window_increment=1) for _ in range(100)))
                    await anyio.lowlevel.checkpoint()
                await client.until_closed()
                assert client.goaway == CALM
                assert all(size >= 1024 for size in client.replies[sid].frames)
            await still_served(server)


async def test_a_connection_without_a_request_is_closed(kubeconfig: Path) -> None:
    async with proxy(kubeconfig, header_timeout=0.5) as server:
        with anyio.fail_after(20):
            async with h2_client(server) as client:
                await client.until_closed()  # the preface and SETTINGS, then nothing
                assert client.goaway == h2.errors.ErrorCodes.NO_ERROR
            await still_served(server)
