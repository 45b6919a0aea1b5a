"""File descriptors: each watch holds one connection.

The commands raise the soft RLIMIT_NOFILE to the hard one (as Go programs do), and running
out anyway is one clear error per context (:class:`kubemux.TooManyOpenFiles`), not a
traceback or a retry storm. The CLI runs in a subprocess whose limit is lowered; the
FakeClusters run in another one, so their sockets do not count.
"""

from __future__ import annotations

import contextlib
import os
import re
import resource
import subprocess
import sys
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import orjson
import pytest
import yaml

import kubemux
from kubemux import WatcherRegistry
from kubemux._runtime import FD_LIMIT_CAP, open_watches
from kubemux.testing import FakeCluster, make_pod
from process_support import INTERRUPTED, run_until

HERE = Path(__file__).parent
CONTEXTS = 100
LIMIT = 64
"""A soft limit some contexts' watches do not fit in (about 55 of 100 do): the CLI opens
every context at once and gives them ten seconds together, its cost (~8 ms of CPU per
context) grows with their number, so a few hundred missed that under a load of 7."""


@contextlib.asynccontextmanager
async def fake_clusters(count: int, pods: int) -> AsyncIterator[list[str]]:
    """``count`` FakeClusters with ``pods`` pods each, in a process of their own."""
    command = [sys.executable, str(HERE / "fake_cluster_process.py"), str(count), str(pods)]
    async with await anyio.open_process(command) as process:
        assert process.stdout is not None and process.stdin is not None
        try:
            line = b""
            with anyio.fail_after(30):
                while not line.endswith(b"\n"):
                    line += await process.stdout.receive()
            yield orjson.loads(line)["servers"]
        finally:
            with contextlib.suppress(Exception):
                await process.stdin.aclose()  # the servers stop when their stdin closes
            with anyio.move_on_after(10, shield=True):
                await process.wait()
            if process.returncode is None:
                process.kill()


def write_contexts(path: Path, servers: list[str], n: int) -> list[str]:
    """A kubeconfig of ``n`` contexts spread over ``servers``, each with its own entries."""
    names = [f"ctx-{i:03d}" for i in range(n)]
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": f"c{i}", "cluster": {"server": servers[i % len(servers)]}} for i in range(n)
        ],
        "users": [{"name": f"u{i}", "user": {}} for i in range(n)],
        "contexts": [
            {"name": name, "context": {"cluster": f"c{i}", "user": f"u{i}", "namespace": "default"}}
            for i, name in enumerate(names)
        ],
        "current-context": names[0],
    }
    path.write_text(yaml.dump(doc, Dumper=getattr(yaml, "CSafeDumper", yaml.SafeDumper)))
    return names


def _lower_limit(soft: int, hard: int | None) -> Any:
    def preexec() -> None:  # runs in the child between fork and exec
        now_hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, now_hard if hard is None else hard))

    return preexec


_LIMIT_THEN_EXEC = """
import os, resource, sys
soft, hard = int(sys.argv[1]), int(sys.argv[2])
now_hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
resource.setrlimit(resource.RLIMIT_NOFILE, (soft, now_hard if hard < 0 else hard))
os.execv(sys.argv[3], sys.argv[3:])
"""


def _limited(soft: int, hard: int | None) -> list[str]:
    """A command prefix that lowers the open-file limit, then execs the rest (a preexec_fn
    is unsafe in a process with threads, as this one reads its child's output)."""
    return [sys.executable, "-c", _LIMIT_THEN_EXEC, str(soft), str(-1 if hard is None else hard)]


async def run_watch(
    kubeconfig: Path, soft: int, hard: int | None, done: Callable[[str, str], bool]
) -> tuple[int, str, str]:
    """``kubemux watch pods --all-contexts`` under that limit, until ``done(out, err)`` holds
    (then 1 s more, to see what a retry storm would print), ended by Ctrl-C as a person ends
    it. The end waits for the output, not for a clock: under a load of 14 a fixed 2 s ran out
    before the first row."""
    command = [sys.executable, "-m", "kubemux.cli", "watch", "pods", "--all-contexts"]
    command += ["--kubeconfig", str(kubeconfig)]
    env = {**os.environ, "KUBEMUX_LOG": "info", "PYTHONUNBUFFERED": "1"}
    return await run_until([*_limited(soft, hard), *command], done, env=env)


def _printed(out: str) -> Counter[str]:
    """Pods printed per context."""
    return Counter(line.split()[0] for line in out.splitlines() if " pod-" in line)


@pytest.fixture
async def servers() -> AsyncIterator[list[str]]:
    async with fake_clusters(3, 2) as found:
        yield found


async def test_watch_all_contexts_past_a_soft_limit_of_64(
    tmp_path: Path, servers: list[str]
) -> None:
    names = write_contexts(tmp_path / "config", servers, CONTEXTS)

    def all_printed(out: str, err: str) -> bool:
        printed = _printed(out)
        return len(printed) == len(names) and min(printed.values()) >= 2

    code, out, err = await run_watch(tmp_path / "config", LIMIT, None, all_printed)
    assert code == INTERRUPTED, err
    printed = _printed(out)
    assert set(printed) == set(names), err[-2000:]  # before: about 55 of 100, then EMFILE
    assert all(count == 2 for count in printed.values())
    assert "too many open files" not in err.lower()
    assert re.search(rf"raised the open-file limit from {LIMIT} to \d+", err), err[-2000:]


