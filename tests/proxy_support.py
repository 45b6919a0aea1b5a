"""Helpers for the proxy tests: a running proxy, a client for it, a tiny upstream.

The tiny upstream is for what FakeCluster does not serve yet (exec over WebSocket, a
``pods/log`` stream): a real aiohttp server on 127.0.0.1 answering a handful of paths.

The fixtures ``cluster`` and ``kubeconfig`` (:func:`upstream_cluster`,
:func:`upstream_kubeconfig`) are a test module's once it imports them.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any, Self

import aiohttp
import anyio
import pytest
from aiohttp import web

from kubectl_support import kubectl_binary  # noqa: F401 - imported from here before
from kubemux import WatcherRegistry
from kubemux.proxy import ProxyServer, encode_context
from kubemux.testing import FakeCluster, make_pod, write_kubeconfig

UPSTREAM_TOKEN = "upstream-token"
TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"
"""The Accept header kubectl sends for a Table."""


class ProxyClient:
    """Raw HTTP to a running proxy, as kubectl would speak to it."""

    def __init__(self, server: ProxyServer, session: aiohttp.ClientSession) -> None:
        self.server = server
        self.session = session
        self.ssl = server.certificates.client_context()
        self.auth = {"Authorization": f"Bearer {server.token}"}

    def url(self, context: str, path: str) -> str:
        assert self.server.url is not None
        return f"{self.server.url}/clusters/{encode_context(context)}{path}"

    async def request(
        self,
        method: str,
        context: str,
        path: str,
        *,
        headers: Mapping[str, str] | None = None,
        data: bytes | None = None,
        auth: bool = True,
    ) -> tuple[int, Mapping[str, str], bytes]:
        sent = {**(self.auth if auth else {}), **(headers or {})}
        async with self.session.request(
            method, self.url(context, path), headers=sent, data=data, ssl=self.ssl
        ) as resp:
            return resp.status, resp.headers, await resp.read()

    async def get_json(self, context: str, path: str, **kwargs: Any) -> tuple[int, Any]:
        status, _, body = await self.request("GET", context, path, **kwargs)
        return status, json.loads(body) if body else None


@pytest.fixture(name="cluster")
async def upstream_cluster() -> AsyncIterator[FakeCluster]:
    """FakeCluster ``up`` (TLS, token :data:`UPSTREAM_TOKEN`) with pods ``web-1`` and
    ``web-2`` in ``default`` and ``db-1`` in ``data``."""
    async with FakeCluster(tokens={UPSTREAM_TOKEN}, tls=True, name="up") as fake:
        fake.create("pods", make_pod("web-1", size=600))
        fake.create("pods", make_pod("web-2", size=600))
        fake.create("pods", make_pod("db-1", "data", size=600))
        yield fake


@pytest.fixture(name="kubeconfig")
def upstream_kubeconfig(cluster: FakeCluster, tmp_path: Path) -> Path:
    """A kubeconfig with one context, ``prod``, for the ``cluster`` fixture."""
    return write_kubeconfig(tmp_path / "config", {"prod": cluster})


async def informer_watching(cluster: FakeCluster, resource: str = "pods") -> None:
    """Until the proxy's informer for ``resource`` has its long-lived watch open: it starts
    with a streaming list (a watch with ``sendInitialEvents``), which it closes at the
    initial-events-end bookmark and follows with a watch from there; a read it answers can
    be back before that second watch is sent, so a test counting upstream watches waits."""

    def watching() -> bool:
        return cluster.open_watches >= 1 and any(
            r.is_watch and r.resource == resource and "sendInitialEvents" not in r.query
            for r in cluster.requests
        )

    await cluster.wait_for(watching)


@contextlib.asynccontextmanager
async def running_proxy(
    kubeconfig: Path | WatcherRegistry, **options: Any
) -> AsyncIterator[tuple[ProxyServer, ProxyClient]]:
    """A registry (unless given) and a ProxyServer on a free port, with a client."""
    async with contextlib.AsyncExitStack() as stack:
        if isinstance(kubeconfig, WatcherRegistry):
            registry = kubeconfig
        else:
            registry = await stack.enter_async_context(
                WatcherRegistry.from_kubeconfig(str(kubeconfig), transform=None)
            )
        server = ProxyServer(registry, port=0, **options)
        session = await stack.enter_async_context(aiohttp.ClientSession())
        async with anyio.create_task_group() as tg:
            await tg.start(server.serve)
            try:
                yield server, ProxyClient(server, session)
            finally:
                server.shutdown()


POD = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {
        "name": "shell",
        "namespace": "default",
        "uid": "u-1",
        "resourceVersion": "7",
        "creationTimestamp": "2024-01-01T00:00:00Z",
    },
    "spec": {"containers": [{"name": "main", "image": "busybox"}]},
    "status": {
        "phase": "Running",
        "containerStatuses": [
            {
                "name": "main",
                "ready": True,
                "restartCount": 0,
                "image": "busybox",
                "imageID": "",
                "state": {"running": {}},
            }
        ],
    },
}


RESOURCES = {
    "kind": "APIResourceList",
    "groupVersion": "v1",
    "resources": [
        {
            "name": "pods",
            "singularName": "pod",
            "namespaced": True,
            "kind": "Pod",
            "verbs": ["get", "list", "watch"],
            "shortNames": ["po"],
        },
        {"name": "pods/exec", "namespaced": True, "kind": "PodExecOptions", "verbs": ["get"]},
        {"name": "pods/log", "namespaced": True, "kind": "Pod", "verbs": ["get"]},
    ],
}


class TinyUpstream:
    """An API server that knows one pod, its exec (WebSocket, v5.channel.k8s.io: echoes
    the command's arguments on stdout, then a Success status) and its log (a few lines,
    the last one only after :attr:`release_log` is set)."""

    def __init__(self, *, refuse_exec: int | None = None) -> None:
        self.refuse_exec = refuse_exec
        self.requests: list[tuple[str, str, dict[str, str]]] = []
        self.release_log = asyncio.Event()
        self.log_started = asyncio.Event()
        self.exec_closed = asyncio.Event()
        self.received: list[bytes] = []
        self._runner: web.AppRunner | None = None
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def __aenter__(self) -> Self:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = self._runner.addresses[0][1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._runner is not None
        self.release_log.set()  # a log stream still held ends
        await self._runner.cleanup()

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        self.requests.append((request.method, request.path_qs, dict(request.headers)))
        path = request.path
        if path.endswith("/pods/shell/exec"):
            return await self._exec(request)
        if path.endswith("/pods/shell/log"):
            return await self._log(request)
        if path.endswith("/pods/shell"):
            return web.json_response(POD)
        if path == "/api":
            return web.json_response({"kind": "APIVersions", "versions": ["v1"]})
        if path == "/apis":
            return web.json_response({"kind": "APIGroupList", "apiVersion": "v1", "groups": []})
        if path == "/api/v1":
            return web.json_response(RESOURCES)
        status = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 404}
        return web.json_response({**status, "reason": "NotFound", "message": "nf"}, status=404)

    async def _exec(self, request: web.Request) -> web.StreamResponse:
        if self.refuse_exec is not None:
            body = {
                "kind": "Status",
                "apiVersion": "v1",
                "status": "Failure",
                "code": self.refuse_exec,
                "reason": "Forbidden",
                "message": 'pods "shell" is forbidden: exec is not allowed',
            }
            return web.json_response(body, status=self.refuse_exec)
        ws = web.WebSocketResponse(protocols=("v5.channel.k8s.io",))
        await ws.prepare(request)
        words = request.query.getall("command", [])
        if "--stdin" in words:  # echo what arrives on stdin (channel 0) back on stdout
            async for msg in ws:
                if msg.type is aiohttp.WSMsgType.BINARY:
                    self.received.append(msg.data)
                    if msg.data[:1] == b"\x00":
                        await ws.send_bytes(b"\x01" + msg.data[1:])
                    if msg.data[:1] == b"\xff":  # v5: the client closed stdin
                        break
        else:
            await ws.send_bytes(b"\x01" + (" ".join(words[1:]) + "\n").encode())
        await ws.send_bytes(b"\x03" + json.dumps({"metadata": {}, "status": "Success"}).encode())
        await ws.close()
        self.exec_closed.set()
        return ws

    async def _log(self, request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/plain"})
        await resp.prepare(request)
        await resp.write(b"line 1\n")
        self.log_started.set()
        if request.query.get("follow") == "true":
            await self.release_log.wait()
        with contextlib.suppress(ConnectionError):  # the reader may have left
            await resp.write(b"line 2\n")
            await resp.write_eof()
        return resp
