"""Informer soak: random churn and faults against one FakeCluster; the caches must equal the truth.

For --seconds, pods of random sizes (100 B to 6 KB, so watch lines are sometimes packed into
one 2 KiB HTTP chunk and cut mid-line, sometimes one chunk each) are created, changed
(MODIFIED), relabelled (entering and leaving a label selector) and deleted, in bursts. Some
pods have no managedFields, some a label named ``managedFields``. Now and then a fault strikes:
streams dropped mid-chunk, the history compacted (410: RELIST), a burst of 5xx on watches, a
malformed line injected. Two informers watch: every pod, and ``-l tier=front``.

Every few bursts the soak waits for a sentinel to come through both informers and compares
each cache with the server, object by object (the server's object without
managedFields against ``store.get``). At the end: what was compared, what the informers
counted, and that closing the registry left no task behind.

With --transform, the registry has a user transform, so every watch line goes through the
general per-line path (decode, transform, re-encode) instead of the block decoder.

Usage: python bench/soak_informer.py [--seconds 60] [--seed 1] [--transform] [--verbose]
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import logging
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import table

from kubemux import Backoff, WatcherRegistry, WatchSettings
from kubemux.testing import FakeCluster, make_pod, write_kubeconfig

SETTINGS = WatchSettings(
    backoff=Backoff(initial_delay=0.01, max_delay=0.1),
    inactivity_timeout=5.0,
    page_size=50,
    watch_timeout_range=(1.0, 3.0),  # streams also end normally: re-WATCH without a relist
)
SELECTOR = "tier=front"


def expected(obj: dict[str, Any]) -> dict[str, Any]:
    meta = {k: v for k, v in obj["metadata"].items() if k != "managedFields"}
    return {**obj, "metadata": meta}


def add_checked(obj: dict[str, Any]) -> dict[str, Any]:
    """A user transform: objects then go the general per-line path (decode, transform, encode)."""
    obj.setdefault("metadata", {}).setdefault("annotations", {})["soak/checked"] = "yes"
    return obj


def expected_transformed(obj: dict[str, Any]) -> dict[str, Any]:
    meta = dict(obj["metadata"])
    meta["annotations"] = {**(meta.get("annotations") or {}), "soak/checked": "yes"}
    return {**obj, "metadata": meta}  # a user transform keeps managedFields


def new_pod(rng: random.Random, name: str) -> dict[str, Any]:
    pod = make_pod(
        name,
        rng.choice(("default", "web", "batch")),
        size=rng.choice((100, 300, 800, 1500, 2100, 6000)),
        managed_fields=rng.random() < 0.8,
        labels={"app": "web", "tier": rng.choice(("front", "back"))},
    )
    if rng.random() < 0.05:
        pod["metadata"]["labels"]["managedFields"] = "not-the-real-one"
    return pod


async def compare(
    registry: WatcherRegistry, cluster: FakeCluster, sentinel: str, transformed: bool
) -> int:
    """Wait for ``sentinel`` in both caches, then compare them with the server's objects."""
    async with registry.subscribe("pods", ["c"], snapshot=False, buffer_size=10**7) as changes:
        cluster.create("pods", make_pod(sentinel, labels={"tier": "front"}))
        seen = 0
        with anyio.fail_after(60):
            async for change in changes:
                if change.name == sentinel:
                    seen += 1
                    if seen == 2:  # both informers delivered it
                        break
    truth = {
        (o["metadata"]["namespace"], o["metadata"]["name"]): o for o in cluster.objects("pods")
    }
    front = {k: o for k, o in truth.items() if o["metadata"]["labels"].get("tier") == "front"}
    every = registry.store("c", "pods")
    selected = registry.store("c", "pods", label_selector=SELECTOR)
    assert every is not None and selected is not None
    for store, want in ((every, truth), (selected, front)):
        assert set(store.keys()) == set(want), "cache keys differ from the server's"
        for (ns, name), obj in want.items():
            want_obj = expected_transformed(obj) if transformed else expected(obj)
            assert store.get(ns, name) == want_obj, f"{ns}/{name} differs"
    return len(truth) + len(front)


