"""Issue 29, point 4, in parts: which reloads keep the cluster (``cluster_key``), and a
handed-over store that never goes back in time (its floor)."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import pytest

from kubemux import ContextConfig, Store
from kubemux._cache.stream import StoreListener
from kubemux._resources import parse_resource
from kubemux._wire.codec import StoreChange
from kubemux.testing import make_pod

CA = base64.b64encode(b"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n").decode()


def _config(cluster: dict[str, Any], user: dict[str, Any], user_name: str = "me") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": cluster}],
        "users": [{"name": user_name, "user": user}],
        "contexts": [{"name": "prod", "context": {"cluster": "c", "user": user_name}}],
    }


BASE_CLUSTER = {"server": "https://10.0.0.1:6443", "certificate-authority-data": CA}
BASE_USER = {"token": "one"}


def _key(
    cluster: dict[str, Any] = BASE_CLUSTER, user: dict[str, Any] = BASE_USER, **kw: Any
) -> str:
    return ContextConfig.from_dict("prod", _config(cluster, user, **kw)).cluster_key


@pytest.mark.parametrize(
    ("user", "user_name"),
    [
        ({"token": "two"}, "me"),  # a rotated token
        (
            {
                "exec": {
                    "apiVersion": "client.authentication.k8s.io/v1",
                    "command": "x",
                    "args": ["--new"],
                }
            },
            "me",
        ),
        (BASE_USER, "renamed"),  # a renamed user entry
    ],
)
def test_a_new_credential_keeps_the_cluster_key(user: dict[str, Any], user_name: str) -> None:
    assert _key(user=user, user_name=user_name) == _key()
    assert len(_key()) == 64


@pytest.mark.parametrize(
    "change",
    [
        {"server": "https://10.0.0.2:6443"},
        {"certificate-authority-data": base64.b64encode(b"another CA").decode()},
        {"tls-server-name": "api.internal"},
        {"insecure-skip-tls-verify": True, "certificate-authority-data": None},
        {"proxy-url": "socks5://127.0.0.1:1080"},
    ],
)
def test_another_cluster_has_another_key(change: dict[str, Any]) -> None:
    cluster = {k: v for k, v in {**BASE_CLUSTER, **change}.items() if v is not None}
    assert _key(cluster=cluster) != _key()


def test_a_ca_file_counts_by_its_bytes_not_its_path(tmp_path: Path) -> None:
    ca = tmp_path / "ca.crt"
    ca.write_bytes(b"first CA")
    cluster = {"server": "https://10.0.0.1:6443", "certificate-authority": str(ca)}
    first = _key(cluster=cluster)
    moved = tmp_path / "moved.crt"
    moved.write_bytes(b"first CA")
    assert _key(cluster={**cluster, "certificate-authority": str(moved)}) == first
    ca.write_bytes(b"a new CA")  # the same path, another CA: another cluster, maybe
    assert _key(cluster=cluster) != first


class _Heard(StoreListener):
    def __init__(self) -> None:
        self.said: list[tuple[str, Any]] = []

    def listed(self, resource_version: str, changes: Any, *, relist: bool) -> None:
        self.said.append(("listed", (resource_version, relist)))

    def changed(self, change: StoreChange) -> None:
        self.said.append((change.type, change.entry.name))

    def cleared(self) -> None:
        self.said.append(("cleared", None))


def _pod(name: str, rv: int) -> Any:
    pod = make_pod(name)
    pod["metadata"]["resourceVersion"] = str(rv)
    return pod


def _filled(rv: str) -> tuple[Store, _Heard]:
    store = Store(parse_resource("pods"))
    w = store.writer
    w.replace([w.prepare(_raw(_pod("a", 5))), w.prepare(_raw(_pod("b", 6)))], rv)
    heard = _Heard()
    w.add_listener(heard)
    return store, heard


def _raw(obj: Any) -> bytes:
    import orjson

    return orjson.dumps(obj)


def test_a_list_at_or_past_the_floor_is_a_relist_of_differences() -> None:
    store, heard = _filled("10")
    w = store.writer
    w.set_floor(store.resource_version)
    w.replace([w.prepare(_raw(_pod("a", 5))), w.prepare(_raw(_pod("c", 11)))], "12")
    assert heard.said == [("listed", ("12", True)), ("ADDED", "c"), ("DELETED", "b")]


def test_a_list_older_than_the_floor_starts_the_store_over() -> None:
    store, heard = _filled("10")
    w = store.writer
    w.set_floor("10")
    w.replace([w.prepare(_raw(_pod("a", 5)))], "8")  # a past after a newer present
    assert heard.said == [("cleared", None), ("listed", ("8", False)), ("ADDED", "a")]
    assert store.resource_version == "8" and store.has_synced and len(store) == 1
    heard.said.clear()
    w.replace([w.prepare(_raw(_pod("a", 5)))], "7")  # the floor held for one list only
    assert heard.said == [("listed", ("7", True))]


async def test_the_sliced_commit_keeps_the_floor_too() -> None:
    store, heard = _filled("10")
    w = store.writer
    w.set_floor("10")
    replacement = w.replacement()
    replacement.add(
        w.prepare(_raw(_pod("b", 6))),
    )
    await replacement.commit("9", slice_size=1)
    assert heard.said == [("cleared", None), ("listed", ("9", False)), ("ADDED", "b")]


@pytest.mark.parametrize("floor", ["", "abc", "-1", "1e3", "\u0669"])
def test_an_undecimal_floor_checks_nothing(floor: str) -> None:
    store, heard = _filled("10")
    w = store.writer
    w.set_floor(floor)
    w.replace([w.prepare(_raw(_pod("a", 5)))], "3")
    assert heard.said[0] == ("listed", ("3", True))
