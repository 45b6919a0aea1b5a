"""The store's writer, its snapshots and its event history (issue 19): plain, synchronous
code, tested without an event loop; then an informer and a registry over FakeCluster."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import anyio
import orjson
import pytest

from kubemux import (
    EventHistory,
    HistoryEvent,
    MultiStore,
    Store,
    StoreListener,
    StoreSizes,
    StoreSnapshot,
    StoreWriter,
    TableColumn,
    TableStore,
    WatcherRegistry,
    WatchSettings,
    parse_resource,
)
from kubemux._wire.codec import Entry, StoreChange, UndecodableObject
from kubemux.testing import FakeCluster, make_pod, write_kubeconfig
from support import Calls

PODS = parse_resource("pods")
TIMEOUT = 15


def raw(name: str, rv: int, ns: str = "default", **extra: Any) -> bytes:
    meta = {"name": name, "namespace": ns, "resourceVersion": str(rv)}
    return orjson.dumps({"metadata": meta, **extra})


def entry(name: str, rv: int, ns: str = "default", **extra: Any) -> Entry:
    return Entry(ns, name, str(rv), raw(name, rv, ns, **extra))


def filled(n: int = 3, rv: int = 10) -> Store:
    store = Store(PODS)
    store.writer.replace([entry(f"p{i}", i + 1) for i in range(n)], str(rv))
    return store


class Heard(StoreListener):
    """A store listener writing down what it hears."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    def changed(self, change: StoreChange) -> None:
        self.calls.append((change.type, change.entry.name))

    def listed(self, resource_version: str, changes: Any, *, relist: bool) -> None:
        self.calls.append(("listed", resource_version, relist))

    def announced(self, changes: Any, resource_version: str) -> None:
        self.calls.append(("slice", len(changes)))
        super().announced(changes, resource_version)

    def bookmarked(self, resource_version: str) -> None:
        self.calls.append(("bookmarked", resource_version))

    def cleared(self) -> None:
        self.calls.append(("cleared",))


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


# ------------------------------------------------------------------ writer
def test_the_writer_is_the_one_way_to_change_a_store() -> None:
    store = Store(PODS)
    writer = store.writer
    assert isinstance(writer, StoreWriter) and store.writer is writer
    assert writer.sizes() == StoreSizes(0, 0)
    first = writer.prepare(raw("a", 1), from_list=True)
    assert first.rv == "1" and b'"kind":"Pod"' in first.raw  # a LIST item gets its kind
    changes = writer.replace([first, writer.prepare(raw("b", 2))], "5")
    assert [(c.type, c.entry.name) for c in changes] == [("ADDED", "a"), ("ADDED", "b")]
    assert store.has_synced and store.resource_version == "5"
    change = writer.apply("MODIFIED", entry("a", 6))
    assert isinstance(change, StoreChange) and change.old is not None
    assert writer.apply("DELETED", entry("zz", 7)) is None  # not held: nothing changed
    writer.set_resource_version("9")
    assert store.resource_version == "9"
    assert [e.name for e in writer.entries()] == ["a", "b"]
    assert writer.sizes() == StoreSizes(2, sum(len(e.raw) for e in writer.entries()))
    sliced = writer.replacement()
    sliced.add(entry("b", 2))
    heard = Heard()
    writer.add_listener(heard)
    assert anyio.run(sliced.commit, "12") == 1  # found missing, swapped in, announced
    assert heard.calls == [("listed", "12", True), ("slice", 1), ("DELETED", "a")]
    writer.clear()
    assert len(store) == 0 and not store.has_synced


@pytest.mark.parametrize(
    "bad",
    [b'{"metadata":{"name":"x"},"s":"\xff"}', b"[1,2,3]", b'{"metadata":' + b"[" * 3000 + b"]}"],
    ids=["utf-8", "array", "deep"],
)
def test_what_no_reader_can_decode_never_enters(bad: bytes) -> None:
    store = Store(PODS)
    with pytest.raises((UndecodableObject, ValueError, RecursionError)):
        store.writer.prepare(bad)
    assert len(store) == 0


