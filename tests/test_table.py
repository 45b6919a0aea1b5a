"""kubemux._cache.table: a live Table view (server-side columns) against FakeCluster."""

from __future__ import annotations

import contextlib
import dataclasses
import math
from collections.abc import AsyncIterator
from typing import Any

import anyio
import orjson
import pytest

from kubemux import Backoff, ContextConfig, Resource, ResourceNotFound, WatchSettings
from kubemux._cache.table import FALLBACK_COLUMNS, TableColumn, TableStore
from kubemux._http.client import ContextClient, open_client
from kubemux._informer.informer import Informer, InformerKey
from kubemux._wire.codec import UndecodableObject
from kubemux.testing import FakeCluster, kubeconfig_dict, make_pod
from kubemux.testing._hostile import HostileServer
from support import TIMEOUT, listen

PODS = Resource(group="", version="v1", plural="pods", kind="Pod")
WIDGETS = Resource(group="example.com", version="v1", plural="widgets", kind="Widget")
FAST = WatchSettings(
    backoff=Backoff(initial_delay=0.02, max_delay=0.1),
    inactivity_timeout=0.5,
    page_size=3,
    min_healthy_watch=0.0,
)


def config_for(cluster: FakeCluster) -> ContextConfig:
    return ContextConfig.from_dict("c", kubeconfig_dict({"c": cluster}))  # type: ignore[arg-type]


