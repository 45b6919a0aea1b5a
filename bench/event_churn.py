"""Event-bucket churn: does an event index give its memory back when objects go away?

Replays the workload of flyteorg/flyte#7992 / #7993: N distinct objects (pods, named per attempt
so none repeats), each with one events.k8s.io/v1 Event; every event is ADDED, then every event
is DELETED. Each event is decoded from ~600 bytes of JSON with orjson, as the informer does, so
ADDED and DELETED hand the index distinct dicts.

Two implementations run the same workload:

* ``kubemux.EventIndex``;
* the leaky Flyte pattern, re-implemented faithfully in Python: an ``objectCache`` keyed by the
  regarding object's ``(namespace, name, kind)`` whose value maps each event's
  ``(namespace, name)`` to the event (Go: ``map[NamespacedName]*eventInfo``); ``OnDelete``
  removes the event from that inner map and never removes the outer key.

Memory is measured with tracemalloc after ``gc.collect()``, with the index still alive:
"retained" is the heap after the churn minus the heap before it, "peak" the peak above the
same baseline. Time is measured in a second pass without tracemalloc and counts only the
index's apply() calls (decoding is the same for both and excluded).

Usage: python bench/event_churn.py [--objects 200000]
"""

from __future__ import annotations

import argparse
import gc
import sys
import time
import tracemalloc
from collections import defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from kubemux._cache.event_index import EventIndex

FLYTE_PUBLISHED_OBJECTS = 200_000
FLYTE_PUBLISHED_BUCKETS = 200_000
FLYTE_PUBLISHED_RETAINED = "115.9 MB"

# One realistic Event: the scheduler binding a Flyte task pod (~600 bytes of JSON).
_TEMPLATE = (
    '{"kind":"Event","apiVersion":"events.k8s.io/v1",'
    '"metadata":{"name":"a8k2xq4vz7-n0-0-%(i)d.17c3e8a1f2b4d6%(i)02x",'
    '"namespace":"flyte-dev",'
    '"uid":"3f6c1d2e-8a4b-4c7d-9e0f-%(i)012d",'
    '"resourceVersion":"%(rv)d","creationTimestamp":"2024-05-01T12:00:00Z"},'
    '"eventTime":"2024-05-01T12:00:00.%(us)06dZ",'
    '"reportingController":"default-scheduler",'
    '"action":"Binding","reason":"Scheduled",'
    '"regarding":{"kind":"Pod","namespace":"flyte-dev",'
    '"name":"a8k2xq4vz7-n0-0-%(i)d","uid":"b1e2c3d4-5f6a-4b7c-8d9e-%(i)012d",'
    '"apiVersion":"v1"},'
    '"note":"Successfully assigned flyte-dev/a8k2xq4vz7-n0-0-%(i)d to '
    'ip-10-0-12-34.ec2.internal","type":"Normal"}'
)


def event_json(i: int, rv: int) -> bytes:
    return (_TEMPLATE % {"i": i, "rv": rv, "us": i % 1_000_000}).encode()


class Index(Protocol):
    def apply(self, event_type: str, event: Mapping[str, Any]) -> None: ...
    def __len__(self) -> int: ...


class LeakyFlyteIndex:
    """Flyte's controllerRuntimeEventWatcher.objectCache, as reported in flyteorg/flyte#7992."""

    def __init__(self) -> None:
        self.object_cache: defaultdict[tuple[str, str, str], dict[tuple[str, str], Any]] = (
            defaultdict(dict)
        )

    def apply(self, event_type: str, event: Mapping[str, Any]) -> None:
        regarding = event["regarding"]
        object_key = (regarding.get("namespace", ""), regarding["name"], regarding["kind"])
        meta = event["metadata"]
        event_key = (meta.get("namespace", ""), meta["name"])
        if event_type == "ADDED":
            self.object_cache[object_key][event_key] = event  # store(): LoadOrStore the bucket
        elif event_type == "DELETED":
            bucket = self.object_cache.get(object_key)  # OnDelete(): Load, then delete inside
            if bucket is not None:
                bucket.pop(event_key, None)
                # "We intentionally do not delete empty buckets from objectCache."

    def __len__(self) -> int:
        return len(self.object_cache)


@dataclass
class Result:
    name: str
    buckets: int = 0
    retained: int = 0
    peak: int = 0
    seconds: float = 0.0


