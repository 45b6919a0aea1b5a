"""Hostile servers beside a healthy one: does one bad cluster cost the others anything?

Each scenario runs one hostile server (``kubemux.testing._hostile``, in its own process)
and one healthy
FakeCluster as two contexts of one WatcherRegistry (default WatchSettings), for --seconds
seconds, while the healthy cluster gets an update every 50 ms. Printed per scenario: RSS
delta, CPU % of this process, event-loop lag p99, the healthy context's p99 update latency
(server write to subscriber), the hostile context's state and the time until its status
showed an error.

Targets: RSS < +200 MB, CPU < 20 % for servers that misbehave in a loop, healthy p99 and
loop lag < 100 ms, a clear error within 30 s.

Usage: python bench/hostile.py [--seconds 20] [--only NAME]
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import anyio

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _common import table

from kubemux import WatcherRegistry
from kubemux.testing import FakeCluster, make_pod, write_kubeconfig
from kubemux.testing._hostile import BEHAVIOURS, HostileServer


def rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def p99(values: list[float]) -> float:
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, int(len(values) * 0.99))]


async def serve(name: str) -> None:
    """Child side: one hostile server until stdin closes (its CPU is not the client's)."""
    async with HostileServer(name) as bad:
        print("READY", bad.server, flush=True)
        await anyio.wrap_file(sys.stdin).read()


async def scenario(name: str, seconds: float, folder: Path) -> list[str]:
    proc = subprocess.Popen(  # noqa: ASYNC220 - once per scenario, before measuring
        [sys.executable, __file__, "--serve", name],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None and proc.stdin is not None
        url = proc.stdout.readline().split()[1]
        return await _scenario(name, url, seconds, folder)
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()


async def _scenario(name: str, url: str, seconds: float, folder: Path) -> list[str]:
    async with FakeCluster(bookmark_period=5) as healthy:
        healthy.create("pods", make_pod("beat"))
        path = write_kubeconfig(folder / f"{name}.yaml", {"good": healthy, "bad": url})
        async with WatcherRegistry.from_kubeconfig(str(path)) as reg:
            await reg.watch("good", "pods")
            base_rss, base_cpu, t0 = rss(), cpu(), time.monotonic()
            lags: list[float] = []
            latencies: list[float] = []
            sent: dict[str, float] = {}
            error_at: float | None = None

            async def start_bad() -> None:
                try:
                    await reg.watch("bad", "pods")
                except Exception:  # noqa: BLE001, S110 - its error shows in status
                    pass

            peak = base_rss

            async def ticker() -> None:
                nonlocal peak
                while True:
                    t = time.monotonic()
                    await anyio.sleep(0.01)
                    lags.append(time.monotonic() - t - 0.01)
                    peak = max(peak, rss())

            async def writer() -> None:
                i = 0
                while True:
                    i += 1
                    sent[str(i)] = time.monotonic()
                    pod = make_pod("beat")
                    pod["metadata"]["labels"] = {"i": str(i)}
                    healthy.apply("pods", pod)
                    await anyio.sleep(0.05)

            async with anyio.create_task_group() as tg:
                tg.start_soon(start_bad)
                tg.start_soon(ticker)
                async with reg.subscribe("pods", ["good"], snapshot=False) as changes:
                    tg.start_soon(writer)
                    with anyio.move_on_after(seconds):
                        async for change in changes:
                            label = (change.object.get("metadata") or {}).get("labels") or {}
                            at = sent.pop(label.get("i", ""), None)
                            if at is not None:
                                latencies.append(time.monotonic() - at)
                            st = reg.status().contexts.get("bad")
                            if st is not None and error_at is None and st.last_error:
                                error_at = time.monotonic() - t0
                tg.cancel_scope.cancel()
            elapsed = time.monotonic() - t0
            used = cpu() - base_cpu
            grown = rss() - base_rss
            st = reg.status().contexts.get("bad")
            informers = st.informers if st else ()
            state = informers[0].state if informers else (st.state if st else "?")
            skipped = informers[0].skipped_lines if informers else 0
            final = f"{state}; {skipped} skipped; {st.last_error if st else None}"
    return [
        name,
        f"{grown / 1e6:+.0f} MB",
        f"{(peak - base_rss) / 1e6:+.0f} MB",
        f"{100 * used / elapsed:.0f}%",
        f"{p99(lags) * 1000:.0f} ms",
        f"{p99(latencies) * 1000:.0f} ms",
        f"{error_at:.1f} s" if error_at is not None else "none",
        final[:100],
    ]


async def main(seconds: float, only: str | None) -> None:
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in BEHAVIOURS:
            if only and name != only:
                continue
            rows.append(await scenario(name, seconds, Path(tmp)))
            print(f"  measured {name}", flush=True)
    header = [
        "scenario",
        "RSS end",
        "RSS peak",
        "CPU",
        "loop p99",
        "healthy p99",
        "error after",
        "hostile status",
    ]
    print(table(f"Hostile servers beside a healthy one ({seconds:.0f} s each)", header, rows))


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--seconds", type=float, default=20.0)
    p.add_argument("--only")
    p.add_argument("--serve", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.serve:
        anyio.run(serve, a.serve)
    else:
        anyio.run(main, a.seconds, a.only)
