"""kubemux proxy against its peers: LIST of 10k and 100k pods (JSON, Table), the real
``kubectl proxy`` (a pass-through) to the same upstream, 1,000 downstream watches of one
resource at 100 events/s, and repeated ``kubectl get`` reads. One table, issue #20's targets.

Run: ``python bench/proxy.py [--sizes 10000,100000] [--watchers 1000] [--rate 100]
[--seconds 20] [--kubectl-runs 1000]``. FakeCluster runs in its own process (this file with
``--serve``), the proxy (a :class:`kubemux.proxy.ProxyServer`, TLS) in this one, the
watching clients in another (``--watch-client``); LISTs are fetched with ``curl`` (best of 3,
the whole body read), kubectl is the real one (1.32 where installed). Beside each wall-clock
time, the CPU time the serving process spent per object (for ``kubectl proxy``, its own process
only: the upstream's work for it is not counted), which a loaded machine disturbs less.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
from _common import table
from _proxy_h2 import clients as h2_clients
from _proxy_h2 import curl_version, trimmed_rss_kib

from kubemux import WatcherRegistry
from kubemux.proxy import ProxyServer, ProxySettings, WatchLimits, create_app
from kubemux.testing import FakeCluster, FakeContext, make_pod, write_kubeconfig

HERE = Path(__file__).resolve().parent
TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io"
CHURN_PODS = 200
CURL_PARALLEL = 300  # the most transfers curl --parallel runs at once
TLS_READ_BUFFER = 16 * 1024  # what `kubemux proxy` sets


# ----------------------------------------------------------------------- the upstream
async def serve(n: int, size: int) -> None:
    """FakeCluster with ``n`` pods in 20 namespaces and 200 small pods in ``bench``;
    commands on stdin: ``counts`` and ``churn RATE COUNT`` (each change carries the time
    it was made in the ``bench/sent`` annotation)."""
    async with FakeCluster(history_limit=200_000, bookmark_period=3600) as cluster:
        for start in range(0, n, 5000):
            cluster.create_many(
                "pods",
                [
                    make_pod(f"web-{i:07d}", f"ns-{i % 20}", size=size)
                    for i in range(start, min(n, start + 5000))
                ],
            )
        bench = [make_pod(f"churn-{i:03d}", "bench", size=300) for i in range(CHURN_PODS)]
        cluster.create_many("pods", bench)
        print("READY", cluster.server, cluster.resource_version, flush=True)
        stdin = anyio.wrap_file(sys.stdin)
        async for line in stdin:
            words = line.split()
            if words == ["counts"]:
                counts = {
                    "watch_requests": cluster.request_count("watch", "pods"),
                    "open_watches": cluster.open_watches,
                    "list_get": cluster.request_count(("list", "get"), "pods"),
                    "rv": cluster.resource_version,
                }
                print(json.dumps(counts), flush=True)
            elif words[:1] == ["churn"]:
                rate, count = float(words[1]), int(words[2])
                began = time.monotonic()
                for i in range(count):
                    await anyio.sleep(max(0.0, began + i / rate - time.monotonic()))
                    pod = bench[i % CHURN_PODS]
                    pod["metadata"].setdefault("annotations", {})["bench/sent"] = (
                        f"{time.time():.6f}"
                    )
                    cluster.update("pods", pod)
                print("CHURNED", count, flush=True)


class Upstream:
    """The FakeCluster process, spoken to over its stdin/stdout."""

    def __init__(self, proc: subprocess.Popen[str], url: str) -> None:
        self.proc = proc
        self.url = url

    def ask(self, command: str) -> str:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()
        return self.proc.stdout.readline().strip()

    def counts(self) -> dict[str, Any]:
        counts: dict[str, Any] = json.loads(self.ask("counts"))
        return counts


@contextlib.contextmanager
def upstream(n: int, size: int) -> Any:
    proc = subprocess.Popen(
        [sys.executable, __file__, "--serve", str(n), str(size)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        words = proc.stdout.readline().split()
        if words[:1] != ["READY"]:
            raise RuntimeError("the FakeCluster process did not start")
        yield Upstream(proc, words[1])
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()


# ---------------------------------------------------------------------- the clients
def kubectl_binary() -> str:
    found = shutil.which("kubectl")
    if not found:
        raise SystemExit("kubectl is needed on PATH")
    pinned = os.path.join(os.path.dirname(os.path.realpath(found)), "kubectl.1.32")
    return pinned if os.access(pinned, os.X_OK) else found


def cpu_seconds(pid: int) -> float:
    """CPU time (user + system) a process has used."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def curl(
    url: str, *, accept: str = "", token: str = "", ca: str = "", pid: int | None = None
) -> float:
    """Seconds for one GET with the whole body read: the best of 3 wall-clock times, or
    with ``pid``, the CPU time that process spent per GET (less sensitive to a loaded
    machine than wall-clock time)."""
    # HTTP/1.1 (curl would negotiate h2 with the proxy: the h2 rows ask for it themselves)
    args = ["curl", "-sS", "--http1.1", "-o", "/dev/null", "-w", "%{http_code} %{time_total}"]
    if accept:
        args += ["-H", f"Accept: {accept}"]
    if token:
        args += ["-H", f"Authorization: Bearer {token}"]
    if ca:
        args += ["--cacert", ca]
    best = float("inf")
    cpu = cpu_seconds(pid) if pid is not None else 0.0
    for _ in range(3):
        result = await anyio.run_process([*args, url])
        code, seconds = result.stdout.decode().split()
        if code != "200":
            raise RuntimeError(f"GET {url}: {code}")
        best = min(best, float(seconds))
    if pid is not None:
        return (cpu_seconds(pid) - cpu) / 3
    return best


