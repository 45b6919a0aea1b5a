"""Run the dashboard with uvicorn inside the current event loop.

``kubemux demo`` needs the FakeClusters, the kubeconfig editor and the web server in one
event loop, and tests need to start and stop the server deterministically; ``uvicorn.run``
would own the loop. :class:`DashboardServer` binds the socket itself (so a busy port is an
``OSError`` naming the address, and port 0 picks a free one), reports readiness through
``task_group.start``, and shuts down gracefully even when its caller is cancelled.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import socket
from collections.abc import Iterator
from types import FrameType

import anyio
import anyio.abc
import uvicorn
from starlette.applications import Starlette

from .app import Dashboard

__all__ = ["DashboardServer"]

log = logging.getLogger(__name__)

STOP_TIMEOUT = 10.0
ACCEPT_BACKLOG = 128  # connections accepted per turn of the event loop, at most
GC_THRESHOLD = 5000  # the collector's youngest-generation threshold while serving


_gc_tuned: list[tuple[int, int, int]] = []  # the thresholds before, once per server serving


@contextlib.contextmanager
def _tuned_gc() -> Iterator[None]:
    """The collector's first threshold at ``GC_THRESHOLD`` (at least) while serving.

    Hundreds of event streams are a few hundred thousand long-lived objects (each request's
    middleware, coroutines and transport); with the default threshold (700) a burst of
    connecting streams runs full collections over all of them, 50-70 ms of CPU each
    (bench/hostile_sse.py, 1000 streams), stalling every stream. With 5000, the young
    collections run a seventh as often, a burst of streams causes no full collection, and
    the young ones take 10-20 ms at most. Restored when the last server stops.
    """
    before = gc.get_threshold()
    _gc_tuned.append(before)
    gc.set_threshold(max(before[0], GC_THRESHOLD), *before[1:])
    try:
        yield
    finally:
        first = _gc_tuned[0]
        _gc_tuned.pop()
        if not _gc_tuned:
            gc.set_threshold(*first)


class _Server(uvicorn.Server):
    """uvicorn's server, ending the dashboard's event streams as soon as it is told to exit."""

    def __init__(self, config: uvicorn.Config, dashboard: Dashboard) -> None:
        super().__init__(config)
        self._dashboard = dashboard
        self._loop = asyncio.get_running_loop()

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:  # a signal handler
        self._loop.call_soon_threadsafe(self._dashboard.close_streams)
        super().handle_exit(sig, frame)


class DashboardServer:
    """A dashboard app served by uvicorn in the running event loop.

    Example::

        server = DashboardServer(create_app(path), port=0)
        async with anyio.create_task_group() as tg:
            url = await tg.start(server.serve)   # the registry runs, the port listens
            ...
            server.shutdown()                     # serve() returns once everything stopped

    Args:
        app: An app from :func:`create_app`.
        host: Address to listen on; the default is loopback only.
        port: Port; 0 picks a free one (see :attr:`url`).
        log_level: uvicorn's log level.
        ssl_certfile: Serve HTTPS with this certificate (PEM), and ``ssl_keyfile``'s key
            (a per-user dashboard's session cookie is then ``Secure``).

    While it serves, the garbage collector's first threshold is at least 5000 (restored
    afterwards; see ``_tuned_gc``) and uvicorn accepts at most 128 connections per turn of
    the event loop: hundreds of event streams keep the loop responsive.
    """

    def __init__(
        self,
        app: Starlette,
        *,
        host: str = "127.0.0.1",
        port: int = 8000,
        log_level: str = "warning",
        ssl_certfile: str | None = None,
        ssl_keyfile: str | None = None,
    ) -> None:
        self.app = app
        self.ssl_certfile = ssl_certfile
        self.ssl_keyfile = ssl_keyfile
        self.host = host
        self.port = port
        self.log_level = log_level
        self.url: str | None = None
        self._server: _Server | None = None

    @property
    def dashboard(self) -> Dashboard:
        dashboard = self.app.state.dashboard
        assert isinstance(dashboard, Dashboard)
        return dashboard

    def _bind(self) -> socket.socket:
        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        # IPPROTO_TCP, not 0: asyncio sets TCP_NODELAY only on sockets that say they are TCP
        # (without it, Nagle and a delayed ACK held each new connection's answer ~40 ms)
        sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((self.host, self.port))
            sock.listen(128)  # connections wait in the backlog until uvicorn accepts them
        except OSError as exc:
            sock.close()
            where = f"{self.host}:{self.port}"
            raise OSError(f"cannot listen on {where}: {exc.strerror or exc}") from exc
        sock.setblocking(False)
        port = sock.getsockname()[1]
        host = f"[{self.host}]" if family == socket.AF_INET6 else self.host
        scheme = "https" if self.ssl_certfile else "http"
        self.url = f"{scheme}://{host}:{port}/"
        return sock

    async def serve(
        self, *, task_status: anyio.abc.TaskStatus[str] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """Serve until :meth:`shutdown` (or Ctrl-C); report the URL once the registry runs.

        Raises:
            OSError: The address cannot be bound.
            Exception: What the app's startup raised (a kubeconfig that cannot be loaded).

        Cancellation: the server is shut down gracefully (bounded in time) before the
        cancellation goes on.
        """
        sock = self._bind()
        config = uvicorn.Config(
            self.app,
            log_level=self.log_level,
            log_config=None,
            access_log=False,
            lifespan="on",
            ws="none",
            timeout_graceful_shutdown=5,
            backlog=ACCEPT_BACKLOG,
            ssl_certfile=self.ssl_certfile,
            ssl_keyfile=self.ssl_keyfile,
        )
        server = self._server = _Server(config, self.dashboard)
        ready = anyio.Event()
        startup: list[BaseException | None] = []
        done = anyio.Event()

        def started(error: BaseException | None) -> None:
            startup.append(error)
            ready.set()

        self.dashboard.on_startup(started)
        shield = anyio.CancelScope(shield=True)

        async def run() -> None:
            try:
                with shield, _tuned_gc():
                    await server.serve(sockets=[sock])
            except SystemExit:  # uvicorn's answer to a failed startup; reported below
                pass
            finally:
                done.set()
                ready.set()

        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(run)
                try:
                    await ready.wait()
                    if startup and startup[0] is not None:
                        raise startup[0]
                    if not startup:
                        raise RuntimeError("the dashboard server stopped before it started")
                    assert self.url is not None
                    task_status.started(self.url)
                    await done.wait()
                finally:
                    with anyio.CancelScope(shield=True):
                        self.shutdown()
                        with anyio.move_on_after(STOP_TIMEOUT):
                            await done.wait()
                        if not done.is_set():  # pragma: no cover - a stuck app
                            log.error("the dashboard did not stop within %.0fs", STOP_TIMEOUT)
                            server.force_exit = True
                            shield.cancel()
        finally:
            sock.close()

    def shutdown(self) -> None:
        """Ask the server to stop: event streams end, then the registry closes. Idempotent."""
        self.dashboard.close_streams()
        if self._server is not None:
            self._server.should_exit = True
