"""An open event or log stream does not hold up the server's shutdown (uvicorn run as users
run it).

uvicorn waits for every open response before the app's lifespan shutdown; the dashboard
chains its handlers of SIGINT/SIGTERM to end its streams first (dashboard/_signals.py).
Each case runs uvicorn in a process of its own, on a socket bound here (no port race).
"""

from __future__ import annotations

import signal
import socket
import sys
from pathlib import Path

import anyio
import httpx
import pytest

from kubemux.testing import FakeCluster, make_pod, write_kubeconfig
from support import TIMEOUT

ALONE = """
import sys, uvicorn
from kubemux.dashboard import create_app
uvicorn.run(create_app(kubeconfig=sys.argv[1]), fd=int(sys.argv[2]), log_level="warning")
"""

MOUNTED = """
import contextlib, sys, uvicorn
from starlette.applications import Starlette
from starlette.routing import Mount
import kubemux
from kubemux.dashboard import create_app

@contextlib.asynccontextmanager
async def lifespan(app):
    async with kubemux.WatcherRegistry.from_kubeconfig(sys.argv[1]) as registry:
        app.mount("/dashboard", create_app(registry))
        yield

uvicorn.run(Starlette(lifespan=lifespan), fd=int(sys.argv[2]), log_level="warning")
"""


EVENTS = ("api/stream", "event: synced")
LOG = ("api/contexts/prod/pods/default/web-1/log?follow=1", "first line")


@pytest.mark.parametrize(
    ("script", "prefix", "signum", "stream"),
    [
        (ALONE, "/", signal.SIGINT, EVENTS),
        (ALONE, "/", signal.SIGTERM, LOG),
        (MOUNTED, "/dashboard/", signal.SIGINT, LOG),  # the log stream the only one
        (MOUNTED, "/dashboard/", signal.SIGTERM, EVENTS),
    ],
    ids=[
        "alone-sigint-events",
        "alone-sigterm-log",
        "mounted-sigint-log",
        "mounted-sigterm-events",
    ],
)
async def test_open_streams_do_not_hold_up_uvicorns_shutdown(
    tmp_path: Path, script: str, prefix: str, signum: int, stream: tuple[str, str]
) -> None:
    async with FakeCluster() as c:
        c.create("pods", make_pod("web-1"))
        c.append_log("default", "web-1", "first line\n")
        path = write_kubeconfig(tmp_path / "config", {"prod": c})
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        sock.bind(("127.0.0.1", 0))
        sock.listen(16)
        port = sock.getsockname()[1]
        with sock:
            proc = await anyio.open_process(
                [sys.executable, "-c", script, str(path), str(sock.fileno())],
                pass_fds=[sock.fileno()],
                stdout=None,
                stderr=None,
            )
        try:
            path, first = stream
            url = f"http://127.0.0.1:{port}{prefix}{path}"
            async with (
                httpx.AsyncClient(timeout=TIMEOUT) as client,
                client.stream("GET", url) as response,
            ):
                assert response.status_code == 200
                lines = response.aiter_lines()
                with anyio.fail_after(TIMEOUT):
                    while first not in await anext(lines):
                        pass
                proc.send_signal(signum)  # the stream is open, its client reading nothing
                with anyio.fail_after(TIMEOUT):
                    await proc.wait()
            assert proc.returncode in (0, -signum, 128 + signum)
        finally:
            if proc.returncode is None:
                proc.kill()
                with anyio.CancelScope(shield=True):
                    await proc.wait()
