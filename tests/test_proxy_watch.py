"""The downstream watch broadcaster against a small in-test event history: where a watch
starts, selector enter/leave, one encoding shared by every watcher of a view, slow watchers
cut off without slowing anyone, bookmarks, initial-events-end, timeouts, RESET, cleanup."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from typing import Any

import anyio
import orjson
import pytest

from kubemux._resources import parse_resource
from kubemux.proxy._query.options import WatchPlan, WatchStart, parse_list_options, plan_watch
from kubemux.proxy._query.selectors import ObjectFilter, parse_field_selector, parse_label_selector
from kubemux.proxy._watch.watch import (
    ObjectWatchFormat,
    TableWatchFormat,
    WatchBroadcaster,
    WatchEnd,
    WatchLimits,
)

PODS = parse_resource("pods")
JSON = ObjectWatchFormat("Pod", "v1")


# ------------------------------------------------------------------ a tiny store + history
@dataclasses.dataclass(frozen=True, slots=True)
class Ev:
    type: str
    rv: int
    namespace: str
    name: str
    raw: bytes
    old: bytes | None


class Snap:
    def __init__(self, objects: dict[tuple[str, str], bytes], rv: int):
        self._objects = dict(sorted(objects.items()))
        self.resource_version = str(rv)

    def items(
        self, namespace: str | None = None, after: tuple[str, str] | None = None
    ) -> Iterator[tuple[tuple[str, str], bytes]]:
        for key, raw in self._objects.items():
            if namespace is not None and key[0] != namespace:
                continue
            if after is not None and key <= after:
                continue
            yield key, raw


class Store:
    """Objects, a bounded history, and synchronous listeners: the EventHistory contract."""

    def __init__(self, keep: int = 1000) -> None:
        self.rv = 10
        self.objects: dict[tuple[str, str], bytes] = {}
        self.history: list[Ev] = []
        self.listeners: list[Callable[[Any], None]] = []
        self.keep = keep
        self.oldest_resource_version = self.rv

    # EventHistory
    def since(self, rv: int) -> list[Ev] | None:
        if rv < self.oldest_resource_version:
            return None
        return [e for e in self.history if e.rv > rv]

    def add_listener(self, fn: Callable[[Any], None]) -> Callable[[], None]:
        self.listeners.append(fn)
        return lambda: self.listeners.remove(fn)

    def snapshot(self) -> Snap:
        return Snap(self.objects, self.rv)

    # changes
    def _emit(self, event: Ev, keep: bool = True) -> Ev:
        if keep:
            self.history.append(event)
            while len(self.history) > self.keep:
                dropped = self.history.pop(0)
                self.oldest_resource_version = dropped.rv
        for fn in list(self.listeners):
            fn(event)
        return event

    def put(self, name: str, namespace: str = "default", **labels: str) -> Ev:
        self.rv += 1
        key = (namespace, name)
        old = self.objects.get(key)
        obj = {
            "kind": "Pod",
            "apiVersion": "v1",
            "metadata": {
                "name": name,
                "namespace": namespace,
                "resourceVersion": str(self.rv),
                "labels": labels,
            },
            "spec": {"nodeName": labels.get("node", "n1")},
        }
        raw = orjson.dumps(obj)
        self.objects[key] = raw
        return self._emit(Ev("MODIFIED" if old else "ADDED", self.rv, namespace, name, raw, old))

    def delete(self, name: str, namespace: str = "default") -> Ev:
        self.rv += 1
        old = self.objects.pop((namespace, name))
        obj = orjson.loads(old)
        obj["metadata"]["resourceVersion"] = str(self.rv)
        return self._emit(Ev("DELETED", self.rv, namespace, name, orjson.dumps(obj), old))

    def bookmark(self) -> None:
        self.rv += 1
        self._emit(Ev("BOOKMARK", self.rv, "", "", b"", None), keep=False)

    def reset(self) -> None:
        self.objects.clear()
        self._emit(Ev("RESET", self.rv, "", "", b"", None), keep=False)


class Sink:
    """A client: collects lines; ``gate`` (when set) holds every write until opened."""

    def __init__(self, gate: anyio.Event | None = None) -> None:
        self.lines: list[bytes] = []
        self.chunks: list[bytes] = []
        self.gate = gate
        self._changed = anyio.Event()

    async def send(self, data: bytes) -> None:
        if self.gate is not None:
            await self.gate.wait()
        self.chunks.append(data)
        self.lines.extend(data.splitlines(keepends=True))
        self._changed.set()
        self._changed = anyio.Event()

    async def wait_lines(self, n: int) -> list[bytes]:
        while len(self.lines) < n:
            await self._changed.wait()
        return self.lines

    def events(self) -> list[tuple[str, dict[str, Any]]]:
        out = []
        for line in self.lines:
            doc = orjson.loads(line)
            out.append((doc["type"], doc["object"]))
        return out

    def summary(self) -> list[tuple[str, str, str]]:
        return [
            (t, o["metadata"].get("name", ""), o["metadata"].get("resourceVersion", ""))
            for t, o in self.events()
        ]


class Run:
    """One served watch in a task group."""

    def __init__(self) -> None:
        self.result: WatchEnd | None = None
        self.done = anyio.Event()


def _start(
    tg: anyio.abc.TaskGroup,
    broadcaster: WatchBroadcaster,
    plan: WatchPlan,
    sink: Sink,
    filt: ObjectFilter | None = None,
    fmt: Any = JSON,
    watch_timeout: float = 60.0,
) -> Run:
    run = Run()

    async def serve() -> None:
        try:
            run.result = await broadcaster.serve(
                plan, fmt, filt or ObjectFilter(), sink.send, watch_timeout=watch_timeout
            )
        finally:
            run.done.set()

    tg.start_soon(serve)
    return run


def _broadcaster(store: Store, **settings: Any) -> WatchBroadcaster:
    return WatchBroadcaster(store, store.snapshot, lambda: store.rv, WatchLimits(**settings))


async def _until(condition: Callable[[], bool]) -> None:
    while not condition():
        await anyio.lowlevel.checkpoint()


# ----------------------------------------------------------------------------- the tests
async def test_from_zero_the_current_objects_then_live_events() -> None:
    store = Store()
    store.put("b")
    store.put("a")
    broadcaster = _broadcaster(store)
    sink = Sink()
    plan = plan_watch(parse_list_options({"watch": "1", "resourceVersion": "0"}, PODS))
    assert plan.start is WatchStart.INITIAL and not plan.initial_events_end
    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            run = _start(tg, broadcaster, plan, sink)
            await sink.wait_lines(2)
            store.put("a", app="x")
            store.delete("b")
            await sink.wait_lines(4)
            tg.cancel_scope.cancel()
    assert sink.summary() == [
        ("ADDED", "a", "12"),
        ("ADDED", "b", "11"),
        ("MODIFIED", "a", "13"),
        ("DELETED", "b", "14"),
    ]
    # the lines are the cached bytes, wrapped, exactly
    assert (
        sink.lines[2] == b'{"type":"MODIFIED","object":' + store.objects[("default", "a")] + b"}\n"
    )
    assert run.result is None  # cancelled
    assert broadcaster.watchers == 0 and broadcaster.views == 0 and store.listeners == []


async def test_send_initial_events_ends_with_the_annotated_bookmark() -> None:
    store = Store()
    store.put("a")
    broadcaster = _broadcaster(store)
    sink = Sink()
    query = {
        "watch": "1",
        "sendInitialEvents": "true",
        "resourceVersionMatch": "NotOlderThan",
        "allowWatchBookmarks": "true",
    }
    plan = plan_watch(parse_list_options(query, PODS))
    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            _start(tg, broadcaster, plan, sink)
            await sink.wait_lines(2)
            store.put("b")
            await sink.wait_lines(3)
            tg.cancel_scope.cancel()
    assert sink.lines[1] == (
        b'{"type":"BOOKMARK","object":{"kind":"Pod","apiVersion":"v1","metadata":'
        b'{"resourceVersion":"11","annotations":{"k8s.io/initial-events-end":"true"}}}}\n'
    )
    assert sink.summary() == [("ADDED", "a", "11"), ("BOOKMARK", "", "11"), ("ADDED", "b", "12")]


async def test_initial_events_from_a_version_ahead_wait_for_it() -> None:
    store = Store()
    broadcaster = _broadcaster(store, wait_timeout=5.0)
    sink = Sink()
    plan = WatchPlan(WatchStart.INITIAL, 12, initial_events_end=True, bookmarks=True)
    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            run = _start(tg, broadcaster, plan, sink)
            await _until(lambda: bool(store.listeners))  # waiting
            store.put("a")
            assert sink.lines == []
            store.put("b")
            await sink.wait_lines(3)
            tg.cancel_scope.cancel()
    assert sink.summary()[-1] == ("BOOKMARK", "", "12")
    assert run.result is None


async def test_initial_events_from_a_version_never_reached_are_a_504_error_event() -> None:
    store = Store()
    broadcaster = _broadcaster(store, wait_timeout=0.05)
    sink = Sink()
    with anyio.fail_after(5):
        result = await broadcaster.serve(
            WatchPlan(WatchStart.INITIAL, 99), JSON, ObjectFilter(), sink.send, watch_timeout=10
        )
    assert result is WatchEnd.ERROR
    assert sink.lines == [
        (
            b'{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","metadata":{},'
            b'"status":"Failure","message":"Timeout: Too large resource version: 99, current: 10",'
            b'"reason":"Timeout","details":{"causes":[{"reason":"ResourceVersionTooLarge",'
            b'"message":"Too large resource version"}],"retryAfterSeconds":1},"code":504}}\n'
        )
    ]


async def test_from_a_version_in_history_exactly_the_later_events() -> None:
    store = Store()
    for name in "abcd":
        store.put(name)  # rv 11..14
    broadcaster = _broadcaster(store)
    sink = Sink()
    plan = plan_watch(parse_list_options({"watch": "1", "resourceVersion": "12"}, PODS))
    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            _start(tg, broadcaster, plan, sink)
            await sink.wait_lines(2)
            store.put("e")
            await sink.wait_lines(3)
            tg.cancel_scope.cancel()
    assert sink.summary() == [("ADDED", "c", "13"), ("ADDED", "d", "14"), ("ADDED", "e", "15")]


async def test_from_a_version_older_than_history_is_410_as_an_error_event() -> None:
    store = Store(keep=2)
    for name in "abcd":
        store.put(name)
    broadcaster = _broadcaster(store)
    sink = Sink()
    with anyio.fail_after(5):
        result = await broadcaster.serve(
            WatchPlan(WatchStart.SINCE, 11), JSON, ObjectFilter(), sink.send, watch_timeout=10
        )
    assert result is WatchEnd.EXPIRED
    assert sink.lines == [
        (
            b'{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","metadata":{},'
            b'"status":"Failure","message":"too old resource version: 11 (12)","reason":"Expired",'
            b'"code":410}}\n'
        )
    ]
    assert broadcaster.views == 0 and store.listeners == []


async def test_a_selector_turns_leaving_into_deleted_and_entering_into_added() -> None:
    store = Store()
    store.put("a", app="web")
    store.put("b", app="db")
    broadcaster = _broadcaster(store)
    sink = Sink()
    filt = ObjectFilter("default", parse_label_selector("app=web"))
    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            _start(tg, broadcaster, WatchPlan(WatchStart.INITIAL), sink, filt)
            await sink.wait_lines(1)
            store.put("a", app="db")  # leaves: DELETED, its last state at rv 13
            store.put("b", app="web")  # enters: ADDED
            store.put("b", app="web", x="1")  # stays: MODIFIED
            store.put("c", "other", app="web")  # another namespace: nothing
            store.delete("b")  # was selected: DELETED
            store.delete("a")  # was not: nothing
            await sink.wait_lines(5)
            tg.cancel_scope.cancel()
    assert sink.summary() == [
        ("ADDED", "a", "11"),
        ("DELETED", "a", "13"),
        ("ADDED", "b", "14"),
        ("MODIFIED", "b", "15"),
        ("DELETED", "b", "17"),
    ]
    leaving = sink.events()[1][1]
    assert leaving["metadata"]["labels"] == {"app": "web"}  # the state that matched


async def test_a_field_selector_reads_the_object() -> None:
    store = Store()
    broadcaster = _broadcaster(store)
    sink = Sink()
    filt = ObjectFilter(None, fields=parse_field_selector("spec.nodeName=n2", PODS))
    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            _start(tg, broadcaster, WatchPlan(WatchStart.NOW), sink, filt)
            await _until(lambda: broadcaster.watchers == 1)
            store.put("a", node="n1")
            store.put("a", node="n2")
            store.put("a", node="n1")
            await sink.wait_lines(2)
            tg.cancel_scope.cancel()
    assert sink.summary() == [("ADDED", "a", "12"), ("DELETED", "a", "13")]


async def test_one_encoding_is_shared_by_every_watcher_of_a_view() -> None:
    store = Store()
    broadcaster = _broadcaster(store)
    sinks = [Sink() for _ in range(3)]
    other = Sink()
    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            for sink in sinks:
                _start(tg, broadcaster, WatchPlan(WatchStart.NOW), sink)
            _start(tg, broadcaster, WatchPlan(WatchStart.NOW), other, ObjectFilter("default"))
            await _until(lambda: broadcaster.watchers == 4)
            assert broadcaster.views == 2 and len(store.listeners) == 2
            store.put("a")
            for sink in (*sinks, other):
                await sink.wait_lines(1)
            tg.cancel_scope.cancel()
    first = sinks[0].chunks[0]
    assert all(sink.chunks[0] is first for sink in sinks)  # the same bytes object
    assert other.chunks[0] == first and other.chunks[0] is not first
    assert "views=0" in repr(broadcaster)


async def test_a_slow_watcher_is_cut_off_and_nobody_else_waits() -> None:
    store = Store()
    broadcaster = _broadcaster(store, max_buffered_events=5)
    gate = anyio.Event()
    slow, fast = Sink(gate), Sink()
    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            slow_run = _start(tg, broadcaster, WatchPlan(WatchStart.NOW), slow)
            fast_run = _start(tg, broadcaster, WatchPlan(WatchStart.NOW), fast)
            await _until(lambda: broadcaster.watchers == 2)
            store.put("p0")
            await fast.wait_lines(1)
            await anyio.lowlevel.checkpoint()  # the slow writer is now stuck in send
            for i in range(1, 20):
                store.put(f"p{i}")  # never blocks, whoever is behind
                await fast.wait_lines(i + 1)  # the fast client keeps up
            assert broadcaster.watchers == 2 and not slow_run.done.is_set()
            gate.set()  # the slow client reads again: its buffer, then the end
            await slow_run.done.wait()
            assert slow_run.result is WatchEnd.CUT_OFF
            assert not fast_run.done.is_set()
            tg.cancel_scope.cancel()
    assert [s[1] for s in fast.summary()] == [f"p{i}" for i in range(20)]
    # the slow one got a consistent prefix: the event it was writing, then its buffer
    assert slow.lines == fast.lines[: len(slow.lines)]
    assert len(slow.lines) == 1 + 5


async def test_bookmarks_come_periodically_at_the_views_version() -> None:
    store = Store()
    store.put("a")
    broadcaster = _broadcaster(store, bookmark_period=0.05)
    sink = Sink()
    plan = WatchPlan(WatchStart.NOW, bookmarks=True)
    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            _start(tg, broadcaster, plan, sink)
            await sink.wait_lines(1)
            store.bookmark()  # the store moved with no object change (rv 12)
            store.put("other", "elsewhere")
            await _until(lambda: any(b'"resourceVersion":"13"' in line for line in sink.lines))
            tg.cancel_scope.cancel()
    kinds = [t for t, _n, _rv in sink.summary()]
    assert kinds[0] == "BOOKMARK" and "ADDED" in kinds
    assert sink.summary()[0] == ("BOOKMARK", "", "11")
    assert b"initial-events-end" not in b"".join(sink.lines)


async def test_no_bookmarks_unless_allowed() -> None:
    store = Store()
    broadcaster = _broadcaster(store, bookmark_period=0.01)
    sink = Sink()
    with anyio.fail_after(5):
        result = await broadcaster.serve(
            WatchPlan(WatchStart.NOW), JSON, ObjectFilter(), sink.send, watch_timeout=0.2
        )
    assert result is WatchEnd.TIMEOUT
    assert sink.lines == []


async def test_timeout_seconds_ends_the_watch_with_a_bookmark_two_seconds_before() -> None:
    store = Store()
    broadcaster = _broadcaster(store, bookmark_period=600)
    sink = Sink()
    with anyio.fail_after(10):
        start = anyio.current_time()
        result = await broadcaster.serve(
            WatchPlan(WatchStart.NOW, bookmarks=True),
            JSON,
            ObjectFilter(),
            sink.send,
            watch_timeout=2.2,
        )
        elapsed = anyio.current_time() - start
    assert result is WatchEnd.TIMEOUT
    assert 2.1 < elapsed < 5
    assert sink.summary() == [("BOOKMARK", "", "10")]


async def test_a_reset_ends_every_watch() -> None:
    store = Store()
    broadcaster = _broadcaster(store)
    sinks = [Sink(), Sink()]
    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            runs = [_start(tg, broadcaster, WatchPlan(WatchStart.NOW), s) for s in sinks]
            await _until(lambda: broadcaster.watchers == 2)
            store.put("a")
            store.reset()
            for run in runs:
                await run.done.wait()
    assert [run.result for run in runs] == [WatchEnd.RESET, WatchEnd.RESET]
    assert all(len(s.lines) == 1 for s in sinks)  # what was buffered, then the end
    assert store.listeners == [] and broadcaster.watchers == 0


async def test_close_ends_every_watch_and_new_ones() -> None:
    store = Store()
    broadcaster = _broadcaster(store)
    sink = Sink()
    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            run = _start(tg, broadcaster, WatchPlan(WatchStart.NOW), sink)
            await _until(lambda: broadcaster.watchers == 1)
            broadcaster.close()
            await run.done.wait()
    assert run.result is WatchEnd.CLOSED
    closed = await broadcaster.serve(
        WatchPlan(WatchStart.NOW), JSON, ObjectFilter(), sink.send, watch_timeout=1
    )
    assert closed is WatchEnd.CLOSED and store.listeners == []


async def test_a_client_that_goes_away_leaves_nothing_behind() -> None:
    store = Store()
    broadcaster = _broadcaster(store)

    async def broken(data: bytes) -> None:
        raise ConnectionResetError("gone")

    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:

            async def serve() -> None:
                with pytest.raises(ConnectionResetError):
                    await broadcaster.serve(
                        WatchPlan(WatchStart.NOW), JSON, ObjectFilter(), broken, watch_timeout=10
                    )

            tg.start_soon(serve)
            await _until(lambda: broadcaster.watchers == 1)
            store.put("a")
    assert broadcaster.watchers == 0 and store.listeners == []


async def test_a_table_watch_has_columns_in_each_watchers_first_event_only() -> None:
    store = TableStore()
    fmt = TableWatchFormat(
        [{"name": "Name", "type": "string", "format": "name", "description": "", "priority": 0}]
    )
    broadcaster = WatchBroadcaster(store, store.snapshot, lambda: store.rv)
    early, late = Sink(), Sink()
    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            _start(tg, broadcaster, WatchPlan(WatchStart.NOW), early, fmt=fmt)
            await _until(lambda: broadcaster.watchers == 1)
            store.row("a")
            await early.wait_lines(1)
            _start(tg, broadcaster, WatchPlan(WatchStart.NOW), late, fmt=fmt)
            await _until(lambda: broadcaster.watchers == 2)
            store.row("b")
            await early.wait_lines(2)
            await late.wait_lines(1)
            tg.cancel_scope.cancel()
    first, second = (orjson.loads(line)["object"] for line in early.lines)
    assert first["columnDefinitions"][0]["name"] == "Name"
    assert second["columnDefinitions"] is None
    assert orjson.loads(late.lines[0])["object"]["columnDefinitions"][0]["name"] == "Name"
    assert first["metadata"] == {"resourceVersion": "11"}
    assert first["rows"] == [
        {
            "cells": ["a"],
            "object": {
                "kind": "PartialObjectMetadata",
                "apiVersion": "meta.k8s.io/v1",
                "metadata": {"name": "a", "namespace": "default", "resourceVersion": "11"},
            },
        }
    ]
    bookmark = orjson.loads(fmt.bookmark("12", initial_events_end=True))
    assert bookmark["type"] == "BOOKMARK"
    assert bookmark["object"]["metadata"] == {"resourceVersion": "12"}
    assert bookmark["object"]["rows"][0]["object"]["metadata"]["annotations"] == {
        "k8s.io/initial-events-end": "true"
    }
    with pytest.raises(ValueError, match="includeObject=Object"):
        TableWatchFormat([], "Object")


class TableStore(Store):
    def row(self, name: str) -> None:
        self.rv += 1
        meta = {"name": name, "namespace": "default", "resourceVersion": str(self.rv)}
        raw = b'{"cells":' + orjson.dumps([name]) + b',"metadata":' + orjson.dumps(meta) + b"}"
        self.objects[("default", name)] = raw
        self._emit(Ev("ADDED", self.rv, "default", name, raw, None))


async def test_a_thousand_watchers_of_one_view_get_every_event() -> None:
    store = Store()
    broadcaster = _broadcaster(store)
    sinks = [Sink() for _ in range(1000)]
    with anyio.fail_after(30):
        async with anyio.create_task_group() as tg:
            for sink in sinks:
                _start(tg, broadcaster, WatchPlan(WatchStart.NOW), sink)
            await _until(lambda: broadcaster.watchers == 1000)
            assert broadcaster.views == 1 and len(store.listeners) == 1
            for i in range(50):
                store.put(f"p{i}")
            for sink in sinks:
                await sink.wait_lines(50)
            tg.cancel_scope.cancel()
    assert all(sink.lines == sinks[0].lines for sink in sinks)
    assert store.listeners == []


async def test_a_long_backlog_is_not_limited_by_the_buffer() -> None:
    store = Store()
    for i in range(50):
        store.put(f"p{i:02d}")  # rv 11..60
    broadcaster = _broadcaster(store, max_buffered_events=5)
    sink = Sink()
    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            run = _start(tg, broadcaster, WatchPlan(WatchStart.SINCE, 10), sink)
            await sink.wait_lines(50)
            store.put("last")
            await sink.wait_lines(51)
            tg.cancel_scope.cancel()
    assert [n for _t, n, _rv in sink.summary()] == [f"p{i:02d}" for i in range(50)] + ["last"]
    assert run.result is None


async def test_a_burst_larger_than_the_buffer_cuts_a_watcher_off() -> None:
    store = Store()
    broadcaster = _broadcaster(store, max_buffered_events=5)
    sink = Sink()
    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            run = _start(tg, broadcaster, WatchPlan(WatchStart.NOW), sink)
            await _until(lambda: broadcaster.watchers == 1)
            for i in range(8):  # one synchronous step: the writer cannot run in between
                store.put(f"p{i}")
            await run.done.wait()
    assert run.result is WatchEnd.CUT_OFF
    assert len(sink.lines) == 5  # the buffered prefix, then the end
    assert store.listeners == []


async def test_resuming_from_a_version_ahead_of_the_cache_skips_up_to_it() -> None:
    store = Store()
    broadcaster = _broadcaster(store)
    sink = Sink()
    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            _start(tg, broadcaster, WatchPlan(WatchStart.SINCE, 12), sink)
            await _until(lambda: broadcaster.watchers == 1)
            store.put("a")  # 11
            store.put("b")  # 12
            store.put("c")  # 13
            await sink.wait_lines(1)
            tg.cancel_scope.cancel()
    assert sink.summary() == [("ADDED", "c", "13")]


# ------------------------------------------------------------------------------ pacing
async def test_events_closer_than_the_write_interval_go_out_in_one_write() -> None:
    store = Store()
    broadcaster = _broadcaster(store, write_interval=2.0)
    sink = Sink()
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            _start(tg, broadcaster, WatchPlan(WatchStart.NOW), sink)
            await _until(lambda: broadcaster.watchers == 1)
            store.put("p0")  # after a quiet spell: written at once
            await sink.wait_lines(1)
            store.put("p1")
            for _ in range(20):  # the watcher could run: it is not woken before the round
                await anyio.lowlevel.checkpoint()
            assert len(sink.lines) == 1
            store.put("p2")
            await sink.wait_lines(3)  # the round: both in one write
            tg.cancel_scope.cancel()
    assert [len(chunk.splitlines()) for chunk in sink.chunks] == [1, 2]
    assert [s[1] for s in sink.summary()] == ["p0", "p1", "p2"]


async def test_pacing_never_cuts_a_watcher_off_in_a_burst() -> None:
    store = Store()
    broadcaster = _broadcaster(store, write_interval=60.0, max_buffered_events=10)
    sink = Sink()
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            run = _start(tg, broadcaster, WatchPlan(WatchStart.NOW), sink)
            await _until(lambda: broadcaster.watchers == 1)
            store.put("p0")
            await sink.wait_lines(1)
            for i in range(1, 31):  # three buffers' worth, well inside the 60 s interval
                store.put(f"p{i}")
                await anyio.lowlevel.checkpoint()
            await sink.wait_lines(31)  # half a buffer behind wakes the watchers at once
            assert not run.done.is_set()
            tg.cancel_scope.cancel()
    assert [s[1] for s in sink.summary()] == [f"p{i}" for i in range(31)]