def test_a_table_store_writes_its_columns_through_its_writer() -> None:
    table = TableStore(PODS)
    columns = (TableColumn(name="Name", format="name"), TableColumn(name="Age", type="date"))
    table.writer.set_columns(columns, dropped=(2,), fallback=True)
    assert (table.columns, table.writer.dropped, table.is_fallback) == (columns, (2,), True)


def test_a_multistore_has_no_writer_history_or_snapshot_of_its_own() -> None:
    multi = MultiStore({"a": Store(PODS), "b": Store(PODS)})
    for read in (lambda: multi.writer, lambda: multi.history, multi.snapshot):
        with pytest.raises(TypeError, match="stores"):
            read()


# ------------------------------------------------------------------ the change stream
def test_every_change_reaches_every_listener_in_apply_order() -> None:
    store = Store(PODS)
    first, second = Heard(), Heard()
    store.writer.add_listener(first)
    remove = store.writer.add_listener(second)
    store.writer.replace([entry("a", 1)], "5")
    store.writer.apply("ADDED", entry("b", 6))
    store.writer.apply("DELETED", entry("zz", 7))  # not held: nothing to announce
    store.writer.set_resource_version("8")
    remove()
    remove()  # idempotent
    store.writer.apply("DELETED", entry("a", 9))
    store.writer.clear()
    common = [("listed", "5", False), ("slice", 1), ("ADDED", "a"), ("ADDED", "b")]
    assert second.calls == [*common, ("bookmarked", "8")]
    assert first.calls == [*common, ("bookmarked", "8"), ("DELETED", "a"), ("cleared",)]


async def test_a_relist_is_announced_in_slices_and_a_late_listener_misses_nothing() -> None:
    store = filled(10, rv=10)  # p0..p9
    early = Heard()
    store.writer.add_listener(early)
    replacement = store.writer.replacement()
    for i in range(3, 13):  # p3..p9 unchanged, p10..p12 added (first), p0..p2 deleted
        replacement.add(entry(f"p{i}", i + 1))
    late: list[str] = []
    joined: list[str] = []

    async def join_between_slices() -> None:
        while len(early.calls) < 4:  # listed, a slice of two, and its changes
            await anyio.lowlevel.checkpoint()
        # one synchronous step: what was announced, then what comes
        joined.extend(e.name for e in store.writer.announced_entries())
        store.writer.add_listener(Calls(lambda kind, e, _o: late.append(f"{kind} {e.name}")))

    async with anyio.create_task_group() as tg:
        tg.start_soon(join_between_slices)
        assert await replacement.commit("30", slice_size=2) == 6
    assert early.calls[0] == ("listed", "30", True)
    assert [c for c in early.calls if c[0] == "slice"] == [("slice", 2)] * 3
    assert len(store) == 10 and store.resource_version == "30"  # swapped in one step
    # the late listener joined after the first slice (two DELETEDs): the store less the rest
    # the late listener joined after the first slice (two ADDEDs): the store less the rest
    assert joined == sorted(f"p{i}" for i in range(12))  # p12 not yet, p0-p2 not yet gone
    assert late == ["ADDED p12", "DELETED p0", "DELETED p1", "DELETED p2"]
    assert store.writer.announced_entries() == store.writer.entries()  # all told


async def test_a_commit_cancelled_after_the_swap_announces_the_rest_at_once() -> None:
    store = filled(6, rv=10)
    heard = Heard()
    store.writer.add_listener(heard)
    with anyio.CancelScope() as scope:

        class Canceller(StoreListener):
            def listed(self, resource_version: str, changes: Any, *, relist: bool) -> None:
                scope.cancel()  # swapped: the next yield (after the first slice) is cancelled

        store.writer.add_listener(Canceller())
        await store.writer.replacement().commit("20", slice_size=2)  # empty: six DELETEDs
    assert scope.cancelled_caught
    assert len(store) == 0 and store.resource_version == "20"
    assert [c[1] for c in heard.calls if c[0] == "slice"] == [2, 4]  # one slice, then the rest
    assert [c[1] for c in heard.calls if c[0] == "DELETED"] == [f"p{i}" for i in range(6)]
    assert store.writer.announced_entries() == []