class Changes:
    """What the informer reported, with an event to wait on."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str]] = []
        self.event = anyio.Event()

    def __call__(self, kind: str, entry: Any, old: Any) -> None:
        self.seen.append((kind, entry.name))
        self.event.set()

    async def wait_for(self, kind: str, name: str) -> None:
        with anyio.fail_after(TIMEOUT):
            while (kind, name) not in self.seen:
                self.event = anyio.Event()
                await self.event.wait()


@contextlib.asynccontextmanager
async def table_view(
    client: ContextClient, resource: Resource, namespace: str | None = None
) -> AsyncIterator[tuple[TableStore, Informer, Changes]]:
    store = TableStore(resource)
    changes = Changes()
    informer = Informer(
        client,
        resource,
        InformerKey(resource.name, namespace, view="table"),
        settings=FAST,
        store=listen(store, changes),
    )
    async with anyio.create_task_group() as tg:
        with anyio.fail_after(TIMEOUT):
            await tg.start(informer.run)
        yield store, informer, changes
        tg.cancel_scope.cancel()


@pytest.fixture
async def cluster() -> AsyncIterator[FakeCluster]:
    async with FakeCluster(tokens={"t"}, bookmark_period=0.1) as c:
        for i in range(5):
            c.create("pods", make_pod(f"p-{i}", "default" if i % 2 else "other"))
        yield c


async def test_pods_table_lists_and_follows(cluster: FakeCluster) -> None:
    async with (
        open_client(config_for(cluster)) as client,
        table_view(client, PODS) as (store, informer, changes),
    ):
        assert store.has_synced and not store.is_fallback
        assert [c.name for c in store.columns] == [
            "Name",
            "Ready",
            "Status",
            "Restarts",
            "Age",
            "IP",
            "Node",
            "Nominated Node",
            "Readiness Gates",
        ]
        assert store.columns[0] == TableColumn(
            name="Name",
            type="string",
            format="name",
            description=store.columns[0].description,
            priority=0,
        )
        assert [c.priority for c in store.columns[5:]] == [1, 1, 1, 1]
        rows = store.rows()
        assert [(r.namespace, r.name) for r in rows] == [
            ("default", "p-1"),
            ("default", "p-3"),
            ("other", "p-0"),
            ("other", "p-2"),
            ("other", "p-4"),
        ]
        assert rows[0].cells[:4] == ("p-1", "1/1", "Running", "0")
        assert rows[0].metadata["labels"] == {"app": "p"}
        assert "managedFields" not in rows[0].metadata
        assert store.rows("default") == rows[:2]
        # the LIST and WATCH asked for Tables with metadata only
        with anyio.fail_after(TIMEOUT):
            await cluster.wait_for(lambda: cluster.open_watches == 1)
        table_requests = [r for r in cluster.requests if r.path == "/api/v1/pods"]
        assert table_requests and all(
            r.query.get("includeObject") == "Metadata" for r in table_requests
        )
        assert any(r.is_watch for r in table_requests)

        cluster.create("pods", make_pod("new-1", phase="Pending"))
        await changes.wait_for("ADDED", "new-1")
        row = store.row("default", "new-1")
        assert row is not None and row.cells[1:3] == ("0/1", "ContainerCreating")
        pod = cluster.get("pods", "default", "new-1")
        assert pod is not None
        pod["status"]["phase"] = "Failed"
        pod["status"]["containerStatuses"][0]["state"] = {}
        cluster.update("pods", pod)
        await changes.wait_for("MODIFIED", "new-1")
        updated = store.row("default", "new-1")
        assert updated is not None and updated.cells[2] == "Failed"
        assert updated.metadata["resourceVersion"] == cluster.resource_version
        cluster.delete("pods", "default", "p-1")
        await changes.wait_for("DELETED", "p-1")
        assert store.row("default", "p-1") is None
        assert store.get("other", "p-0") == {
            "cells": list(store.rows("other")[0].cells),
            "metadata": store.rows("other")[0].metadata,
        }
        assert informer.status().state == "watching"
        assert "TableStore pods" in repr(store) and "TableInformer" in repr(informer)


async def test_relist_after_compaction_converges(cluster: FakeCluster) -> None:
    async with (
        open_client(config_for(cluster)) as client,
        table_view(client, PODS, "other") as (store, _, changes),
    ):
        with anyio.fail_after(TIMEOUT):
            await cluster.wait_for(lambda: cluster.open_watches == 1)
        cluster.delete("pods", "other", "p-0")
        cluster.compact()
        cluster.create("pods", make_pod("after", "other"))
        await changes.wait_for("ADDED", "after")
        assert {r.name for r in store.rows()} == {"p-2", "p-4", "after"}
        assert ("DELETED", "p-0") in changes.seen


async def test_crd_printer_columns_and_column_change(cluster: FakeCluster) -> None:
    columns = [{"name": "Size", "type": "integer", "jsonPath": ".spec.size"}]
    cluster.add_crd("example.com", "widgets", "Widget", printer_columns=columns)
    cluster.create("widgets.example.com", {"metadata": {"name": "w1"}, "spec": {"size": 3}})
    async with (
        open_client(config_for(cluster)) as client,
        table_view(client, WIDGETS) as (store, _, changes),
    ):
        assert [(c.name, c.type) for c in store.columns] == [
            ("Name", "string"),
            ("Size", "integer"),
        ]
        assert store.rows()[0].cells == ("w1", 3)
        # the CRD's columns change: the next rows come with new definitions, the table relists
        crd = cluster.get("customresourcedefinitions", None, "widgets.example.com")
        assert crd is not None
        crd["spec"]["versions"][0]["additionalPrinterColumns"] = [
            {"name": "Size", "type": "integer", "jsonPath": ".spec.size"},
            {"name": "Color", "type": "string", "jsonPath": ".spec.color"},
        ]
        cluster.update("customresourcedefinitions", crd)
        with anyio.fail_after(TIMEOUT):
            await cluster.wait_for(lambda: cluster.open_watches >= 1)
        cluster.drop_watches()  # the next watch's first event carries the new columns
        cluster.create(
            "widgets.example.com", {"metadata": {"name": "w2"}, "spec": {"size": 5, "color": "red"}}
        )
        await changes.wait_for("ADDED", "w2")
        await cluster.wait_for(
            lambda: (
                [c.name for c in store.columns] == ["Name", "Size", "Color"]
                and len(store.rows()) == 2
                and all(len(r.cells) == 3 for r in store.rows())
            ),
            timeout=TIMEOUT,
        )
        assert [r.cells for r in store.rows()] == [("w1", 3, None), ("w2", 5, "red")]


async def test_server_without_table_support_falls_back_to_name_and_age() -> None:
    async with FakeCluster(tokens={"t"}, table_format=False) as old:
        created = old.create("pods", make_pod("p-1"))
        async with (
            open_client(config_for(old)) as client,
            table_view(client, PODS) as (store, _, changes),
        ):
            assert store.is_fallback and store.columns == FALLBACK_COLUMNS
            (row,) = store.rows()
            assert row.cells == ("p-1", created["metadata"]["creationTimestamp"])
            assert "managedFields" not in row.metadata and "spec" not in row.metadata
            old.create("pods", make_pod("p-2"))
            await changes.wait_for("ADDED", "p-2")
            p2 = store.row("default", "p-2")
            assert p2 is not None and p2.cells[0] == "p-2"


async def test_unknown_resource_fails_the_first_list(cluster: FakeCluster) -> None:
    store = TableStore(WIDGETS)
    async with open_client(config_for(cluster)) as client:
        informer = Informer(
            client,
            WIDGETS,
            InformerKey("widgets.example.com", view="table"),
            settings=FAST,
            store=store,
        )
        with anyio.fail_after(TIMEOUT), pytest.raises(ResourceNotFound):
            await informer.initial_sync()
        assert informer.status().state == "error"


def _informer_without_client() -> Informer:
    store = TableStore(PODS)
    store.columns = (TableColumn(name="Name", format="name"), TableColumn(name="Ready"))
    return Informer(
        None,  # type: ignore[arg-type]  # only the line decoding is used
        PODS,
        InformerKey("pods", view="table"),
        settings=FAST,
        store=store,
    )


def test_watch_lines_fast_and_general_paths_agree() -> None:
    meta = {
        "name": "p",
        "namespace": "ns",
        "resourceVersion": "7",
        "managedFields": [{"manager": "m"}],
        "labels": {"a": "b"},
    }
    table = {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": {"resourceVersion": "7"},
        "columnDefinitions": None,
        "rows": [
            {
                "cells": ["p", "1/1"],
                "object": {
                    "kind": "PartialObjectMetadata",
                    "apiVersion": "meta.k8s.io/v1",
                    "metadata": meta,
                },
            }
        ],
    }
    compact = orjson.dumps({"type": "ADDED", "object": table})
    spaced = b'{"object": ' + orjson.dumps(table) + b', "type": "MODIFIED"}'
    informer = _informer_without_client()
    ((etype, entry),) = informer.format.decode_block(
        (compact + b"\n" + spaced, 0, len(compact)), informer.store
    )
    assert etype == "ADDED" and not isinstance(entry, bytes)  # the one-decode path
    assert (entry.namespace, entry.name, entry.resource_version) == ("ns", "p", "7")
    fast = orjson.loads(entry.raw)
    assert fast == {
        "cells": ["p", "1/1"],
        "metadata": {k: v for k, v in meta.items() if k != "managedFields"},
    }
    ((kind, line),) = informer.format.decode_block((spaced, 0, len(spaced)), informer.store)
    assert kind == "" and line == spaced  # not laid out as the server writes: general path
    assert informer._handle_line(spaced) == "7"
    row = informer.store.row("ns", "p")
    assert row is not None and row.cells == ("p", "1/1") and row.metadata == fast["metadata"]
    # a bookmark and an error line take the general path too
    bookmark = orjson.dumps(
        {"type": "BOOKMARK", "object": {**table, "rows": [], "metadata": {"resourceVersion": "9"}}}
    )
    assert informer.format.decode_block((bookmark, 0, len(bookmark)), informer.store)[0][0] == ""
    assert informer._handle_line(bookmark) == "9"


# ------------------------------------------------------------------ poisoned rows (issue 18.5)
def _hostile_config(server: str) -> ContextConfig:
    return ContextConfig.from_dict("c", kubeconfig_dict({"c": server}))  # type: ignore[arg-type]


async def test_poisoned_rows_and_columns_are_skipped_alone() -> None:
    """One row nested 6,000 deep, one that is not UTF-8, one column whose priority is not an
    integer: each is skipped alone (counted, named in status), the rest of the LIST and of
    the watch is cached; a 400-digit cell and a 1e308 cell are cached and read leniently."""
    settings = dataclasses.replace(FAST, page_size=0, skip_log_period=3600)
    store = TableStore(PODS)
    changes = Changes()
    async with HostileServer("hostile-table") as srv, open_client(_hostile_config(srv.server)) as c:
        informer = Informer(
            c,
            PODS,
            InformerKey("pods", view="table"),
            settings=settings,
            store=listen(store, changes),
        )
        async with anyio.create_task_group() as tg:
            with anyio.fail_after(TIMEOUT):
                await tg.start(informer.run)
            assert [col.name for col in store.columns] == ["Name", "Status", "Size"]
            names = {r.name for r in store.rows()}
            assert names == {"p-0", "p-1", "p-2", "big-number", "huge-float"}
            assert all(len(r.cells) == 3 for r in store.rows())  # the odd column's cell is gone
            big = store.row("default", "big-number")
            assert big is not None and big.cells == ("big-number", "Running", math.inf)
            huge = store.row("default", "huge-float")
            assert huge is not None and huge.cells[2] == 1e308
            st = informer.status()
            assert st.skipped_lines == 3  # the column, the deep row, the row not UTF-8
            await changes.wait_for("ADDED", "w-after")
            assert {r.name for r in store.rows()} == names | {"w-big", "w-after"}
            st = informer.status()
            assert st.skipped_lines == 5 and st.state == "watching"
            assert st.last_skip == (
                'malformed watch line of "default/w-utf8" (the object is not valid UTF-8)'
            )
            tg.cancel_scope.cancel()


async def test_skips_are_named_in_status() -> None:
    """Each poison alone: what status says of it."""
    expected = {
        "deep": 'Table row "default/deep" (nested too deep)',
        "bad-utf8": 'Table row "default/bad-utf8" (the object is not valid UTF-8)',
        "odd-column": 'Table column "Odd" (Expected `int`, got `float` - at `$.priority`)',
    }
    settings = dataclasses.replace(FAST, page_size=0, skip_log_period=3600)
    for poison, message in expected.items():
        store = TableStore(PODS)
        async with (
            HostileServer("hostile-table", poison=(poison,)) as srv,
            open_client(_hostile_config(srv.server)) as c,
        ):
            key = InformerKey("pods", view="table")
            informer = Informer(c, PODS, key, settings=settings, store=store)
            with anyio.fail_after(TIMEOUT):
                await informer.initial_sync()
            st = informer.status()
            assert (st.skipped_lines, st.last_skip) == (1, message), poison
            assert {r.name for r in store.rows()} == {"p-0", "p-1", "p-2"}


def test_a_cell_beyond_a_double_is_cached_and_read_leniently() -> None:
    """The general path: the row is cached (its bytes are valid JSON) and every read of it
    works (the number reads as inf), as an object's would."""
    informer = _informer_without_client()
    row = (
        b'{"cells":["p",' + b"9" * 400 + b'],"object":{"metadata":'
        b'{"name":"p","namespace":"ns","resourceVersion":"7"}}}'
    )
    line = b'{"type":"ADDED","object":{"kind":"Table","rows":[' + row + b"]}}"
    assert informer._handle_line(line) == "7"
    store = informer.store
    assert store.rows()[0].cells == ("p", math.inf)
    assert store.row("ns", "p") == store.rows()[0]
    assert store.get("ns", "p") == {"cells": ["p", math.inf], "metadata": store.rows()[0].metadata}


def test_the_fast_path_refuses_a_row_that_is_not_utf8() -> None:
    informer = _informer_without_client()
    meta = b'{"name":"p","namespace":"ns","resourceVersion":"7"}'
    obj = b'{"kind":"PartialObjectMetadata","apiVersion":"meta.k8s.io/v1","metadata":' + meta
    line = (
        b'{"type":"ADDED","object":{"kind":"Table","apiVersion":"meta.k8s.io/v1",'
        b'"metadata":{"resourceVersion":"7"},"rows":[{"cells":["p","\xff"],"object":'
        + obj
        + b"}}]}}"
    )
    ((etype, item),) = informer.format.decode_block((line, 0, len(line)), informer.store)
    assert etype == "" and item == line  # the general path, which refuses it
    with pytest.raises(UndecodableObject, match="not valid UTF-8"):
        informer.lister.parse(line)
