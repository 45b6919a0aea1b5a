"""What one live context costs: sockets, tasks, memory beyond its objects, CPU at rest.

N contexts (100, 500, 1,000), each watching 3 resources (pods, services, configmaps), every
context with its own cluster and user entries, spread over FakeClusters that run in other
processes (bench/_server.py, 2 pods each: the objects are not what is measured). Each N runs
in a fresh process of its own, so one size's heap does not inflate the next one's.

Measured for each N, once every informer has synced:

* sync: wall time from entering the registry until all 3N stores are synced (watch()
  calls 64 at a time);
* sockets: the process's open sockets (``/proc/self/fd``), per context;
* tasks: asyncio tasks alive, per context;
* memory: resident set size grown since before the registry was entered (after a warm-up
  registry with one context, so imports and the shared TLS context are not counted), less
  the bytes the stores hold (``bytes_cached``), per context;
* CPU at rest: process CPU time (user + system) over ``--rest`` seconds with no events,
  as a share of one core, in total and per 1,000 contexts.

Usage: python bench/contexts_cost.py [--contexts 100,500,1000] [--servers 4] [--rest 20]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import anyio
import yaml

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "src"))

from _common import server, table

import kubemux
from kubemux import WatcherRegistry

RESOURCES = ("pods", "services", "configmaps")
OPENING = 64  # watch() calls in flight at once


def rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def sockets() -> int:
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{fd}").startswith("socket:"):
                count += 1
        except OSError:
            continue
    return count


def kubeconfig(path: Path, servers: list[str], n: int) -> None:
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": f"c{i}", "cluster": {"server": servers[i % len(servers)]}} for i in range(n)
        ],
        "users": [{"name": f"u{i}", "user": {"token": f"token-{i}"}} for i in range(n)],
        "contexts": [
            {"name": f"ctx-{i}", "context": {"cluster": f"c{i}", "user": f"u{i}"}} for i in range(n)
        ],
        "current-context": "ctx-0",
    }
    path.write_text(yaml.dump(doc, Dumper=yaml.CSafeDumper))


async def warm_up(path: Path) -> None:
    """One context started and stopped first: imports, the shared TLS context and the
    worker threads are the process's costs, not a context's."""
    registry = WatcherRegistry.from_kubeconfig([str(path)], follow=False)
    async with registry:
        for resource in RESOURCES:
            await registry.watch("ctx-0", resource)


async def measure(path: Path, n: int, rest: float) -> dict[str, Any]:
    """One size, in this process."""
    kubemux.raise_fd_limit()
    await warm_up(path)
    before_sockets = sockets()
    before_tasks = len(asyncio.all_tasks())
    before_rss = rss()
    started = time.perf_counter()
    async with WatcherRegistry.from_kubeconfig([str(path)], follow=False) as registry:
        limiter = anyio.CapacityLimiter(OPENING)

        async def one(context: str, resource: str) -> None:
            async with limiter:
                await registry.watch(context, resource)

        with anyio.fail_after(600):
            async with anyio.create_task_group() as tg:
                for i in range(n):
                    for resource in RESOURCES:
                        tg.start_soon(one, f"ctx-{i}", resource)
        sync = time.perf_counter() - started
        await anyio.sleep(2)  # let the LIST connections settle into watches
        status = registry.status()
        cached = sum(i.bytes_cached for c in status.contexts.values() for i in c.informers)
        synced = sum(i.has_synced for c in status.contexts.values() for i in c.informers)
        grown = rss() - before_rss
        open_sockets = sockets() - before_sockets
        tasks = len(asyncio.all_tasks()) - before_tasks
        cpu0, wall0 = time.process_time(), time.perf_counter()
        await anyio.sleep(rest)
        cpu = (time.process_time() - cpu0) / (time.perf_counter() - wall0)
    return {
        "contexts": n,
        "informers": synced,
        "sync": sync,
        "sockets": open_sockets,
        "tasks": tasks,
        "memory": grown - cached,
        "cached": cached,
        "cpu": cpu,
    }


def child(args: argparse.Namespace) -> None:
    result = anyio.run(measure, Path(args.kubeconfig), args.one, args.rest)
    print(json.dumps(result), flush=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--contexts", default="100,500,1000")
    p.add_argument("--servers", type=int, default=4)
    p.add_argument("--rest", type=float, default=20.0)
    p.add_argument("--one", type=int, help=argparse.SUPPRESS)
    p.add_argument("--kubeconfig", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.one:
        child(args)
        return
    sizes = [int(x) for x in args.contexts.split(",")]
    results = []
    with ExitStack() as stack, tempfile.TemporaryDirectory() as tmp:
        servers = [stack.enter_context(server(2, 500))[0] for _ in range(args.servers)]
        for n in sizes:
            path = Path(tmp) / f"config-{n}"
            kubeconfig(path, servers, n)
            command = [sys.executable, __file__, "--one", str(n), "--kubeconfig", str(path)]
            command += ["--rest", str(args.rest)]
            out = subprocess.run(command, capture_output=True, text=True, check=True).stdout
            results.append(json.loads(out.strip().splitlines()[-1]))
            print(f"  {n} contexts measured", file=sys.stderr)
    rows = []
    for r in results:
        n = r["contexts"]
        rows.append(
            [
                f"{n:,}",
                f"{r['informers']:,}",
                f"{r['sync']:.1f} s",
                f"{r['sockets']:,} ({r['sockets'] / n:.2f})",
                f"{r['tasks']:,} ({r['tasks'] / n:.1f})",
                f"{r['memory'] / n / 1e3:,.0f} KB",
                f"{r['cpu'] * 100:.1f} % ({r['cpu'] * 100 / n * 1000:.1f} %)",
            ]
        )
    print(
        table(
            f"One live context, 3 resources each ({platform.node() or 'this machine'}, "
            f"{os.cpu_count()} cores, Python {platform.python_version()}; "
            f"at rest {args.rest:g} s)",
            [
                "contexts",
                "informers",
                "sync",
                "sockets (per context)",
                "tasks (per context)",
                "memory per context",
                "CPU at rest (per 1,000)",
            ],
            rows,
        )
    )


if __name__ == "__main__":
    main()