def test_a_store_listener_that_raises_is_removed_and_the_others_go_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    store = filled(1)
    calls: list[str] = []

    def broken(kind: str, e: Entry, old: Entry | None) -> None:
        calls.append(e.name)
        raise KeyError("a bug")

    after = Heard()
    store.writer.add_listener(Calls(broken))
    store.writer.add_listener(after)
    assert store.writer.apply("ADDED", entry("a", 11)) is not None
    assert store.writer.apply("ADDED", entry("b", 12)) is not None
    assert calls == ["a"] and after.calls == [("ADDED", "a"), ("ADDED", "b")]
    assert "raised; it is removed" in caplog.text and len(store) == 3


async def test_history_listeners_get_a_relist_in_slices_kept_whole_at_the_swap() -> None:
    """The proxy's watches hear a relist a slice at a time (the loop runs between), while
    ``since`` answers the whole of it from the swap on, as the store is."""
    store = filled(1000, rv=10)
    history = store.history
    heard: list[int] = []
    history.add_listener(lambda event: heard.append(event.rv))
    replacement = store.writer.replacement()  # empty: 1,000 DELETEDs
    seen_between: list[tuple[int, int]] = []

    async def look() -> None:
        while len(heard) < 1000:
            since = history.since(10)
            seen_between.append((len(heard), len(since or ())))
            await anyio.lowlevel.checkpoint()

    async with anyio.create_task_group() as tg:
        tg.start_soon(look)
        await replacement.commit("20", slice_size=100)
    assert heard == [20] * 1000
    partial = [(h, s) for h, s in seen_between if 0 < h < 1000]
    assert partial and all(s == 1000 for _, s in partial)  # since() had the whole relist


async def test_a_proxy_watch_started_mid_relist_gets_nothing_twice() -> None:
    """The proxy's watches hear a relist a slice at a time: one that starts from the store
    (its snapshot, at the list's version) gets none of the relist's changes, one that
    resumes from before the relist gets each of them exactly once."""
    from kubemux._wire.types import View
    from kubemux.proxy._query.options import parse_list_options, plan_watch
    from kubemux.proxy._query.selectors import ObjectFilter
    from kubemux.proxy._reads.served import ServedStore
    from kubemux.proxy._watch.watch import ObjectWatchFormat

    store = filled(600, rv=1000)  # p0..p599
    served = ServedStore("c", store, View.OBJECTS)
    fmt, everything = ObjectWatchFormat("Pod", "v1"), ObjectFilter()
    lines: dict[str, list[bytes]] = {"fresh": [], "resumed": []}

    async def watch(name: str, rv: str) -> None:
        plan = plan_watch(parse_list_options({"watch": "1", "resourceVersion": rv}, PODS))

        async def send(data: bytes) -> None:
            lines[name].extend(data.splitlines())

        await served.broadcaster.serve(plan, fmt, everything, send, watch_timeout=60)

    replacement = store.writer.replacement()
    for i in range(300, 600):
        replacement.add(entry(f"p{i}", i + 1))  # p0..p299 deleted
    heard: list[int] = []
    store.history.add_listener(lambda event: heard.append(event.rv))
    with anyio.fail_after(TIMEOUT):
        async with anyio.create_task_group() as tg:

            async def join_mid_relist() -> None:
                while not 0 < len(heard) < 300:
                    await anyio.lowlevel.checkpoint()
                tg.start_soon(watch, "fresh", "0")  # the store now: at the list's version
                tg.start_soon(watch, "resumed", "1000")  # from before the relist

            tg.start_soon(join_mid_relist)
            await replacement.commit("2000", slice_size=50)
            while len(lines["resumed"]) < 300 or len(lines["fresh"]) < 300:
                await anyio.lowlevel.checkpoint()
            store.writer.apply("ADDED", entry("late", 2001))
            while len(lines["fresh"]) < 301 or len(lines["resumed"]) < 301:
                await anyio.lowlevel.checkpoint()
            tg.cancel_scope.cancel()
    fresh = [orjson.loads(line) for line in lines["fresh"]]
    assert [e["type"] for e in fresh] == ["ADDED"] * 301  # the 300 left, then "late"
    assert fresh[-1]["object"]["metadata"]["name"] == "late"
    resumed = [orjson.loads(line) for line in lines["resumed"]]
    deleted = [e["object"]["metadata"]["name"] for e in resumed if e["type"] == "DELETED"]
    assert sorted(deleted) == sorted(f"p{i}" for i in range(300))  # each once
    assert [e["type"] for e in resumed[300:]] == ["ADDED"]


