"""A hostile upstream behind the proxy (issue 28, points 8-10): what one API server sends
must never reach another origin, another client or the process.

- 8: an exec WebSocket answered with a redirect is not followed (the context's client
  certificate and credential would be presented there): the client gets a Status;
- 9: an upstream ``Set-Cookie`` is not kept: no later request of any client carries it;
- 10: a header value outside latin-1, or not UTF-8, is a Kubernetes ``Status`` (5xx), and
  the proxy keeps serving.

The upstream is :class:`hostile_upstream.HostileUpstream`, raw HTTP/1.1 over a real socket.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, Self

import aiohttp
import anyio
import pytest
from aiohttp import web

from hostile_upstream import HostileUpstream
from kubemux.proxy import ProxyServer
from kubemux.testing import FakeContext, write_kubeconfig
from proxy_support import ProxyClient, running_proxy
from support import TIMEOUT

SHELL = "/api/v1/namespaces/default/pods/shell"


@contextlib.asynccontextmanager
async def hostile_proxy(
    tmp_path: Path, **options: Any
) -> AsyncIterator[tuple[HostileUpstream, ProxyServer, ProxyClient]]:
    async with HostileUpstream() as up:
        kubeconfig = write_kubeconfig(tmp_path / "config", {"h": FakeContext(cluster=up.url)})
        async with running_proxy(kubeconfig, **options) as (server, client):
            yield up, server, client


class Origin:
    """Another origin (plain aiohttp): records every request that reaches it."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, dict[str, str]]] = []
        self._runner: web.AppRunner | None = None
        self.url = ""

    async def __aenter__(self) -> Self:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.url = f"http://127.0.0.1:{self._runner.addresses[0][1]}"
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._runner is not None
        await self._runner.cleanup()

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        self.requests.append((request.path_qs, dict(request.headers)))
        return web.Response(status=400, text="you should not be here")


async def test_an_exec_websocket_redirected_upstream_is_not_followed(tmp_path: Path) -> None:
    async with Origin() as elsewhere, hostile_proxy(tmp_path) as (up, _, client):
        up.redirect_to = f"{elsewhere.url}/steal?from=proxy"
        url = client.url("h", f"{SHELL}/exec?command=id&stdout=true")
        with anyio.fail_after(TIMEOUT):
            with pytest.raises(aiohttp.WSServerHandshakeError) as info:
                async with client.session.ws_connect(
                    url, headers=client.auth, ssl=client.ssl, protocols=("v5.channel.k8s.io",)
                ):
                    pass
        assert elsewhere.requests == []  # nothing, and no credential, went to the other origin
        assert info.value.status == 502
        assert [r.path for r in up.requests if r.path.endswith("/exec")] == [f"{SHELL}/exec"]
        # the SPDY fallback (kubectl's, after a refused WebSocket) gets the same answer
        status, _, body = await client.request(
            "POST",
            "h",
            f"{SHELL}/exec?command=id&stdout=true",
            headers={"Connection": "Upgrade", "Upgrade": "SPDY/3.1"},
        )
        assert elsewhere.requests == []
        assert status >= 400
        doc = json.loads(body)
        assert doc["kind"] == "Status" and "302" in doc["message"]


async def test_an_upstream_cookie_is_never_sent_again(tmp_path: Path) -> None:
    async with hostile_proxy(tmp_path) as (up, _, client):
        with anyio.fail_after(TIMEOUT):
            status, headers, _ = await client.request("GET", "h", SHELL)
            assert status == 200 and "Set-Cookie" not in headers  # not passed down either
            for _ in range(2):  # later requests: the same client, or any other
                status, _, _ = await client.request("GET", "h", f"{SHELL}/log")
                assert status == 200
        cookies = [r.target for r in up.requests if "cookie" in r.headers]
        assert cookies == []  # kubectl keeps no cookie jar; neither does the proxy


@pytest.mark.parametrize(
    ("name", "header"),
    [
        ("outside latin-1", b"X-Odd: \xe2\x82\xac uro"),  # U+20AC, as UTF-8
        ("not UTF-8", b"X-Bad: \xff\xfe\xfd"),
        ("an ETag outside latin-1", b'ETag: "\xe2\x82\xac"'),
    ],
)
async def test_an_upstream_header_no_client_can_read_is_a_status(
    tmp_path: Path, name: str, header: bytes
) -> None:
    async with hostile_proxy(tmp_path) as (up, _, client):
        odd = f"{SHELL}/status"
        up.raw_headers[odd] = [b"Content-Type: application/json", header]
        up.raw_headers["/version"] = [b"Content-Type: application/json", header]
        with anyio.fail_after(TIMEOUT):
            status, headers, body = await client.request("GET", "h", odd)  # passed through
            assert 500 <= status < 600, (name, status)
            assert headers["Content-Type"] == "application/json", body[:200]
            doc = json.loads(body)
            assert doc["kind"] == "Status" and doc["code"] == status
            assert b"Traceback" not in body
            # the discovery cache keeps a few headers (ETag among them) and drops the rest
            status, headers, body = await client.request("GET", "h", "/version")
            if header.startswith(b"ETag"):
                assert 500 <= status < 600 and json.loads(body)["kind"] == "Status", status
            else:
                assert status == 200 and json.loads(body) == {}  # what the server sent
                assert not {"X-Odd", "X-Bad"} & set(headers)
            status, _, body = await client.request("GET", "h", SHELL)  # still serving
            assert status == 200 and json.loads(body)["metadata"]["name"] == "shell"
