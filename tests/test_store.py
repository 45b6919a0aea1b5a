"""Store: a plain, synchronous cache; tested without an event loop."""

from __future__ import annotations

from typing import Any

from kubemux import parse_resource
from kubemux._codec import Entry
from kubemux._store import Store

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