# ------------------------------------------------------------------ snapshots
def test_a_snapshot_does_not_see_later_changes() -> None:
    store = filled(3)
    snap = store.snapshot()
    assert isinstance(snap, StoreSnapshot) and (len(snap), snap.resource_version) == (3, "10")
    before = snap.get_raw("default", "p1")
    store.writer.apply("MODIFIED", entry("p1", 11, extra=1))
    store.writer.apply("DELETED", entry("p0", 12))
    store.writer.apply("ADDED", entry("new", 13, ns="other"))
    assert snap.get_raw("default", "p1") == before and snap.get_raw("default", "p0") is not None
    assert snap.get_raw("other", "new") is None and len(snap) == 3
    assert [k for k, _ in snap.items()] == [("default", f"p{i}") for i in range(3)]
    after = store.snapshot()
    assert after is not snap and after.resource_version == "13" and len(after) == 3
    assert [k for k, _ in after.items()] == [("default", "p1"), ("default", "p2"), ("other", "new")]
    assert store.get("default", "p1") == orjson.loads(raw("p1", 11, extra=1))


def test_a_snapshot_shares_the_bytes_and_is_taken_once_per_change() -> None:
    store = filled(50)
    snap = store.snapshot()
    assert store.snapshot() is snap  # nothing changed: the same one
    assert snap.get_raw("default", "p7") is store.get_raw("default", "p7")  # no copy
    store.writer.set_resource_version("11")  # a bookmark: another version
    moved = store.snapshot()
    assert moved is not snap and moved.resource_version == "11"
    store.writer.apply("ADDED", entry("x", 12))
    assert store.snapshot() is not moved
    store.writer.clear()
    assert len(store.snapshot()) == 0 and len(moved) == 50


def test_snapshot_items_page_in_order_after_a_key() -> None:
    store = Store(PODS)
    names = [("b", "y"), ("a", "z"), ("a", "x"), ("", "cluster"), ("b", "w"), ("c", "v")]
    store.writer.replace([entry(n, i + 1, ns) for i, (ns, n) in enumerate(names)], "9")
    snap = store.snapshot()
    keys = [k for k, _ in snap.items()]
    assert keys == sorted(names)
    assert [k for k, _ in snap.items(after=("a", "x"))] == keys[2:]
    assert [k for k, _ in snap.items(after=("a", "zz"))] == keys[3:]  # past a namespace's end
    assert [k for k, _ in snap.items(after=("aa", ""))] == keys[3:]  # between namespaces
    assert [k for k, _ in snap.items("b", after=("b", "w"))] == [("b", "y")]
    assert list(snap.items("nope")) == []
    pages: list[tuple[str, str]] = []
    after: tuple[str, str] | None = None
    while True:
        page = [k for k, _ in itertools.islice(snap.items(after=after), 2)]
        if not page:
            break
        pages += page
        after = page[-1]
    assert pages == keys
    assert dict(snap.items())[("a", "x")] == store.get_raw("a", "x")


def test_taking_a_snapshot_costs_nothing_per_object() -> None:
    """O(namespaces): the objects' dicts are shared, one is copied when it next changes."""
    store = Store(PODS)
    store.writer.replace([entry(f"p{i}", i + 1, ns=f"ns{i % 4}") for i in range(4000)], "5000")
    snap = store.snapshot()
    buckets = dict(store._items)
    assert all(snap._items[ns] is buckets[ns] for ns in buckets)  # shared, not copied
    store.writer.apply("MODIFIED", entry("p1", 5001, ns="ns1"))
    assert store._items["ns1"] is not snap._items["ns1"]  # copied on the first write
    assert store._items["ns0"] is snap._items["ns0"]  # the others still shared
    again = store._items["ns1"]
    store.writer.apply("MODIFIED", entry("p5", 5002, ns="ns1"))
    assert store._items["ns1"] is again  # once per snapshot, not per write


