"""Hostile clients of ``kubemux proxy`` (issue 28): does one client starve, bloat or stall the
others? Each attack runs beside a bystander, and the same bystander runs without the attack.

Scenarios (the issue's points 1, 3, 4 and 7, at the issue's sizes):

- ``stalled``: 40 watchers that never read, each with its own label selector, on 40 KB pods
  changing 10 times a second, for 30 s. Target: the proxy's RSS grows by at most 100 MB, and
  a reading watcher still gets every event within 1 s.
- ``scans``: four clients looping LISTs with a 100-requirement label selector over 20k pods,
  for 10 s. Target: the bystander's cached GET at p50 <= 20 ms, max <= 200 ms.
- ``pins``: 1,024 ``limit=1`` LISTs of a 20k-pod namespace that changes meanwhile (each pins
  a snapshot for 5 minutes). Target: <= 50 MB pinned, the pages still exact.
- ``idle``: 1,074 TCP connections that never start TLS, against a proxy whose open-file
  limit is 1,024. Target: every one closed within 10 s (the handshake timeout), and the
  token holder's LIST (a new connection each time, as kubectl's) still served.

Processes: the FakeCluster (20k pods in ``big``, 40 pods of 40 KB in ``fat``) in one, the
proxy (a :class:`kubemux.proxy.ProxyServer` with default settings, TLS, open-file limit 1,024,
a loop-lag probe every 5 ms) in another, fresh for each run; attackers and the bystander (a
cached GET of one pod every 20 ms) in this one. Printed per run: the proxy's RSS growth over
the run, its loop lag (p99, max), the bystander's latency (p50, max, failures), and the
scenario's own figure.

``--before REF`` also runs every scenario with the proxy from git REF (``git archive``; the
proxy child uses only the public API, so any commit since the proxy existed works): the
figures before and after in one run, on one machine, under one load.

Usage: ``python bench/hostile_proxy.py [--only stalled,scans,pins,idle] [--before REF]``
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import resource
import socket
import ssl
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _common import table

BIG = 20_000  # pods in the namespace "big"
FAT = 40  # pods of 40 KB in "fat"
FAT_SIZE = 40_000
FILES = 1024  # the proxy's open-file limit
# 100 requirements that every pod of "big" passes but the last: every pod evaluated in full
HEAVY = ",".join([*(f"k{i:02d}!%3Dv" for i in range(99)), "zz%3Dnothing"])


# ---------------------------------------------------------------------- the cluster process
async def serve_cluster() -> None:
    """FakeCluster; stdin: ``churn NAMESPACE RATE SECONDS`` (each change stamps
    ``bench/sent``), answered ``CHURNED n``."""
    import anyio

    from kubemux.testing import FakeCluster, make_pod

    async with FakeCluster(history_limit=100_000, bookmark_period=3600) as cluster:
        for start in range(0, BIG, 5000):
            cluster.create_many(
                "pods",
                [make_pod(f"p-{i:05d}", "big", size=1000) for i in range(start, start + 5000)],
            )
        fat = [
            make_pod(f"fat-{i:02d}", "fat", labels={"app": "fat"}, size=FAT_SIZE)
            for i in range(FAT)
        ]
        cluster.create_many("pods", fat)
        print("READY", cluster.server, flush=True)
        async for line in anyio.wrap_file(sys.stdin):
            words = line.split()
            if words[:1] != ["churn"]:
                continue
            namespace, rate, seconds = words[1], float(words[2]), float(words[3])
            names = (
                [f"fat-{i:02d}" for i in range(FAT)]
                if namespace == "fat"
                else [f"p-{i:05d}" for i in range(0, BIG, 97)]
            )
            began = time.monotonic()
            count = 0
            while time.monotonic() - began < seconds:
                await anyio.sleep(max(0.0, began + count / rate - time.monotonic()))
                pod = cluster.get("pods", namespace, names[count % len(names)])
                assert pod is not None
                pod["metadata"].setdefault("annotations", {})["bench/sent"] = f"{time.time():.6f}"
                cluster.update("pods", pod)
                count += 1
            print("CHURNED", count, flush=True)


# ---------------------------------------------------------------------- the proxy process
def rss_of(pid: int) -> int:
    with open(f"/proc/{pid}/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


async def serve_proxy(upstream: str, ca_out: str) -> None:
    """A ProxyServer (default settings) for the cluster; prints ``READY url token``; stdin:
    ``lag`` answers the loop lag since the last ``lag`` (JSON: p99, max, in seconds)."""
    import anyio

    from kubemux import WatcherRegistry
    from kubemux.proxy import ProxyServer
    from kubemux.testing import FakeContext, write_kubeconfig

    resource.setrlimit(resource.RLIMIT_NOFILE, (FILES, FILES))
    with tempfile.TemporaryDirectory() as tmp:
        kubeconfig = write_kubeconfig(
            Path(tmp) / "config", {"bench": FakeContext(cluster=upstream)}
        )
        async with WatcherRegistry.from_kubeconfig(str(kubeconfig), transform=None) as registry:
            server = ProxyServer(registry, port=0, tls_read_buffer=16 * 1024)
            Path(ca_out).write_bytes(server.certificates.ca_pem)  # noqa: ASYNC240 - once, at start
            lags: list[float] = []

            async def probe() -> None:
                loop = asyncio.get_running_loop()
                while True:
                    before = loop.time()
                    await asyncio.sleep(0.005)
                    lags.append(loop.time() - before - 0.005)

            async with anyio.create_task_group() as tg:
                url = await tg.start(server.serve)
                tg.start_soon(probe)
                print("READY", url, server.token, flush=True)
                async for line in anyio.wrap_file(sys.stdin):
                    if line.strip() == "lag":
                        got = sorted(lags) or [0.0]
                        lags.clear()
                        p99 = got[min(len(got) - 1, int(len(got) * 0.99))]
                        print(json.dumps({"p99": p99, "max": got[-1]}), flush=True)
                server.shutdown()
                tg.cancel_scope.cancel()


class Child:
    """A child process spoken to by lines on stdin and stdout."""

    def __init__(self, proc: asyncio.subprocess.Process, words: list[str]) -> None:
        self.proc = proc
        self.words = words

    async def ask(self, command: str) -> str:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(command.encode() + b"\n")
        await self.proc.stdin.drain()
        return (await self.proc.stdout.readline()).decode().strip()


@contextlib.asynccontextmanager
async def child(args: list[str], env: dict[str, str] | None = None) -> AsyncIterator[Child]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        __file__,
        *args,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,  # the old proxy logs every refused accept
        env={**os.environ, **(env or {})},
    )
    try:
        assert proc.stdout is not None
        words = (await proc.stdout.readline()).decode().split()
        if words[:1] != ["READY"]:
            raise RuntimeError(f"{args[0]} did not start")
        yield Child(proc, words[1:])
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        try:
            await asyncio.wait_for(proc.wait(), 20)
        except TimeoutError:
            proc.kill()
            await proc.wait()


class Proxy:
    def __init__(self, proc: Child, ca: str) -> None:
        self.child = proc
        self.url, self.token = proc.words
        self.port = int(self.url.rsplit(":", 1)[1])
        self.ssl = ssl.create_default_context(cafile=ca)
        self.auth = {"Authorization": f"Bearer {self.token}"}

    def api(self, path: str) -> str:
        return f"{self.url}/clusters/bench{path}"

    def rss(self) -> int:
        return rss_of(self.child.proc.pid)

    async def lag(self) -> dict[str, float]:
        lag: dict[str, float] = json.loads(await self.child.ask("lag"))
        return lag


# ---------------------------------------------------------------------- clients
class Bystander:
    """A cached GET of one pod every 20 ms; latencies in seconds, failures counted."""

    def __init__(self, proxy: Proxy, *, fresh_connections: bool = False) -> None:
        self.proxy = proxy
        self.fresh = fresh_connections
        self.latencies: list[float] = []
        self.failures = 0

    async def run(self) -> None:
        import aiohttp

        connector = aiohttp.TCPConnector(force_close=self.fresh, ssl=self.proxy.ssl)
        url = self.proxy.api("/api/v1/namespaces/big/pods/p-00001")
        timeout = aiohttp.ClientTimeout(total=5.0)
        async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
            while True:
                began = time.perf_counter()
                try:
                    async with session.get(url, headers=self.proxy.auth) as resp:
                        await resp.read()
                        if resp.status != 200:
                            raise RuntimeError(resp.status)
                    self.latencies.append(time.perf_counter() - began)
                except (aiohttp.ClientError, TimeoutError, RuntimeError, OSError):
                    self.failures += 1
                await asyncio.sleep(max(0.0, 0.02 - (time.perf_counter() - began)))

    def summary(self) -> str:
        got = sorted(self.latencies)
        if not got:
            return f"no answer ({self.failures} failed)"
        p50 = statistics.median(got)
        failed = f", {self.failures} failed" if self.failures else ""
        return f"p50 {p50 * 1e3:.1f} ms, max {got[-1] * 1e3:.0f} ms{failed}"

    def p50_max(self) -> tuple[float, float]:
        got = sorted(self.latencies) or [float("inf")]
        return statistics.median(got), got[-1]


async def stalled_watch(proxy: Proxy, path: str) -> asyncio.StreamWriter:
    """A watch whose client reads the head, then nothing (reading paused, small buffer)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.setblocking(False)
    await asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", proxy.port))
    reader, writer = await asyncio.open_connection(
        sock=sock, ssl=proxy.ssl, server_hostname="127.0.0.1"
    )
    target = "/clusters/bench" + path
    writer.write(
        f"GET {target} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {proxy.token}\r\n\r\n".encode()
    )
    head = await reader.readuntil(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200"), head[:100]
    transport = writer.transport
    transport.pause_reading()
    return writer


async def during(seconds: float, *tasks: Callable[[], Awaitable[None]]) -> None:
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(seconds):
            await asyncio.gather(*(t() for t in tasks))


# ---------------------------------------------------------------------- scenarios
Result = dict[str, Any]


async def stalled(proxy: Proxy, cluster: Child, attack: bool, seconds: float) -> Result:
    import aiohttp

    rv_doc = await get_json(proxy, "/api/v1/namespaces/fat/pods")
    rv = rv_doc["metadata"]["resourceVersion"]
    writers = []
    if attack:
        for i in range(40):
            path = f"/api/v1/pods?watch=1&resourceVersion={rv}&labelSelector=app%3Dfat,w!%3D{i}"
            writers.append(await stalled_watch(proxy, path))
    delays: list[float] = []
    bystander = Bystander(proxy)
    rss0 = proxy.rss()
    await proxy.lag()

    async def read_events() -> None:
        url = proxy.api(f"/api/v1/pods?watch=1&resourceVersion={rv}&labelSelector=app%3Dfat")
        async with (
            aiohttp.ClientSession() as session,
            session.get(url, headers=proxy.auth, ssl=proxy.ssl) as resp,
        ):
            async for line in resp.content:
                event = json.loads(line)
                sent = event["object"]["metadata"].get("annotations", {}).get("bench/sent")
                if sent:
                    delays.append(time.time() - float(sent))

    churned = 0

    async def churn() -> None:
        nonlocal churned
        churned = int((await cluster.ask(f"churn fat 10 {seconds}")).split()[1])

    await during(seconds + 3, bystander.run, read_events, churn)
    growth = proxy.rss() - rss0
    lag = await proxy.lag()
    for writer in writers:
        writer.close()
    missed = churned - len(delays)
    worst = max(delays) if delays else float("inf")
    figure = f"reader: {len(delays)}/{churned} events, max {worst:.2f} s"
    met = growth <= 100e6 and missed <= 0 and worst <= 1.0
    return {"growth": growth, "lag": lag, "bystander": bystander, "figure": figure, "met": met}


async def scans(proxy: Proxy, cluster: Child, attack: bool, seconds: float) -> Result:
    import aiohttp

    await get_json(proxy, "/api/v1/pods?limit=1")
    bystander = Bystander(proxy)
    rss0 = proxy.rss()
    await proxy.lag()
    done = 0

    async def scanner() -> None:
        nonlocal done
        url = proxy.api(f"/api/v1/pods?labelSelector={HEAVY}")
        async with aiohttp.ClientSession() as session:
            while True:
                async with session.get(url, headers=proxy.auth, ssl=proxy.ssl) as resp:
                    await resp.read()
                done += 1

    attackers = [scanner] * 4 if attack else []
    await during(seconds, bystander.run, *attackers)
    lag = await proxy.lag()
    p50, worst = bystander.p50_max()
    figure = f"{done} scans of {BIG} pods" if attack else "-"
    met = p50 <= 0.020 and worst <= 0.200
    return {
        "growth": proxy.rss() - rss0,
        "lag": lag,
        "bystander": bystander,
        "figure": figure,
        "met": met,
    }


async def pins(proxy: Proxy, cluster: Child, attack: bool, seconds: float) -> Result:
    import aiohttp

    await get_json(proxy, "/api/v1/namespaces/big/pods?limit=1")
    bystander = Bystander(proxy)
    rss0 = proxy.rss()
    await proxy.lag()
    listed = 0
    exact = True

    async def lister() -> None:
        nonlocal listed, exact
        url = proxy.api("/api/v1/namespaces/big/pods?limit=1")
        async with aiohttp.ClientSession() as session:
            while listed < 1024:
                async with session.get(url, headers=proxy.auth, ssl=proxy.ssl) as resp:
                    doc = await resp.json()
                    exact = exact and bool(doc["metadata"].get("continue"))
                listed += 1
                await asyncio.sleep(0.01)

    async def churn() -> None:
        await cluster.ask(f"churn big 50 {seconds}")

    await during(seconds + 2, bystander.run, churn, *([lister] if attack else []))
    if attack:  # the pages of one pin, after all that: still the set at its first page
        exact = exact and await paged_exactly(proxy)
    growth = proxy.rss() - rss0
    lag = await proxy.lag()
    figure = f"{listed} pins, pages exact: {exact}" if attack else "churn only"
    return {
        "growth": growth,
        "lag": lag,
        "bystander": bystander,
        "figure": figure,
        "met": growth <= 50e6 and exact,
    }


async def paged_exactly(proxy: Proxy) -> bool:
    first = await get_json(proxy, "/api/v1/namespaces/big/pods?limit=500")
    names = [o["metadata"]["name"] for o in first["items"]]
    doc = first
    while token := doc["metadata"].get("continue"):
        doc = await get_json(proxy, f"/api/v1/namespaces/big/pods?limit=500&continue={token}")
        names += [o["metadata"]["name"] for o in doc["items"]]
    return names == sorted(names) and len(names) == len(set(names)) == BIG


async def idle(proxy: Proxy, cluster: Child, attack: bool, seconds: float) -> Result:
    await get_json(proxy, "/api/v1/pods?limit=1")
    bystander = Bystander(proxy, fresh_connections=True)
    rss0 = proxy.rss()
    await proxy.lag()
    closed: list[float] = []
    held: list[asyncio.StreamWriter] = []

    async def one() -> None:
        try:
            reader, writer = await asyncio.wait_for(
                asyncio.open_connection("127.0.0.1", proxy.port), 5
            )
        except (OSError, TimeoutError):
            return
        began = time.monotonic()  # from its own connect: the handshake timeout's clock
        held.append(writer)
        with contextlib.suppress(OSError):
            await reader.read(1)
            closed.append(time.monotonic() - began)

    async def attackers() -> None:
        await asyncio.gather(*(one() for _ in range(FILES + 50)))

    await during(seconds, bystander.run, *([attackers] if attack else []))
    for writer in held:
        writer.close()
    lag = await proxy.lag()
    figure = "-"
    met = bystander.failures == 0
    if attack:
        last = max(closed) if len(closed) == FILES + 50 else float("inf")
        figure = f"{len(closed)}/{FILES + 50} idle closed, last after {last:.1f} s"
        met = met and last <= 10.0
    return {
        "growth": proxy.rss() - rss0,
        "lag": lag,
        "bystander": bystander,
        "figure": figure,
        "met": met,
    }


async def get_json(proxy: Proxy, path: str) -> Any:
    import aiohttp

    async with (
        aiohttp.ClientSession() as session,
        session.get(proxy.api(path), headers=proxy.auth, ssl=proxy.ssl) as resp,
    ):
        assert resp.status == 200, await resp.text()
        return await resp.json()


SCENARIOS = {
    "stalled": (stalled, 30.0, "RSS <= +100 MB; reader: every event, <= 1 s"),
    "scans": (scans, 10.0, "bystander p50 <= 20 ms, max <= 200 ms"),
    "pins": (pins, 20.0, "<= 50 MB pinned; pages exact"),
    "idle": (idle, 15.0, "idle closed <= 10 s; token holder served"),
}


# ---------------------------------------------------------------------- main
def source_of(ref: str, into: Path) -> Path:
    """``src`` of git ``ref``, extracted under ``into``."""
    data = subprocess.run(
        ["git", "-C", str(HERE.parent), "archive", ref, "src"], check=True, capture_output=True
    ).stdout
    with tarfile.open(fileobj=__import__("io").BytesIO(data)) as archive:
        archive.extractall(into, filter="data")
    return into / "src"


async def main(args: argparse.Namespace) -> None:
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))  # the attackers' sockets
    only = args.only.split(",") if args.only else list(SCENARIOS)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        codes = [("this tree", None)]
        if args.before:
            codes.insert(0, (f"before ({args.before})", str(source_of(args.before, Path(tmp)))))
        ca = str(Path(tmp) / "ca.pem")
        load = os.getloadavg()[0]
        async with child(["--serve-cluster"]) as cluster:
            upstream = cluster.words[0]
            for name in only:
                scenario, seconds, target = SCENARIOS[name]
                for code, src in codes:
                    env = {"PYTHONPATH": src} if src else {}
                    for attack in (False, True):
                        async with child(["--serve-proxy", upstream, ca], env) as proc:
                            proxy = Proxy(proc, ca)
                            result = await scenario(proxy, cluster, attack, seconds)
                        lag = result["lag"]
                        rows.append(
                            [
                                name,
                                code,
                                "attack" if attack else "alone",
                                f"{result['growth'] / 1e6:+.0f} MB",
                                f"{lag['p99'] * 1e3:.0f} / {lag['max'] * 1e3:.0f} ms",
                                result["bystander"].summary(),
                                result["figure"],
                                ("met" if result["met"] else "MISSED") if attack else "",
                            ]
                        )
                        print("  ".join(rows[-1]), flush=True)
                rows.append(["", "", "", "", "", "", f"target: {target}", ""])
    header = [
        "scenario",
        "code",
        "run",
        "proxy RSS",
        "loop lag p99/max",
        "bystander GET",
        "figure",
        "target",
    ]
    title = f"kubemux proxy under hostile clients (load {load:.2f} at start, {os.cpu_count()} CPUs)"
    print()
    print(table(title, header, rows))


if __name__ == "__main__":
    if sys.argv[1:2] == ["--serve-cluster"]:
        import anyio

        anyio.run(serve_cluster)
    elif sys.argv[1:2] == ["--serve-proxy"]:
        import anyio

        anyio.run(serve_proxy, sys.argv[2], sys.argv[3])
    else:
        parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
        parser.add_argument("--only", default="", help="scenarios, comma-separated")
        parser.add_argument("--before", default="", help="also run the proxy from this git ref")
        asyncio.run(main(parser.parse_args()))
