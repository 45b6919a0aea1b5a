"""The dashboard at fleet scale, in a real browser: today's page beside a baseline's.

    python bench/dashboard_scale.py [--fleets one,fleet,cli] [--before REF] [--timeout 60]
                                    [--idle 10] [--no-before]

Fleets (issue 31):

``one``
    5,000 pods in one context (one FakeCluster).
``fleet``
    1,000 contexts: 10 FakeClusters x 100 contexts each, 12 pods per cluster (12,000 rows).
``cli``
    ``kubemux get pods -A --all-contexts`` on the ``fleet``: when the first row is printed,
    when the command ends, its peak memory.

The FakeClusters run in a process of their own (as API servers do); with 1,000 contexts
each cluster sends its watches bookmarks every 5 to 9.5 s (kube-apiserver sends one about
every minute: over 1,000 watches, some every second, as here). Each dashboard is
``kubemux dashboard`` in a process of its own, run from this checkout's ``src`` ("after")
and from ``git archive REF`` ("before", default the commit before issue 31's work), on the
same clusters, one after the other in the same run. The page is opened in headless Chromium (Debian's ``/usr/bin/chromium`` through
Playwright) once the dashboard's informers are synced, so the figures are the page's and
the streams', not the informers' start (the warm-up is printed apart).

Measured from the navigation (the page's ``performance.now()``):

- first rows: the first row of the table on screen;
- all rows: the page holds every row (its count says N); with ``fleet`` also the context
  cards (all 1,000);
- reachable: the last row (in the table's order) shown after typing its name in the filter
  box, and after scrolling to the bottom of the table;
- longest main-thread block: the longest task (a ``longtask`` PerformanceObserver, tasks
  over 50 ms) while loading, while idle after it, while typing in the filter and while
  scrolling;
- one change: a pod's restart count changed in its cluster until the page shows it;
- idle stream: bytes per second the page's event stream receives while nothing changes
  (Chromium's network events), after the load;
- picker: ``GET /api/namespaces`` and ``GET /api/resources`` from the page, the first call
  and the median of four more (an answer may name contexts still ``pending``: "namespaces
  complete" is the time until none is).

A measurement that hits ``--timeout`` prints ``> N s``; the measurements after a page never
finished loading print ``-``. The machine's load average is printed: this machine has 2
cores shared with others, and Chromium, the dashboard and the clusters share them too.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Self

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

from _common import table

BEFORE = "ed8ae06"  # main before issue 31's work
CHROMIUM = os.environ.get("KUBEMUX_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
DEVTOOLS = ["--remote-debugging-port=0", "about:blank"]
DASHBOARD = [sys.executable, "-m", "kubemux.cli", "dashboard"]


@dataclass(frozen=True)
class Fleet:
    name: str
    clusters: int
    contexts_per_cluster: int
    pods_per_cluster: int

    @property
    def contexts(self) -> int:
        return self.clusters * self.contexts_per_cluster

    @property
    def rows(self) -> int:
        return self.contexts * self.pods_per_cluster

    def context_name(self, cluster: int, i: int) -> str:
        if self.contexts == 1:
            return "prod"
        return f"c{cluster}-ctx-{i:03d}"

    @staticmethod
    def pod(k: int) -> tuple[str, str]:
        """(namespace, name) of a cluster's k-th pod."""
        return f"ns-{k % 20:02d}", f"pod-{k:05d}"

    def last_row(self) -> tuple[str, str, str]:
        """The last row in the table's default order (context, namespace, name)."""
        return max(
            (self.context_name(c, i), *self.pod(k))
            for c in range(self.clusters)
            for i in range(self.contexts_per_cluster)
            for k in range(self.pods_per_cluster)
        )


FLEETS = {
    "one": Fleet("5,000 pods, 1 context", 1, 1, 5000),
    "fleet": Fleet("1,000 contexts x 12 pods", 10, 100, 12),
}