# ------------------------------------------------------------------ history
def watch_like(store: Store, *changes: tuple[str, str, int]) -> None:
    for kind, name, rv in changes:
        store.writer.apply(kind, entry(name, rv))


def test_history_since_a_version_in_apply_order() -> None:
    store = filled(2, rv=10)
    history = store.history
    assert isinstance(history, EventHistory) and history.since(10) == []
    watch_like(store, ("ADDED", "a", 11), ("MODIFIED", "a", 12), ("DELETED", "p0", 13))
    events = history.since(10)
    assert events is not None
    assert [(e.type, e.rv, e.name) for e in events] == [
        ("ADDED", 11, "a"),
        ("MODIFIED", 12, "a"),
        ("DELETED", 13, "p0"),
    ]
    assert all(isinstance(e, HistoryEvent) for e in events)
    modified, deleted = events[1], events[2]
    assert modified.old == raw("a", 11) and modified.raw == raw("a", 12)
    assert deleted.old == store_raw_of_p0() and events[0].old is None
    assert [e.rv for e in history.since(12) or ()] == [13]
    assert history.since(13) == [] and history.since(99) == []
    assert history.since(9) is None  # older than what is kept: 410
    assert history.oldest_resource_version == 10


def store_raw_of_p0() -> bytes:
    return entry("p0", 1).raw


def test_history_shares_the_stores_bytes() -> None:
    store = filled(1)
    history = store.history
    new = entry("p0", 20, big="x" * 1000)
    store.writer.apply("MODIFIED", new)
    (event,) = history.since(10) or ()
    assert event.raw is new.raw and event.raw is store.get_raw("default", "p0")


def test_history_is_bounded_by_count() -> None:
    store = filled(1)
    store.history.max_events = 100
    watch_like(store, *(("MODIFIED", "p0", 11 + i) for i in range(1000)))
    history = store.history
    assert 0 < len(history) <= 100
    oldest = history.oldest_resource_version
    assert history.since(oldest - 1) is None
    events = history.since(oldest)
    assert events is not None and [e.rv for e in events] == list(range(oldest + 1, 1011))


def test_history_is_bounded_by_age_and_keeps_at_least_max_age() -> None:
    clock = Clock()
    history = EventHistory(max_events=1000, max_age=75.0, clock=clock)
    store = filled(1)
    history.listed(store.resource_version, (), relist=False)  # a clock of our own
    store.writer.add_listener(history)  # (the store makes its own history lazily)
    for i in range(100):  # one change a second
        store.writer.apply("MODIFIED", entry("p0", 11 + i))
        clock.now += 1.0
    kept = history.since(history.oldest_resource_version) or []
    ages = [100 - (e.rv - 11) for e in kept]  # seconds since each was applied
    assert max(ages) <= 77 and min(ages) == 1
    assert all(history.since(10 + 100 - a) is not None for a in range(1, 75))  # >= 75 s kept
    clock.now += 500  # quiet: the next change lets the old ones go
    store.writer.apply("MODIFIED", entry("p0", 200))
    assert len(history) <= 2 and history.since(110) is not None


def test_a_relist_enters_the_history_at_the_lists_version() -> None:
    store = filled(3, rv=10)
    history = store.history
    watch_like(store, ("MODIFIED", "p0", 11))
    store.writer.replace([entry("p0", 11), entry("p1", 2), entry("new", 15)], "20")
    events = history.since(11)
    assert events is not None
    assert sorted((e.type, e.rv, e.name) for e in events) == [
        ("ADDED", 20, "new"),
        ("DELETED", 20, "p2"),
    ]
    deleted = next(e for e in events if e.type == "DELETED")
    assert deleted.raw == entry("p2", 3).raw  # its last state
    assert next(e.name for e in history.since(10) or ()) == "p0"  # the watch's change first
    assert history.since(20) == []


