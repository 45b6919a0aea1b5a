"""Store: a plain, synchronous cache; tested without an event loop."""

from __future__ import annotations

from typing import Any

from kubemux import parse_resource
from kubemux._cache.store import Store
from kubemux._wire.codec import Entry, PinnedEntry

PODS = parse_resource("pods")


def pod(name: str, ns: str = "default", rv: str = "1", **labels: str) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "namespace": ns,
            "resourceVersion": rv,
            "labels": labels,
            "managedFields": [{"manager": "kubectl"}],
        }
    }


def test_apply_and_read() -> None:
    s = Store(PODS)
    assert s._apply_object("ADDED", pod("a")) is not None
    assert s._apply_object("ADDED", pod("b", "kube-system")) is not None
    assert s.get("default", "a") is not None
    assert "managedFields" not in s.get("default", "a")["metadata"]  # type: ignore[index]
    assert [o["metadata"]["name"] for o in s.list()] == ["a", "b"]
    assert [o["metadata"]["name"] for o in s.list("kube-system")] == ["b"]
    assert s.namespaces() == ["default", "kube-system"]
    change = s._apply_object("MODIFIED", pod("a", rv="2"))
    assert change is not None and change.type == "MODIFIED" and change.old is not None
    assert s.resource_version == "2"
    deleted = s._apply_object("DELETED", pod("b", "kube-system", rv="3"))
    assert deleted is not None and deleted.type == "DELETED"
    assert s._apply_object("DELETED", pod("zz", rv="4")) is None  # unknown: nothing changed
    assert s.namespaces() == ["default"]  # no empty namespace bucket left
    assert len(s) == 1 and ("default", "a") in s


def test_replace_reports_missed_changes() -> None:
    s = Store(PODS)

    def entries(*objs: dict[str, Any]) -> list[Entry]:
        return [s._prepare_object(o) for o in objs]

    s._replace(entries(pod("a"), pod("b"), pod("c")), "10")
    assert s.has_synced
    changes = s._replace(entries(pod("a"), pod("b", rv="11"), pod("d", rv="12")), "12")
    assert sorted((c.type, c.entry.name) for c in changes) == [
        ("ADDED", "d"),
        ("DELETED", "c"),
        ("MODIFIED", "b"),
    ]
    assert s.resource_version == "12"
    assert [k[1] for k in s] == ["a", "b", "d"]


def test_indexers_drop_empty_buckets() -> None:
    s = Store(PODS, indexers={"app": lambda o: [o["metadata"]["labels"].get("app", "")]})
    s._apply_object("ADDED", pod("a", app="web"))
    s._apply_object("ADDED", pod("b", app="web"))
    s._apply_object("ADDED", pod("c", app="db"))
    assert [o["metadata"]["name"] for o in s.by_index("app", "web")] == ["a", "b"]
    s._apply_object("MODIFIED", pod("c", rv="2", app="web"))
    assert s.index_values("app") == ["web"]
    for name in "abc":
        s._apply_object("DELETED", pod(name))
    assert s.index_values("app") == []
    assert s._items == {} and s._keyvals == {}


def test_no_transform_keeps_managed_fields() -> None:
    s = Store(PODS, transform=None)
    s._apply_object("ADDED", pod("a"))
    assert "managedFields" in s.get("default", "a")["metadata"]  # type: ignore[index]
    assert "objects=1" in repr(s)


def test_label_and_owner_indexers_added_later() -> None:
    from kubemux import by_label, by_owner

    s = Store(PODS)
    a = pod("a", app="web")
    a["metadata"]["ownerReferences"] = [{"kind": "ReplicaSet", "name": "web-1"}]
    s._apply_object("ADDED", a)
    s._apply_object("ADDED", pod("b", app="db"))
    s.add_indexer("app", by_label("app"))
    s.add_indexer("owner", by_owner)
    assert [o["metadata"]["name"] for o in s.by_index("app", "web")] == ["a"]
    assert [o["metadata"]["name"] for o in s.by_index("owner", "ReplicaSet/web-1")] == ["a"]
    s._apply_object("ADDED", pod("c", app="web"))
    assert [o["metadata"]["name"] for o in s.by_index("app", "web")] == ["a", "c"]
    s._apply_object("DELETED", a)
    assert s.index_values("owner") == []
    assert s.index_values("app") == ["db", "web"]


