"""Storm: many callers against a registry whose kubeconfig is rewritten at 100 Hz.

N callers (default 50 and 1,000) call watch / stop_watcher / subscribe / store / events_for
on random contexts, each call under a random timeout of 0-200 ms (so calls are cancelled
at every point), while the kubeconfig is rewritten 100 times a second (reloads: a new
namespace; removals and re-additions: one context in five comes and goes) against two
FakeClusters. Then every context is stopped, and the table shows what is left: informer
tasks, open watches on the servers, HTTP sessions, registry entries. All must be 0, and no
call may raise anything but a KubemuxError.

    python bench/storm.py [--duration 30] [--callers 50,1000] [--contexts 8]
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import gc
import json
import random
import sys
import tempfile
import time
import weakref
from pathlib import Path
from typing import Any

import aiohttp
import anyio

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import table

from kubemux import KubemuxError, WatcherRegistry
from kubemux.testing import FakeCluster, FakeContext, make_pod, write_kubeconfig

_sessions: weakref.WeakSet[aiohttp.ClientSession] = weakref.WeakSet()
_orig_init = aiohttp.ClientSession.__init__


def _tracking_init(self: aiohttp.ClientSession, *args: Any, **kwargs: Any) -> None:
    _orig_init(self, *args, **kwargs)
    _sessions.add(self)


aiohttp.ClientSession.__init__ = _tracking_init  # type: ignore[method-assign]


_WRITER = """
import json, os, sys, time
path, texts, duration = sys.argv[1], json.load(open(sys.argv[2])), float(sys.argv[3])
n, end, next_at = 0, time.monotonic() + duration, time.monotonic()
while time.monotonic() < end:
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(texts[n % len(texts)])
    os.replace(tmp, path)
    n += 1
    next_at += 0.01
    time.sleep(max(0.0, next_at - time.monotonic()))
print(n)
"""


def config(
    names: list[str], clusters: tuple[FakeCluster, FakeCluster], version: int
) -> dict[str, FakeContext]:
    out = {}
    for i, name in enumerate(names):
        if (i + version) % 5 == 0:
            continue  # one context in five comes and goes
        out[name] = FakeContext(cluster=clusters[i % 2], namespace=f"ns{version % 3}")
    return out


async def storm(n_callers: int, duration: float, n_contexts: int) -> list[str]:
    names = [f"ctx-{i}" for i in range(n_contexts)]
    errors: collections.Counter[str] = collections.Counter()
    foreign: collections.Counter[str] = collections.Counter()
    calls = 0
    rewrites = 0
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "config"
        async with FakeCluster(name="a") as a, FakeCluster(name="b") as b:
            for i in range(20):
                a.create("pods", make_pod(f"a-{i}"))
                b.create("pods", make_pod(f"b-{i}"))
            write_kubeconfig(path, config(names, (a, b), 0))
            async with WatcherRegistry.from_kubeconfig(
                str(path), debounce_delay=0.005, event_max_age=60
            ) as registry:
                deadline = anyio.current_time() + duration

                async def caller(seed: int) -> None:
                    nonlocal calls
                    rng = random.Random(seed)
                    while anyio.current_time() < deadline:
                        name = rng.choice(names)
                        op = rng.choice(["watch", "watch", "stop", "subscribe", "store", "events"])
                        calls += 1
                        with anyio.move_on_after(rng.uniform(0, 0.2)):
                            try:
                                if op == "watch":
                                    await registry.watch(name, "pods")
                                elif op == "stop":
                                    await registry.stop_watcher(name)
                                elif op == "subscribe":
                                    async with registry.subscribe("pods", [name]) as changes:
                                        async for _ in changes:
                                            pass
                                elif op == "store":
                                    registry.store(name, "pods")
                                    await anyio.sleep(0.01)
                                else:
                                    await registry.events_for(name, "Pod", "default", "a-1")
                            except KubemuxError as exc:
                                errors[type(exc).__name__] += 1
                            except Exception as exc:  # noqa: BLE001 - what the bench counts
                                foreign[f"{type(exc).__name__}: {exc}"[:80]] += 1
                        await anyio.lowlevel.checkpoint()

                # 15 versions cycle (namespaces mod 3, absences mod 5); a separate process
                # writes them, so the rate holds however busy this process is
                versions = []
                for version in range(1, 16):
                    write_kubeconfig(path, config(names, (a, b), version))
                    versions.append(path.read_text())
                write_kubeconfig(path, config(names, (a, b), 0))
                texts = Path(tmp) / "versions.json"
                texts.write_text(json.dumps(versions))

                async def writer() -> None:
                    nonlocal rewrites
                    result = await anyio.run_process(
                        [sys.executable, "-c", _WRITER, str(path), str(texts), str(duration)]
                    )
                    rewrites = int(result.stdout)

                started = time.perf_counter()
                async with anyio.create_task_group() as tg:
                    tg.start_soon(writer)
                    rng = random.Random(n_callers)
                    for _ in range(n_callers):
                        tg.start_soon(caller, rng.randrange(1 << 30))
                elapsed = time.perf_counter() - started
                stop_started = time.perf_counter()
                for name in names:
                    await registry.stop_watcher(name)
                stop_time = time.perf_counter() - stop_started
                await asyncio.sleep(0)
                informers = [
                    t
                    for t in asyncio.all_tasks()
                    if not t.done()
                    and t.get_name().startswith(("kubemux informer", "kubemux context"))
                ]
                entries = registry._structure_sizes()["entries"]
                with anyio.move_on_after(5):  # the servers notice closed connections a moment later
                    await a.wait_for(lambda: a.open_watches + b.open_watches == 0, 5)
                watches = a.open_watches + b.open_watches
            gc.collect()
            sessions = sum(1 for s in _sessions if not s.closed)
    error_text = ", ".join(f"{k} {v}" for k, v in errors.most_common()) or "none"
    foreign_text = "; ".join(f"{k} x{v}" for k, v in foreign.most_common()) or "none"
    return [
        str(n_callers),
        f"{calls:,}",
        f"{rewrites} ({rewrites / elapsed:.0f}/s)",
        error_text,
        foreign_text,
        str(len(informers)),
        str(watches),
        str(sessions),
        str(entries),
        f"{stop_time:.2f}s",
    ]


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=float, default=30.0)
    parser.add_argument("--callers", default="50,1000")
    parser.add_argument("--contexts", type=int, default=8)
    args = parser.parse_args()
    rows = []
    for n in (int(x) for x in args.callers.split(",")):
        rows.append(await storm(n, args.duration, args.contexts))
    header = [
        "callers",
        "calls",
        "kubeconfig rewrites",
        "KubemuxErrors by type",
        "other errors",
        "tasks left",
        "open watches",
        "sessions",
        "entries",
        "stop all",
    ]
    print(
        table(f"Storm: {args.duration:g} s, {args.contexts} contexts, 2 FakeClusters", header, rows)
    )
    bad = [r for r in rows if r[4] != "none" or any(r[i] != "0" for i in (5, 6, 7, 8))]
    print("\nresult:", "FAIL" if bad else "PASS (all zeros, only KubemuxErrors)")
    if bad:
        sys.exit(1)


if __name__ == "__main__":
    asyncio.run(main())
