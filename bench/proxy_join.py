"""Micro-bench of the proxy's serving core: LIST bodies joined from cached bytes, Tables,
selectors on bytes, continue tokens, and one watch event fanned out to many watchers.

Run: ``python bench/proxy_join.py [N ...]`` (default 10000 100000). Objects are ~1 KB pods.
Targets (issue #20): <= 2 us per object as JSON, <= 10 us per object as a Table.
"""

from __future__ import annotations

import bisect
import gc
import os
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import orjson
from _common import table

from kubemux._resources import parse_resource
from kubemux.proxy._api.lists import (
    iter_list,
    iter_table,
    join_list,
    join_table,
    paginate,
    split_table_row,
)
from kubemux.proxy._api.tokens import ContinueTokens
from kubemux.proxy._query.options import WatchPlan, WatchStart
from kubemux.proxy._query.selectors import ObjectFilter, parse_field_selector, parse_label_selector
from kubemux.proxy._watch.watch import ObjectWatchFormat, WatchBroadcaster
from kubemux.testing import make_pod

COLUMNS = [
    {"name": n, "type": "string", "format": "", "description": "", "priority": 0}
    for n in ("Name", "Ready", "Status", "Restarts", "Age")
]


def _objects(n: int) -> dict[tuple[str, str], bytes]:
    template = make_pod("tmpl-0", "default", size=1000, managed_fields=False)
    out: dict[tuple[str, str], bytes] = {}
    for i in range(n):
        ns = f"ns-{i % 20:02d}"
        name = f"web-{i:06d}"
        template["metadata"].update(name=name, namespace=ns, resourceVersion=str(1000 + i))
        template["metadata"]["labels"] = {"app": "web" if i % 2 else "db"}
        out[(ns, name)] = orjson.dumps(template)
    return dict(sorted(out.items()))


class _Snapshot:
    """A stand-in for the store's snapshot: sorted items, ``after`` by bisection."""

    def __init__(self, objects: dict[tuple[str, str], bytes]):
        self.objects = objects
        self.keys = list(objects)
        self.values = list(objects.values())
        self.resource_version = "999999"

    def items(
        self, namespace: str | None = None, after: tuple[str, str] | None = None
    ) -> Iterator[tuple[tuple[str, str], bytes]]:
        start = 0 if after is None else bisect.bisect_right(self.keys, after)
        keys, values = self.keys, self.values
        return ((keys[i], values[i]) for i in range(start, len(keys)))


def _best(fn: Callable[[], object], repeat: int = 5) -> float:
    best = float("inf")
    for _ in range(repeat):
        gc.collect()
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


@dataclass
class _Ev:
    type: str
    rv: int
    namespace: str
    name: str
    raw: bytes
    old: bytes | None


class _History:
    def __init__(self) -> None:
        self.listeners: list[Callable[[_Ev], None]] = []

    def since(self, rv: int) -> list[_Ev]:
        return []

    def add_listener(self, fn: Callable[[_Ev], None]) -> Callable[[], None]:
        self.listeners.append(fn)
        return lambda: self.listeners.remove(fn)


def _fanout_us(watchers: int, raw: bytes) -> tuple[float, float]:
    """(us per watcher to hand one event to ``watchers`` watchers of one view: the
    synchronous dispatch the informer pays; bytes allocated per idle watcher)."""
    import tracemalloc

    import anyio

    history = _History()
    broadcaster = WatchBroadcaster(history, lambda: _Snapshot({}), lambda: 1)
    fmt = ObjectWatchFormat("Pod", "v1")
    result: list[float] = []

    async def main() -> None:
        sent = 0

        async def sink(data: bytes) -> None:
            nonlocal sent
            sent += 1

        tracemalloc.start()
        before = tracemalloc.get_traced_memory()[0]
        async with anyio.create_task_group() as tg:
            for _ in range(watchers):
                tg.start_soon(
                    lambda: broadcaster.serve(
                        WatchPlan(WatchStart.NOW), fmt, ObjectFilter(), sink, watch_timeout=60
                    )
                )
            while broadcaster.watchers < watchers:  # noqa: ASYNC110 (a bench, not a test)
                await anyio.sleep(0.01)
            per_watcher = (tracemalloc.get_traced_memory()[0] - before) / watchers
            tracemalloc.stop()
            (listener,) = history.listeners
            best = float("inf")
            for rv in range(2, 22):
                event = _Ev("MODIFIED", rv, "default", "web", raw, None)
                start = time.perf_counter()
                listener(event)
                best = min(best, time.perf_counter() - start)
                while sent < watchers * (rv - 1):  # let every writer send it
                    await anyio.lowlevel.checkpoint()
            result.extend((best / watchers * 1e6, per_watcher))
            tg.cancel_scope.cancel()

    anyio.run(main)
    return result[0], result[1]