async def soak(seconds: float, seed: int, transformed: bool) -> dict[str, Any]:
    rng = random.Random(seed)
    names = (f"p-{i:06d}" for i in itertools.count())
    sentinels = (f"sentinel-{i:04d}" for i in itertools.count())
    counts = dict.fromkeys(("created", "modified", "deleted", "faults", "checks", "objects"), 0)
    baseline = len(asyncio.all_tasks())
    with tempfile.TemporaryDirectory() as tmp:
        async with FakeCluster(history_limit=3000, bookmark_period=0.5) as cluster:
            path = write_kubeconfig(Path(tmp) / "config", {"c": cluster})
            transform = {"transform": add_checked} if transformed else {}
            async with WatcherRegistry.from_kubeconfig(
                str(path), settings=SETTINGS, **transform
            ) as registry:
                await registry.watch("c", "pods")
                await registry.watch("c", "pods", label_selector=SELECTOR)
                live: list[dict[str, Any]] = []
                deadline = time.monotonic() + seconds
                burst = 0
                while time.monotonic() < deadline:
                    burst += 1
                    for _ in range(rng.randint(1, 200)):
                        op = rng.random()
                        if op < 0.4 or len(live) < 50:
                            live.append(cluster.create("pods", new_pod(rng, next(names))))
                            counts["created"] += 1
                        elif op < 0.8:
                            i = rng.randrange(len(live))
                            pod = live[i]
                            pod["metadata"]["labels"]["tier"] = rng.choice(("front", "back"))
                            pod["status"]["phase"] = rng.choice(("Running", "Pending", "Failed"))
                            live[i] = cluster.update("pods", pod)
                            counts["modified"] += 1
                        else:
                            pod = live.pop(rng.randrange(len(live)))
                            meta = pod["metadata"]
                            cluster.delete("pods", meta["name"], meta["namespace"])
                            counts["deleted"] += 1
                    fault = rng.random()
                    if fault < 0.05:
                        cluster.drop_watches()
                    elif fault < 0.08:
                        cluster.compact()
                    elif fault < 0.10:
                        cluster.fail_next(rng.randint(1, 5), status=503, watch=True)
                    elif fault < 0.12:
                        cluster.inject_watch_line("pods", b'{"type":"ADDED","object":{"metad')
                    counts["faults"] += fault < 0.12
                    await anyio.sleep(rng.random() * 0.02)
                    if burst % 10 == 0:
                        counts["objects"] += await compare(
                            registry, cluster, next(sentinels), transformed
                        )
                        counts["checks"] += 1
                counts["objects"] += await compare(registry, cluster, next(sentinels), transformed)
                counts["checks"] += 1
                informers = registry.status().contexts["c"].informers
    await anyio.lowlevel.checkpoint()
    leftover = len(asyncio.all_tasks()) - baseline
    return {**counts, "informers": informers, "leftover_tasks": leftover}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--seconds", type=float, default=60)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument(
        "--transform",
        action="store_true",
        help="with a user transform: every line takes the general path instead of the block one",
    )
    p.add_argument("--verbose", action="store_true", help="show the informers' warnings")
    args = p.parse_args()
    if not args.verbose:  # the faults are deliberate: their warnings are expected
        logging.getLogger("kubemux").setLevel(logging.ERROR)
    result = anyio.run(soak, args.seconds, args.seed, args.transform)
    print(
        f"informer soak: {args.seconds:g} s, seed {args.seed}: {result['created']:,} created, "
        f"{result['modified']:,} modified, {result['deleted']:,} deleted, "
        f"{result['faults']} faults\n"
    )
    rows = [
        [
            "pods" + (f" -l {i.label_selector}" if i.label_selector else ""),
            f"{i.objects:,}",
            str(i.relists),
            str(i.reconnects),
            str(i.skipped_lines),
            i.state,
        ]
        for i in result["informers"]
    ]
    header = ["informer", "objects", "relists", "reconnects", "skipped lines", "state"]
    print(table("Informers at the end", header, rows))
    print(
        f"\n{result['checks']} comparisons with the server, {result['objects']:,} objects "
        f"compared, all equal; tasks left after close: {result['leftover_tasks']}"
    )
    if result["leftover_tasks"]:
        raise SystemExit("tasks leaked")


if __name__ == "__main__":
    main()