def test_custom_transform_and_unusual_json() -> None:
    def strip_status(obj: dict[str, Any]) -> dict[str, Any]:
        obj.pop("status", None)
        return obj

    s = Store(PODS, transform=strip_status)
    p = pod("a")
    p["status"] = {"phase": "Running"}
    s._apply_object("ADDED", p)
    got = s.get("default", "a")
    assert got is not None and "status" not in got and "managedFields" in got["metadata"]
    # non-compact JSON: managedFields still dropped by the default transform
    d = Store(PODS)
    import json

    entry = d._prepare(json.dumps(pod("b"), indent=2).encode())
    assert "managedFields" not in entry.decode()["metadata"]


def test_opaque_resource_versions_are_read_back_exactly_and_compared_as_strings() -> None:
    s = Store(PODS)

    def entries(*objs: dict[str, Any]) -> list[Entry]:
        return [s._prepare_object(o) for o in objs]

    s._replace(entries(pod("a", rv="007"), pod("b", rv="abc"), pod("c", rv="41")), "007")
    assert s.resource_version == "007"
    assert {k[1]: s.get(*k)["metadata"]["resourceVersion"] for k in s} == {  # type: ignore[index]
        "a": "007",
        "b": "abc",
        "c": "41",
    }
    assert [e.resource_version for e in s._entries(None)] == ["007", "abc", "41"]
    # the store keeps the bytes alone (the resourceVersion is read from them when needed)
    assert all(type(v) is bytes for v in s._items["default"].values())
    assert [e.rv for e in s._entries(None)] == [None, None, None]
    assert [e.compact_rv() for e in s._entries(None)] == ["007", "abc", 41]  # etcd's: an int
    # "7" is not "007", nor "041" "41": MODIFIED; the same strings: unchanged
    changes = s._replace(entries(pod("a", rv="7"), pod("b", rv="abc"), pod("c", rv="041")), "9")
    assert sorted((c.type, c.entry.name, c.entry.resource_version) for c in changes) == [
        ("MODIFIED", "a", "7"),
        ("MODIFIED", "c", "041"),
    ]
    assert s._replace(entries(pod("a", rv="7"), pod("b", rv="abc"), pod("c", rv="041")), "9") == []
    change = s._apply_object("MODIFIED", pod("b", rv="abd"))
    assert change is not None and change.old is not None
    assert (change.entry.resource_version, change.old.resource_version) == ("abd", "abc")
    assert s.resource_version == "abd"
    s._apply_object("MODIFIED", pod("b", rv="0042"))
    assert s.resource_version == "0042"
    s._apply_object("MODIFIED", pod("b", rv="43"))
    assert s.resource_version == "43"
    assert repr(s).endswith("rv='43'>")


def test_an_object_whose_bytes_lack_its_resource_version_keeps_its_entry() -> None:
    def strip(obj: dict[str, Any]) -> dict[str, Any]:  # a user transform dropping it
        return {"metadata": {"name": obj["metadata"]["name"], "namespace": "default"}}

    s = Store(PODS, transform=strip)

    def entries(*objs: dict[str, Any]) -> list[Entry]:
        return [s._prepare_object(o) for o in objs]

    s._replace(entries(pod("a", rv="5"), pod("b", rv="6")), "6")
    assert all(type(v) is PinnedEntry for v in s._items["default"].values())
    assert [e.resource_version for e in s._entries(None)] == ["5", "6"]
    assert s.get("default", "a") == {"metadata": {"name": "a", "namespace": "default"}}
    assert s.get_raw("default", "a") == b'{"metadata":{"name":"a","namespace":"default"}}'
    # the server's versions, not the (missing) ones in the bytes, decide what changed
    changes = s._replace(entries(pod("a", rv="5"), pod("b", rv="7")), "7")
    assert [(c.type, c.entry.name, c.old and c.old.resource_version) for c in changes] == [
        ("MODIFIED", "b", "6")
    ]


def test_changes_carry_the_old_objects_versions_from_their_bytes() -> None:
    s = Store(PODS)
    s._apply_object("ADDED", pod("a", rv="5"))
    assert type(s._items["default"]["a"]) is bytes
    change = s._apply_object("MODIFIED", pod("a", rv="6"))
    assert change is not None and change.old is not None
    assert (change.old.name, change.old.namespace, change.old.resource_version) == (
        "a",
        "default",
        "5",
    )
    assert change.entry.resource_version == "6"
    gone = s._apply_object("DELETED", pod("a", rv="8"))
    assert gone is not None and gone.old is not None and gone.old.resource_version == "6"
    s._replace([s._prepare_object(pod("x", rv="1"))], "1")
    missed = s._replace([], "2")
    assert [(c.type, c.entry.name, c.entry.resource_version) for c in missed] == [
        ("DELETED", "x", "1")
    ]