def _lists(n: int) -> list[list[str]]:
    rows: list[list[str]] = []
    pods = parse_resource("pods")
    tokens = ContinueTokens()
    objects = _objects(n)
    snap = _Snapshot(objects)
    raws = list(objects.values())
    size = sum(len(r) for r in raws) / n

    def full_list() -> bytes:
        page = paginate(snap.items(), 0)
        return join_list("PodList", "v1", snap.resource_version, page.items)

    def streamed_list() -> int:
        page = paginate(snap.items(), 0)
        chunks = iter_list("PodList", "v1", snap.resource_version, page.items)
        return sum(len(chunk) for chunk in chunks)

    def paged_list() -> int:
        total = 0
        after: tuple[str, str] | None = None
        token = ""
        while True:
            if token:
                position = tokens.decode(token, "ctx", "pods")
                after = position.last_key
            page = paginate(snap.items(after=after), 500)
            token = ""
            if page.last_key is not None:
                token = tokens.encode("ctx", "pods", 1, page.last_key, "999999")
            total += len(join_list("PodList", "v1", "999999", page.items, token or None))
            if not token:
                return total

    label = ObjectFilter(None, parse_label_selector("app=web"))
    field = ObjectFilter(None, fields=parse_field_selector("spec.nodeName=node-1", pods))

    def label_list() -> int:
        page = paginate(snap.items(), 0, label.matches_raw)
        return sum(map(len, iter_list("PodList", "v1", "1", page.items)))

    def field_list() -> int:
        page = paginate(snap.items(), 0, field.matches_raw)
        return sum(map(len, iter_list("PodList", "v1", "1", page.items)))

    table_rows = [
        b'{"cells":'
        + orjson.dumps([key[1], "1/1", "Running", 0, "5d"])
        + b',"metadata":'
        + orjson.dumps(
            {
                "name": key[1],
                "namespace": key[0],
                "resourceVersion": "1",
                "labels": {"app": "web"},
            }
        )
        + b"}"
        for key in objects
    ]

    def table_list() -> bytes:
        rows_ = [split_table_row(row) for row in table_rows]
        return join_table(COLUMNS, rows_, "Metadata", "999999")

    def streamed_table() -> int:
        rows_ = (split_table_row(row) for row in table_rows)
        return sum(map(len, iter_table(COLUMNS, rows_, "Metadata", "999999")))

    body = full_list()
    assert orjson.loads(body)["items"][0]["metadata"]["name"] == "web-000000"
    assert len(orjson.loads(table_list())["rows"]) == n
    assert streamed_list() == len(body)
    for name, fn in (
        ("LIST JSON, streamed in 1 MB chunks", streamed_list),
        ("LIST JSON, one body", full_list),
        ("LIST JSON, limit=500 pages + tokens", paged_list),
        ("LIST JSON, labelSelector app=web", label_list),
        ("LIST JSON, fieldSelector spec.nodeName", field_list),
        ("LIST Table (Metadata), streamed", streamed_table),
        ("LIST Table (Metadata), one body", table_list),
    ):
        seconds = _best(fn, 3 if n >= 100_000 else 5)
        rows.append(
            [
                name,
                f"{n:,}",
                f"{size:.0f} B",
                f"{seconds * 1e3:.1f} ms",
                f"{seconds / n * 1e6:.2f} us",
            ]
        )
    return rows


def main(sizes: list[int]) -> None:
    rows: list[list[str]] = []
    for n in sizes:
        rows.extend(_lists(n))
    for watchers in (100, 1000):
        raw = next(iter(_objects(1).values()))
        us, memory = _fanout_us(watchers, raw)
        rows.append(
            [f"memory per idle watcher ({watchers})", "-", "-", "-", f"{memory / 1024:.1f} KB"]
        )
        rows.append(
            [
                f"watch event fan-out to {watchers} watchers",
                "1 event",
                f"{len(raw)} B",
                "-",
                f"{us:.2f} us/watcher",
            ]
        )
    load = os.getloadavg()[0]
    print(
        table(
            f"proxy serving core (best of runs; per object unless noted; load average {load:.1f}"
            f" on {os.cpu_count()} CPUs)",
            ["measure", "objects", "object size", "total", "per object"],
            rows,
        )
    )


if __name__ == "__main__":
    main([int(a) for a in sys.argv[1:]] or [10_000, 100_000])