def test_a_first_list_starts_the_history_at_its_version() -> None:
    store = Store(PODS)
    history = store.history  # asked for before the first list
    assert history.since(0) is None
    store.writer.replace([entry("a", 1)], "7")
    assert history.since(7) == [] and history.since(6) is None


def test_listeners_see_every_change_in_order_then_reset() -> None:
    store = filled(1, rv=10)
    seen: list[HistoryEvent] = []
    history = store.history
    backlog = history.since(10)
    remove = history.add_listener(seen.append)  # one synchronous step: no gap
    assert backlog == []
    watch_like(store, ("ADDED", "a", 11))
    store.writer.set_resource_version("12")
    store.writer.replace([entry("a", 11)], "13")
    store.writer.clear()
    assert [(e.type, e.rv, e.name) for e in seen] == [
        ("ADDED", 11, "a"),
        ("BOOKMARK", 12, ""),
        ("DELETED", 13, "p0"),
        ("RESET", -1, ""),
    ]
    assert history.since(13) is None  # cleared: nothing until it is listed again
    remove()
    remove()  # idempotent
    store.writer.replace([entry("b", 20)], "20")
    assert len(seen) == 4


def test_a_listener_that_raises_is_removed_and_the_store_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    store = filled(1)
    calls: list[str] = []

    def broken(event: HistoryEvent) -> None:
        calls.append(event.name)
        raise KeyError("a bug")

    store.history.add_listener(broken)
    assert store.writer.apply("ADDED", entry("a", 11)) is not None
    assert store.writer.apply("ADDED", entry("b", 12)) is not None
    assert calls == ["a"] and "listener raised" in caplog.text
    assert len(store) == 3


def test_resource_versions_that_are_not_decimal_are_never_answered() -> None:
    store = Store(PODS)
    history = store.history
    store.writer.replace([Entry("default", "a", "abc", raw("a", 1))], "xyz")
    assert history.since(0) is None
    assert history.oldest_resource_version == -1


# ------------------------------------------------------------------ over HTTP
async def test_an_informers_history_converges_across_a_relist(tmp_path: Path) -> None:
    """A watch resumed from before a 410 relist gets what the relist found (DELETED at the
    list's resourceVersion): it converges to the server's objects."""
    settings = WatchSettings(streaming_list=False)
    async with FakeCluster() as cluster:
        for i in range(3):
            cluster.create("pods", make_pod(f"p{i}"))
        path = write_kubeconfig(tmp_path / "config", {"c": cluster})
        async with WatcherRegistry.from_kubeconfig(str(path), settings=settings) as reg:
            with anyio.fail_after(TIMEOUT):
                store = await reg.watch("c", "pods")
                await cluster.wait_for(lambda: cluster.open_watches == 1)
            history = store.history
            start = int(store.resource_version)
            client = dict(store.snapshot().items())  # a client's copy at start
            seen: list[HistoryEvent] = []
            live, gone = anyio.Event(), anyio.Event()

            def listen(event: HistoryEvent) -> None:
                seen.append(event)
                if event.name == "live":
                    live.set()
                if event.type == "DELETED" and event.name == "p1":
                    gone.set()

            history.add_listener(listen)
            cluster.create("pods", make_pod("live"))
            with anyio.fail_after(TIMEOUT):
                await live.wait()
            cluster.stall()
            cluster.drop_watches()  # the next watch waits: the server is stalled
            cluster.delete("pods", "default", "p1")  # missed by every watch
            cluster.compact()  # so the next watch is told 410 and the informer relists
            cluster.unstall()
            with anyio.fail_after(TIMEOUT):
                await gone.wait()
            events = history.since(start)
            assert events is not None
            for event in events:  # what a client resumed at `start` applies
                key = (event.namespace, event.name)
                if event.type == "DELETED":
                    client.pop(key, None)
                else:
                    client[key] = event.raw
            assert client == dict(store.snapshot().items())
            (deleted,) = [e for e in events if e.type == "DELETED"]
            assert deleted.name == "p1" and deleted.rv == int(store.resource_version)
            assert reg.status().contexts["c"].informers[0].relists == 1
            await reg.stop_watcher("c")
            assert seen[-1].type == "RESET"  # a stopped context ends its watches