# ---------------------------------------------------------------------- the clusters' process
async def serve_fleet(clusters: int, per_cluster: int, pods: int, kubeconfig: str) -> None:
    """The FakeClusters of a fleet, their kubeconfig written; READY on stdout, then commands
    on stdin (``restart CLUSTER NAMESPACE NAME COUNT``) until it closes."""
    import anyio

    from kubemux.testing import FakeCluster, make_pod, write_kubeconfig

    fleet = Fleet("", clusters, per_cluster, pods)
    async with contextlib.AsyncExitStack() as stack:
        running = []
        for c in range(clusters):
            # kube-apiserver sends a watch a bookmark about once a minute: over 1,000 watches
            # some arrive every second. Here each cluster has its own period (5-9.5 s),
            # so that within the idle window bookmarks keep arriving, spread out.
            period = 5.0 + c / 2 if clusters > 1 else 60.0
            cluster = FakeCluster(name=f"c{c}", bookmark_period=period, history_limit=pods + 1000)
            await stack.enter_async_context(cluster)
            for start in range(0, pods, 2000):
                batch = [
                    make_pod(name, ns, size=1500)
                    for ns, name in map(fleet.pod, range(start, min(pods, start + 2000)))
                ]
                cluster.create_many("pods", batch)
            running.append(cluster)
        contexts = {
            fleet.context_name(c, i): running[c]
            for c in range(clusters)
            for i in range(per_cluster)
        }
        write_kubeconfig(kubeconfig, contexts)
        print("READY", flush=True)
        stdin = anyio.wrap_file(sys.stdin)
        async for line in stdin:
            words = line.split()
            if words[:1] == ["restart"]:
                cluster = running[int(words[1])]
                pod = cluster.get("pods", words[2], words[3])
                assert pod is not None
                pod["status"]["containerStatuses"][0]["restartCount"] = int(words[4])
                cluster.update("pods", pod)
                print("OK", flush=True)


