"""Examples are tested code: each one runs for real against FakeClusters, over HTTP."""

from __future__ import annotations

import contextlib
import importlib.util
import socket
import sys
import urllib.parse
from collections.abc import AsyncIterator
from pathlib import Path
from types import ModuleType
from typing import Any

import anyio
import httpx
import orjson
import pytest
import uvicorn
from aiohttp import web

from kubemux.testing import FakeCluster, make_pod, write_kubeconfig
from support import TIMEOUT, wait_until

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture
async def kubeconfig(tmp_path: Path) -> AsyncIterator[tuple[Path, FakeCluster, FakeCluster]]:
    async with FakeCluster() as a, FakeCluster() as b:
        a.create("pods", make_pod("web-1"))
        b.create("pods", make_pod("db-1", "data"))
        yield write_kubeconfig(tmp_path / "config", {"prod": a, "dev": b}), a, b


async def get_until(client: httpx.AsyncClient, path: str, ok: Any) -> Any:
    """GET ``path`` until ``ok(json)`` holds (the registry syncs in the background)."""
    body: Any = None

    async def answered() -> bool:
        nonlocal body
        response = await client.get(path)
        body = response.json() if response.status_code == 200 else None
        return response.status_code == 200 and bool(ok(body))

    await wait_until(answered, poll=0.05)
    return body


async def test_watch_pods_example(
    kubeconfig: tuple[Path, FakeCluster, FakeCluster], capsys: pytest.CaptureFixture[str]
) -> None:
    path, _, _ = kubeconfig
    with anyio.fail_after(TIMEOUT):
        await load("watch_pods").main(str(path), limit=2)
    out = capsys.readouterr().out
    assert "contexts: prod, dev | current: prod" in out
    assert "prod         ADDED     default/web-1" in out
    assert "dev          ADDED     data/db-1" in out


class Server(uvicorn.Server):
    """uvicorn's server, with an event for "listening, lifespan started"."""

    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self.ready = anyio.Event()

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        self.ready.set()


@contextlib.asynccontextmanager
async def uvicorn_serving(app: Any) -> AsyncIterator[str]:
    """``app`` served by uvicorn in this event loop, its lifespan on; yields the URL."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    config = uvicorn.Config(app, lifespan="on", log_level="warning", log_config=None)
    server = Server(config)
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(lambda: server.serve(sockets=[sock]))
            with anyio.fail_after(TIMEOUT):
                await server.ready.wait()
            try:
                yield f"http://127.0.0.1:{sock.getsockname()[1]}"
            finally:
                server.should_exit = True
    finally:
        sock.close()


async def test_fastapi_example(kubeconfig: tuple[Path, FakeCluster, FakeCluster]) -> None:
    path, a, _ = kubeconfig
    app = load("fastapi_app").build_app(str(path))
    async with (
        uvicorn_serving(app) as url,
        httpx.AsyncClient(base_url=url, timeout=TIMEOUT) as client,
    ):
        pods = await get_until(client, "/pods", lambda rows: len(rows) == 2)
        assert {(p["context"], p["name"], p["phase"]) for p in pods} == {
            ("prod", "web-1", "Running"),
            ("dev", "db-1", "Running"),
        }
        one = await client.get("/pods/dev/data/db-1")
        assert one.status_code == 200 and one.json()["metadata"]["name"] == "db-1"
        assert (await client.get("/pods/nope/data/db-1")).status_code == 404
        a.create("pods", make_pod("web-2"))
        await get_until(client, "/pods", lambda rows: len(rows) == 3)
        # the mounted dashboard serves the same registry
        contexts = (await client.get("/dashboard/api/contexts")).json()["contexts"]
        assert [c["name"] for c in contexts] == ["prod", "dev"]
        listed = (await client.get("/dashboard/api/contexts/prod/pods")).json()["items"]
        assert sorted(p["metadata"]["name"] for p in listed) == ["web-1", "web-2"]
        page = await client.get("/dashboard/")
        assert page.status_code == 200 and 'src="static/app.js"' in page.text
        assert (await client.get("/dashboard/static/app.js")).status_code == 200


async def test_aiohttp_example(kubeconfig: tuple[Path, FakeCluster, FakeCluster]) -> None:
    path, a, _ = kubeconfig
    example = load("aiohttp_app")
    app = example.build_app(str(path))
    runner = web.AppRunner(app, shutdown_timeout=TIMEOUT)
    with anyio.fail_after(TIMEOUT):
        await runner.setup()  # enters the cleanup_ctx: the registry runs
    cleaned = False
    try:
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        url = f"http://127.0.0.1:{runner.addresses[0][1]}"
        async with httpx.AsyncClient(base_url=url, timeout=TIMEOUT) as client:
            pods = await get_until(client, "/pods", lambda rows: len(rows) == 2)
            assert {(p["context"], p["name"]) for p in pods} == {("prod", "web-1"), ("dev", "db-1")}
            async with client.stream("GET", "/changes") as response:
                assert response.headers["content-type"] == "text/event-stream"
                seen: set[tuple[str, str, str]] = set()
                with anyio.fail_after(TIMEOUT):
                    async for line in response.aiter_lines():
                        if line.startswith("data: "):
                            event = orjson.loads(line[6:])
                            seen.add((event["context"], event["type"], event["name"]))
                            if ("prod", "ADDED", "web-2") in seen:
                                break
                            if len(seen) == 2:
                                a.create("pods", make_pod("web-2"))  # a live change follows
                assert {("prod", "ADDED", "web-1"), ("dev", "ADDED", "db-1")} <= seen
                assert len(app[example.STREAMS]) == 1
                # shutting down with the stream open: on_shutdown ends it, cleanup is quick
                with anyio.fail_after(TIMEOUT):
                    cleaned = True
                    await runner.cleanup()
                assert not app[example.STREAMS]
    finally:
        if not cleaned:
            with anyio.fail_after(TIMEOUT):
                await runner.cleanup()


async def test_proxy_example(tmp_path: Path) -> None:
    async with FakeCluster() as cluster:
        cluster.create("pods", make_pod("web-1"))
        cluster.create("pods", make_pod("db-1", "data"))
        name = "arn:aws:eks:eu-west-1:123456789012:cluster/prod"
        path = write_kubeconfig(tmp_path / "config", {name: cluster})
        app = load("proxy_app").build_app(str(path), api_key="secret")
        async with (
            uvicorn_serving(app) as url,
            httpx.AsyncClient(base_url=url, timeout=TIMEOUT) as client,
        ):
            # the context segment as a frontend writes it (encodeURIComponent)
            pods = f"/k8s/clusters/{urllib.parse.quote(name, safe='')}/api/v1/pods"
            assert (await client.get(pods)).status_code == 401
            key = {"X-API-Key": "secret"}
            listed = await client.get(pods, headers=key)
            assert listed.status_code == 200, listed.text
            assert listed.headers["x-kubemux-cache"] == "hit"
            items = listed.json()["items"]
            assert sorted(p["metadata"]["name"] for p in items) == ["db-1", "web-1"]
            cluster.clear_requests()
            again = await client.get(pods, headers=key)
            assert again.json() == listed.json()
            assert [r for r in cluster.requests if not r.is_watch] == []
            missing = await client.get("/k8s/clusters/nope/api/v1/pods", headers=key)
            assert missing.status_code == 404 and missing.json()["reason"] == "NotFound"
