"""Real parts for the shared-watch tests and bench: a redis-server and replica processes."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import orjson

HERE = Path(__file__).resolve().parent
REPLICA = HERE / "share_replica.py"
REDIS_SERVER = shutil.which("redis-server")
STARTUP = 30.0  # seconds a replica may take to start, sync or report: on a loaded 2-core
# machine (load 10), starting Python processes that import kubemux and redis-py took > 10 s


def require_redis_server() -> None:
    """Skip the calling test without redis-server, or fail it in CI (which installs it)."""
    import pytest

    if REDIS_SERVER is None:
        if os.environ.get("CI") == "true":
            pytest.fail("redis-server is missing (CI installs Debian's redis-server package)")
        pytest.skip("redis-server not installed: apt-get install -y redis-server")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class RedisServer:
    """A throwaway redis-server on a free port, persistence off."""

    def __init__(self, port: int | None = None) -> None:
        assert REDIS_SERVER is not None
        self.port = port or free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        assert REDIS_SERVER is not None
        self.proc = subprocess.Popen(
            [
                REDIS_SERVER,
                "--port", str(self.port),
                "--bind", "127.0.0.1",
                "--save", "",
                "--appendonly", "no",
                "--daemonize", "no",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
        deadline = time.monotonic() + 10
        while True:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2) as s:
                    s.sendall(b"PING\r\n")
                    if s.recv(16).startswith(b"+PONG"):
                        return
            except OSError:
                pass
            if time.monotonic() > deadline or self.proc.poll() is not None:
                raise RuntimeError(f"redis-server did not start on port {self.port}")
            time.sleep(0.02)

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait(5)
            self.proc = None

    def command(self, *args: str) -> bytes:
        """One command through redis-cli-free RESP over a socket (raw reply bytes)."""
        out = [f"*{len(args)}\r\n".encode()]
        for a in args:
            b = a.encode()
            out.append(b"$%d\r\n%s\r\n" % (len(b), b))
        with socket.create_connection(("127.0.0.1", self.port), timeout=5) as s:
            s.sendall(b"".join(out))
            s.shutdown(socket.SHUT_WR)
            chunks = []
            while chunk := s.recv(65536):
                chunks.append(chunk)
        return b"".join(chunks)


def _python_path() -> str:
    """This process's import path, absolute (a replica may run in another folder)."""
    return os.pathsep.join(os.path.abspath(p) for p in sys.path if p)


_CHANGED = [anyio.Event()]


def _changed() -> None:
    """Any replica reported something: wake every waiter (they re-check their predicate)."""
    _CHANGED[0].set()
    _CHANGED[0] = anyio.Event()


class Replica:
    """A replica process; its JSON lines are kept in :attr:`events`."""

    def __init__(
        self,
        name: str,
        args: list[str],
        *,
        script: Path = REPLICA,
        cwd: Path | None = None,
        env: dict[str, str] | None = None,
    ) -> None:
        self.name = name
        self.args = args
        self.script = script
        self.cwd = cwd
        self.extra_env = env or {}
        self.proc: anyio.abc.Process | None = None
        self.events: list[dict[str, Any]] = []
        self.stopped = False

    async def start(self, tg: anyio.abc.TaskGroup) -> None:
        env = dict(os.environ)
        env["PYTHONPATH"] = _python_path()
        env.update(self.extra_env)
        self.proc = await anyio.open_process(
            [sys.executable, str(self.script), *self.args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=None,
            env=env,
            cwd=self.cwd,
        )
        tg.start_soon(self._read)

    async def _read(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        buf = b""
        async for chunk in self.proc.stdout:
            buf += chunk
            *lines, buf = buf.split(b"\n")
            for line in lines:
                if line.strip():
                    self.events.append(orjson.loads(line))
            _changed()
        _changed()

    async def wait(self, pred: Callable[[], bool], timeout: float = STARTUP) -> None:  # noqa: ASYNC109
        with anyio.fail_after(timeout):
            while not pred():
                if self.proc is not None and self.proc.returncode is not None:
                    raise RuntimeError(f"replica {self.name} exited {self.proc.returncode}")
                await _CHANGED[0].wait()

    def role(self) -> str | None:
        roles = [e["role"] for e in self.events if e["op"] in ("role", "started")]
        return roles[-1] if roles else None

    def role_at(self, role: str) -> float | None:
        times = [e["t"] for e in self.events if e["op"] == "role" and e["role"] == role]
        return times[-1] if times else None

    async def dump(self, timeout: float = 10.0) -> dict[str, Any]:  # noqa: ASYNC109
        assert self.proc is not None and self.proc.stdin is not None
        n = sum(1 for e in self.events if e["op"] == "dump")
        await self.proc.stdin.send(b"dump\n")
        await self.wait(lambda: sum(1 for e in self.events if e["op"] == "dump") > n, timeout)
        return [e for e in self.events if e["op"] == "dump"][-1]

    def signal(self, sig: signal.Signals) -> None:
        assert self.proc is not None
        self.proc.send_signal(sig)

    async def close(self) -> None:
        if self.proc is None:
            return
        with anyio.move_on_after(5, shield=True):
            if self.proc.returncode is None:
                self.proc.send_signal(signal.SIGCONT)
                self.proc.kill()
            await self.proc.wait()
            await self.proc.aclose()
