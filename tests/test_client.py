"""The per-context client: TLS contexts built off the event loop and shared when safe; the
watch line reader."""

from __future__ import annotations

import asyncio
import ssl
from pathlib import Path

import aiohttp
import anyio
import anyio.lowlevel
import pytest
from aiohttp.base_protocol import BaseProtocol

from kubemux import ContextConfig, ResponseTooLarge, WatchSettings
from kubemux._http.client import open_client
from kubemux._http.transport import Progress, read_blocks
from kubemux._wire.codec import split_block
from kubemux.testing import FakeCluster, FakeContext, kubeconfig_dict


def _context(name: str, contexts: dict[str, FakeCluster | FakeContext | str]) -> ContextConfig:
    return ContextConfig.from_dict(name, kubeconfig_dict(contexts))  # type: ignore[arg-type]


def _ssl_of(client: object) -> object:
    return client._api.rest_client.pool_manager.connector._ssl  # type: ignore[attr-defined]


async def test_clients_without_a_client_cert_share_one_tls_context() -> None:
    a = _context("a", {"a": "https://127.0.0.1:1"})
    b = _context("b", {"b": "https://127.0.0.1:2"})
    async with open_client(a) as ca, open_client(b) as cb:
        assert isinstance(_ssl_of(ca), ssl.SSLContext)
        assert _ssl_of(ca) is _ssl_of(cb)


async def test_tls_cluster_with_its_ca_works_and_other_code_gets_real_contexts(
    tmp_path: Path,
) -> None:
    async with FakeCluster(tls=True, tokens={"t"}) as c:
        cfg = _context("c", {"c": FakeContext(cluster=c, token="t")})
        from kubemux import parse_resource

        async with open_client(cfg) as client:
            with anyio.fail_after(10):
                body = await client.list(
                    parse_resource("pods"),
                    None,
                    {},
                    WatchSettings(request_timeout=5, connect_timeout=5),
                )
        assert b'"kind":"PodList"' in body
    # outside open_client, kubernetes-asyncio's module builds contexts as usual
    from kubernetes_asyncio.client import rest

    from kubemux._http.api_client import _shared_contexts

    fresh = rest.ssl.create_default_context()
    assert isinstance(fresh, ssl.SSLContext)
    assert all(fresh is not shared for shared in _shared_contexts.values())


_LINES_1K = WatchSettings(max_line_size=1024)


class _Response:
    """What the line reader uses of an aiohttp response: a real StreamReader, fed by hand."""

    def __init__(self) -> None:
        loop = asyncio.get_running_loop()
        protocol = BaseProtocol(loop)
        protocol.transport = asyncio.Transport()  # "connected"; never paused (little data)
        self.content = aiohttp.StreamReader(protocol, 2**16, loop=loop)


@pytest.mark.parametrize("cut", [1, 2, 3, 5, 7, 11, 64])
async def test_blocks_hold_whole_lines_however_the_reads_cut_them(cut: int) -> None:
    lines = [b'{"a":1}', b'{"b":"' + b"x" * 100 + b'"}', b"", b" ", b'{"c":3}']
    data = b"\n".join(lines) + b"\n" + b'{"tail":true}'  # no newline at the very end
    resp = _Response()
    seen = []

    async def feed() -> None:  # one read at a time, each taken before the next arrives
        for i in range(0, len(data), cut):
            resp.content.feed_data(data[i : i + cut])
            for _ in range(3):
                await anyio.lowlevel.checkpoint()
        resp.content.feed_eof()

    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(feed)
            async for buf, start, stop in read_blocks(resp, "srv", _LINES_1K, Progress()):  # type: ignore[arg-type]
                block = buf[start:stop]
                assert block.endswith(b"\n") or block == b'{"tail":true}'
                seen.append(block)
    if cut < 8:
        assert len(seen) > 3  # the reads really were cut small
    assert b"".join(seen) == data  # every byte once, in order, no line split across blocks
    assert [line for b in seen for line in split_block((b, 0, len(b)))] == [
        b'{"a":1}',
        lines[1],
        b'{"c":3}',
        b'{"tail":true}',
    ]


async def test_a_line_longer_than_the_limit_is_refused() -> None:
    resp = _Response()
    resp.content.feed_data(b"x" * 5000)
    resp.content.feed_eof()
    with anyio.fail_after(5), pytest.raises(ResponseTooLarge, match="exceeds 1024 bytes"):
        async for _ in read_blocks(resp, "srv", _LINES_1K, Progress()):  # type: ignore[arg-type]
            pass


async def test_a_huge_answer_to_a_post_is_refused_not_held() -> None:
    """A server answering the SelfSubjectReview (the one POST kubemux sends) with an endless
    body: the read stops at a small cap with ResponseTooLarge."""
    from aiohttp import web

    async def endless(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        await response.prepare(request)
        chunk = b" " * 65536
        for _ in range(1024):  # 64 MiB, far beyond the cap; stops when the client leaves
            await response.write(chunk)
        return response

    app = web.Application()
    app.router.add_post("/apis/authentication.k8s.io/v1/selfsubjectreviews", endless)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        cfg = _context("c", {"c": FakeContext(cluster=f"http://127.0.0.1:{port}", token="t")})
        async with open_client(cfg) as client:
            with anyio.fail_after(20), pytest.raises(ResponseTooLarge):
                await client.post_json(
                    "/apis/authentication.k8s.io/v1/selfsubjectreviews", {"kind": "x"}
                )
    finally:
        await runner.cleanup()
