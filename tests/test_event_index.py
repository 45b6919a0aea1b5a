"""EventIndex: a bucket per object with events, dropped with its last event."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import pytest

from kubemux._cache.event_index import EventIndex, EventIndexStatistics

T0 = 1_700_000_000.0  # 2023-11-14T22:13:20Z


def ts(offset: float) -> str:
    """RFC 3339 for ``T0 + offset`` seconds, with microseconds when fractional."""
    from datetime import UTC, datetime

    moment = datetime.fromtimestamp(T0 + offset, UTC)
    if offset != int(offset):
        return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def new_event(
    name: str,
    *,
    obj: str = "web-1",
    kind: str = "Pod",
    namespace: str = "default",
    at: float | None = 0.0,
    rv: str = "1",
    note: str = "",
) -> dict[str, Any]:
    """An events.k8s.io/v1 Event about ``kind/namespace/obj``."""
    event: dict[str, Any] = {
        "apiVersion": "events.k8s.io/v1",
        "kind": "Event",
        "metadata": {"namespace": namespace, "name": name, "resourceVersion": rv},
        "regarding": {"kind": kind, "namespace": namespace, "name": obj, "uid": f"uid-{obj}"},
        "reason": "Scheduled",
        "type": "Normal",
        "note": note or name,
        "reportingController": "default-scheduler",
    }
    if at is not None:
        event["eventTime"] = ts(at)
    return event


def core_event(
    name: str, *, obj: str = "web-1", kind: str = "Pod", namespace: str = "default", at: float = 0.0
) -> dict[str, Any]:
    """A core v1 Event about ``kind/namespace/obj``."""
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"namespace": namespace, "name": name, "resourceVersion": "7"},
        "involvedObject": {"kind": kind, "namespace": namespace, "name": obj},
        "reason": "BackOff",
        "message": name,
        "firstTimestamp": ts(at - 100),
        "lastTimestamp": ts(at),
        "eventTime": None,
        "count": 3,
    }


def names(events: list[Mapping[str, Any]]) -> list[str]:
    return [e["metadata"]["name"] for e in events]


def assert_empty_inside(index: EventIndex) -> None:
    """No internal container holds anything once every event is gone."""
    assert len(index) == 0
    assert index._buckets == {}
    assert index._entries == {}
    assert index.objects() == []


# --- buckets live and die with their events ---------------------------------------------------


def test_bucket_kept_while_any_event_remains_and_dropped_with_the_last() -> None:
    index = EventIndex()
    a, b = new_event("e-a"), new_event("e-b", at=1)
    index.apply("ADDED", a)
    index.apply("ADDED", b)
    assert len(index) == 1
    assert ("Pod", "default", "web-1") in index

    index.apply("DELETED", a)
    assert len(index) == 1
    assert names(index.events_for("Pod", "default", "web-1")) == ["e-b"]

    index.apply("DELETED", b)
    assert ("Pod", "default", "web-1") not in index
    assert index.events_for("Pod", "default", "web-1") == []
    assert_empty_inside(index)


def test_thousand_objects_churned_leave_nothing_behind() -> None:
    index = EventIndex(max_events_per_object=5, max_age=3600, clock=lambda: T0)
    events = [new_event(f"e-{i}-{j}", obj=f"pod-{i}", at=j) for i in range(1000) for j in range(2)]
    for event in events:
        index.apply("ADDED", event)
    assert len(index) == 1000
    assert index.statistics().events == 2000
    for event in events:
        index.apply("DELETED", event)
    assert_empty_inside(index)
    assert index.statistics() == EventIndexStatistics(
        buckets=0, events=0, evicted_by_cap=0, evicted_by_age=0
    )


def test_churn_gives_back_the_dict_tables() -> None:
    """CPython dicts keep their tables after deletes; the index rebuilds them."""
    import sys

    index = EventIndex()
    fresh = sys.getsizeof(index._entries)
    events = [new_event(f"e-{i}", obj=f"pod-{i}") for i in range(5000)]
    for event in events:
        index.apply("ADDED", event)
    for event in events:
        index.apply("DELETED", event)
    assert sys.getsizeof(index._entries) <= fresh + 1024
    assert sys.getsizeof(index._buckets) <= fresh + 1024


def test_deleted_for_unknown_event_is_a_noop() -> None:
    index = EventIndex()
    index.apply("ADDED", new_event("known"))
    index.apply("DELETED", new_event("unknown"))
    index.apply("DELETED", new_event("other", obj="web-2"))
    index.apply("DELETED", {"metadata": {}})
    index.apply("DELETED", {})
    assert index.objects() == [("Pod", "default", "web-1")]
    assert index.statistics().events == 1


def test_delete_matches_by_event_identity_even_if_the_final_state_differs() -> None:
    index = EventIndex()
    index.apply("ADDED", new_event("e", obj="web-1"))
    # the DELETED object carries a different regarding (should not happen, but must not leak)
    index.apply("DELETED", new_event("e", obj="web-2"))
    assert_empty_inside(index)


def test_other_event_types_and_unindexable_events_are_ignored() -> None:
    index = EventIndex()
    index.apply("BOOKMARK", {"metadata": {"resourceVersion": "12"}})
    index.apply("ERROR", {"kind": "Status", "code": 410})
    index.apply("ADDED", {"metadata": {"name": "no-ref", "namespace": "default"}})
    index.apply("ADDED", {"regarding": {"kind": "Pod", "name": "x"}})  # no identity
    no_kind = new_event("no-kind")
    del no_kind["regarding"]["kind"]
    index.apply("ADDED", no_kind)
    assert_empty_inside(index)


def test_uid_is_the_identity_when_the_name_is_missing() -> None:
    index = EventIndex()
    event = new_event("ignored")
    event["metadata"] = {"namespace": "default", "uid": "1234"}
    index.apply("ADDED", event)
    assert len(index) == 1
    index.apply("DELETED", {"metadata": {"namespace": "default", "uid": "1234"}})
    assert_empty_inside(index)


def test_replace_drops_buckets_of_missed_deletes() -> None:
    index = EventIndex()
    for i in range(10):
        index.apply("ADDED", new_event(f"e-{i}", obj=f"pod-{i}"))
    survivors = [new_event("e-3", obj="pod-3"), new_event("e-new", obj="pod-new")]
    index.replace(survivors)
    assert sorted(index.objects()) == [("Pod", "default", "pod-3"), ("Pod", "default", "pod-new")]
    assert index.statistics().events == 2
    assert set(index._entries) == {("default", "e-3"), ("default", "e-new")}

    index.replace([])
    assert_empty_inside(index)


def test_replace_is_exactly_the_listed_events_and_moves_what_moved() -> None:
    index = EventIndex()
    index.apply("ADDED", new_event("e-1", obj="a"))
    index.apply("ADDED", new_event("e-2", obj="a"))
    index.replace([new_event("e-1", obj="b", rv="9")])  # missed a MODIFIED and a DELETED
    assert index.objects() == [("Pod", "default", "b")]
    assert names(index.events_for("Pod", "default", "b")) == ["e-1"]


def test_replace_that_fails_halfway_leaves_the_index_as_it_was() -> None:
    index = EventIndex()
    index.apply("ADDED", new_event("e-1", obj="a"))

    def broken() -> Iterator[dict[str, Any]]:
        yield new_event("e-2", obj="b")
        raise RuntimeError("stream broke")

    with pytest.raises(RuntimeError, match="stream broke"):
        index.replace(broken())
    assert index.objects() == [("Pod", "default", "a")]
    assert index.statistics().events == 1


def test_replace_keeps_tie_order_of_unchanged_events() -> None:
    index = EventIndex()
    first, second = new_event("first", rv="10"), new_event("second", rv="11")
    index.apply("ADDED", first)
    index.apply("ADDED", second)
    assert names(index.events_for("Pod", "default", "web-1")) == ["second", "first"]
    # a relist lists by name, not by arrival: unchanged events keep their arrival order
    index.replace([new_event("second", rv="11"), new_event("first", rv="10")])
    assert names(index.events_for("Pod", "default", "web-1")) == ["second", "first"]
    # a changed one (new resourceVersion) counts as the latest arrival
    index.replace([new_event("second", rv="11"), new_event("first", rv="12")])
    assert names(index.events_for("Pod", "default", "web-1")) == ["first", "second"]


def test_clear() -> None:
    index = EventIndex()
    index.apply("ADDED", new_event("e"))
    index.clear()
    assert_empty_inside(index)
    index.apply("ADDED", new_event("e"))
    assert len(index) == 1


# --- moving between objects -------------------------------------------------------------------


def test_modified_moves_an_event_to_another_object() -> None:
    index = EventIndex()
    index.apply("ADDED", new_event("e", obj="web-1"))
    index.apply("ADDED", new_event("stays", obj="web-1"))
    index.apply("MODIFIED", new_event("e", obj="web-2", rv="2"))
    assert names(index.events_for("Pod", "default", "web-1")) == ["stays"]
    assert names(index.events_for("Pod", "default", "web-2")) == ["e"]

    index.apply("MODIFIED", new_event("e", obj="web-3", kind="ReplicaSet", rv="3"))
    assert ("Pod", "default", "web-2") not in index  # emptied by the move: dropped
    assert names(index.events_for("ReplicaSet", "default", "web-3")) == ["e"]
    assert len(index) == 2
    assert index.statistics().events == 2


def test_modified_that_loses_its_reference_drops_the_event() -> None:
    index = EventIndex()
    index.apply("ADDED", new_event("e"))
    modified = new_event("e", rv="2")
    del modified["regarding"]
    index.apply("MODIFIED", modified)
    assert_empty_inside(index)


def test_modified_in_place_updates_the_stored_event() -> None:
    index = EventIndex()
    index.apply("ADDED", new_event("e", note="old"))
    index.apply("MODIFIED", new_event("e", note="new", rv="2"))
    [event] = index.events_for("Pod", "default", "web-1")
    assert event["note"] == "new"
    assert index.statistics().events == 1


# --- event shapes -----------------------------------------------------------------------------


def test_core_v1_and_events_k8s_io_shapes_share_buckets() -> None:
    index = EventIndex()
    index.apply("ADDED", core_event("core", at=10))
    index.apply("ADDED", new_event("new", at=5))
    assert names(index.events_for("Pod", "default", "web-1")) == ["core", "new"]
    index.apply("DELETED", core_event("core"))
    assert names(index.events_for("Pod", "default", "web-1")) == ["new"]


def test_cluster_scoped_objects_use_empty_namespace() -> None:
    index = EventIndex()
    event = new_event("node-event", kind="Node", obj="node-1", namespace="default")
    event["regarding"].pop("namespace")
    index.apply("ADDED", event)
    assert index.objects() == [("Node", "", "node-1")]
    assert names(index.events_for("Node", None, "node-1")) == ["node-event"]
    assert names(index.events_for("Node", "", "node-1")) == ["node-event"]


def test_stores_the_mapping_as_given() -> None:
    index = EventIndex()
    event = new_event("e")
    index.apply("ADDED", event)
    assert index.events_for("Pod", "default", "web-1")[0] is event


# --- ordering ---------------------------------------------------------------------------------


def test_newest_first_by_timestamp_not_arrival() -> None:
    index = EventIndex()
    index.apply("ADDED", new_event("middle", at=10))
    index.apply("ADDED", new_event("newest", at=20.5))
    index.apply("ADDED", new_event("oldest", at=1))
    index.apply("ADDED", new_event("fraction", at=10.25))
    assert names(index.events_for("Pod", "default", "web-1")) == [
        "newest",
        "fraction",
        "middle",
        "oldest",
    ]


def test_equal_timestamps_newest_arrival_first() -> None:
    index = EventIndex()
    for name in ("a", "b", "c"):
        index.apply("ADDED", new_event(name, at=5))
    assert names(index.events_for("Pod", "default", "web-1")) == ["c", "b", "a"]
    index.apply("MODIFIED", new_event("a", at=5, rv="2"))  # a later resourceVersion
    assert names(index.events_for("Pod", "default", "web-1")) == ["a", "c", "b"]


def test_timestamp_precedence() -> None:
    """series.lastObservedTime > eventTime > lastTimestamp > deprecatedLastTimestamp >
    firstTimestamp > metadata.creationTimestamp; a later field never overrides an earlier one."""
    index = EventIndex()
    series = new_event("series", at=0)
    series["series"] = {"count": 4, "lastObservedTime": ts(50)}
    event_time = new_event("eventTime", at=40)
    event_time["lastTimestamp"] = ts(100)  # ignored: eventTime wins
    last = new_event("lastTimestamp", at=None)
    last["lastTimestamp"] = ts(30)
    deprecated = new_event("deprecatedLastTimestamp", at=None)
    deprecated["deprecatedLastTimestamp"] = ts(20)
    deprecated["firstTimestamp"] = ts(90)
    first = new_event("firstTimestamp", at=None)
    first["firstTimestamp"] = ts(10)
    created = new_event("creationTimestamp", at=None)
    created["metadata"]["creationTimestamp"] = ts(5)
    null_fields = new_event("nulls", at=None)
    null_fields |= {"series": None, "eventTime": None, "lastTimestamp": None}
    null_fields["metadata"]["creationTimestamp"] = ts(1)
    for event in (null_fields, created, first, deprecated, last, event_time, series):
        index.apply("ADDED", event)
    assert names(index.events_for("Pod", "default", "web-1")) == [
        "series",
        "eventTime",
        "lastTimestamp",
        "deprecatedLastTimestamp",
        "firstTimestamp",
        "creationTimestamp",
        "nulls",
    ]


def test_timestamp_formats_compare_as_instants() -> None:
    index = EventIndex()
    offset = new_event("offset", at=None)
    offset["eventTime"] = "2023-11-14T23:13:21+01:00"  # T0 + 1 s
    micro = new_event("micro", at=0.5)
    whole = new_event("whole", at=0)
    index.apply("ADDED", whole)
    index.apply("ADDED", offset)
    index.apply("ADDED", micro)
    assert names(index.events_for("Pod", "default", "web-1")) == ["offset", "micro", "whole"]


def test_event_without_usable_timestamp_is_dated_by_first_arrival() -> None:
    now = [T0 + 100]
    index = EventIndex(clock=lambda: now[0])
    index.apply("ADDED", new_event("old", at=50))
    undated = new_event("undated", at=None)
    undated["eventTime"] = "not a time"
    index.apply("ADDED", undated)
    index.apply("ADDED", new_event("newer", at=150))
    assert names(index.events_for("Pod", "default", "web-1")) == ["newer", "undated", "old"]
    now[0] = T0 + 200  # a MODIFIED keeps the first arrival time
    index.apply("MODIFIED", new_event("undated", at=None, rv="2"))
    assert names(index.events_for("Pod", "default", "web-1")) == ["newer", "undated", "old"]


# --- limits -----------------------------------------------------------------------------------


def test_max_events_per_object_keeps_the_newest() -> None:
    index = EventIndex(max_events_per_object=3)
    for i in range(5):
        index.apply("ADDED", new_event(f"e-{i}", at=i))
    index.apply("ADDED", new_event("other-object", obj="web-2"))
    assert names(index.events_for("Pod", "default", "web-1")) == ["e-4", "e-3", "e-2"]
    stats = index.statistics()
    assert (stats.events, stats.buckets, stats.evicted_by_cap) == (4, 2, 2)
    # an arrival older than all kept ones is itself the one evicted
    index.apply("ADDED", new_event("ancient", at=-100))
    assert names(index.events_for("Pod", "default", "web-1")) == ["e-4", "e-3", "e-2"]
    assert index.statistics().evicted_by_cap == 3
    # deleting an evicted event is a no-op; deleting the kept ones drops the bucket
    index.apply("DELETED", new_event("e-0"))
    for i in (2, 3, 4):
        index.apply("DELETED", new_event(f"e-{i}"))
    assert ("Pod", "default", "web-1") not in index
    assert index.statistics().events == 1
    assert set(index._entries) == {("default", "other-object")}


def test_max_events_per_object_with_a_multi_event_relist() -> None:
    index = EventIndex(max_events_per_object=2)
    index.replace([new_event(f"e-{i}", at=i) for i in range(6)])
    assert names(index.events_for("Pod", "default", "web-1")) == ["e-5", "e-4"]
    assert index.statistics().evicted_by_cap == 4
    assert len(index._entries) == 2


def test_max_age_on_apply_with_injected_clock() -> None:
    now = [T0 + 1000]
    index = EventIndex(max_age=600, clock=lambda: now[0])
    index.apply("ADDED", new_event("too-old", at=300))  # 700 s old on arrival
    assert_empty_inside(index)
    assert index.statistics().evicted_by_age == 1

    index.apply("ADDED", new_event("fresh", at=900))
    index.apply("ADDED", new_event("elsewhere", obj="web-2", at=900))
    now[0] = T0 + 1600  # both are 700 s old now
    index.apply("ADDED", new_event("newest", at=1590))  # ages the same object's bucket
    assert names(index.events_for("Pod", "default", "web-1")) == ["newest"]
    assert ("Pod", "default", "web-2") in index  # only prune() ages untouched objects
    assert index.statistics().evicted_by_age == 2


def test_modified_to_a_too_old_time_drops_the_event_and_its_bucket() -> None:
    index = EventIndex(max_age=60, clock=lambda: T0)
    index.apply("ADDED", new_event("e", at=0))
    index.apply("MODIFIED", new_event("e", at=-61, rv="2"))
    assert_empty_inside(index)


def test_prune_drops_old_events_and_empty_buckets() -> None:
    now = [T0]
    index = EventIndex(max_age=60, clock=lambda: now[0])
    index.apply("ADDED", new_event("a-old", obj="a", at=-50))
    index.apply("ADDED", new_event("a-new", obj="a", at=-5))
    index.apply("ADDED", new_event("b-old", obj="b", at=-40))
    assert index.prune() == 0
    now[0] = T0 + 30
    assert index.prune() == 2
    assert index.objects() == [("Pod", "default", "a")]
    assert names(index.events_for("Pod", "default", "a")) == ["a-new"]
    assert index.prune(now=T0 + 1000) == 1
    assert_empty_inside(index)
    assert index.statistics().evicted_by_age == 3


def test_prune_without_max_age_does_nothing() -> None:
    index = EventIndex()
    index.apply("ADDED", new_event("e", at=-(10**6)))
    assert index.prune(now=T0 + 10**9) == 0
    assert len(index) == 1


@pytest.mark.parametrize(
    "kwargs", [{"max_events_per_object": 0}, {"max_age": 0}, {"max_age": -1.0}]
)
def test_invalid_limits(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="must be"):
        EventIndex(**kwargs)


# --- readers ----------------------------------------------------------------------------------


def test_reader_keeps_its_copy_while_the_bucket_is_evicted() -> None:
    index = EventIndex(max_events_per_object=2)
    index.apply("ADDED", new_event("a", at=1))
    index.apply("ADDED", new_event("b", at=2))
    result = index.events_for("Pod", "default", "web-1")
    objects = index.objects()
    seen = []
    for event in result:
        # evict and delete everything while the reader is part-way through
        index.apply("ADDED", new_event("c", at=3))
        index.apply("ADDED", new_event("d", at=4))
        for name in "abcd":
            index.apply("DELETED", new_event(name))
        seen.append(event["metadata"]["name"])
    assert seen == ["b", "a"]
    assert names(result) == ["b", "a"]
    assert objects == [("Pod", "default", "web-1")]
    assert_empty_inside(index)


def test_mutating_a_result_list_does_not_touch_the_index() -> None:
    index = EventIndex()
    index.apply("ADDED", new_event("e"))
    index.events_for("Pod", "default", "web-1").clear()
    index.objects().clear()
    assert len(index) == 1
    assert names(index.events_for("Pod", "default", "web-1")) == ["e"]


def test_events_for_unknown_object() -> None:
    index = EventIndex()
    assert index.events_for("Pod", "default", "nope") == []
    index.apply("ADDED", new_event("e"))
    assert index.events_for("Pod", "other", "web-1") == []
    assert index.events_for("Deployment", "default", "web-1") == []
    assert ("Pod", "default", "nope") not in index
    assert_len = len(index)
    assert assert_len == 1  # a read never creates a bucket


def test_contains_accepts_anything() -> None:
    index = EventIndex()
    index.apply("ADDED", new_event("e"))
    assert ("Pod", "default", "web-1") in index
    assert ["Pod", "default", "web-1"] not in index  # unhashable
    assert "web-1" not in index


def test_repr_and_statistics() -> None:
    index = EventIndex()
    assert repr(index) == "<EventIndex buckets=0 events=0>"
    index.apply("ADDED", new_event("a"))
    index.apply("ADDED", new_event("b"))
    index.apply("ADDED", new_event("c", obj="web-2"))
    assert repr(index) == "<EventIndex buckets=2 events=3>"
    stats = index.statistics()
    assert stats == EventIndexStatistics(buckets=2, events=3, evicted_by_cap=0, evicted_by_age=0)
    with pytest.raises(AttributeError):
        stats.buckets = 5  # type: ignore[misc]


def test_deprecated_first_timestamp_dates_an_event() -> None:
    """events.k8s.io/v1 events with only deprecatedFirstTimestamp are dated by it (the
    dashboard and the index use the same event_time())."""
    from kubemux._cache.event_index import event_time

    old = {"deprecatedFirstTimestamp": "2026-01-01T00:00:00Z"}
    assert event_time(old) == 1767225600.0
    index = EventIndex(clock=lambda: 2e9)
    for name, stamp in (("newer", "2026-01-02T00:00:00Z"), ("older", "2026-01-01T00:00:00Z")):
        index.apply(
            "ADDED",
            {
                "metadata": {"namespace": "d", "name": name},
                "regarding": {"kind": "Pod", "name": "p", "namespace": "d"},
                "deprecatedFirstTimestamp": stamp,
            },
        )
    index.apply(
        "ADDED",
        {
            "metadata": {"namespace": "d", "name": "undated-later"},
            "regarding": {"kind": "Pod", "name": "p", "namespace": "d"},
        },
    )
    names = [e["metadata"]["name"] for e in index.events_for("Pod", "d", "p")]
    assert names == ["undated-later", "newer", "older"]
