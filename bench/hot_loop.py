"""The informer's watch loop alone, fed from memory: CPU time per event, and bytes per object.

bench/ingest.py times the loop behind a socket, in wall-clock time: on a shared machine its
(d)/(e) ratios move by 0.3 from run to run, too much to tell a 5 % change. This probe takes
the socket and the clock out: a watch stream of N pod ADDED events (about 2 KB each) is
downloaded once from a FakeCluster in its own process, cut into blocks of whole lines (each
its own bytes object, as a socket read gives them; ``--block``: 4 KiB is about one line per
block, as kube-apiserver's framing gives), and fed to the real ``Informer._watch_once`` in a
fresh process per run, twice: into an empty store, then again over the full store (each event
replaces an object). Printed: process CPU time per event (median and range), wall time, and
the RSS grown per object by the first pass (after ``gc.collect()``).

Given source trees, runs alternate between them (PYTHONPATH=<tree>/src, in ABBA order) so
that the machine's load falls on each alike:

  python bench/hot_loop.py [--events 100000] [--repeat 6] [--block 4096] [TREE ...]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _common import EventCount, download_watch, line_blocks, replay_watch, rss, server, table


async def record(path: str, n: int, size: int) -> None:
    with server(n, size) as (url, before, _after):
        data = await download_watch(url, before, n)
    Path(path).write_bytes(data)  # noqa: ASYNC240 - before anything is measured


async def peer(path: str, block: int) -> dict[str, Any]:

    from kubemux import ContextConfig, Store, WatchSettings, parse_resource
    from kubemux._http.client import open_client
    from kubemux._informer.informer import Informer, InformerKey
    from kubemux.testing import kubeconfig_dict

    data = Path(path).read_bytes()  # noqa: ASYNC240 - before anything is measured
    n = data.count(b"\n")
    blocks = line_blocks(data, block, copy=True)
    del data
    pods = parse_resource("pods")
    store = Store(pods)
    # never contacted: the watch is replayed from memory
    config = ContextConfig.from_dict("bench", kubeconfig_dict({"bench": "http://127.0.0.1:9"}))
    out: dict[str, Any] = {"events": n}
    async with open_client(config) as client:
        for phase in ("empty", "full"):
            events = EventCount(n)
            informer = Informer(
                client,
                pods,
                InformerKey("pods"),
                settings=WatchSettings(),
                **events.informer_args(store),
            )
            gc.collect()
            base = rss()
            wall, cpu = await replay_watch(informer, blocks, "1", events)
            out[f"{phase}_wall"] = wall
            out[f"{phase}_cpu"] = cpu
            if phase == "empty":
                gc.collect()
                out["rss_per_object"] = (rss() - base) / len(store)
    out["stored_bytes"] = sum(len(e.raw) for e in store.writer.entries()) / len(store)
    return out


def run_peer(tree: str | None, path: str, block: int) -> dict[str, Any]:
    env = dict(os.environ)
    if tree is not None:
        env["PYTHONPATH"] = str(Path(tree) / "src")
    cmd = [sys.executable, __file__, "--peer", path, "--block", str(block)]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env)
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    result["load"] = os.getloadavg()[0]
    return result


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--events", type=int, default=100_000)
    p.add_argument("--size", type=int, default=2000)
    p.add_argument("--repeat", type=int, default=6, help="runs per tree")
    p.add_argument("--block", type=int, default=4096, help="bytes of whole lines per block")
    p.add_argument("--peer", help=argparse.SUPPRESS)
    p.add_argument("trees", nargs="*", help="source trees to compare (default: this one)")
    args = p.parse_args()
    if args.peer:
        import anyio

        print(json.dumps(anyio.run(peer, args.peer, args.block)))
        return

    import anyio

    trees: list[str | None] = list(args.trees) or [None]
    runs: dict[str | None, list[dict[str, Any]]] = {t: [] for t in trees}
    with tempfile.TemporaryDirectory() as tmp:
        path = str(Path(tmp) / "watch.jsonl")
        anyio.run(record, path, args.events, args.size)
        for i in range(args.repeat):
            for tree in trees if i % 2 == 0 else trees[::-1]:
                runs[tree].append(run_peer(tree, path, args.block))
                print(f"  measured {tree or 'this tree'}", file=sys.stderr)

    def us(results: list[dict[str, Any]], key: str) -> str:
        values = sorted(r[key] / r["events"] * 1e6 for r in results)
        return f"{statistics.median(values):.2f} ({values[0]:.2f}-{values[-1]:.2f})"

    rows = [
        [
            tree or "this tree",
            us(results, "empty_cpu"),
            us(results, "full_cpu"),
            us(results, "empty_wall"),
            f"{statistics.median(r['rss_per_object'] for r in results):,.0f}",
            f"{min(r['load'] for r in results):.1f}-{max(r['load'] for r in results):.1f}",
        ]
        for tree, results in runs.items()
    ]
    print(
        f"hot loop: {args.events:,} pod ADDED events from memory, blocks of {args.block} B; "
        f"{time.strftime('%Y-%m-%d')}, Python {sys.version.split()[0]}, {os.cpu_count()} cores, "
        f"{args.repeat} runs per tree\n"
    )
    print(
        table(
            "CPU us per event, median (range); RSS per object after the first pass",
            ["tree", "cpu empty", "cpu full", "wall empty", "B/object", "load"],
            rows,
        )
    )


if __name__ == "__main__":
    main()