async def test_with_no_room_to_raise_each_context_says_why_once(
    tmp_path: Path, servers: list[str]
) -> None:
    names = write_contexts(tmp_path / "config", servers, CONTEXTS)

    def all_answered(out: str, err: str) -> bool:
        failed = set(re.findall(r"context '(ctx-\d+)': .*too many open files", err))
        return len(failed | set(_printed(out))) == len(names)

    code, out, err = await run_watch(tmp_path / "config", LIMIT, LIMIT, all_answered)
    assert code == INTERRUPTED, err
    assert "Traceback" not in err
    printed = _printed(out)
    failed = re.findall(r"context '(ctx-\d+)': .*too many open files", err)
    assert failed, err[-2000:]
    assert len(failed) == len(set(failed))  # once per context: no retry storm in the output
    assert set(failed) | set(printed) == set(names)
    assert not set(failed) & set(printed)
    line = next(line for line in err.splitlines() if "too many open files" in line)
    assert f"this process may open {LIMIT} files, and that is its hard limit too" in line
    assert "watches are open, one connection each" in line
    warnings = [line for line in err.splitlines() if "WARNING" in line]
    assert len(warnings) == len(failed), "\n".join(w for w in warnings if "open files" not in w)


def test_accepting_without_descriptors_is_one_line_not_a_traceback(tmp_path: Path) -> None:
    """A server command whose accept() hits EMFILE: asyncio pauses accepting for a second
    and reports it each time; the command says it once, in one line."""
    script = tmp_path / "server.py"
    script.write_text(
        """
import asyncio, resource, socket, sys
from kubemux.cli._limits import open_file_limits
from kubemux.cli._output import configure_logging

async def main():
    configure_logging(0, None)
    with open_file_limits():
        server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        held = []
        try:
            while True:
                held.append(socket.socket())  # use up the descriptors, keep a few
        except OSError:
            for _ in range(4):
                held.pop().close()
        clients = []
        for _ in range(8):
            try:
                clients.append(socket.create_connection(("127.0.0.1", port)))
            except OSError:
                break
        await asyncio.sleep(2.5)  # asyncio retries accept() every second meanwhile
        print("done", flush=True)

asyncio.run(main())
"""
    )
    result = subprocess.run(
        [sys.executable, str(script)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        preexec_fn=_lower_limit(64, 64),
    )
    assert result.returncode == 0 and "done" in result.stdout, result.stderr
    assert "Traceback" not in result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert "cannot accept connections: too many open files" in lines[0]
    assert "may open 64 files, and that is its hard limit too" in lines[0]


# ---------------------------------------------------------------------- the library call
@contextlib.contextmanager
def soft_limit(soft: int) -> Iterator[tuple[int, int]]:
    before = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, before[1]))
    try:
        yield before
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, before)


def test_raise_fd_limit_lifts_the_soft_limit_to_the_hard_one() -> None:
    with soft_limit(128) as (_, hard):
        result = kubemux.raise_fd_limit()
        now = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        target = FD_LIMIT_CAP if hard == resource.RLIM_INFINITY else min(hard, FD_LIMIT_CAP)
        assert result == (128, target) and now == target
        assert kubemux.raise_fd_limit() == (target, target)  # again: nothing to do


def test_raise_fd_limit_never_lowers() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    assert kubemux.raise_fd_limit() is not None
    assert resource.getrlimit(resource.RLIMIT_NOFILE)[0] >= soft
    assert resource.getrlimit(resource.RLIMIT_NOFILE)[1] == hard


async def test_open_watches_are_counted_while_they_are_open(tmp_path: Path) -> None:
    async with FakeCluster(tokens={"t"}) as cluster:
        cluster.create("pods", make_pod("p"))
        path = tmp_path / "config"
        from kubemux.testing import write_kubeconfig

        write_kubeconfig(path, {"a": cluster})
        before = open_watches()
        async with WatcherRegistry.from_kubeconfig([str(path)], follow=False) as registry:
            with anyio.fail_after(20):
                await registry.watch("a", "pods")
                await registry.watch("a", "configmaps")
            await cluster.wait_for(
                lambda: cluster.open_watches == 2 and open_watches() == before + 2, timeout=20
            )
            await registry.stop_watcher("a")
            assert open_watches() == before


def test_an_exec_plugin_without_descriptors_says_so(tmp_path: Path) -> None:
    """Starting a plugin needs pipes: out of descriptors, the CredentialError names the limit
    (it used to read like a missing program: "could not be started: [Errno 24] ...")."""
    config = tmp_path / "config"
    user = {
        "exec": {
            "apiVersion": "client.authentication.k8s.io/v1",
            "command": sys.executable,
            "args": [str(HERE / "plugins" / "exec_plugin.py")],
            "interactiveMode": "Never",
        }
    }
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:1"}}],
        "users": [{"name": "u", "user": user}],
        "contexts": [{"name": "a", "context": {"cluster": "c", "user": "u"}}],
    }
    config.write_text(yaml.safe_dump(doc))
    script = tmp_path / "plugin.py"
    script.write_text(
        f"""
import socket, sys, anyio
from kubemux import CredentialError, CredentialPool, load_kubeconfig

async def main():
    cfg = load_kubeconfig([{str(config)!r}]).contexts["a"]
    pool = CredentialPool()
    provider = pool.acquire(cfg)
    held = []
    try:
        while True:
            held.append(socket.socket())
    except OSError:
        pass
    try:
        await provider.current()
    except CredentialError as exc:
        print(exc)
    finally:
        pool.release(provider)

anyio.run(main)
"""
    )
    result = subprocess.run(
        [sys.executable, str(script)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        preexec_fn=_lower_limit(64, 64),
    )
    assert result.returncode == 0, result.stderr
    assert "could not be started: too many open files" in result.stdout, result.stdout
    assert "may open 64 files, and that is its hard limit too" in result.stdout