class FleetProcess:
    def __init__(self, fleet: Fleet, kubeconfig: Path) -> None:
        self.fleet = fleet
        self.kubeconfig = kubeconfig
        self.proc: subprocess.Popen[str] | None = None

    def __enter__(self) -> Self:
        f = self.fleet
        args = [str(f.clusters), str(f.contexts_per_cluster), str(f.pods_per_cluster)]
        self.proc = subprocess.Popen(
            [sys.executable, __file__, "--serve-fleet", *args, str(self.kubeconfig)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
        )
        assert self.proc.stdout is not None
        if self.proc.stdout.readline().split() != ["READY"]:
            raise RuntimeError("the fleet's clusters did not start")
        return self

    def restart_count(self, cluster: int, namespace: str, name: str, count: int) -> None:
        assert self.proc is not None and self.proc.stdin and self.proc.stdout
        self.proc.stdin.write(f"restart {cluster} {namespace} {name} {count}\n")
        self.proc.stdin.flush()
        assert self.proc.stdout.readline().strip() == "OK"

    def __exit__(self, *exc: object) -> None:
        assert self.proc is not None and self.proc.stdin is not None
        self.proc.stdin.close()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


# ---------------------------------------------------------------------- a dashboard's process
@contextlib.contextmanager
def source_tree(ref: str) -> Iterator[Path]:
    """``src`` of ``ref`` (``git archive``) in a temporary folder."""
    with tempfile.TemporaryDirectory(prefix="kubemux-before-") as tmp:
        archive = subprocess.run(
            ["git", "-C", str(ROOT), "archive", ref, "src/kubemux"],
            check=True,
            capture_output=True,
        ).stdout
        with tarfile.open(fileobj=__import__("io").BytesIO(archive)) as tar:
            tar.extractall(tmp, filter="data")
        yield Path(tmp) / "src"


@contextlib.contextmanager
def dashboard_process(src: Path, kubeconfig: Path) -> Iterator[str]:
    """``kubemux dashboard`` run from ``src``; yields its URL."""
    proc = subprocess.Popen(
        [*DASHBOARD, "--kubeconfig", str(kubeconfig), "--port", "0"],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(src)},
        cwd=tempfile.gettempdir(),  # not this checkout: PYTHONPATH decides which kubemux runs
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if "open " not in line:
            raise RuntimeError(f"the dashboard did not start: {line!r}")
        yield line.split("open ", 1)[1].split()[0]
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


async def wait_synced(url: str, fleet: Fleet, limit: float) -> float | None:
    """Seconds until every context's pods are listed (from /api/contexts), None if not
    within ``limit`` seconds."""
    import httpx

    start = time.perf_counter()
    async with httpx.AsyncClient(timeout=30) as client:
        while time.perf_counter() - start < limit:
            try:
                body = (await client.get(url + "api/contexts")).json()
            except (httpx.HTTPError, ValueError):
                body = {"contexts": []}
            contexts = body.get("contexts", [])
            if len(contexts) == fleet.contexts and all(
                c.get("objects", {}).get("pods") == fleet.pods_per_cluster for c in contexts
            ):
                return time.perf_counter() - start
            await asyncio.sleep(0.5)
    return None


# ---------------------------------------------------------------------- the page
INIT_JS = """
(() => {
  const b = window.__bench = { longtasks: [], gaps: [] };
  new PerformanceObserver((list) => {
    for (const e of list.getEntries()) b.longtasks.push([e.startTime, e.duration]);
  }).observe({ type: "longtask", buffered: true });
  const total = %(rows)d, contexts = %(contexts)d;
  let last = 0;
  const poll = (now) => {
    if (last && now - last > 50) b.gaps.push([last, now - last]);
    last = now;
    if (b.firstRows === undefined && document.querySelector("#rows tbody tr[data-context] td")) {
      b.firstRows = performance.now();
    }
    const count = document.getElementById("count");
    if (b.allRows === undefined && count && count.textContent.startsWith(total + " ")) {
      b.allRows = performance.now();
    }
    if (b.cards === undefined && document.querySelectorAll("#contexts .card").length === contexts) {
      b.cards = performance.now();
    }
    requestAnimationFrame(poll);
  };
  requestAnimationFrame(poll);
})();
"""

TIMED_FETCH_JS = """async (path) => {
  const t = performance.now();
  const answer = await fetch(path);
  await answer.arrayBuffer();
  return [performance.now() - t, answer.status];
}"""


@dataclass
class Figures:
    cells: dict[str, str] = field(default_factory=dict)

    def put(self, key: str, value: str) -> None:
        self.cells[key] = value


def ms(value: float | None) -> str:
    if value is None:
        return "-"
    if value >= 10_000:
        return f"{value / 1000:.0f} s"
    if value >= 1000:
        return f"{value / 1000:.2f} s"
    return f"{value:.0f} ms"


def longest(tasks: list[list[float]], start: float, end: float) -> str:
    inside = [d for t, d in tasks if start <= t < end or (t < start and t + d > start)]
    return ms(max(inside)) if inside else "< 50 ms"


class Frozen(Exception):
    """A step of the measurement did not end in time: the page is stuck, the rest is skipped."""


async def measure_page(
    url: str, fleet: Fleet, clusters: FleetProcess, limit: float, idle: float
) -> Figures:
    from playwright.async_api import async_playwright

    out = Figures()
    async with async_playwright() as pw, chromium_process() as endpoint:
        browser = await pw.chromium.connect_over_cdp(endpoint)
        try:
            context = await browser.new_context(viewport={"width": 1400, "height": 900})
            page = await context.new_page()
            await _measure(page, context, url, fleet, clusters, limit, idle, out)
        except Frozen:
            pass
        finally:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(browser.close(), 5)
    return out


async def _measure(
    page: Any,
    context: Any,
    url: str,
    fleet: Fleet,
    clusters: FleetProcess,
    limit: float,
    idle: float,
    out: Figures,
) -> None:
    cap = f"> {limit:g} s"

    async def step(what: str, coro: Any) -> Any:
        """``coro`` within the timeout (Playwright's own runs in the page: a frozen page
        never ends it); past it, ``what`` is "> N s" and the measurement ends."""
        try:
            return await asyncio.wait_for(coro, limit)
        except TimeoutError:
            out.put(what, cap)
            raise Frozen(what) from None

    async def timed(what: str, coro: Any) -> None:
        start = time.perf_counter()
        await step(what, coro)
        out.put(what, ms((time.perf_counter() - start) * 1000))

    async def bench() -> Any:
        return await step("-", page.evaluate("window.__bench"))

    async def now() -> float:
        value: float = await step("-", page.evaluate("performance.now()"))
        return value

    page.set_default_timeout(limit * 1000 * 10)  # ours apply (step), not Playwright's
    cdp = await context.new_cdp_session(page)
    await cdp.send("Network.enable")
    streams: set[str] = set()
    received: list[tuple[float, int]] = []

    def sent(e: dict[str, Any]) -> None:
        if "api/stream" in e["request"]["url"]:
            streams.add(e["requestId"])

    def data(e: dict[str, Any]) -> None:
        if e["requestId"] in streams:
            received.append((time.perf_counter(), e.get("dataLength") or 0))

    cdp.on("Network.requestWillBeSent", sent)
    cdp.on("Network.dataReceived", data)
    await page.add_init_script(INIT_JS % {"rows": fleet.rows, "contexts": fleet.contexts})
    await page.goto(url, wait_until="commit")

    def until(expr: str) -> Any:
        return page.wait_for_function(expr, polling=100)

    await step("first rows", until("() => window.__bench.firstRows !== undefined"))
    out.put("first rows", ms((await bench())["firstRows"]))
    await step("all rows", until("() => window.__bench.allRows !== undefined"))
    loaded = (await bench())["allRows"]
    out.put("all rows", ms(loaded))
    if fleet.contexts > 1:
        await step("cards", until("() => window.__bench.cards !== undefined"))
        out.put("cards", ms((await bench())["cards"]))
    out.put("block: load", longest((await bench())["longtasks"], 0, loaded + 1))

    # until every context answered the namespaces question, from the navigation (the page
    # asks at once; answers name the contexts still pending and the page asks again)
    async def complete() -> float:
        while True:
            body = await page.evaluate("async () => (await fetch('api/namespaces')).json()")
            if not body.get("pending"):
                value: float = await page.evaluate("performance.now()")
                return value
            await asyncio.sleep(0.1)

    out.put("namespaces complete", ms(await step("namespaces complete", complete())))

    # idle: nothing changes; what the stream receives, what blocks the page
    await asyncio.sleep(2)
    t0 = await now()
    since = time.perf_counter()
    await asyncio.sleep(idle)
    got = sum(n for when, n in received if when >= since)
    out.put("idle stream", f"{got / idle / 1024:.1f} KB/s")
    t1 = await now()
    out.put("block: idle", longest((await bench())["longtasks"], t0, t1))

    # the picker's endpoints, as the page calls them
    for path in ("api/namespaces", "api/resources"):
        label = path.split("/")[1]
        times = []
        for _ in range(5):
            took, status = await step(f"{label} first", page.evaluate(TIMED_FETCH_JS, path))
            times.append(took if status == 200 else float("nan"))
        out.put(f"{label} first", ms(times[0]))
        out.put(f"{label} p50", ms(statistics.median(times[1:])))

    # the last row, found with the filter box
    context_name, namespace, name = fleet.last_row()
    target = f"#rows tbody tr[data-context=\"{context_name}\"]:has(a:text-is('{name}'))"

    async def filter_shows() -> None:
        await page.fill("#filter", f"{context_name} {name}")
        await page.locator(target).wait_for(state="visible")

    await timed("filter: last row", filter_shows())

    # one change, on screen (the row the filter shows)
    cluster = int(context_name[1:].split("-")[0]) if fleet.contexts > 1 else 0

    async def change_shows() -> None:
        clusters.restart_count(cluster, namespace, name, 4242)
        await page.locator(target, has_text="4242").wait_for()

    await timed("one change", change_shows())

    # typing in the filter box, key by key, then clearing it
    everything = f"() => document.getElementById('count').textContent.startsWith('{fleet.rows} ')"

    async def typing() -> None:
        await page.fill("#filter", "")
        await until(everything)
        await page.locator("#filter").focus()
        await page.keyboard.type("pod-0001", delay=80)
        for _ in range(8):
            await page.keyboard.press("Backspace", delay=80)
        await until(everything)

    t1 = await now()
    await step("block: typing", typing())
    t2 = await now()
    out.put("block: typing", longest((await bench())["longtasks"], t1, t2))

    # scrolling: wheel turns down the table (what blocks the page meanwhile), then a jump
    # to the bottom until the last row is on screen
    async def wheel() -> None:
        await page.locator("#filter").blur()
        await page.mouse.move(700, 600)
        for _ in range(40):
            await page.mouse.wheel(0, 4000)
            await asyncio.sleep(0.05)

    await step("block: scroll", wheel())
    t3 = await now()
    out.put("block: scroll", longest((await bench())["longtasks"], t2, t3))

    async def bottom() -> None:
        await page.evaluate("window.scrollTo(0, 0)")
        await asyncio.sleep(0.5)
        await page.evaluate("window.scrollTo(0, document.documentElement.scrollHeight)")
        await page.locator(target).wait_for(state="visible")

    await timed("scroll: last row", bottom())


def _start_chromium(profile: str, log: Path) -> subprocess.Popen[bytes]:
    with log.open("w") as stderr:
        return subprocess.Popen(
            [CHROMIUM, *CHROMIUM_ARGS, *DEVTOOLS, f"--user-data-dir={profile}/data"],
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            start_new_session=True,
        )


@contextlib.asynccontextmanager
async def chromium_process() -> AsyncIterator[str]:
    """Chromium in a process of our own (a page frozen for minutes cannot hold up its
    end: it is killed); yields its DevTools endpoint."""
    with tempfile.TemporaryDirectory(prefix="kubemux-chromium-") as profile:
        log = Path(profile) / "stderr"
        proc = _start_chromium(profile, log)
        try:
            for _ in range(300):
                found = [
                    line.split(" on ", 1)[1].strip()
                    for line in log.read_text(errors="replace").splitlines()
                    if line.startswith("DevTools listening on ")
                ]
                if found:
                    break
                await asyncio.sleep(0.1)
            else:
                raise RuntimeError("chromium did not start")
            yield found[0]
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


async def measure_http(url: str, idle: float, out: Figures) -> None:
    """The server's side without a browser (so also for a page that froze): what one
    event stream receives while nothing changes, after its snapshot and a settling time,
    and ``/api/namespaces``'s latency (first call and median of four more)."""
    import httpx

    async with httpx.AsyncClient(timeout=60) as client:
        times = []
        for _ in range(5):
            start = time.perf_counter()
            await client.get(url + "api/namespaces")
            times.append((time.perf_counter() - start) * 1000)
        out.put("namespaces first (HTTP)", ms(times[0]))
        out.put("namespaces p50 (HTTP)", ms(statistics.median(times[1:])))
        got = 0
        counting = False
        async with client.stream("GET", url + "api/stream?resource=pods") as response:

            async def read() -> None:
                nonlocal got
                with contextlib.suppress(httpx.HTTPError):
                    async for chunk in response.aiter_bytes():
                        if counting:
                            got += len(chunk)

            task = asyncio.ensure_future(read())
            await asyncio.sleep(5)  # the snapshot, then quiet
            counting = True
            await asyncio.sleep(idle)
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        out.put("idle stream (HTTP)", f"{got / idle / 1024:.1f} KB/s")


# ---------------------------------------------------------------------- the run
ORDER = [
    "warm-up",
    "first rows",
    "all rows",
    "cards",
    "block: load",
    "idle stream",
    "block: idle",
    "namespaces first",
    "namespaces p50",
    "namespaces complete",
    "namespaces first (HTTP)",
    "namespaces p50 (HTTP)",
    "idle stream (HTTP)",
    "resources first",
    "resources p50",
    "filter: last row",
    "one change",
    "block: typing",
    "scroll: last row",
    "block: scroll",
]

TARGETS = {
    "one": {
        "first rows": "<= 1 s",
        "all rows": "<= 2 s",
        "filter: last row": "<= 2 s",
        "scroll: last row": "<= 2 s",
        "block: typing": "<= 100 ms",
        "block: scroll": "<= 100 ms",
        "idle stream": "<= 20 KB/s",
        "idle stream (HTTP)": "<= 20 KB/s",
        "namespaces p50": "<= 200 ms",
        "namespaces p50 (HTTP)": "<= 200 ms",
    },
    "fleet": {
        "all rows": "<= 3 s",
        "cards": "<= 3 s",
        "block: idle": "<= 200 ms",
        "block: typing": "<= 200 ms",
        "block: scroll": "<= 200 ms",
        "one change": "<= 2 s",
        "idle stream": "<= 20 KB/s",
        "idle stream (HTTP)": "<= 20 KB/s",
        "namespaces p50": "<= 200 ms",
        "namespaces p50 (HTTP)": "<= 200 ms",
    },
}


async def run_fleet(key: str, args: argparse.Namespace) -> str:
    fleet = FLEETS[key]
    columns: dict[str, Figures] = {}
    with tempfile.TemporaryDirectory(prefix="kubemux-bench-") as tmp:
        kubeconfig = Path(tmp) / "config"
        with FleetProcess(fleet, kubeconfig) as clusters:
            trees: list[tuple[str, contextlib.AbstractContextManager[Path]]] = []
            if not args.no_before:
                trees.append((f"before ({args.before})", source_tree(args.before)))
            trees.append(("after (this tree)", contextlib.nullcontext(ROOT / "src")))
            for label, tree in trees:
                with tree as src, dashboard_process(src, kubeconfig) as url:
                    warm = await wait_synced(url, fleet, args.timeout * 3)
                    figures = await measure_page(url, fleet, clusters, args.timeout, args.idle)
                    figures.put("warm-up", "-" if warm is None else f"{warm:.1f} s")
                    await measure_http(url, args.idle, figures)
                    columns[label] = figures
                print(f"  {fleet.name}: {label} measured", file=sys.stderr, flush=True)
    labels = list(columns)
    rows = []
    for key_ in ORDER:
        if not any(key_ in f.cells for f in columns.values()):
            continue
        rows.append(
            [
                key_,
                *(columns[label].cells.get(key_, "-") for label in labels),
                TARGETS[key].get(key_, ""),
            ]
        )
    return table(f"{fleet.name} ({fleet.rows:,} rows)", ["", *labels, "target"], rows)


CLI_RUN = """
import atexit, resource, sys
atexit.register(lambda: print("MAXRSS", resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
                              file=sys.stderr))
from kubemux.cli import main
sys.argv = ["kubemux", *sys.argv[1:]]
sys.exit(main())
"""


def cli_run(src: Path, kubeconfig: Path, limit: float) -> tuple[str, str, str, str]:
    """``kubemux get pods -A --all-contexts`` from ``src``: (first line, all, max RSS,
    lines) as printed figures."""
    argv = [sys.executable, "-c", CLI_RUN, "get", "pods", "-A", "--all-contexts"]
    argv += ["--kubeconfig", str(kubeconfig)]
    start = time.perf_counter()
    proc = subprocess.Popen(
        argv,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(src)},
        cwd=tempfile.gettempdir(),
    )
    assert proc.stdout is not None and proc.stderr is not None
    first = None
    lines = 0
    for _ in proc.stdout:
        lines += 1
        if first is None:
            first = time.perf_counter() - start
    proc.wait(limit)
    total = time.perf_counter() - start
    rss = next((int(line.split()[1]) for line in proc.stderr if line.startswith("MAXRSS")), 0)
    return (
        "-" if first is None else f"{first:.1f} s",
        f"{total:.1f} s",
        f"{rss / 1024:.0f} MB",
        f"{max(0, lines - 1):,}",
    )


