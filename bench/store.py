"""Store benchmark: snapshots and the event history (issue 19), and what they cost the writer.

Objects are 2 KB pods applied through ``store.writer`` from memory (no server, no socket).

  snapshots  take one of 100k objects (in 1 and in 100 namespaces), read it in order
             whole, a page of 500 after a key, and the first write after it (the copy of
             one namespace's dict); take one again with nothing changed
  history    memory (tracemalloc) per 10k events kept: ADDED of new objects (the bytes are
             the store's), and MODIFIED (each keeps the object's previous bytes alive)
  writer     us per applied event: no history, with a history, with a snapshot held

Usage: python bench/store.py [--objects 100000] [--events 10000] [--repeat 5]
"""

from __future__ import annotations

import argparse
import datetime as dt
import gc
import itertools
import os
import statistics
import sys
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import orjson
from _common import table

from kubemux import Store, parse_resource
from kubemux._wire.codec import Entry
from kubemux.testing import make_pod

PODS = parse_resource("pods")


def entries(n: int, namespaces: int, rv0: int = 1, size: int = 2000) -> list[Entry]:
    base = orjson.dumps(make_pod("x", size=size))
    out = []
    for i in range(n):
        ns, name, rv = f"ns-{i % namespaces}", f"pod-{i:06d}", str(rv0 + i)
        raw = base.replace(b'"name":"x"', b'"name":"' + name.encode() + b'"', 1)
        out.append(Entry(ns, name, rv, raw))
    return out


def filled(n: int, namespaces: int) -> Store:
    store = Store(PODS, transform=None)
    store.writer.replace(entries(n, namespaces), str(n))
    return store


def timed(fn: Callable[[], object], repeat: int) -> float:
    """Median seconds of ``repeat`` calls."""
    runs = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        runs.append(time.perf_counter() - t0)
    return statistics.median(runs)


def snapshots(n: int, repeat: int) -> list[list[str]]:
    return [_snapshot_row(n, spaces, repeat) for spaces in (1, 100)]


def _snapshot_row(n: int, spaces: int, repeat: int) -> list[str]:
    store = filled(n, spaces)
    take = timed(lambda: _fresh(store), repeat)  # a new version each time: taken anew
    snap = store.snapshot()
    again = timed(store.snapshot, repeat)  # nothing changed: the same one
    first = timed(lambda: sum(1 for _ in snap.items()), 1)  # sorts each namespace once
    whole = timed(lambda: sum(1 for _ in snap.items()), repeat)
    after = ("ns-0", f"pod-{n // 2:06d}")
    page = timed(lambda: list(itertools.islice(snap.items(after=after), 500)), repeat)
    write = []
    for i in range(repeat):
        store.snapshot()
        e = entries(1, spaces, rv0=n + 10 + i)[0]
        t0 = time.perf_counter()
        store.writer.apply("MODIFIED", e)  # copies the namespace's dict, once
        write.append(time.perf_counter() - t0)
    return [
        f"{n:,} objects in {spaces} namespace{'s' if spaces > 1 else ''}",
        f"{take * 1e6:,.1f}",
        f"{again * 1e6:,.2f}",
        f"{first * 1e3:,.1f}",
        f"{whole * 1e3:,.1f}",
        f"{page * 1e6:,.0f}",
        f"{statistics.median(write) * 1e3:,.2f}",
    ]


def _fresh(store: Store) -> object:
    store.writer.set_resource_version(str(int(store.resource_version) + 1))  # a new version
    return store.snapshot()


def _batch(kind: str, events: int) -> list[Entry]:
    fresh = entries(events, 10, rv0=10_000)
    if kind == "ADDED":  # new objects: the history shares their bytes with the store
        return [Entry(e.namespace, "new-" + e.name, e.rv, e.raw) for e in fresh]
    # each modifies one of the 1,000 objects, ten times over: the store drops each old
    # version, the history keeps it alive
    return [Entry(e.namespace, f"pod-{i % 1000:06d}", e.rv, e.raw) for i, e in enumerate(fresh)]


def _retained(kind: str, events: int, history: bool) -> tuple[int, int]:
    """Bytes still allocated after ``events`` were made and applied (and dropped by the
    caller), and the history's length."""
    store = filled(1000, 10)
    if history:
        store.history.max_events = events
    gc.collect()
    tracemalloc.start()
    batch = _batch(kind, events)
    apply = store.writer.apply
    for e in batch:
        apply(kind, e)
    del batch, e
    gc.collect()
    retained = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    return retained, len(store.history) if history else 0


def history_memory(events: int) -> list[list[str]]:
    rows = []
    for kind in ("ADDED", "MODIFIED"):
        with_history, kept = _retained(kind, events, True)
        without, _ = _retained(kind, events, False)
        extra = with_history - without
        rows.append(
            [
                f"{events:,} {kind} ({'new objects' if kind == 'ADDED' else 'old versions'})",
                f"{kept:,}",
                f"{extra / 2**20:,.2f}",
                f"{extra / max(kept, 1):,.0f}",
            ]
        )
    return rows


def writer_cost(n: int, repeat: int) -> list[list[str]]:
    rows = []
    for label in ("no history (default)", "with a history", "with a history and a snapshot"):
        runs = []
        for _ in range(repeat):
            store = filled(1000, 10)
            if label != "no history (default)":
                store.history.max_events = 10_000
            batch = [
                Entry(e.namespace, f"pod-{i % 1000:06d}", e.rv, e.raw)
                for i, e in enumerate(entries(n, 10, rv0=10_000))
            ]
            apply = store.writer.apply
            t0 = time.perf_counter()
            for i, e in enumerate(batch):
                if label.endswith("snapshot") and i % 1000 == 0:
                    store.snapshot()  # a proxy LIST every 1,000 events
                apply("MODIFIED", e)
            runs.append((time.perf_counter() - t0) / n)
        rows.append([label, f"{statistics.median(runs) * 1e6:.2f}"])
    return rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--objects", type=int, default=100_000)
    p.add_argument("--events", type=int, default=10_000)
    p.add_argument("--repeat", type=int, default=5)
    args = p.parse_args()
    load = os.getloadavg()[0]
    print(
        f"store: {dt.date.today()}, Python {sys.version.split()[0]}, "
        f"{os.cpu_count()} cores, load {load:.1f}\n"
    )
    header = [
        "store",
        "take us",
        "again us",
        "1st read ms",
        "read ms",
        "page of 500 us",
        "1st write ms",
    ]
    print(table("Snapshots (medians)", header, snapshots(args.objects, args.repeat)))
    print()
    print(
        table(
            "Event history memory (tracemalloc, beyond the store's own)",
            ["events applied", "kept", "MiB", "bytes/event"],
            history_memory(args.events),
        )
    )
    print()
    print(
        table(
            f"Writer, us per MODIFIED ({args.events:,} events, median of {args.repeat})",
            ["store", "us/event"],
            writer_cost(args.events, args.repeat),
        )
    )


if __name__ == "__main__":
    main()