def churn(index: Index, objects: int, *, timed: bool) -> float:
    """ADDED for every object's event, then DELETED for each. Returns seconds spent in apply()."""
    spent = 0.0
    clock = time.perf_counter
    apply = index.apply
    for phase, rv_base in (("ADDED", 1_000_000), ("DELETED", 2_000_000)):
        for i in range(objects):
            event = orjson.loads(event_json(i, rv_base + i))
            if timed:
                start = clock()
                apply(phase, event)
                spent += clock() - start
            else:
                apply(phase, event)
    return spent


def measure(name: str, factory: Callable[[], Index], objects: int) -> Result:
    result = Result(name)
    churn(factory(), 1_000, timed=False)  # warm up one-off caches (imports, interned keys)

    gc.collect()
    tracemalloc.start()
    index = factory()
    gc.collect()
    before = tracemalloc.get_traced_memory()[0]
    tracemalloc.reset_peak()
    churn(index, objects, timed=False)
    gc.collect()
    after, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    result.buckets = len(index)
    result.retained = after - before
    result.peak = peak - before
    del index

    gc.collect()
    index = factory()
    result.seconds = churn(index, objects, timed=True)
    del index
    gc.collect()
    return result


def mb(n: float) -> str:
    if abs(n) < 100_000:
        return f"{n:,.0f} B"
    return f"{n / 1e6:,.1f} MB"


def table(rows: list[list[str]]) -> str:
    widths = [max(len(row[c]) for row in rows) for c in range(len(rows[0]))]
    lines = []
    for r, row in enumerate(rows):
        cells = [
            cell.ljust(w) if c == 0 else cell.rjust(w)
            for c, (cell, w) in enumerate(zip(row, widths, strict=True))
        ]
        lines.append("  ".join(cells).rstrip())
        if r == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def ratio(leaky: float, ours: float) -> str:
    if ours <= 0:
        return "inf"
    if ours < 1024 < leaky:  # a few bytes of noise: a ratio would be meaningless
        return ">100,000x"
    return f"{leaky / ours:,.0f}x" if leaky / ours >= 10 else f"{leaky / ours:,.2f}x"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--objects", type=int, default=200_000, help="distinct objects to churn")
    args = parser.parse_args(argv)
    n = args.objects

    sample = event_json(n - 1, 3_000_000)
    print(f"event churn: {n:,} objects x 1 event ({len(sample)}-byte events.k8s.io/v1 JSON,")
    print("decoded with orjson), all ADDED then all DELETED; index kept alive;")
    print(f"tracemalloc after gc.collect(); Python {sys.version.split()[0]}; MB = 10^6 bytes\n")

    started = time.perf_counter()
    ours = measure("kubemux EventIndex", EventIndex, n)
    leaky = measure("leaky Flyte pattern (Python)", LeakyFlyteIndex, n)
    wall = time.perf_counter() - started

    header = [
        "implementation",
        "buckets retained",
        "retained heap",
        "peak heap",
        "apply time",
        "per event",
    ]
    rows = [header]
    for r in (ours, leaky):
        rows.append(
            [
                r.name,
                f"{r.buckets:,}",
                mb(r.retained),
                mb(r.peak),
                f"{r.seconds:.2f} s",
                f"{r.seconds / (2 * n) * 1e6:.2f} us",
            ]
        )
    rows.append(
        [
            "leaky / kubemux",
            ratio(leaky.buckets, ours.buckets),
            ratio(leaky.retained, ours.retained),
            ratio(leaky.peak, ours.peak),
            ratio(leaky.seconds, ours.seconds),
            "",
        ]
    )
    rows.append(
        [
            f"Flyte published (Go, {FLYTE_PUBLISHED_OBJECTS:,} objects)",
            f"{FLYTE_PUBLISHED_BUCKETS:,}",
            FLYTE_PUBLISHED_RETAINED,
            "-",
            "-",
            "-",
        ]
    )
    print(table(rows))
    print(
        f"\nkubemux retains {ours.retained:,} bytes for {ours.buckets} buckets; "
        f"the leaky pattern {leaky.retained / max(leaky.buckets, 1):,.0f} bytes per empty "
        f"bucket. Total run {wall:.1f} s."
    )


if __name__ == "__main__":
    main()