def run_cli(args: argparse.Namespace) -> str:
    """``get --all-contexts`` over the 1,000 contexts, before and after."""
    fleet = FLEETS["fleet"]
    rows = []
    with tempfile.TemporaryDirectory(prefix="kubemux-bench-") as tmp:
        kubeconfig = Path(tmp) / "config"
        with FleetProcess(fleet, kubeconfig):
            trees: list[tuple[str, contextlib.AbstractContextManager[Path]]] = []
            if not args.no_before:
                trees.append((f"before ({args.before})", source_tree(args.before)))
            trees.append(("after (this tree)", contextlib.nullcontext(ROOT / "src")))
            for label, tree in trees:
                with tree as src:
                    rows.append([label, *cli_run(src, kubeconfig, args.timeout * 3)])
    header = ["", "first row", "all rows", "max RSS", "rows"]
    return table(f"kubemux get pods -A --all-contexts ({fleet.name})", header, rows)


async def main(args: argparse.Namespace) -> None:
    load = os.getloadavg()
    print(f"load average before: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} (2 cores)\n")
    for key in args.fleets.split(","):
        if key == "cli":
            print(run_cli(args))
        else:
            print(await run_fleet(key, args))
        print()
    load = os.getloadavg()
    print(f"load average after: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--serve-fleet"]:
        import anyio

        a = sys.argv[2:]
        anyio.run(serve_fleet, int(a[0]), int(a[1]), int(a[2]), a[3])
        sys.exit(0)
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--fleets", default="one,fleet,cli", help="one, fleet, cli (comma list; default all)"
    )
    parser.add_argument("--before", default=BEFORE, help=f"the baseline (default {BEFORE})")
    parser.add_argument("--no-before", action="store_true", help="measure this tree only")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds per measurement")
    parser.add_argument("--idle", type=float, default=10.0, help="seconds of idle stream")
    asyncio.run(main(parser.parse_args()))
