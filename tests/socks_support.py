"""A real SOCKS5 server for tests: pproxy (from PyPI) in a process of its own."""

from __future__ import annotations

import contextlib
import re
import signal
import subprocess
import sys
from collections.abc import AsyncIterator

import anyio
import anyio.abc

_SERVING = re.compile(r"Serving on .*:(\d+) by socks5")
_TUNNEL = re.compile(r"^socks5 \S+ -> (\S+)$")


class Pproxy:
    """One pproxy process serving SOCKS5 on 127.0.0.1 (see :func:`pproxy`).

    Attributes:
        port: The port it listens on.
        tunnels: The ``host:port`` of every tunnel it opened, as the client named it (a host
            name here means the proxy resolved it: remote DNS).
    """

    def __init__(self, process: anyio.abc.Process, port: int) -> None:
        self.process = process
        self.port = port
        self.tunnels: list[str] = []
        self.output: list[str] = []
        self._changed = anyio.Event()

    def url(self, userinfo: str | None = None, scheme: str = "socks5") -> str:
        """The proxy's URL, with ``user:password`` (as written in a URL) if given."""
        at = f"{userinfo}@" if userinfo else ""
        return f"{scheme}://{at}127.0.0.1:{self.port}"

    async def wait_tunnels(self, count: int, timeout: float = 15.0) -> None:  # noqa: ASYNC109
        """Wait until it has opened at least ``count`` tunnels."""
        with anyio.fail_after(timeout):
            while len(self.tunnels) < count:
                await self._changed.wait()

    def kill(self) -> None:
        """SIGKILL: the tunnels it carries die with it."""
        with contextlib.suppress(ProcessLookupError):
            self.process.send_signal(signal.SIGKILL)

    async def _read(self, lines: AsyncIterator[str]) -> None:
        async for line in lines:
            self.output.append(line)
            match = _TUNNEL.match(line.strip())
            if match:
                self.tunnels.append(match.group(1))
            self._changed.set()
            self._changed = anyio.Event()


async def _lines(stream: anyio.abc.ByteReceiveStream) -> AsyncIterator[str]:
    buffer = b""
    async for chunk in stream:
        buffer += chunk
        while b"\n" in buffer:
            line, buffer = buffer.split(b"\n", 1)
            yield line.decode("utf-8", "replace")


@contextlib.asynccontextmanager
async def pproxy(auth: str | None = None, port: int = 0) -> AsyncIterator[Pproxy]:
    """Run pproxy as a SOCKS5 server on 127.0.0.1 (``port`` 0: a free one), with ``user:pass``
    authentication if ``auth`` is given (checked on every connection: ``--auth 0``)."""
    listen = f"socks5://127.0.0.1:{port}" + (f"#{auth}" if auth else "")
    command = [sys.executable, "-u", "-m", "pproxy", "-l", listen, "-v", "--auth", "0"]
    async with await anyio.open_process(command, stdin=None, stderr=subprocess.STDOUT) as process:
        assert process.stdout is not None
        lines = _lines(process.stdout)
        try:
            with anyio.fail_after(15):
                first = await anext(lines)
                while not (match := _SERVING.search(first)):
                    if "failed" in first.lower():
                        raise RuntimeError(f"pproxy did not start: {first}")
                    first = await anext(lines)
            proxy = Pproxy(process, int(match.group(1)))
            async with anyio.create_task_group() as tg:
                tg.start_soon(proxy._read, lines)
                try:
                    yield proxy
                finally:
                    proxy.kill()
                    tg.cancel_scope.cancel("the proxy was stopped")
        finally:
            proxy_kill(process)
            with anyio.move_on_after(5, shield=True):
                await process.wait()


def proxy_kill(process: anyio.abc.Process) -> None:
    with contextlib.suppress(ProcessLookupError):
        process.send_signal(signal.SIGKILL)