@contextlib.asynccontextmanager
async def kubectl_proxy(kubeconfig: Path) -> AsyncIterator[tuple[str, int]]:
    """The real ``kubectl proxy`` on a free port: its URL and process id."""
    proc = await asyncio.create_subprocess_exec(
        kubectl_binary(),
        "--kubeconfig",
        str(kubeconfig),
        "proxy",
        "--port=0",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
    )
    try:
        assert proc.stdout is not None
        line = (await proc.stdout.readline()).decode()
        found = re.search(r"127\.0\.0\.1:(\d+)", line)
        if found is None:
            raise RuntimeError(f"kubectl proxy said {line!r}")
        yield f"http://127.0.0.1:{found.group(1)}", proc.pid
    finally:
        proc.kill()
        await proc.wait()


def profiler(out: str | None) -> subprocess.Popen[bytes] | None:
    """``py-spy record`` of this process into ``out`` (its raw format), or None."""
    if not out:
        return None
    return subprocess.Popen(
        ["py-spy", "record", "-p", str(os.getpid()), "-o", out, "-f", "raw", "-r", "200"],
        stderr=subprocess.DEVNULL,
    )


def children_cpu() -> float:
    """CPU time (user + system) of this process's children that have ended."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def rss_kib() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


async def watch_client(url: str, ca: str, token: str, count: int, events: int) -> None:
    """``count`` watches of ``url``; prints ``OPEN`` once all answered, then, once each has
    ``events`` events (or 60 s passed), a JSON line: events per watch and delivery delays
    (from the probes: every 10th watch decodes its events, the others count lines)."""
    import ssl

    import aiohttp

    context = ssl.create_default_context(cafile=ca)
    connector = aiohttp.TCPConnector(limit=0, ssl=context)
    got = [0] * count
    delays: list[float] = []
    opened = 0
    all_open = asyncio.Event()
    headers = {"Authorization": f"Bearer {token}"}

    async with aiohttp.ClientSession(connector=connector) as session:

        async def one(i: int) -> None:
            nonlocal opened
            timeout = aiohttp.ClientTimeout(total=None)
            async with session.get(url, headers=headers, timeout=timeout) as resp:
                assert resp.status == 200, resp.status
                opened += 1
                if opened == count:
                    all_open.set()
                probe = i % 10 == 0
                pending = b""
                while got[i] < events:
                    data = await resp.content.readany()
                    if not data:
                        return
                    if probe:
                        now = time.time()
                        *lines, pending = (pending + data).split(b"\n")
                        for line in lines:
                            sent = json.loads(line)["object"]["metadata"]["annotations"]
                            delays.append(now - float(sent["bench/sent"]))
                        got[i] += len(lines)
                    else:
                        got[i] += data.count(b"\n")

        async with asyncio.timeout(600):
            tasks = [asyncio.create_task(one(i)) for i in range(count)]
            await all_open.wait()
            print("OPEN", flush=True)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(60 + events / 50):
                    await asyncio.gather(*tasks)
            for task in tasks:
                task.cancel()
    delays.sort()
    summary = {
        "complete": sum(1 for g in got if g >= events),
        "lost": sum(max(0, events - g) for g in got),
        "p50": delays[len(delays) // 2] if delays else None,
        "p99": delays[int(len(delays) * 0.99)] if delays else None,
        "max": delays[-1] if delays else None,
    }
    print(json.dumps(summary), flush=True)


async def floor(count: int, kind: str, read_buffer: int) -> None:
    """What ``count`` held connections cost with no kubemux: ``tls``, a bare asyncio TLS
    server (the proxy's certificates, no HTTP); ``uvicorn``, a streaming ASGI app that
    answers 200 and waits for the client to go (uvicorn's httptools protocol, TLS). The
    connections come from ``curl --parallel``, as the watches do; prints the RSS per
    connection: the floor under what a watch costs."""
    import socket

    import uvicorn

    from kubemux.proxy import make_certificates

    answered = 0
    all_answered = asyncio.Event()

    def one_more() -> None:
        nonlocal answered
        answered += 1
        if answered == count:
            all_answered.set()

    class Hold(asyncio.Protocol):
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            assert isinstance(transport, asyncio.WriteTransport)
            self.transport = transport

        def data_received(self, data: bytes) -> None:  # an answer that never ends
            self.transport.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
            one_more()

    async def app(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"", "more_body": True})
        one_more()
        while (await receive())["type"] != "http.disconnect":
            pass

    asyncio.sslproto.SSLProtocol.max_size = read_buffer  # as the proxy's tls_read_buffer
    certificates = make_certificates()
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(1024)
    port = sock.getsockname()[1]
    served: Any
    if kind == "tls":
        served = await asyncio.get_running_loop().create_server(
            Hold, sock=sock, ssl=certificates.server_context()
        )
    else:
        config = uvicorn.Config(app, lifespan="off", log_level="warning", access_log=False)
        config.load()
        config.ssl = certificates.server_context()
        served = uvicorn.Server(config)
        serving = asyncio.create_task(served.serve([sock]))
        while not served.started:  # noqa: ASYNC110 (uvicorn sets a flag, no event)
            await asyncio.sleep(0.01)
    with tempfile.TemporaryDirectory() as tmp:
        ca = Path(tmp) / "ca.pem"
        ca.write_bytes(certificates.ca_pem)
        before = rss_kib()
        url = f"https://127.0.0.1:{port}/"
        curls = [
            await asyncio.create_subprocess_exec(
                "curl", "-sS", "--no-progress-meter", "--parallel", "--parallel-immediate",
                "--parallel-max", str(CURL_PARALLEL), "--cacert", str(ca),
                *[arg for _ in range(first, min(count, first + CURL_PARALLEL))
                  for arg in ("-o", "/dev/null", url)],
                stderr=asyncio.subprocess.DEVNULL,
            )
            for first in range(0, count, CURL_PARALLEL)
        ]  # fmt: skip
        async with asyncio.timeout(120):
            await all_answered.wait()
            await asyncio.sleep(1)  # the answers written
        print(json.dumps({"kib_per_connection": (rss_kib() - before) / count}), flush=True)
        for proc in curls:
            proc.kill()
            await proc.wait()
    if kind == "tls":
        served.close()
    else:
        served.should_exit = True
        await serving


def floor_kib(count: int, kind: str, read_buffer: int = TLS_READ_BUFFER) -> float:
    result = subprocess.run(
        [sys.executable, __file__, "--floor", str(count), kind, str(read_buffer)],
        capture_output=True, text=True, check=True, timeout=300,
    )  # fmt: skip
    return float(json.loads(result.stdout.splitlines()[-1])["kib_per_connection"])


# -------------------------------------------------------------------------- the runs
def per_object(seconds: float, n: int) -> str:
    return f"{seconds / n * 1e6:.1f} us"


async def run(args: argparse.Namespace) -> list[list[str]]:
    rows: list[list[str]] = []
    kubectl = kubectl_binary()
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp)
        for n in args.sizes:
            with upstream(n, 1000) as up:
                source = write_kubeconfig(home / f"up-{n}", {"bench": FakeContext(cluster=up.url)})
                if "lists" in args.parts:
                    rows += await lists(n, up, source, home, args)
                    print(rows[-2:], file=sys.stderr, flush=True)
                if n == args.sizes[0] and {"watches", "kubectl"} & args.parts:
                    rows += await watches(up, source, home, args, kubectl)
                if n == args.sizes[0] and "h2" in args.parts:
                    rows += await h2_watches(up, source, home, args)
    return rows


@contextlib.asynccontextmanager
async def proxy(
    source: Path, home: Path, settings: ProxySettings | None = None
) -> AsyncIterator[tuple[ProxyServer, str]]:
    async with (
        WatcherRegistry.from_kubeconfig(str(source), transform=None) as registry,
        anyio.create_task_group() as tg,
    ):
        server = ProxyServer(registry, port=0, settings=settings, tls_read_buffer=TLS_READ_BUFFER)
        await tg.start(server.serve)
        ca = home / "proxy-ca.pem"
        ca.write_bytes(server.certificates.ca_pem)
        try:
            yield server, str(ca)
        finally:
            server.shutdown()


@contextlib.asynccontextmanager
async def plain_http(registry: WatcherRegistry) -> AsyncIterator[str]:
    """:func:`kubemux.proxy.create_app` on ``registry`` in plain uvicorn, HTTP, no token
    (as ``kubectl proxy`` serves): what the proxy costs without TLS."""
    import socket

    import uvicorn

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)
    config = uvicorn.Config(
        create_app(registry), lifespan="off", log_level="warning", access_log=False
    )
    server = uvicorn.Server(config)
    async with anyio.create_task_group() as tg:
        tg.start_soon(server.serve, [sock])
        with anyio.fail_after(10):
            while not server.started:  # noqa: ASYNC110 (uvicorn sets a flag, no event)
                await anyio.sleep(0.01)
        try:
            yield f"http://127.0.0.1:{sock.getsockname()[1]}"
        finally:
            server.should_exit = True


async def lists(
    n: int, up: Upstream, source: Path, home: Path, args: argparse.Namespace
) -> list[list[str]]:
    path = "/api/v1/pods"
    async with proxy(source, home) as (server, ca):
        url = f"{server.url}/clusters/bench{path}"
        token = server.token
        await curl(url, token=token, ca=ca)  # the informers start
        await curl(url, token=token, ca=ca, accept=TABLE)
        before = up.counts()["list_get"]
        me = os.getpid()
        mine = await curl(url, token=token, ca=ca)
        mine_cpu = await curl(url, token=token, ca=ca, pid=me)
        mine_table = await curl(url, token=token, ca=ca, accept=TABLE)
        mine_table_cpu = await curl(url, token=token, ca=ca, accept=TABLE, pid=me)
        h2_list = await anyio.to_thread.run_sync(curl_version, url, token, ca, "--http2", me)
        h1_list = await anyio.to_thread.run_sync(curl_version, url, token, ca, "--http1.1", me)
        async with plain_http(server.registry) as plain:
            await curl(plain + "/clusters/bench" + path)  # its own views start
            bare = await curl(plain + "/clusters/bench" + path)
            bare_cpu = await curl(plain + "/clusters/bench" + path, pid=me)
        upstream_lists = up.counts()["list_get"] - before
    direct = await curl(up.url + path)
    async with kubectl_proxy(source) as (kp, pid):
        theirs = await curl(kp + path)
        theirs_cpu = await curl(kp + path, pid=pid)
        theirs_table = await curl(kp + path, accept=TABLE)
        theirs_table_cpu = await curl(kp + path, accept=TABLE, pid=pid)
    total = n + CHURN_PODS

    def cell(wall: float, cpu: float) -> str:
        return f"{per_object(wall, total)} ({per_object(cpu, total)} CPU)"

    return [
        [f"LIST {n // 1000}k pods, JSON", "<= 2 us/object", cell(mine, mine_cpu),
         cell(theirs, theirs_cpu), (f"{theirs / mine:.1f}x faster; FakeCluster direct "
         f"{per_object(direct, total)}; the same app over plain HTTP "
         f"{cell(bare, bare_cpu)}; {upstream_lists} upstream LIST")],
        [f"LIST {n // 1000}k pods, Table", "<= 10 us/object", cell(mine_table, mine_table_cpu),
         cell(theirs_table, theirs_table_cpu),
         f"{theirs_table / mine_table:.1f}x faster"],
        [f"LIST {n // 1000}k pods, JSON, h2", "within 10 % of HTTP/1.1 (TLS)",
         cell(*h2_list), "-",
         (f"HTTP/1.1 in the same minute {cell(*h1_list)}: h2 {h2_list[0] / h1_list[0]:.2f}x "
          f"wall, {h2_list[1] / h1_list[1]:.2f}x CPU")],
    ]  # fmt: skip


async def watches(
    up: Upstream, source: Path, home: Path, args: argparse.Namespace, kubectl: str
) -> list[list[str]]:
    rows: list[list[str]] = []
    count, rate, seconds = args.watchers, args.rate, args.seconds
    events = int(rate * seconds)
    pacing = {} if args.write_interval is None else {"write_interval": args.write_interval}
    settings = ProxySettings(max_watches_per_credential=count + 10, watch=WatchLimits(**pacing))
    async with proxy(source, home, settings) as (server, ca):
        base = f"{server.url}/clusters/bench/api/v1/namespaces/bench/pods"
        await curl(base, token=server.token, ca=ca)
        if "watches" in args.parts:
            rv = up.counts()["rv"]
            watches_before = up.counts()["watch_requests"]
            rss_before = trimmed_rss_kib()
            url = f"{base}?watch=1&resourceVersion={rv}&timeoutSeconds={int(seconds) + 30}"
            # the watchers: curl (C; --parallel runs up to 300 transfers in one process, so
            # 1,000 watches are 4 processes, not 1,000 a 2-core machine would spend its time
            # switching between) writing to files, and a few Python probes that time each
            # event (the time it was made is in the object)
            probes = max(1, count // 100)
            outputs = home / "watches"
            outputs.mkdir(exist_ok=True)
            curls = []
            plain = count - probes
            for first in range(0, plain, CURL_PARALLEL):
                group = range(first, min(plain, first + CURL_PARALLEL))
                targets = [arg for i in group for arg in ("-o", str(outputs / f"{i}.json"), url)]
                curls.append(
                    await asyncio.create_subprocess_exec(
                        "nice", "-n", "19", "curl", "-sS", "--http1.1", "--no-progress-meter", "--parallel",
                    "--parallel-immediate",
                        "--parallel-max", str(CURL_PARALLEL), "--cacert", ca,
                        "-H", f"Authorization: Bearer {server.token}", *targets,
                    )
                )  # fmt: skip
            client = await asyncio.create_subprocess_exec(
                sys.executable,
                __file__,
                "--watch-client",
                url,
                ca,
                server.token,
                str(probes),
                str(events),
                stdout=asyncio.subprocess.PIPE,
            )
            assert client.stdout is not None
            assert (await client.stdout.readline()).strip() == b"OPEN"
            proxy_state = server.app.state.proxy
            with anyio.fail_after(120):
                while sum(s.watches for s in proxy_state.status()) < count:  # noqa: ASYNC110
                    await anyio.sleep(0.05)
            rss_after = trimmed_rss_kib()
            cpu_before = cpu_seconds(os.getpid())
            children_before = children_cpu()
            spy = profiler(args.profile)
            churned = await anyio.to_thread.run_sync(up.ask, f"churn {rate} {events}")
            if spy is not None:
                spy.send_signal(signal.SIGINT)
                spy.wait()
            result = json.loads(await client.stdout.readline())
            await client.wait()
            for proc in curls:
                await proc.wait()  # their watches end at timeoutSeconds
            cpu = (cpu_seconds(os.getpid()) - cpu_before) / (events * count)
            clients_cpu = (children_cpu() - children_before) / (events * count)
            sizes = [(outputs / f"{i}.json").stat().st_size for i in range(min(10, plain))]
            line_bytes = sum(sizes) / max(1, len(sizes)) / max(1, events)
            got = [(outputs / f"{i}.json").read_bytes().count(b"\n") for i in range(count - probes)]
            counts = up.counts()
            p50 = (result["p50"] or float("nan")) * 1000
            p99 = (result["p99"] or float("nan")) * 1000
            complete = result["complete"] + sum(1 for g in got if g == events)
            lost = result["lost"] + sum(max(0, events - g) for g in got)
            per_watch = (rss_after - rss_before) / count
            bare_tls = await anyio.to_thread.run_sync(floor_kib, count, "tls")
            bare_uvicorn = await anyio.to_thread.run_sync(floor_kib, count, "uvicorn")
            rows.append(
                [f"{count} watches, {rate:g} events/s, {seconds:g} s",
                 "1 upstream watch, p99 <= 100 ms, 0 lost, <= 20 KB/watch",
                 f"p99 {p99:.0f} ms (p50 {p50:.0f}, max {(result['max'] or 0) * 1000:.0f})", "-",
                 (f"{counts['open_watches']} upstream watch open, "
                 f"{counts['watch_requests'] - watches_before} new; {lost} events lost "
                 f"({complete}/{count} complete, {churned}); {per_watch:.1f} KiB RSS/watch (without kubemux, "
                 f"{count} connections held by a bare asyncio TLS server: {bare_tls:.1f} "
                 f"KiB each, by a streaming app in uvicorn over TLS: {bare_uvicorn:.1f}); "
                 f"proxy CPU {cpu * 1e6:.1f} us per event delivered, the clients' "
                 f"{clients_cpu * 1e6:.1f} us; {line_bytes:.0f} bytes per event")]
            )  # fmt: skip
            print(rows[-1], file=sys.stderr, flush=True)
        if "kubectl" in args.parts:
            # repeated kubectl reads through the proxy's kubeconfig
            out = home / "proxy.yaml"
            server.write_kubeconfig(out)
            runs = args.kubectl_runs
            limit = anyio.Semaphore(2)

            async def one(i: int) -> None:
                name = f"web-{i % 1000:07d}"
                read = (
                    ("get", "pod", name, "-n", f"ns-{i % 1000 % 20}")
                    if i % 2
                    else (
                        "get",
                        "pods",
                        "-n",
                        "bench",
                        "--field-selector",
                        "metadata.name=churn-001",
                    )
                )
                async with limit:
                    result = await anyio.run_process(
                        [kubectl, "--kubeconfig", str(out), "--cache-dir", str(home / "kc"), *read],
                        check=False,
                    )
                if result.returncode != 0:
                    raise RuntimeError(result.stderr.decode())

            await one(0)  # the informers these reads need start (their LISTs are not counted)
            await one(1)
            before = up.counts()["list_get"]
            started = time.perf_counter()
            async with anyio.create_task_group() as tg:
                for i in range(runs):
                    tg.start_soon(one, i)
            elapsed = time.perf_counter() - started
            reads = up.counts()["list_get"] - before
            rows.append(
                [f"{runs} kubectl get reads", "0 upstream LIST/GET", f"{reads} upstream", "-",
                 f"{elapsed / runs * 1000:.0f} ms per kubectl run (2 at a time)"]
            )  # fmt: skip
    return rows


async def h2_watches(
    up: Upstream, source: Path, home: Path, args: argparse.Namespace
) -> list[list[str]]:
    """Watches of one resource held by h2 clients (``_proxy_h2``, kubectl 1.33's windows,
    250 streams per connection) in separate processes, with the proxy's default settings
    (the watch cap must admit them all): ``--watchers`` at ``--rate``, then grown to
    ``--h2-watchers`` and 5 events at 1/s."""
    rows: list[list[str]] = []
    count, rate, seconds, big = args.watchers, args.rate, args.seconds, args.h2_watchers
    events = int(rate * seconds)
    pacing = {} if args.write_interval is None else {"write_interval": args.write_interval}
    me = os.getpid()
    async with proxy(source, home, ProxySettings(watch=WatchLimits(**pacing))) as (server, ca):
        base = f"{server.url}/clusters/bench/api/v1/namespaces/bench/pods"
        await curl(base, token=server.token, ca=ca)
        proxy_state = server.app.state.proxy

        async def held(n: int) -> int:
            """Watches open once ``n`` are (or 120 s passed: a loaded machine's informer
            may restart, ending some, which these clients do not open again)."""
            with anyio.move_on_after(120):
                while sum(s.watches for s in proxy_state.status()) < n:  # noqa: ASYNC110
                    await anyio.sleep(0.05)
            return sum(s.watches for s in proxy_state.status())

        rv = up.counts()["rv"]
        watches_before = up.counts()["watch_requests"]
        url = f"{base}?watch=1&resourceVersion={rv}"
        rss0 = trimmed_rss_kib()
        async with h2_clients() as clients:
            conns = count // 250 or 1  # a process per connection, as kubectl would be
            await clients.add(url, ca, server.token, conns, min(count, 250), conns)
            await held(count)
            rss1 = trimmed_rss_kib()
            cpu0 = cpu_seconds(me)
            churned = await anyio.to_thread.run_sync(up.ask, f"churn {rate} {events}")
            result = await clients.report(events)
            cpu = (cpu_seconds(me) - cpu0) / (events * count)
            counts = up.counts()
            hub = server.http2
            assert hub is not None
            rows.append(
                [f"{count} h2 watches (250/connection), {rate:g} events/s, {seconds:g} s",
                 "1 upstream watch, p99 <= 100 ms, 0 lost, CPU <= half HTTP/1.1's",
                 (f"p99 {(result['p99'] or 0) * 1000:.0f} ms (p50 "
                  f"{(result['p50'] or 0) * 1000:.0f}, max {(result['max'] or 0) * 1000:.0f})"), "-",
                 (f"{counts['open_watches']} upstream watch open, "
                  f"{counts['watch_requests'] - watches_before} new; {result['lost']} events lost "
                  f"({result['complete']}/{count} complete, {churned}; streams ended by the "
                  f"proxy {result['ended']}, reset {result['resets']}); "
                  f"{(rss1 - rss0) / count:.2f} KiB RSS/watch; proxy CPU {cpu * 1e6:.2f} us per "
                  f"event delivered; {hub.counts['h2']} h2 connections")]
            )  # fmt: skip
            print(rows[-1], file=sys.stderr, flush=True)
            if big > count:
                began = time.perf_counter()
                more = big - count
                now = f"{base}?watch=1&resourceVersion={up.counts()['rv']}"  # no replay
                step = args.h2_step or more // 250  # connections opened at a time
                for first in range(0, more // 250, step):
                    conns = min(step, more // 250 - first)
                    await clients.add(now, ca, server.token, conns, 250, min(4, conns))
                    holding = await held(count + (first + conns) * 250)
                opened = time.perf_counter() - began
                rss2 = trimmed_rss_kib()
                cpu0 = cpu_seconds(me)
                await anyio.to_thread.run_sync(up.ask, "churn 1 5")
                result = await clients.report(5)
                cpu = (cpu_seconds(me) - cpu0) / (5 * big)
                rows.append(
                    [f"{big} h2 watches ({big // 250} connections), 5 events at 1/s",
                     "<= 2 KiB RSS per added stream, each event to all within 5 s, 0 lost",
                     (f"max {(result['max'] or 0) * 1000:.0f} ms (p99 "
                      f"{(result['p99'] or 0) * 1000:.0f})"), "-",
                     (f"{(rss2 - rss1) / more:.2f} KiB RSS per added stream; {more} opened in "
                      f"{opened:.1f} s ({step * 250} at a time); {result['lost']} events lost ({result['complete']}/{big} "
                      f"complete); proxy CPU {cpu * 1e6:.2f} us per event delivered; "
                      f"{up.counts()['open_watches']} upstream watch open; {holding} held")]
                )  # fmt: skip
                print(rows[-1], file=sys.stderr, flush=True)
    return rows


def main() -> None:
    if sys.argv[1:2] == ["--serve"]:
        anyio.run(serve, int(sys.argv[2]), int(sys.argv[3]))
        return
    if sys.argv[1:2] == ["--floor"]:
        asyncio.run(floor(int(sys.argv[2]), sys.argv[3], int(sys.argv[4])))
        return
    if sys.argv[1:2] == ["--watch-client"]:
        url, ca, token, count, events = sys.argv[2:7]
        asyncio.run(watch_client(url, ca, token, int(count), int(events)))
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10000,100000")
    parser.add_argument("--watchers", type=int, default=1000)
    parser.add_argument("--h2-watchers", type=int, default=10000, help="the large h2 row")
    parser.add_argument(
        "--h2-step",
        type=int,
        default=0,
        help="h2 connections the large row opens at a time (0: all at once)",
    )
    parser.add_argument("--rate", type=float, default=100.0)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--kubectl-runs", type=int, default=1000)
    parser.add_argument(
        "--parts",
        default="lists,watches,h2,kubectl",
        help="which rows: lists, watches, h2, kubectl",
    )
    parser.add_argument(
        "--write-interval", type=float, help="the watches' pacing (default: the library's)"
    )
    parser.add_argument("--profile", help="py-spy raw samples of the watch churn to this file")
    args = parser.parse_args()
    args.parts = set(args.parts.split(","))
    args.sizes = [int(s) for s in args.sizes.split(",")]
    if not shutil.which("curl"):
        raise SystemExit("curl is needed")
    started = time.strftime("%Y-%m-%d %H:%M")
    load = os.getloadavg()[0]
    rows = anyio.run(run, args)
    title = (
        f"kubemux proxy vs kubectl proxy ({started}, {os.cpu_count()} CPUs, "
        f"load {load:.1f} at start, Python {sys.version.split()[0]})"
    )
    print(table(title, ["measure", "target", "kubemux proxy", "kubectl proxy", "notes"], rows))


if __name__ == "__main__":
    main()
